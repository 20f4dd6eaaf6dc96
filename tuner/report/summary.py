"""The answer first: what to deploy, how it compares with where the study started (the release
defaults and the static calculator), the env file, and why it wins, in plain words."""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from ..results.export import ExportError, env_file_text
from ..vocabulary import display
from .data import ReportData
from .facts import balanced_rule, runner_up
from .tables import esc, table


def stats(d: ReportData, t: FrozenTrial) -> dict:
    """Objectives and server-side facts of a trial, the same keys for every trial."""
    out: dict = {}
    rec = d.record(t)
    if t.state == TrialState.COMPLETE and t.values and rec.ok:
        out.update(zip(d.names, t.values))
    obs, pred = rec.observed, rec.predicted
    for key in ("prompt_buckets", "decode_buckets", "prompt_graphs", "decode_graphs", "kv_blocks"):
        out[key] = obs.get(key, pred.get(key))
    if rec.ok:
        out["recompiles"] = (obs.get("not_warmed_up") or 0) + (obs.get("buckets_not_prepared") or 0)
        out["preemptions"] = obs.get("preemptions")
        out.update(first_run(rec))
    pad = d.padding(t)
    if pad is not None:
        out["prompt padding"] = None if pad.prompt_waste is None else 100 * pad.prompt_waste
        out["decode padding"] = None if pad.decode_waste is None else 100 * pad.decode_waste
    return out


def first_run(rec) -> dict:
    """The first requests after ready (tuner/load/firstrun.py): the window's tail TTFT and throughput, their
    penalty against as many warm requests, and the shapes compiled in the window; {} when not measured."""
    obs, m = rec.observed, rec.metrics
    if m.get("first_requests") is None:
        return {}
    return {FIRST_TAIL: m.get(FIRST_TAIL), "first_output_throughput": m.get("first_output_throughput"),
            "first-run penalty": obs.get("first_run_penalty_tail_ttft"),
            "first-run compiles": sum(obs.get(k) or 0 for k in ("first_run_not_warmed_up",
                                                                "first_run_buckets_not_prepared"))}


FIRST_TAIL = "first_p99_ttft_ms"  # the window's p99 TTFT (what --slo first_p99_ttft_ms limits)
ROWS = ("prompt_buckets", "decode_buckets", "prompt_graphs", "decode_graphs", "kv_blocks", "recompiles",
        "prompt padding", "decode padding", FIRST_TAIL, "first_output_throughput", "first-run penalty",
        "first-run compiles")
BETTER_LOW = {"prompt_buckets", "decode_buckets", "recompiles", "prompt padding", "decode padding", FIRST_TAIL,
              "first-run penalty", "first-run compiles"}


# The comparison table's rows in words a newcomer reads, with their units (the cells carry them too).
PLAIN = {"prompt_buckets": "prompt shapes warmed up (buckets)", "decode_buckets": "decode shapes warmed up (buckets)",
         "prompt_graphs": "prompt HPU graphs captured", "decode_graphs": "decode HPU graphs captured",
         "kv_blocks": "KV-cache blocks (memory for context)", "recompiles": "requests in a shape not warmed up",
         "prompt padding": "prompt padding (% of prompt tokens wasted)",
         "decode padding": "decode padding (% of context wasted)",
         FIRST_TAIL: "time to first token of the first requests after ready, p99 (ms)",
         "first_output_throughput": "throughput of the first requests after ready (output tokens/s)",
         "first-run penalty": "first-run p99 TTFT against the same requests once warm",
         "first-run compiles": "shapes compiled in the first requests after ready"}
LATENCY_WORDS = {"ttft": "time to first token", "tpot": "time per output token", "itl": "time between tokens",
                 "e2el": "request time, end to end"}


def plain_name(name: str) -> str:
    """'p99_ttft_ms' -> 'time to first token, p99 (ms)'; 'output_throughput' -> 'throughput (output tokens/s)'."""
    if name == "output_throughput":
        return "throughput (output tokens/s)"
    if name == "warmup_s":
        return "warm-up before serving"
    parts = name.split("_")
    if len(parts) == 3 and parts[1] in LATENCY_WORDS and parts[2] == "ms":
        return f"{LATENCY_WORDS[parts[1]]}, {parts[0]} (ms)"
    return PLAIN.get(name, name.replace("_", " "))


def _show(name: str, v) -> str:
    if name.endswith("padding"):
        return "-" if display.missing(v) else f"{v:.0f}%"
    if name == "first-run penalty":  # the window's tail TTFT over as many warm requests'
        return "-" if display.missing(v) else f"x{v:.2f}"
    return display.metric(name, v)


def _delta(name: str, new, old) -> tuple[str, float | None]:
    diff, pct = display.change(new, old)
    if diff is None:
        return "-", None
    if name.endswith("padding"):
        return f"{diff:+.0f} pts", diff
    if name == "first-run penalty":  # a ratio: the difference of two ratios
        return f"{diff:+.2f}", diff
    text = _show(name, abs(diff))
    text = ("+" if diff > 0 else "-" if diff < 0 else "") + text
    return (f"{text} ({display.percent(pct)})" if pct is not None else text), pct


def comparison_table(d: ReportData, columns: list[tuple[str, FrozenTrial]]) -> str:
    all_stats = [stats(d, t) for _, t in columns]
    headers = ["", *[f"{label}: trial {t.number}" for label, t in columns[:1]]]
    for label, t in columns[1:]:
        headers += [f"{label}: trial {t.number}", f"pick vs {label}"]
    statuses = [d.record(t).status_text for _, t in columns[1:]]
    rows = []
    for name in [*d.names, *ROWS]:
        if all(display.missing(s.get(name)) for s in all_stats):
            continue
        row = [plain_name(name), (_show(name, all_stats[0].get(name)), all_stats[0].get(name))]
        for status, s in zip(statuses, all_stats[1:]):
            other = s.get(name) if status == "ok" or name not in d.names else None
            row.append((_show(name, other) if status == "ok" or name not in d.names else status, other))
            row.append(_delta(name, all_stats[0].get(name), other) if status == "ok" or name not in d.names
                       else ("-", None))
        rows.append(row)
    return table(headers, rows, cls="compare")


def why(d: ReportData, t: FrozenTrial) -> str:
    """One paragraph in plain words: the gain, the settings that differ, buckets, padding, graphs."""
    me = stats(d, t)
    thr, lat, warm = d.names[0], d.names[1], d.names[2]
    say = [f"Trial {t.number} serves {display.metric(thr, me.get(thr))} at {display.short(lat)} "
           f"{display.metric(lat, me.get(lat))} after a warmup of {display.seconds(me.get(warm))}."]
    say += _against_baseline(d, t, me)
    base = d.defaults
    if base is not None and base.number != t.number:
        b = stats(d, base)
        if d.record(base).ok:
            _, p_thr = display.change(me.get(thr), b.get(thr))
            _, p_lat = display.change(me.get(lat), b.get(lat))
            _, p_warm = display.change(me.get(warm), b.get(warm))
            say.append(f"Against the release defaults (trial {base.number}) that is {display.percent(p_thr)} "
                       f"throughput, {display.percent(p_lat)} {display.short(lat)} and "
                       f"{display.percent(p_warm)} warmup.")
        else:
            rec = d.record(base)
            say.append(f"The release defaults (trial {base.number}) did not even serve: "
                       f"{rec.status} ({rec.reason[:120]}).")
        changed = [f"{k} {base.params.get(k, 'unset')} -> {v}" for k, v in t.params.items()
                   if base.params.get(k) != v]
        if changed:
            say.append("It changes " + ", ".join(changed) + ".")
        say += _buckets_sentence(me, b)
    elif base is not None:
        say.append("It is the release defaults: the search found nothing that beats them on balance.")
    pad = d.padding(t)
    if pad is not None and pad.prompt_waste is not None:
        text = f"On this workload about {pad.prompt_waste:.0%} of the prompt tokens it computes are padding"
        if pad.decode_waste is not None:
            text += f" and about {pad.decode_waste:.0%} of the decode context (at batch bucket {pad.decode_bs})"
        say.append(text + ".")
    say += _first_run_sentence(d.record(t))
    rec = me.get("recompiles")
    if rec == 0:
        say.append("No request hit a shape that was not warmed up.")
    elif rec:
        say.append(f"{rec} request shapes were not warmed up and compiled at runtime.")
    return " ".join(say)   # the balanced pick's rule (the maths) is folded away below it: rule_details


def pick_noise_sentence(d: ReportData, t: FrozenTrial) -> str | None:
    """The balanced pick's evidence against its runner-up when the choice rests on a difference inside the noise."""
    runner = runner_up(d.front, t, d.dirs)
    if d.spread is None or runner is None or d.spread.verdict(t.number, runner.number)[0] is not True:
        return None
    return d.spread.pick_evidence(t.number, runner.number)


def _how_sure(d: ReportData, t: FrozenTrial) -> str:
    """The pick's figures with their spread over its boots (study/estimates.py), or that it is one measurement."""
    spread = d.spread
    if spread is None:
        return ""
    n = spread.n(t.number)
    if n < 2:
        return ("<p id='how-sure'>How sure: the pick is one measurement of its settings, so its figures carry no "
                "interval; <code>tune --remeasure 2</code> boots each configuration twice.</p>")
    items = "".join(f"<li>{esc(line)}</li>" for line in spread.describe(t.number, sep="\n").splitlines())
    same = [b if a == t.number else a for a, b in spread.indistinguishable([x.number for x in d.front])
            if t.number in (a, b)]
    note = (f"<p>Indistinguishable from the pick within the noise: {esc(', '.join(f'trial {x}' for x in same))} "
            "(their intervals overlap on every objective where they differ).</p>") if same else ""
    return (f"<p id='how-sure'>How sure: {n} boots of the pick's settings; each figure's mean and 95% Student "
            f"t-interval:</p><ul>{items}</ul>{note}")


def _first_run_sentence(rec) -> list[str]:
    """The pick's first requests after ready against as many once warm (docs/load-metrics.md section 4)."""
    obs, m = rec.observed, rec.metrics
    tail = obs.get("first_run_tail") or "p99"
    first, warm = m.get(f"first_{tail}_ttft_ms"), m.get(f"warm_{tail}_ttft_ms")
    if first is None or warm is None:
        return []
    thr = obs.get("first_run_penalty_output_throughput")
    shapes = sum(obs.get(k) or 0 for k in ("first_run_not_warmed_up", "first_run_buckets_not_prepared"))
    text = (f"Its first {obs.get('first_run_window')} requests after ready (the first run) had a {tail} TTFT of "
            f"{display.millis(first)} against {display.millis(warm)} for as many once warm")
    if thr is not None:
        text += f", and {display.percent(100 * (thr - 1))} throughput"
    text += (f"; {shapes} shapes not warmed up compiled in that window." if shapes else
             "; no shape compiled in that window.")
    return [text]


def baseline_label(d: ReportData) -> str:
    b = d.baseline
    source = (d.study.user_attrs.get("baseline") or {}).get("source")
    return f"your baseline (trial {b.number}{', ' + source if source else ''})"


def _against_baseline(d: ReportData, t: FrozenTrial, me: dict) -> list[str]:
    """The pick against what the user runs today, first: each objective absolute and in percent."""
    b = d.baseline
    if b is None:
        return []
    if b.number == t.number:
        return ["It is your baseline: the search found nothing that beats it on balance."]
    rec = d.record(b)
    if not rec.ok or not b.values:
        return [f"Your baseline (trial {b.number}) did not serve: {rec.status} ({rec.reason[:120]})."]
    other = stats(d, b)
    parts = []
    for name in d.names[:3]:
        text, _ = _delta(name, me.get(name), other.get(name))
        label = {"output_throughput": "throughput", "warmup_s": "warmup"}.get(name, display.short(name))
        parts.append(f"{text} {label}")
    limits = "" if rec.feasible else " (your baseline is outside this study's limits)"
    return [f"Against {baseline_label(d)}: {', '.join(parts)}{limits}."]


def _buckets_sentence(me: dict, b: dict) -> list[str]:
    out = []
    pb, db, bpb, bdb = (me.get("prompt_buckets"), me.get("decode_buckets"), b.get("prompt_buckets"),
                        b.get("decode_buckets"))
    if None not in (pb, db, bpb, bdb):
        fewer = (pb + db) < (bpb + bdb)
        out.append(f"Its release builds {pb} prompt and {db} decode buckets (defaults: {bpb} and {bdb}), "
                   + ("fewer shapes to warm up" if fewer else "more shapes, so less padding per request")
                   + (" and " if fewer else ", at the price of ") + "a "
                   + ("shorter" if fewer else "longer") + " warmup.")
    g, bg = ((me.get("prompt_graphs") or 0) + (me.get("decode_graphs") or 0),
             (b.get("prompt_graphs") or 0) + (b.get("decode_graphs") or 0))
    if g or bg:
        out.append(f"It captures {g} HPU graphs (defaults: {bg}).")
    return out


def simulated(d: ReportData) -> bool:
    return d.backend.get("kind") == "sim"


def sim_banner(d: ReportData) -> str:
    """The page's first line when nothing ran on hardware."""
    if not simulated(d):
        return ""
    return ("<p class='sim-banner' id='simulated'><b>Simulated study: nothing here ran on hardware.</b> Every "
            "figure comes from bucket-tuner's simulated vLLM-on-Gaudi server. Run the same study with "
            "<code>--backend vllm</code> on a Gaudi node before deploying any of its settings.</p>")


def _headline(d: ReportData, t: FrozenTrial) -> str:
    """The answer in one sentence: the pick, and its gain over what the user runs or the release defaults."""
    base = d.defaults
    headline = f"Deploy trial {t.number}, the balanced pick of the feasible front (what best.env holds)"
    if simulated(d):
        headline = (f"Trial {t.number}, the balanced pick of the feasible front on the simulator (what best.env "
                    "holds)")
    mine = d.baseline
    if mine is not None:  # what the user runs today comes first
        if mine.number == t.number:
            headline += ": your baseline itself (0% throughput over it)"
        elif d.record(mine).ok and mine.values:
            diff, p = display.change(t.values[0], mine.values[0])
            headline += (f": {'+' if diff >= 0 else '-'}{display.metric(d.names[0], abs(diff))} "
                         f"({display.percent(p)}) throughput over {baseline_label(d)}")
        else:
            headline += f"; {baseline_label(d)} did not serve: {d.record(mine).status}"
    elif base is not None and base.number == t.number:
        headline += ": the release defaults themselves (0% throughput over the release defaults)"
    elif base is not None and d.record(base).ok:
        _, p = display.change(t.values[0], base.values[0])
        headline += f": {display.percent(p)} throughput over the release defaults (trial {base.number})"
    elif base is not None:
        headline += f"; the release defaults (trial {base.number}) failed: {d.record(base).status}"
    return headline


def section(d: ReportData) -> str:
    parts = ["<section id='summary'><h2>What to deploy</h2>"]
    limits = d.limits.describe()
    if d.pick is None:
        from .facts import closest_admission

        admit = closest_admission(d.study)
        parts.append("<p class='warn'>No trial is feasible yet: there is nothing to deploy. The Failures "
                     "section says what went wrong" + (f"; {esc(admit.sentence())}" if admit else "") + ".</p>")
        return "".join(parts) + "</section>"
    t = d.pick
    base = d.defaults
    headline = _headline(d, t)
    verify = (" Simulated: nothing ran on hardware, so verify it on a Gaudi node (--backend vllm) before "
              "deploying it." if simulated(d) else "")
    parts.append(f"<p class='answer' id='answer'>{esc(headline)}.{esc(verify)}</p>")
    parts.append(f"<p>Limits of this study: {esc(limits)}.</p>" if limits else
                 "<p>No warmup budget or SLO was given at tune time: every measured trial without failed requests "
                 "or runtime recompiles counts as feasible.</p>")
    if d.best is not None and d.best.number != t.number:
        parts.append(f"<p>Highest throughput within the limits: trial {d.best.number} "
                     f"({esc(display.metric(d.names[0], d.best.values[0]))}, {esc(display.short(d.names[1]))} "
                     f"{esc(display.metric(d.names[1], d.best.values[1]))}, warmup "
                     f"{esc(display.seconds(d.best.values[2]))}); <code>bucket-tuner export "
                     f"{esc(d.study.study_name)} --pick throughput</code> writes it.</p>")
    mine = d.baseline
    columns = [("pick", t)]
    if mine is not None and mine.number != t.number:
        columns.append(("your baseline", mine))
    if d.best is not None and d.best.number != t.number:
        columns.append(("best throughput", d.best))
    if base is not None:
        columns.append(("release defaults", base))
    if d.calculator is not None:
        columns.append(("calculator", d.calculator))
    parts.append(comparison_table(d, columns))
    parts.append(_how_sure(d, t))
    if base is None:
        parts.append("<p class='none'>This study has no release-defaults trial: it was started with "
                     "--no-seed-defaults, or its search space cannot express the release's defaults.</p>")
    parts.append(f"<h3>Why it wins</h3><p id='why'>{esc(why(d, t))}</p>")
    rule = balanced_rule(d.front, t, d.names, d.dirs, d.spread)
    noise = pick_noise_sentence(d, t)
    if noise:  # the evidence stays in view when the choice rests on a difference inside the noise
        parts.append(f"<p class='warn' id='pick-noise'>{esc(noise)}</p>")
    if rule:
        parts.append("<details id='pick-rule'><summary>How the balanced pick is chosen (the scoring)</summary>"
                     f"<p>{esc(rule)}</p></details>")
    try:
        env = env_file_text(d.study, t, "balanced", d.release)
    except ExportError as exc:
        env = f"# cannot write the env file: {exc}"
    parts.append("<h3>The env file <button class='copy' data-target='env-file'>copy</button></h3>"
                 f"<pre id='env-file'>{esc(env)}</pre>")
    return "".join(parts) + "</section>"
