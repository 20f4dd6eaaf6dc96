"""What a trial cost: the cards it held and for how long, in accelerator-hours (the report, the tuner's
progress line and tune --confirm's budget read it here)."""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from .record import TrialRecord, as_record


def _flag_int(argv: list[str], flags: tuple[str, ...]) -> int | None:
    for i, tok in enumerate(argv):
        name, eq, inline = tok.partition("=")
        if name in flags:
            raw = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            try:
                return max(1, int(raw))
            except ValueError:
                return None
    return None


def server_cards(argv: list[str], server: dict[str, Any]) -> int:
    """Accelerator cards one server holds: tensor-parallel x pipeline-parallel size, from its command line
    (where --server-args put them) or its settings; 1 when neither says."""
    tp = _flag_int(argv, ("--tensor-parallel-size", "-tp")) or int(server.get("tensor_parallel_size") or 1)
    pp = _flag_int(argv, ("--pipeline-parallel-size", "-pp")) or int(server.get("pipeline_parallel_size") or 1)
    return max(1, tp) * max(1, pp)


def cards(t: FrozenTrial | TrialRecord) -> int:
    """Accelerator cards a trial held (server_cards of its command line and settings)."""
    rec = as_record(t)
    return server_cards(rec.argv, rec.server)


def device_seconds(t: FrozenTrial | TrialRecord, backend: dict[str, Any]) -> float:
    """Seconds the trial held its cards (boot + warmup + load test), in the server's own time: the
    simulator runs compressed, so its wall times are scaled back to what a real node would spend, except
    the time before its first log line (its interpreter starting), which is real time.
    A trial rejected before boot held nothing."""
    tm = as_record(t).timings
    load_scale = float(backend.get("time_scale") or 1.0)
    startup_scale = float(backend.get("startup_time_scale") or load_scale)
    boot = float(tm.get("boot_and_warmup_s", 0.0))
    real = min(boot, float(tm.get("before_first_line_s", 0.0)))
    return real + (boot - real) / startup_scale + float(tm.get("load_s", 0.0)) / load_scale


def accelerator_hours(t: FrozenTrial | TrialRecord, backend: dict[str, Any]) -> float:
    rec = as_record(t)
    return device_seconds(rec, backend) * cards(rec) / 3600.0


def spent_hours(t: FrozenTrial | TrialRecord, backend: dict[str, Any]) -> float:
    """accelerator_hours, or the accelerator seconds the trial's runner charged (a virtual-clock runner)."""
    rec = as_record(t)
    charged = rec.timings.get("accelerator_s")
    return float(charged) / 3600.0 if charged is not None else accelerator_hours(rec, backend)
