"""An `Explanation` as plain words and figures in 80 columns, or as the documented --json document."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

from ..logparse import EngineStats
from ..vocabulary import display
from .advice import command_text

if TYPE_CHECKING:
    from . import Explanation

WIDTH = 80


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.2f} GiB"


def _prefix_hit_pct(x) -> float | None:
    """The prefix-cache hit rate of the last stats line that gives one (vLLM's, over its recent requests)."""
    rates = [t.event.prefix_cache_hit_pct for t in x.reading.events
             if isinstance(t.event, EngineStats) and t.event.prefix_cache_hit_pct is not None]
    return rates[-1] if rates else None


def _restated(p) -> str:
    return f" (restated at line{'s' if len(p.restated) > 1 else ''} {', '.join(map(str, p.restated))})" \
        if p.restated else ""


def _failed_step(x):
    """(the step, the failure) when the primary run's warm-up stopped at an error: the step the error ended."""
    tl = x.timeline
    run = tl.primary if tl.primary is not None else 0
    iv = next((iv for iv in tl.intervals if iv.run == run and iv.end is not None
               and getattr(iv.end, "kind", None) == "failed"), None)
    if iv is None or not x.problems:
        return None
    after = [p for p in x.problems if p.line_no >= iv.end.line_no]
    return iv.start.label, (after or x.problems)[0]


def _failure_words(p) -> str:
    if p.kind == "oom":
        what = p.message.split(":", 1)[0]
        return f"{what} out of memory (line {p.line_no}: {_clip(p.message.split(':', 1)[-1].strip())})"
    return f"{p.kind} at line {p.line_no}: {_clip(p.message)}"


# vLLM's refusal of a --max-model-len past the model's own (config/model.py _get_and_verify_max_len)
_LONGER_THAN_MODEL = re.compile(r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the derived "
                                r"max_model_len \((?P<key>\w+)=(?P<derived>[\d.]+)")
# vLLM 0.32 reads each RoPE dict's "rope_type"; a config file's older "type" is renamed when the file is read,
# but an --hf-overrides object is set after that (config/model.py _apply_dict_overrides) and keeps it
_LEGACY_ROPE_TYPE = re.compile(r"^KeyError: 'rope_type'$")
# a pydantic refusal as the log reader words it: "...ValidationError: ModelConfig: <what>" (tuner.logparse.watcher)
_CONFIG_REFUSED = re.compile(r"^[\w.]*ValidationError: (?P<config>[A-Z]\w*Config): (?P<what>.+)$", re.S)


def _refusal_words(problems) -> str | None:
    """The sentence for a server that refused its own configuration before starting (vLLM's config checks)."""
    for p in problems:
        m = _LONGER_THAN_MODEL.search(p.message)
        if m:
            derived = int(float(m["derived"]))
            return (f"The server refused to start: --max-model-len {m['asked']} is longer than the model's "
                    f"{derived:,} tokens (its config's {m['key']}; line {p.line_no}). Serve at most {derived}, or "
                    "set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 to force it (positions past it give NaN with RoPE).")
        if _LEGACY_ROPE_TYPE.match(p.message):
            return ("The server stopped reading the model's RoPE parameters (KeyError: 'rope_type', line "
                    f"{p.line_no}): its rope_scaling names the kind with the older key \"type\", which vLLM renames "
                    "in a config file but not in an --hf-overrides object. Write \"rope_type\", e.g. --hf-overrides "
                    "'{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                    "\"original_max_position_embeddings\": 32768}}'.")
        m = _CONFIG_REFUSED.match(p.message)
        if m:
            return f"The server refused its configuration ({m['config']}, line {p.line_no}): {_clip(m['what'])}"
    return None


def _compact_states_words(x) -> str | None:
    """A device allocation that failed after a Gated DeltaNet model's runner said its states are compact: those
    tensors are allocated beside the KV budget (a slot per sequence per state group in each layer slot), out of
    what the budget leaves (tuner/perfmodel/hybridcache.py)."""
    gdn = next((n for n in x.notices if n.kind == "gdn_layers" and "VLLM_COMPACT_GDN=1" in n.values.get("flags", "")),
               None)
    if gdn is None:
        return None
    oom = next((p for p in x.problems if p.kind == "oom" and p.message.startswith("device") and p.line_no > gdn.line_no
                and not x.timeline.steps), None)
    if oom is None:
        return None
    return (f"The allocation that failed (line {oom.line_no}) came after the KV cache was sized, before warm-up: "
            f"with VLLM_COMPACT_GDN=1 (line {gdn.line_no}) the plugin allocates the {gdn.values.get('n', '?')} Gated "
            "DeltaNet layers' states beside the KV budget, a slot per sequence (max_num_seqs) per state group, out "
            "of what --gpu-memory-utilization and VLLM_GRAPH_RESERVED_MEM leave. Lower --max-num-seqs or "
            "--gpu-memory-utilization, or set VLLM_COMPACT_GDN=0 (the states then come out of the KV budget: fewer "
            "KV blocks).")


def _warmup_oom_advice(m) -> str:
    """What gives a warm-up's graphs more room: they compile in what the KV cache leaves of the usable memory."""
    knobs = []
    if m.graph_reserved_fraction is not None:
        knobs.append(f"raise VLLM_GRAPH_RESERVED_MEM (now {m.graph_reserved_fraction:g}; the KV cache gets the rest)")
    if m.gpu_memory_utilization is not None:
        knobs.append(f"lower --gpu-memory-utilization (now {m.gpu_memory_utilization:g})")
    knobs.append("warm fewer or smaller buckets (a lower bucket max or --max-num-seqs)")
    return "Advice: the warm-up's graphs ran out of device memory; " + ", or ".join(knobs) + "."


def _clip(text: str, width: int = 120) -> str:
    """At most about `width` characters, cut between words (never inside a number)."""
    if len(text) <= width:
        return text
    return text[:width].rsplit(" ", 1)[0] + " ..."


def _secs(s: float | None) -> str:
    if s is None:
        return "?"
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def _pct(new: float | None, old: float | None) -> str:
    if new is None or not old:
        return ""
    return f" ({(new - old) / old * 100:+.0f}%)"


def _wrap(text: str, indent: str = "", *, words: bool = True) -> list[str]:
    # never at a hyphen (a flag such as --gpu-memory-utilization stays whole); words=False: a command or path
    # is never broken inside a long word either
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent or "  ",
                         break_on_hyphens=False, break_long_words=words) or [""]


def _server_line(x: Explanation) -> str:
    f = x.server
    parts = []
    if f.model:
        parts.append(f.model)
    if f.tp is not None:
        parts.append(f"TP {f.tp}" + ("" if f.tp_exact else "+ (ranks seen)"))
    if f.dtype:
        parts.append(f.dtype)
    if f.device:
        parts.append(f"{f.device} ({f.device_evidence})")
    return ", ".join(parts)


def _phase_rows(phases) -> list[str]:
    rows = []
    for p in phases:
        note = p.describe()
        rows.append(f"  {p.name:<32}{_secs(p.seconds):>8}" + (f"  {note}" if note else ""))
    return rows


def _step_name(step) -> str:
    """A step by its bucket, or by its place when the log names none (a tqdm bar counts, it shows no shape)."""
    return str(step.shape) if step.shape else f"step {step.index}/{step.total}"


def plain_words(x: Explanation) -> list[str]:  # noqa: C901 (one sentence per fact the log may or may not hold)
    """The answer first: what this log shows and what would change it, in sentences."""
    out = []
    s = x.reading.summary
    tl = x.timeline
    counts = x.bucket_counts
    total = tl.warmup_total_s
    if x.phases and not counts and (tl.steps or total is not None):
        out.append("The bucket configs are logged but the bucket lists are not in this excerpt: how many buckets "
                   "warmed up is unknown.")
    elif x.phases and not counts:
        out.append("The bucket configs are logged but no bucket list: the log ends before the lists (a cut paste, "
                   "or a server that stopped there); how many buckets is unknown.")
    elif counts:
        buckets = " and ".join(f"{n} {ph}" for ph, n in counts.items())
        if total is not None:
            out.append(f"Warm-up took {_secs(total)} for {buckets} buckets.")
        elif tl.skipped:
            out.append(f"Warm-up was skipped ({tl.skip_evidence}): {buckets} buckets will compile on first use.")
        elif (failed := _failed_step(x)) is not None:
            out.append(f"Warm-up failed during {failed[0]} ({buckets} buckets generated): "
                       f"{_failure_words(failed[1])}.")
            if failed[1].kind == "oom" and failed[1].message.startswith("device"):
                out.append(_warmup_oom_advice(x.memory))
        else:
            out.append(f"The log ends before warm-up finished ({buckets} buckets generated).")
    elif tl.skipped:
        out.append(f"Warm-up is skipped ({tl.skip_evidence}): every bucket compiles on its first use.")
    elif (refused := _refusal_words(x.problems)) is not None:
        out.append(refused)
    elif x.release.profile is None:
        out.append("No Gaudi bucketing lines in this log.")
    if (compact := _compact_states_words(x)) is not None:
        out.append(compact)
    cut = [p for p in x.phases if not p.complete and p.listed]
    for p in cut:
        out.append(f"The {p.phase} bucket list is cut after {p.listed} of {p.count} buckets: its ranges are "
                   "only what the cut list shows.")
    if len(x.reading.runs) > 1 and tl.primary is not None:
        run = tl.runs[tl.primary]
        others = len(x.reading.runs) - 1
        out.append(f"The log holds more than one start of the server ({others + 1} runs: {_runs_why(x)}); "
                   f"the figures are of lines {run.first_line}-{run.last_line}"
                   + (f", with the bucket lines of lines {tl.runs[run.lender].first_line}-"
                      f"{tl.runs[run.lender].last_line}" if run.lender is not None else "") + ", never added together.")
    slow = tl.slowest
    timed = [st for st in tl.steps if st.run == (tl.primary or 0)]
    if slow:
        out.append(f"Of the {len([t for t in timed if t.seconds is not None])} warm-up steps timed one by one, "
                   f"the slowest was {slow[0].phase} {_step_name(slow[0])} at {_secs(slow[0].seconds)}.")
    if any(p.gap for p in tl.phases):
        out.append("Warm-up lines are missing from this log (elided or cut): figures over them are totals of "
                   "the steps they span, never one step's time.")
    phase_times = [p for p in tl.phases if p.steps is not None and p.seconds is not None]
    if len(phase_times) > 1 and all(p.complete and len(p.keys) == 1 for p in phase_times):
        whole = sum(p.seconds for p in phase_times)
        top = max(phase_times, key=lambda p: p.seconds)
        if whole > 0:
            out.append(f"{top.name.capitalize()} took {top.seconds / whole * 100:.0f}% of the timed warm-up.")
    if any(getattr(t.event, "name", None) == "no_compile_only_mode" for t in x.reading.events):
        out.append("The server could not use PT_COMPILE_ONLY_MODE (its Gaudi software is too old): its warm-up "
                   "runs each graph instead of only compiling it, which takes longer.")
    if s.engine_init_s is not None:
        out.append(f"The engine's start (profiling, KV cache, warm-up) took {_secs(s.engine_init_s)}"
                   + (f"; it then served at {s.listening_url}." if s.listening_url else "."))
    elif s.listening_url:
        out.append(f"The server came up at {s.listening_url}.")
    if x.memory.kv_blocks is not None:
        m = x.memory
        out.append(f"The KV cache holds {m.kv_blocks} blocks" + (f" ({_gib(m.kv_cache)})" if m.kv_cache else "")
                   + (f", {m.kv_tokens:,} tokens" if m.kv_tokens else "")
                   + (f": {m.max_concurrency:g} requests of {m.concurrency_for:,} tokens at once"
                      if m.max_concurrency and m.concurrency_for else "") + ".")
    if s.not_warmed_up:
        out.append(f"{len(s.not_warmed_up)} shape(s) were not warmed up and compiled while serving.")
    if s.preemptions:
        out.append(f"{s.preemptions} request(s) were preempted for lack of KV cache.")
    if x.problems:
        first = x.problems[0]
        out.append(f"{len(x.problems)} error(s), first at line {first.line_no}{_restated(first)}: "
                   f"{_clip(first.message)}")
    if x.advice.rebuild_mismatch:
        out.append(f"Check failed: {x.advice.rebuild_mismatch}.")
    if (r := x.advice.graph_reserve) is not None:
        out.append(f"Advice: the warm-up's graphs used {_gib(r.used)} of the {_gib(r.reserved)} reserved for them "
                   f"(VLLM_GRAPH_RESERVED_MEM={r.fraction:g}); VLLM_GRAPH_RESERVED_MEM={r.suggested:g} would give "
                   f"the KV cache {_gib(r.freed)} more" + (f", about {r.extra_blocks} blocks" if r.extra_blocks else "")
                   + " (keeping a quarter more than was used for graphs compiled while serving).")
    best = _best_alternative(x)
    if best is not None:
        base = _as_logged(x)
        out.append(f"Advice: {best.name} would build {best.prompt_buckets} prompt and {best.decode_buckets} "
                   f"decode buckets, about {_secs(best.predicted_warmup_s)} of warm-up"
                   f"{_pct(best.predicted_warmup_s, base.predicted_warmup_s if base else None)} "
                   f"(predicted)" + ("; verify it with the tune command below." if x.advice.tune_command else "."))
    return out


def _runs_why(x: Explanation) -> str:
    return ", ".join(f"lines {r.first_line}-{r.last_line}" + (f" from {r.start}" if r.start else "")
                     for r in x.timeline.runs)


def _as_logged(x: Explanation):
    return next((a for a in x.advice.alternatives if a.name == "as logged" and a.error is None), None)


def _best_alternative(x: Explanation):
    base = _as_logged(x)
    options = [a for a in x.advice.alternatives if a.name != "as logged" and a.error is None
               and a.unusable is None and not a.gaps and a.predicted_warmup_s is not None]
    if not options or base is None or base.predicted_warmup_s is None:
        return None
    best = min(options, key=lambda a: a.predicted_warmup_s)
    return best if best.predicted_warmup_s < base.predicted_warmup_s else None


def render_text(x: Explanation) -> str:  # noqa: C901 (one section per part of the reading, each optional)
    lines: list[str] = []
    r = x.release
    head = f"{x.source}: {r.family}"
    lines += _wrap(head)
    if r.profiles:
        lines += _wrap(f"release profiles consistent with it: {', '.join(r.profiles)}"
                       + (f"; vLLM {r.version}" if r.version else ""), "  ")
    if r.preferred and len(r.profiles) > 1:
        lines += _wrap(f"read as {r.preferred}", "  ")
    for sign in r.decided_by:
        lines += _wrap(f"decided by: {sign}", "  ")
    inputs = dict(r.inputs)
    if inputs.get("token_budget_phases"):
        lines += _wrap(f"rebuilt with the token budget on {' and '.join(inputs['token_budget_phases'])} buckets "
                       "(as that build filters them)", "  ")
    facts = _server_line(x)
    if facts:
        lines += _wrap(f"server: {facts}", "  ")
    lines.append("")
    assumed = [ln for note in x.advice.assumptions for ln in _wrap(f"assumed: {note}", "  ")]
    for sentence in plain_words(x):
        if sentence.startswith("Advice:"):  # what the advice assumed comes before it
            lines += assumed
            assumed = []
        lines += _wrap(sentence)
    if x.phases or x.counted:
        lines += ["", "Buckets", f"  {'phase':<9}{'count':>6}{'omitted':>9}{'graphs':>8}  count from"]
        for p in x.phases + x.counted:
            count = "?" if p.count_from == "config" else p.count  # a config alone does not say how many
            lines.append(f"  {p.phase:<9}{count:>6}{p.omitted:>9}{'' if p.captured is None else p.captured:>8}"
                         f"  {p.count_from}")
            rng = ", ".join(f"{d} {lo}..{hi}" for d, (lo, hi) in zip(p.dims, p.ranges))
            if rng and p.complete:
                lines += _wrap(f"ranges: {rng}", "    ", words=False)
            elif rng:
                lines += _wrap(f"ranges of the {p.listed} listed (list cut, not the whole range): {rng}", "    ",
                               words=False)
            if p.config:
                cfg = "  ".join(f"{d}:{list(v)}" for d, v in p.config.items())
                lines += _wrap(f"config (min, step, max...): {cfg}", "    ", words=False)
    m = x.memory
    mem = [("weights", _gib(m.weights) if m.weights else None),
           ("profiling peak", _gib(m.profiling_peak) if m.profiling_peak else None),
           ("free after profiling", _gib(m.free_after_profiling) if m.free_after_profiling else None),
           ("KV cache", (_gib(m.kv_cache) if m.kv_cache else "") + (f" ({m.kv_blocks} blocks)" if m.kv_blocks else "")
            if (m.kv_cache or m.kv_blocks) else None),
           ("graph reserve", f"{_gib(m.graph_reserved)} (VLLM_GRAPH_RESERVED_MEM={m.graph_reserved_fraction})"
            if m.graph_reserved is not None else None),
           ("gpu_memory_utilization", str(m.gpu_memory_utilization) if m.gpu_memory_utilization else None),
           ("graphs captured use", _gib(m.graphs_used) if m.graphs_used else None),
           ("warm-up allocated", _gib(m.warmup_allocated) if m.warmup_allocated else None)]
    mem = [(k, v) for k, v in mem if v]
    if mem:
        lines += ["", "Memory"] + [f"  {k:<24}{v}" for k, v in mem]
    tl = x.timeline
    if tl.phases or tl.warmup_total_s is not None or tl.other_runs or tl.notes:
        where = tl.runs[tl.primary] if tl.primary is not None and len(tl.runs) > 1 else None
        lines += ["", "Warm-up timeline" + (f" (lines {where.first_line}-{where.last_line})" if where else "")]
        lines += _phase_rows(tl.phases)
        if tl.warmup_total_s is not None:
            lines.append(f"  {'total (server: Warmup finished)':<32}{_secs(tl.warmup_total_s):>8}")
        if tl.slowest:
            lines.append("  slowest buckets (each timed to the next step):")
            lines += [f"    {s.phase:<8}[{s.index}/{s.total}] {str(s.shape or ''):<28}{_secs(s.seconds):>10}"
                      for s in tl.slowest]
        for run in tl.other_runs:
            lines += [""] + _wrap(f"Another run in this log (lines {run.first_line}-{run.last_line}"
                                  + (f", from {run.start}" if run.start else "") + f"; {run.why}), not added to "
                                  "the figures above:", "  ")
            lines += _phase_rows(run.phases)
            if run.warmup_total_s is not None:
                lines.append(f"  {'total (server: Warmup finished)':<32}{_secs(run.warmup_total_s):>8}")
        if tl.notes:  # what the timestamps could not time one by one, as calibration reads them too
            lines.append("  how the warm-up lines were read:")
            for note in tl.notes:
                lines += textwrap.wrap(note, WIDTH, initial_indent="    - ", subsequent_indent="      ")
    if tl.skipped:
        lines += ["", f"Warm-up skipped: {tl.skip_evidence}"]
    setup = [n for n in x.notices if not n.serving]
    if setup:
        lines += ["", "Server notices"]
        for n in setup:
            lines += _wrap(f"line {n.line_no}: {n.words}", "  ")
    s = x.reading.summary
    serving = [n for n in x.notices if n.serving]
    hit_pct = _prefix_hit_pct(x)
    if s.not_warmed_up or s.buckets_not_prepared or s.preemptions or s.compilations_under_load or serving or hit_pct:
        lines += ["", "At runtime"]
        if hit_pct:
            lines += _wrap(f"prefix cache hit rate: {hit_pct:g}% (the last stats line: prompt tokens found cached, "
                           "run as context)", "  ")
        lines += [f"  not warmed up: {n.phase} {n.shape}" for n in s.not_warmed_up[:10]]
        if len(s.not_warmed_up) > 10:
            lines.append(f"  ... and {len(s.not_warmed_up) - 10} more shapes")
        lines += [f"  bucket not prepared: {b.phase} {b.requested} -> {b.new_bucket}"
                  for b in s.buckets_not_prepared[:5]]
        if s.preemptions:
            lines.append(f"  preemptions: {s.preemptions}")
        if s.compilations_under_load:
            lines.append(f"  graphs compiled while serving: {s.compilations_under_load}")
    for n in serving:
        times = f" ({n.count} times)" if n.count > 1 else ""
        lines += _wrap(f"line {n.line_no}: {n.words}{times}", "  ")
    if x.problems:
        lines += ["", "Errors"]
        for p in x.problems[:10]:
            lines += _wrap(f"line {p.line_no} [{p.kind}]: {p.message}{_restated(p)}", "  ")
    adv = x.advice
    if adv.alternatives:
        paced = any(a.predicted_warmup_s is not None for a in adv.alternatives)
        lines += ["", *_wrap(f"Alternatives (warm-up predicted from {adv.predicted_by})" if paced else
                             "Alternatives (bucket counts only: this log has no warm-up timing to predict from)"),
                  f"  {'':<16}{'strategy':<14}{'prompt':>7}{'decode':>7}{'warm-up':>10}"
                  + ("  (2-sd range)" if any(a.predicted_warmup_band for a in adv.alternatives) else "")]
        base = _as_logged(x)
        if x.phases or x.counted:
            counts = x.bucket_counts
            lines.append(f"  {'this log':<16}{'':<14}{counts.get('prompt', 0):>7}{counts.get('decode', 0):>7}"
                         f"{_secs(x.timeline.warmup_total_s):>10}  (observed)")
        for a in adv.alternatives:
            if a.error:
                lines += _wrap(f"{a.name}: not valid for {adv.profile}: {a.error}", "  ")
                continue
            if a.unusable:
                continue   # shown apart below, never in a row beside the options
            pct = _pct(a.predicted_warmup_s, base.predicted_warmup_s if base and a is not base else None)
            flag = "  != this log" if a is base and adv.rebuild_mismatch else ""
            rng = f" ({display.span(*a.predicted_warmup_band)})" if a.predicted_warmup_band else ""
            lines.append(f"  {a.name:<16}{a.strategy or '':<14}{a.prompt_buckets:>7}{a.decode_buckets:>7}"
                         f"{_secs(a.predicted_warmup_s):>10}{rng}{pct}{flag}")
        apart = [a for a in adv.alternatives if a.unusable]
        if apart:
            lines.append("  not usable (far beyond the logged run):")
            for a in apart:
                lines += _wrap(f"{a.name}: {a.prompt_buckets:,} prompt and {a.decode_buckets:,} decode buckets"
                               + (f", {_secs(a.predicted_warmup_s)} of warm-up" if a.predicted_warmup_s else "")
                               + f" -- {a.unusable}", "    ")
        for a in adv.alternatives:
            if a.error is None and a.unusable is None:
                for why in a.raised:
                    lines += _wrap(f"{a.name}: {why}", "  ")
                for gap in a.gaps:
                    lines += _wrap(f"{'the logged settings' if a is base else a.name} leave a gap: {gap}", "  ")
        for a in adv.alternatives:
            if a.name == "calculator" and a.error is None and a.unusable is None:
                lines.append("  calculator settings:")
                lines += [f"    {k}={v}" for k, v in a.env.items() if "BUCKET" in k]
    if adv.rebuild_mismatch:
        lines += _wrap(f"CHECK FAILED: {adv.rebuild_mismatch}", "  ")
    lines += assumed  # not shown yet: no advice sentence
    for note in adv.notes:
        lines += _wrap(f"note: {note}", "  ")
    if adv.tune_command:
        lines += ["", "Verify with a study (replace MODEL):"]
        lines += [f"  {command_text(adv.tune_command)}"]  # one line, so that it can be copied whole
    rd = x.reading
    ranks = f", {rd.duplicate_rank_lines} lines of other ranks ignored" if rd.duplicate_rank_lines else ""
    lines += [""] + _wrap(f"Read {rd.lines} lines: {len(rd.events)} events, {rd.unread} unread log lines{ranks}.")
    for ex in rd.unread_examples[:3]:
        lines += _wrap(f"unread: {ex[:150]}", "  ")
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _interval_json(iv) -> dict:
    steps: dict[str, int] = {}
    for key, n in iv.spans:
        steps[key] = steps.get(key, 0) + n
    return {"run": iv.run, "start_line": iv.start_line, "end_line": iv.end_line, "seconds": iv.seconds,
            "kind": iv.kind, "steps": steps, "exact": iv.exact, "note": iv.note or None}


def _phase_json(p) -> dict:
    return {"name": p.name, "seconds": p.seconds, "steps": p.steps, "of": p.total, "complete": p.complete,
            "spans_gap": p.gap, "phases": list(p.keys)}


def to_json(x: Explanation) -> dict:
    """The --json document (schema in README "Explain a server log")."""
    s = x.reading.summary
    rd = x.reading
    return {
        "source": x.source,
        "release": {"family": x.release.family, "profiles": list(x.release.profiles), "engine": x.release.engine,
                    "version": x.release.version, "evidence": list(x.release.evidence),
                    "decided_by": list(x.release.decided_by), "profile": x.release.profile,
                    "given": x.release.given, "inputs": {k: (list(v) if isinstance(v, tuple) else v)
                                                         for k, v in x.release.inputs}},
        "summary": plain_words(x),
        "buckets": {p.phase: {"count": None if p.count_from == "config" else p.count, "count_from": p.count_from,
                              "dims": list(p.dims),
                              "ranges": [list(r) for r in p.ranges] if p.complete else None,
                              "listed": p.listed, "list_complete": p.complete,
                              "listed_ranges": [list(r) for r in p.ranges],
                              "omitted": p.omitted, "graphs_captured": p.captured,
                              "config": {k: list(v) for k, v in (p.config or {}).items()} or None}
                    for p in x.phases + x.counted},
        "memory_bytes": {k: v for k, v in vars(x.memory).items()},
        "warmup": {"total_s": x.timeline.warmup_total_s, "complete": x.timeline.complete,
                   "phases": [_phase_json(p) for p in x.timeline.phases],
                   "slowest": [{"phase": st.phase, "index": st.index, "total": st.total, "shape": list(st.shape),
                                "seconds": st.seconds, "line": st.line_no} for st in x.timeline.slowest],
                   "skipped": x.timeline.skipped, "skip_evidence": x.timeline.skip_evidence,
                   "engine_init_s": s.engine_init_s, "listening_url": s.listening_url,
                   "run": x.timeline.primary,
                   "runs": [{"index": r.index, "first_line": r.first_line, "last_line": r.last_line, "start": r.start,
                             "why": r.why, "bucket_lines_from": r.lender, "warmup_steps": r.steps,
                             "total_s": r.warmup_total_s, "phases": [_phase_json(p) for p in r.phases]}
                            for r in x.timeline.runs],
                   "intervals": [_interval_json(iv) for iv in x.timeline.intervals],
                   "notes": x.timeline.notes},
        "server": {k: v for k, v in vars(x.server).items()},
        "runtime": {"not_warmed_up": [{"phase": n.phase, "shape": list(n.shape)} for n in s.not_warmed_up],
                    "buckets_not_prepared": [{"phase": b.phase, "requested": list(b.requested),
                                              "new_bucket": list(b.new_bucket)} for b in s.buckets_not_prepared],
                    "preemptions": s.preemptions,
                    # the bridge's graph-compilation lines (fork: VLLM_HPU_LOG_STEP_GRAPH_COMPILATION, vllm-gaudi:
                    # PT_HPU_METRICS_GC_DETAILS): graphs compiled once the server was up
                    "graphs_compiled_while_serving": s.compilations_under_load,
                    "prefix_cache_hit_pct": _prefix_hit_pct(x)},
        "notices": [{"kind": n.kind, "line": n.line_no, "words": n.words, "values": n.values, "count": n.count,
                     "serving": n.serving} for n in x.notices],
        "errors": [{"kind": p.kind, "message": p.message, "line": p.line_no, "restated_at": list(p.restated)}
                   for p in x.problems],
        "advice": {"profile": x.advice.profile, "server": x.advice.server, "assumptions": x.advice.assumptions,
                   "alternatives": [{"name": a.name, "description": a.description, "strategy": a.strategy,
                                     "env": a.env, "prompt_buckets": a.prompt_buckets,
                                     "decode_buckets": a.decode_buckets, "predicted_warmup_s": a.predicted_warmup_s,
                                     "predicted_kv_blocks": a.predicted_kv_blocks,
                                     "predicted_warmup_band_s": (list(a.predicted_warmup_band)
                                                                 if a.predicted_warmup_band else None),
                                     "error": a.error, "unusable": a.unusable,
                                     "gaps": list(a.gaps), "raised": list(a.raised)} for a in x.advice.alternatives],
                   "predicted_by": x.advice.predicted_by, "rebuild_mismatch": x.advice.rebuild_mismatch,
                   "tune_command": x.advice.tune_command, "notes": x.advice.notes,
                   "graph_reserve": vars(x.advice.graph_reserve) if x.advice.graph_reserve else None},
        "reading": {"lines": rd.lines, "events": len(rd.events), "unread": rd.unread,
                    "unread_examples": rd.unread_examples, "duplicate_rank_lines": rd.duplicate_rank_lines,
                    "processes": rd.processes, "leader": rd.leader},
    }
