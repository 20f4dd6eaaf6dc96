"""`export --with-cache DIR`: prepare the recipe cache of an exported configuration and verify it.

Two boots of the chosen configuration, through the same launcher (server.ServerProcess) and the same
backend command line (backends.Backend.argv) as a trial: the first with delete=True compiles every
shape into DIR (the cold warmup), the second with delete=False must find them there (the cached
warmup). The verification is measured, never assumed: the recipes the second boot had to add are its
misses, out of the shapes its warmup compiled (the log's [Warmup] steps). The server's log gives the
warmup ("Warmup finished in N secs"), the KV block count and the software version.
With `reuse=True` the first boot is skipped: one delete=False boot tells how much of an existing
cache (e.g. one prepared for other memory settings) this configuration hits.

The verifying boot runs on a copy of DIR (a sibling folder, removed after): its misses would otherwise
be written into the folder a team ships, so a refused `--reuse-cache` leaves DIR as it was, byte for
byte, and DIR holds exactly the recipes that were verified. Every ratio and the manifest's cold warmup
are the exported configuration's own: its delete=True boot here, or (reuse) its cold warmup in the
study, never the figure of the trial that prepared the cache.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..logparse import LogWatcher
from ..serve.backends import Backend
from ..serve.ports import find_free_port
from ..serve.process import ServerProcess
from .manifest import (
    GUIDE_RATIO,
    VARIABLE,
    Manifest,
    format_value,
    is_compatible,
    normalize_dtype,
    read_manifest,
    recipe_files,
    write_manifest,
)


class CacheWarmError(RuntimeError):
    """A boot of the cache preparation did not reach ready; the message says which and why."""


@dataclass(frozen=True)
class ColdFigure:
    """The exported configuration's cold warmup and where it comes from (said next to every ratio)."""

    seconds: float
    source: str  # e.g. "this export's delete=True boot", "trial 3's cold boot in the study"


@dataclass
class Boot:
    delete: bool
    warmup_s: float | None
    kv_blocks: int | None
    software_version: str | None
    shapes_compiled: int             # warmup steps the log announced (each compiles one shape)
    recipes_before: int
    recipes_added: int
    log_path: Path

    @property
    def hit_rate(self) -> float | None:
        """Share of the warmup's shapes found in the cache: 1 - recipes written / shapes compiled."""
        total = self.shapes_compiled or (self.recipes_before + self.recipes_added)
        if not total:
            return None
        return max(0.0, 1.0 - self.recipes_added / total)


@dataclass
class CacheReport:
    folder: Path
    value: str                         # the variable as the env file carries it (delete=False)
    boots: list[Boot] = field(default_factory=list)
    manifest: Manifest | None = None
    previous: Manifest | None = None   # what DIR held before, if anything
    compatibility: str | None = None   # previous manifest vs this configuration
    cold: ColdFigure | None = None     # the exported configuration's own cold warmup

    @property
    def verified(self) -> bool:
        """True when the delete=False boot found every shape it compiled."""
        rate = self.boots[-1].hit_rate if self.boots else None
        return rate is not None and rate >= 0.999

    def lines(self) -> list[str]:
        out = []
        if self.previous is not None and self.compatibility:
            out.append(f"cache in {self.folder} was built for another configuration: {self.compatibility}")
        for b in self.boots:
            kind = "prepare (delete=True)" if b.delete else "verify (delete=False)"
            warm = f"{b.warmup_s:.0f} s" if b.warmup_s is not None else "unknown"
            rate = f"{b.hit_rate:.0%}" if (b.hit_rate is not None and not b.delete) else "-"
            out.append(f"{kind}: warmup {warm}, {b.shapes_compiled} shapes, {b.recipes_added} recipes written, "
                       f"hit rate {rate}, KV blocks {b.kv_blocks}")
        m, cached = self.manifest, self.boots[-1].warmup_s if self.boots else None
        if self.cold is not None and cached is not None and self.cold.seconds:
            guide = GUIDE_RATIO.get(m.dtype) if m else None
            files = f", {m.recipes} recipes, {m.size_bytes / 2**20:.1f} MiB" if m else ""
            out.append(f"cached warmup {cached:.0f} s = {cached / self.cold.seconds:.2f}x the cold "
                       f"{self.cold.seconds:.0f} s ({self.cold.source}{files})"
                       + (f"; the warmup guide measured {guide:.2f}x for Llama 3.1 8B" if guide else ""))
        if self.boots and not self.boots[-1].delete:
            last = self.boots[-1]
            if self.verified:
                out.append(f"verified: every shape was a cache hit; {VARIABLE}={self.value}")
            else:
                out.append(f"MISS: the delete=False boot compiled {last.recipes_added} of {last.shapes_compiled} "
                           f"shapes again (hit rate {_pct(last.hit_rate)}); this cache does not fit this "
                           "configuration")
        return out


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.0%}"


def shapes_compiled(steps: dict[str, tuple[int, int]]) -> int:
    """Shapes the warmup compiled: its compile passes, not the fork's separate "Graph/..." capture
    passes over the same buckets."""
    compile_passes = [total for key, (_, total) in steps.items() if "graph" not in key.lower()]
    return sum(compile_passes) if compile_passes else sum(total for _, total in steps.values())


def base_environment(env: dict[str, str]) -> dict[str, str]:
    """Ours minus stray VLLM_/PT_HPU_ settings, plus the exported configuration's variables."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PT_HPU_"))}
    out.update(env)
    return out


def boot(backend: Backend, server: dict, env: dict[str, str], folder: Path, delete: bool, log_path: Path,
         *, max_mb: int, host: str = "127.0.0.1", timeout_s: float = 7200.0) -> Boot:
    """One boot to ready with the cache variable set, then a clean stop; what its log and DIR say."""
    before = recipe_files(folder)
    port = find_free_port(host)
    lock = threading.Lock()
    watcher = LogWatcher()

    def on_line(line: str, t: float) -> None:
        with lock:
            watcher.feed(line, t)

    full_env = base_environment(dict(env, **{VARIABLE: format_value(folder, delete, max_mb)}))
    scale = backend.startup_scale
    with ServerProcess(on_line=on_line) as srv:
        srv.start(backend.argv(server, host, port), full_env, log_path, port=port)
        outcome = srv.wait_ready(f"http://{host}:{port}", boot_timeout_s=timeout_s * scale + 30,
                                 warmup_timeout_s=timeout_s * scale + 30)
        srv.stop(grace_int_s=5.0, grace_term_s=5.0, grace_kill_s=5.0)
    with lock:
        s = watcher.summary()
    if not outcome.ok:
        raise CacheWarmError(f"the {'preparing' if delete else 'verifying'} boot did not get ready: "
                             f"{outcome.reason} (log: {log_path})")
    after = recipe_files(folder)
    return Boot(delete=delete, warmup_s=float(s.warmup_finished.seconds) if s.warmup_finished else None,
                kv_blocks=s.hpu_blocks, software_version=s.engine_version,
                shapes_compiled=shapes_compiled(s.warmup_steps),
                recipes_before=len(before), recipes_added=len(set(after) - set(before)), log_path=log_path)


def verify_on_copy(backend: Backend, server: dict, env: dict[str, str], folder: Path, log_path: Path, *,
                   max_mb: int, host: str = "127.0.0.1") -> Boot:
    """The delete=False boot, on a copy of `folder` beside it (removed after): `folder` is never written."""
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.verify-", dir=folder.parent))
    try:
        shutil.copytree(folder, scratch, dirs_exist_ok=True)
        return boot(backend, server, env, scratch, False, log_path, max_mb=max_mb, host=host)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def prepare(backend: Backend, server: dict, env: dict[str, str], folder: Path, *, release: str, dtype: str,
            device: str, logs: Path, reuse: bool = False, max_mb: int = 8192,
            host: str = "127.0.0.1", own_cold: ColdFigure | None = None) -> CacheReport:
    """Prepare (unless `reuse`) and verify the cache in `folder`; write its manifest when verified.
    `own_cold`: with `reuse`, the exported configuration's cold warmup (from its study)."""
    folder = Path(folder).resolve()
    if reuse and not recipe_files(folder):
        raise CacheWarmError(f"--reuse-cache: {folder} holds no recipe to reuse; leave --reuse-cache out to "
                             "prepare it")
    folder.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    report = CacheReport(folder=folder, value=format_value(folder, False, max_mb))
    report.previous = read_manifest(folder)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if not reuse:
        first = boot(backend, server, env, folder, True, logs / f"cache-prepare-{stamp}.log", max_mb=max_mb, host=host)
        if first.recipes_added == 0:
            raise CacheWarmError(f"the server wrote no recipe into {folder}: it does not use {VARIABLE} (a vLLM "
                                 "that does not run on Gaudi ignores it); there is no cache to ship")
        report.boots.append(first)
        if first.warmup_s is not None:
            report.cold = ColdFigure(first.warmup_s, "this export's delete=True boot of the same configuration")
    else:
        report.cold = own_cold
    verify = verify_on_copy(backend, server, env, folder, logs / f"cache-verify-{stamp}.log", max_mb=max_mb,
                            host=host)
    report.boots.append(verify)
    tp = int(server.get("tensor_parallel_size") or 1)
    if report.previous is not None:
        report.compatibility = is_compatible(report.previous, release, device, backend.model, dtype, tp,
                                             verify.kv_blocks, verify.software_version).describe()
        if report.compatibility == "compatible":
            report.compatibility = None
    if reuse and not report.verified:
        return report  # DIR keeps the manifest of what it was built for: never claim this one fits
    files = recipe_files(folder)
    cold = report.cold
    report.manifest = Manifest(
        release=release, device=device, model=backend.model, dtype=normalize_dtype(dtype), tp=tp,
        kv_blocks=verify.kv_blocks or 0, software_version=verify.software_version or "unknown",
        recipes=len(files), size_bytes=sum(files.values()), cold_warmup_s=cold.seconds if cold else None,
        cold_warmup_source=cold.source if cold else None, cached_warmup_s=verify.warmup_s, hit_rate=verify.hit_rate)
    if report.verified or not reuse:
        write_manifest(folder, report.manifest)
    return report


# --- the study's backend, rebuilt -----------------------------------------------------------------

def backend_from_study(described: dict, recorded_argv: list[str] | None) -> Backend:
    """The Backend a study's trials ran on (study attr "backend"), with the extra server arguments
    the trial's recorded command line carried after the ones Backend.argv builds itself."""
    if not described or described.get("kind") not in ("sim", "vllm"):
        raise CacheWarmError("the study does not record its backend; cannot boot its configuration")
    if described["kind"] == "sim":
        backend = Backend(kind="sim", model=described["model"], sim_release=described.get("release"),
                          sim_device=described.get("device") or "gaudi2",
                          sim_model=described.get("sim_model") or "llama-3.1-8b",
                          time_scale=float(described.get("time_scale") or 1.0),
                          startup_time_scale=described.get("startup_time_scale"),
                          sim_seed=int(described.get("seed") or 0), sim_noise=float(described.get("noise") or 0.0))
    else:
        backend = Backend(kind="vllm", model=described["model"],
                          vllm_command=list(described.get("command") or ["vllm"]))
    backend.extra_args = _extra_args(backend, recorded_argv or [])
    return backend


def _extra_args(backend: Backend, recorded: list[str]) -> list[str]:
    if "--port" not in recorded or "--host" not in recorded:
        return []
    host, port = recorded[recorded.index("--host") + 1], recorded[recorded.index("--port") + 1]
    try:
        served = recorded[recorded.index("--served-model-name") + 1]
    except (ValueError, IndexError):
        served = None
    backend.served_model_name = served
    if backend.kind == "sim" and "--sim-startup-time-scale" not in recorded:
        backend.startup_time_scale = None  # describe() stores the effective scale; argv had none
    flags_end = recorded.index("--port") + 2
    server_part = recorded[flags_end:]
    # rebuild with no server options; the recorded server flags sit between --port and our own
    base = backend.argv({}, host, int(port))
    own = base[base.index("--port") + 2:]
    # the recorded argv = head + server flags + own tail + extras: the extras follow the own tail
    n = len(own)
    for i in range(len(server_part) - n + 1):
        if server_part[i:i + n] == own:
            return server_part[i + n:]
    return []


def dtype_of(server: dict, argv: list[str]) -> str:
    """bf16 or fp8, from the server options or the command line (--quantization / --dtype); an FP8
    KV cache under BF16 weights is "bf16+fp8kv" (the KV tensor's type is part of the graphs too)."""
    words = [str(server.get("quantization") or ""), str(server.get("dtype") or "")]
    kv = [str(server.get("kv_cache_dtype") or "")]
    for flag, into in (("--quantization", words), ("--dtype", words), ("--kv-cache-dtype", kv)):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            into.append(argv[argv.index(flag) + 1])
    if any("fp8" in w.lower() for w in words):
        return "fp8"
    return "bf16+fp8kv" if any("fp8" in w.lower() for w in kv) else "bf16"
