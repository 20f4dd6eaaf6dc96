"""The evidence sections of report.html: pareto, warmup, workload, failures, convergence, trials."""

from __future__ import annotations

import json
import warnings
from collections import defaultdict
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..study.estimates import LEVEL, formatter
from ..vocabulary import display
from ..vocabulary.record import TrialRecord
from . import charts
from .convergence import convergence
from .data import ReportData
from .facts import accelerator_hours, settings_text, trial_class, value_text
from .startup import PHASES
from .summary import stats
from .sweep import sweep_cell, sweep_points
from .tables import esc, table
from .warmuprows import warmup_rows

Chart = Callable[[object, str], str]  # (figure, div id) -> html


def hover(d: ReportData, t: FrozenTrial, cls: str) -> str:
    rec = d.record(t)
    lines = [f"trial {t.number} ({cls}, {rec.status_text})"]
    if t.values and rec.ok:
        lines += [f"{display.short(n)}: {display.metric(n, v)}" for n, v in zip(d.names, t.values)]
    lines += [f"{k}={value_text(v)}" for k, v in t.params.items()]
    return "<br>".join(esc(x) for x in lines)


def budget_steps(d: ReportData) -> list[tuple[float, FrozenTrial]]:
    """Best throughput within a warmup budget: every front trial that raises it, by warmup."""
    steps, best = [], None
    for t in sorted(d.front, key=lambda t: (t.values[2], -t.values[0])):
        if best is None or t.values[0] > best:
            best = t.values[0]
            steps.append((t.values[2], t))
    return steps


def pareto(d: ReportData, chart: Chart) -> str:
    out = ["<section id='pareto'><h2>The Pareto front</h2>"]
    if len(d.names) < 3:
        return out[0] + "<p>This study does not have the three objectives of bucket-tuner.</p></section>"
    thr, lat, warm = d.names[:3]
    by_xy: dict[str, dict[str, list]] = {"lat": defaultdict(list), "warm": defaultdict(list)}
    cloud: dict[str, list] = defaultdict(list)
    for t in d.trials:
        rec = d.record(t)
        cls = trial_class(rec, d.pareto)
        if cls == "running" or not t.values:
            continue
        text = hover(d, t, cls)
        ok = rec.ok
        by_xy["warm"][cls].append({"x": t.values[2], "y": t.values[0] if ok else 0.0, "text": text})
        if ok:
            by_xy["lat"][cls].append({"x": t.values[1], "y": t.values[0], "text": text})
            cloud[cls].append({"v": t.values, "text": text})
    failed = sum(1 for t in d.trials if trial_class(d.record(t), d.pareto) == "failed")
    out.append(f"<p>{len(d.front)} of {len(d.trials)} trials on the feasible front. Red stars: the front; blue: "
               "feasible; orange: measured but outside a limit; grey crosses: failed (no measurement; drawn at "
               f"zero throughput in the warmup view). {failed} failed trials have no latency.</p><div class='grid'>")
    pick = d.pick if d.pick is not None and d.pick.values else None
    mark = {"trial": pick.number, "text": hover(d, pick, "the pick")} if pick else None
    at = (lambda **xy: {**mark, **xy}) if mark else (lambda **xy: None)
    v = pick.values if pick else (0.0, 0.0, 0.0)
    out.append(chart(charts.scatter_2d(_ordered(by_xy["lat"]), f"{display.short(lat)} (ms)", "throughput (tokens/s)",
                                       f"Throughput vs {display.short(lat)}", at(x=v[1], y=v[0])),
                     "chart-pareto-latency"))
    out.append(chart(charts.scatter_2d(_ordered(by_xy["warm"]), "warm-up (s)", "throughput (tokens/s)",
                                       "Throughput vs warm-up", at(x=v[2], y=v[0])), "chart-pareto-warmup"))
    out.append("</div>")
    out.append(chart(charts.scatter_3d(_ordered(cloud), d.names, at(v=v)), "chart-pareto-3d"))
    out.append("<h3>Best throughput within a warmup budget</h3>")
    rows = [((display.seconds(w), w), (display.metric(thr, t.values[0]), t.values[0]),
             (display.metric(lat, t.values[1]), t.values[1]), t.number, settings_text(t)) for w, t in budget_steps(d)]
    out.append(table(["warmup budget", "best tok/s", display.short(lat), "trial", "settings"], rows,
                     table_id="budget-table"))
    out.append("<h3>Front trials</h3>")
    out.append(front_table(d))
    imp = _importances(d.study, d.names)
    if imp:
        out.append(chart(charts.importances(imp), "chart-importances"))
    return "".join(out) + "</section>"


def front_table(d: ReportData) -> str:
    """The front, with each configuration's spread when some were measured more than once (study/estimates.py):
    n boots, the mean +- half its 95% t-interval, and the pairs the noise cannot tell apart."""
    spread = d.spread
    repeated = spread is not None and spread.repeated(t.number for t in d.front)
    rows = []
    for t in d.front:
        cells = [(display.metric(n, v), v) for n, v in zip(d.names, t.values)]
        if repeated:
            cells = [spread.n(t.number), *[(e.short(formatter(n)), e.mean) if e is not None else c
                                           for n, e, c in zip(d.names, spread.of(t.number), cells)]]
        rows.append((t.number, *cells, settings_text(t)))
    heads = ["trial", *(["n"] if repeated else []), *[display.short(n) for n in d.names], "settings"]
    html = table(heads, rows, cls="sortable")
    if not repeated:
        return html + ("<p>Each front trial is one measurement: no interval. <code>tune --remeasure 2</code> boots "
                       "each configuration twice and shows each figure's mean and 95% t-interval.</p>")
    html += (f"<p>n: boots of the same settings; a figure is their mean ± half its {LEVEL:.0%} Student t-interval "
             "(n 1: one measurement, no interval).</p>")
    pairs = spread.indistinguishable([t.number for t in d.front])
    if pairs:
        html += ("<p>Indistinguishable within the noise (their intervals overlap on every objective where they "
                 "differ): " + ", ".join(f"trials {a} and {b}" for a, b in pairs) + ".</p>")
    return html


def _ordered(points: dict[str, list]) -> dict[str, list]:
    order = ("failed", "infeasible", "feasible", "Pareto front")  # the front drawn last, on top
    return {k: points[k] for k in order if points.get(k)}


def _importances(study: optuna.Study, names: list[str]) -> list[dict]:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 4 or not any(t.params for t in complete):
        return []
    rows = []
    signs = [-1.0 if d.name == "MAXIMIZE" else 1.0 for d in study.directions]
    for i, name in enumerate(names):
        try:
            # PED-ANOVA (Optuna's default) looks for what makes the target low: flip maximised ones.
            # It warns about that and about thinly sampled parameters on every call: a best effort.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                imp = optuna.importance.get_param_importances(study, target=lambda t, i=i: signs[i] * t.values[i])
        except (RuntimeError, ValueError, ZeroDivisionError):
            continue
        rows += [{"objective": name, "parameter": p, "importance": v} for p, v in imp.items()]
    return rows


def warmup(d: ReportData, chart: Chart) -> str:
    out = ["<section id='warmup'><h2>Warmup: what the server built and how long it took</h2>"]
    who = [(label, t) for label, t in (("pick", d.pick), ("release defaults", d.defaults)) if t is not None]
    if d.defaults is not None and d.pick is not None and d.defaults.number == d.pick.number:
        who = who[:1]
    if not who:
        return out[0] + "<p class='none'>No pick and no release-defaults trial to show.</p></section>"
    facts = {label: d.log(t) for label, t in who}
    rows = warmup_rows([(t, facts[label]) for label, t in who], lambda t: stats(d, t))
    out.append(table(["", *[f"{label}: trial {t.number}" for label, t in who]], rows))
    bars = {f"{label} (trial {t.number})": facts[label].phase_s for label, t in who
            if facts[label] and facts[label].phase_s}
    if bars:
        out.append(chart(charts.warmup_phases(bars, PHASES), "chart-warmup-phases"))
    else:
        out.append("<p class='none'>The server logs carry no timestamps to time the phases with.</p>")
    out.append("<h3>Predicted before boot vs observed</h3>")
    for label, t in who:
        out.append(f"<h4>{esc(label)}: trial {t.number}</h4>" + _predicted_vs_observed(d.record(t)))
    out.append(_calibration(d))
    return "".join(out) + "</section>"


# What each correction of the performance model scales (tuner/perfmodel/corrections.py).
_CORRECTIONS = {
    "load": "weights load time", "profile": "profiling run time", "prompt_warmup": "prompt warm-up step time",
    "decode_warmup": "decode warm-up step time", "capture": "HPU-graph capture time",
    "kv_block": "bytes per KV block", "graph_mem": "memory per HPU graph",
    "free_mem_offset_gib": "free device memory (GiB added)", "decode_step": "decode step time",
    "prefill_step": "prefill step time",
}


def _calibration(d: ReportData) -> str:
    """The corrections in force: what every boot of this study (and --calibrate-from logs) taught the model."""
    cal = d.study.user_attrs.get("calibration") or {}
    head = "<h3 id='calibration'>Calibration in force</h3>"
    if d.release is None:  # a generic vLLM (CPU, CUDA): the cost model has nothing to predict, nothing to correct
        return head + ("<p class='none'>None: this server has no release profile, so the performance model "
                       "predicted nothing for it and nothing was calibrated.</p>")
    if not cal or not cal.get("boots"):
        return head + "<p class='none'>No calibration recorded (no prediction, or no boot yet).</p>"
    boots = cal.get("boots", 0)
    rows = []
    for name, f in cal.items():
        if not isinstance(f, dict):
            continue
        rows.append([_CORRECTIONS.get(name, name), name, (f"{f['value']:.3g}", f["value"]),
                     f"{f['low']:.3g} .. {f['high']:.3g}", f.get("n", 0)])
    intro = (f"<p>The documented cost model, corrected by {boots} observation(s) of this node: a factor of 1 "
             "is the documented constant; the interval is 95%. Pre-boot rejections and the live warm-up "
             "projection use these.</p>")
    if cal.get("prior") == "generic":  # Calibration.for_device: the tables lack the device or the model
        intro += ("<p>The device or model is not in the performance model's tables: its prior is a generic "
                  "stand-in, and these corrections come from this study's boots alone.</p>")
    return head + intro + _device_seen(d) + table(["what it scales", "correction", "value", "95% interval",
                                                   "samples"], rows)


def _device_seen(d: ReportData) -> str:
    """A node other than the study was told: the boots' memory lines name another Gaudi than --device."""
    told = (d.study.user_attrs.get("device_model") or {}).get("device")
    seen = {r.observed.get("device_seen") for r in (getattr(d, "records", None) or {}).values()} - {None, told}
    if told is None or not seen:
        return ""
    return (f"<p class='warn'>The servers' memory lines report a {', '.join(sorted(seen))}, but the study was told "
            f"<code>--device {esc(told)}</code>: the predictions started from {esc(told)}'s figures and the "
            "corrections above carry the difference. Run with the device the logs name to predict from its "
            "own.</p>")


def _predicted_vs_observed(rec: TrialRecord) -> str:
    pred, obs = rec.predicted, rec.observed
    keys = [k for k in pred if isinstance(pred[k], (int, float)) and not isinstance(pred[k], bool)
            and k not in ("warmup_low_s", "warmup_high_s")]  # shown as the warm-up's band
    rows = []
    for k in keys:
        o = obs.get(k)
        _, pct = display.change(pred[k], o) if isinstance(o, (int, float)) else (None, None)
        shown = pred[k]
        if k == "warmup_s":  # with its 2-sd band and where the calibration came from
            shown = (display.band(pred[k], pred.get("warmup_low_s"), pred.get("warmup_high_s"),
                                  source=pred.get("warmup_from")), pred[k])
        rows.append([k, shown, o if isinstance(o, (int, float)) else "-", (display.percent(pct, 1), pct)])
    extra = {k: v for k, v in rec.attrs.items() if k.startswith(("perfmodel", "calibrat", "prediction"))}
    html = table(["quantity", "predicted", "observed", "prediction error"], rows) if rows else \
        "<p class='none'>No prediction was recorded for this trial (--no-prediction, or no release profile).</p>"
    if extra:
        records = esc(json.dumps(extra, indent=1, default=str))
        html += f"<details><summary>performance-model records</summary><pre>{records}</pre></details>"
    return html


def workload(d: ReportData, chart: Chart) -> str:
    out = ["<section id='workload'><h2>The workload against the pick's buckets</h2>"]
    t = d.pick
    pad = d.padding(t) if t is not None else None
    if pad is None or not pad.input_lens:
        out.append("<p class='none'>No measured pick with a server log and bench.json to compare with.</p>")
    else:
        out.append("<p>Request lengths of the measured load test (bench.json) against the bucket boundaries the "
                   "server logged. Padding is estimated per sequence: prompts along the sequence dimension, "
                   f"decode contexts half-way through generation at the decode batch bucket {pad.decode_bs}; "
                   "batch-size padding is not included.</p><div class='grid'>")
        out.append(chart(charts.histogram(pad.input_lens, pad.prompt_edges, "Prompt lengths vs prompt buckets",
                                          "prompt tokens", "prompt bucket edge"), "chart-workload-prompt"))
        out.append(chart(charts.histogram(pad.context_lens, pad.decode_edges,
                                          "Context lengths vs decode buckets", "prompt + output tokens",
                                          f"decode bucket edge (per sequence at bs {pad.decode_bs})"),
                         "chart-workload-context"))
        out.append("</div>")
        rows = []
        for label, x in (("pick", t), ("release defaults", d.defaults)):
            p = d.padding(x) if x is not None else None
            if p is None:
                continue
            rows.append([f"{label}: trial {x.number}", _pct(p.prompt_waste), _pct(p.decode_waste),
                         p.beyond_prompt, p.beyond_decode])
        out.append(table(["", "prompt padding", "decode padding", "prompts beyond every bucket",
                          "contexts beyond every bucket"], rows))
    out.append("<h3>Runtime recompiles and preemptions under load</h3>")
    rows, classes = [], []
    for x in d.measured():
        obs = d.record(x).observed
        nw, bnp, pre = obs.get("not_warmed_up") or 0, obs.get("buckets_not_prepared") or 0, obs.get("preemptions") or 0
        if nw or bnp or pre:
            facts = d.log(x)
            shapes = ", ".join((facts.not_warmed_up if facts else [])[:6])
            rows.append([x.number, nw, bnp, pre, shapes])
            classes.append("pick" if t is not None and x.number == t.number else "")
    if rows:
        out.append(table(["trial", "not warmed-up shapes", "buckets not prepared", "preemptions", "shapes (log)"],
                         rows, cls="sortable", row_classes=classes))
    else:
        out.append(f"<p>None: no measured trial ({len(d.measured())}) met a shape that was not warmed up, "
                   "and none preempted a request.</p>")
    out.append(image_recompiles(d))
    return "".join(out) + "</section>"


def image_recompiles(d: ReportData) -> str:
    """Vision-encoder recompiles per image bucket over the measured trials (a VL study only): which image
    buckets the traffic met that the trial's warm-up had not compiled."""
    per_trial = {x.number: d.record(x).observed.get("image_recompiles") for x in d.measured()}
    per_trial = {n: v for n, v in per_trial.items() if isinstance(v, dict)}
    if not per_trial:
        return ""
    buckets: dict[str, list[int]] = defaultdict(list)
    for number, counts in per_trial.items():
        for label, n in counts.items():
            buckets[label] += [number] * int(n)
    out = ["<h3>Recompiles per image bucket</h3>"]
    if not buckets:
        return out[0] + (f"<p>None: every image of the {len(per_trial)} measured trial(s) ran in an image bucket "
                         "its warm-up had compiled.</p>")
    rows = [[label, len(trials), len(set(trials)), ", ".join(map(str, sorted(set(trials))[:12]))]
            for label, trials in sorted(buckets.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    out.append(table(["image bucket", "recompiles", "trials", "trial numbers"], rows, cls="sortable"))
    out.append(f"<p>Of {len(per_trial)} measured trial(s), {sum(1 for c in per_trial.values() if c)} recompiled the "
               "vision encoder under load.</p>")
    return "".join(out)


def _pct(v) -> tuple[str, float | None]:
    return ("-", None) if v is None else (f"{100 * v:.1f}%", 100 * v)


def violations(t: FrozenTrial) -> str:
    cons = {k.split(":", 1)[1]: v for k, v in t.system_attrs.items() if k.startswith("constraints:") and v > 0}
    def amount(key: str, v: float) -> str:
        if key.startswith("slo_"):
            return f"{key[4:]} over its limit by {display.metric(key[4:], v)}"
        if key == "warmup_budget":
            return f"warmup over the budget by {display.seconds(v)}"
        if key == "recompiles":
            return f"{display.num(v)} runtime recompiles (--allow-recompiles lifts this limit)"
        if key == "failed_requests":
            return f"{display.num(v)} failed requests"
        return f"{key} over its limit by {display.num(v)}"

    return "; ".join(amount(k, v) for k, v in cons.items())


def failures(d: ReportData) -> str:
    out = ["<section id='failures'><h2>Failures and rejections</h2>"]
    groups: dict[str, list[FrozenTrial]] = defaultdict(list)
    for t in d.trials:
        rec = d.record(t)
        status = rec.status_text
        if t.state in (TrialState.RUNNING, TrialState.WAITING):
            continue
        if status == "ok" and not rec.told_infeasible:
            continue
        groups["outside a limit (measured)" if status == "ok" else status].append(t)
    if not groups:
        return out[0] + "<p>No trial failed or was rejected.</p></section>"
    out.append(table(["class", "trials", "numbers"],
                     [(k, len(v), ", ".join(str(t.number) for t in v)) for k, v in sorted(groups.items())]))
    for cls, members in sorted(groups.items()):
        out.append(f"<details open><summary><b>{esc(cls)}</b> ({len(members)})</summary>")
        for t in members:
            rec = d.record(t)
            reason = rec.reason or violations(t) or "(no reason recorded)"
            note = " (re-run: the environment failed it)" if rec.requeued else ""
            out.append(f"<p>trial {t.number}{esc(note)}: {esc(settings_text(t))}<br><i>{esc(reason[:600])}</i></p>")
            facts = d.log(t) if not rec.ok else None
            if facts and facts.excerpt:
                out.append(f"<details><summary>log excerpt (trial {t.number})</summary>"
                           f"<pre>{esc(chr(10).join(facts.excerpt))}</pre></details>")
        out.append("</details>")
    return "".join(out) + "</section>"


def convergence_section(d: ReportData, chart: Chart) -> str:
    c = convergence(d.study)
    out = ["<section id='convergence'><h2>Convergence: would more trials pay off?</h2>",
           f"<p class='answer' id='verdict'>{esc(c.verdict)}</p>"]
    if c.numbers:
        total = c.hours[-1]
        scaled = ("; the simulator's compressed time scaled back to a real node's"
                  if d.backend.get("kind") == "sim" else "")
        out.append(f"<p>{len(c.numbers)} finished trials took {total:.2f} accelerator-hours "
                   f"(boot + warmup + load test, times the cards each held{scaled}).</p><div class='grid'>")
        hov = [f"trial {n}" for n in c.numbers]
        at = c.numbers.index(d.pick.number) if d.pick is not None and d.pick.number in c.numbers else None
        mark = (lambda xs: (xs[at], c.share[at], d.pick.number)) if at is not None else (lambda xs: None)
        out.append(chart(charts.convergence(c.numbers, c.share, "Front hypervolume over trials", "trial", hov,
                                            mark(c.numbers)), "chart-convergence-trials"))
        out.append(chart(charts.convergence(c.hours, c.share, "Front hypervolume over accelerator-hours",
                                            "accelerator-hours", hov, mark(c.hours)), "chart-convergence-hours"))
        out.append("</div>")
    return "".join(out) + "</section>"


def _pred_obs(pred, obs, fmt, band: tuple | None = None) -> tuple[str, float | None]:
    """'predicted / observed' for a table cell, sorted by the prediction error (%); `band`: the
    prediction's (low, high, source), shown as '49 s (35-70 s, 3 boots) / 51 s'."""
    if pred is None and obs is None:
        return ("-", None)
    shown = display.band(pred, band[0], band[1], fmt=fmt, source=band[2]) if pred is not None and band else (
        fmt(pred) if pred is not None else "-")
    text = f"{shown} / {fmt(obs) if obs is not None else '-'}"
    if isinstance(pred, (int, float)) and isinstance(obs, (int, float)) and obs:
        err = (pred - obs) / obs * 100
        return (f"{text} ({err:+.0f}%)", err)
    return (text, None)


def trials(d: ReportData) -> str:
    out = ["<section id='trials'><h2>All trials</h2><p>Click a header to sort.</p>"]
    params = list(dict.fromkeys(k for t in d.trials for k in t.params))
    swept = any(sweep_points(d.record(t)) for t in d.trials)  # tune --load-sweep: one column for the curve
    headers = ["trial", "status", "feasible", "seed", *[display.short(n) for n in d.names], *params,
               "prompt buckets", "decode buckets", "warmup pred / obs", "cold / cached warmup",
               "KV blocks pred / obs", "recompiles", "first-run p99 TTFT / warm",
               "acc-hours", *(["load sweep (* reported)"] if swept else []), "reason"]
    rows, classes = [], []
    from ..recipecache.warmupmode import study_figures

    warmups = study_figures(d.study)
    for t in d.trials:
        rec = d.record(t)
        ok = rec.ok and t.values
        obs, pred = rec.observed, rec.predicted
        s = {k: obs.get(k, pred.get(k)) for k in ("prompt_buckets", "decode_buckets")}  # no log reading here
        row = [t.number, rec.status_text, "yes" if rec.feasible else "no", "" if rec.seed is None else rec.seed]
        row += ([(display.metric(n, v), v) for n, v in zip(d.names, t.values)] if ok
                else [("-", None)] * len(d.names))
        row += [value_text(t.params[p]) if p in t.params else "-" for p in params]
        row += [s.get("prompt_buckets"), s.get("decode_buckets"),
                _pred_obs(pred.get("warmup_s"), obs.get("warmup_s"), display.seconds,
                          (pred.get("warmup_low_s"), pred.get("warmup_high_s"), pred.get("warmup_from"))),
                _cold_cached(warmups.get(t.number)),
                _pred_obs(pred.get("kv_blocks"), obs.get("kv_blocks"), display.num),
                (obs.get("not_warmed_up") or 0) + (obs.get("buckets_not_prepared") or 0) if ok else "-",
                _first_run_cell(rec) if ok else ("-", None),
                (f"{accelerator_hours(rec, d.backend):.3f}", accelerator_hours(rec, d.backend)),
                *([sweep_cell(rec)] if swept else []),
                rec.reason[:160]]
        rows.append(row)
        cls = trial_class(rec, d.pareto)
        classes.append("pick" if d.pick is not None and t.number == d.pick.number else
                       {"failed": "failed", "infeasible": "infeasible"}.get(cls, ""))
    headers, rows = _without_empty(headers, rows, OPTIONAL_COLUMNS)
    # a table that fits the page first (who, how it went, the three objectives, why); every column folded below
    first = [i for i, h in enumerate(headers) if h in ("trial", "status", "feasible", "reason")
             or h in [display.short(n) for n in d.names]]
    out.append(table([headers[i] for i in first], [[r[i] for i in first] for r in rows], cls="sortable fit",
                     row_classes=classes, table_id="trials-table"))
    out.append(f"<details id='trials-all'><summary>Every column: the settings, buckets, predictions and costs "
               f"({len(headers)} columns)</summary>"
               + table(headers, rows, cls="sortable", row_classes=classes, table_id="trials-table-full")
               + "</details>")
    return "".join(out) + "</section>"


# Columns a server may give nothing for (a CPU or CUDA vLLM logs no buckets, KV blocks or cached warmup; a
# study without a warm pass has no first-run window)
OPTIONAL_COLUMNS = ("prompt buckets", "decode buckets", "cold / cached warmup", "KV blocks pred / obs",
                    "first-run p99 TTFT / warm")


def _first_run_cell(rec: TrialRecord) -> tuple[str, float | None]:
    """'1,900 / 640 ms (x2.97, 3 compiled)': the first requests after ready against as many warm ones,
    sorted by the penalty (tuner/load/firstrun.py)."""
    m, obs = rec.metrics, rec.observed
    first, warm = m.get("first_p99_ttft_ms"), m.get("warm_p99_ttft_ms")
    if first is None:
        return ("-", None)
    penalty = first / warm if warm else None
    shapes = sum(obs.get(k) or 0 for k in ("first_run_not_warmed_up", "first_run_buckets_not_prepared"))
    extra = [f"x{penalty:.2f}"] if penalty is not None else []
    extra += [f"{shapes} compiled"] if shapes else []
    return (f"{display.millis(first)} / {display.millis(warm)}" + (f" ({', '.join(extra)})" if extra else ""),
            penalty)


def _empty(cell) -> bool:
    value = cell[1] if isinstance(cell, tuple) else cell
    return value is None or value == "-"


def _without_empty(headers: list[str], rows: list[list], optional) -> tuple[list[str], list[list]]:
    """Drop the optional columns that no trial has a value in."""
    drop = {i for i, h in enumerate(headers) if h in optional and all(_empty(r[i]) for r in rows)}
    if not drop:
        return headers, rows
    keep = [i for i in range(len(headers)) if i not in drop]
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows]


def _cold_cached(w) -> tuple[str, float | None]:
    """'cold / cached' warmup of a trial, predicted ones marked (tune --warmup); sorted by the cold one."""
    if not w or w["cached"].seconds is None:  # no cached figure (no recipe cache, no model): nothing to set beside
        return ("-", None)
    return (f"{w['cold'].text(display.seconds)} / {w['cached'].text(display.seconds)}", w["cold"].seconds)


def plan_section(d: ReportData) -> str:
    """tune --from-plan: what the plan predicted before the first boot, against what its picks measured."""
    from .facts import PLAN_SEED, seed_trial

    plan = d.study.user_attrs.get("plan") or {}
    out = ["<section id='plan'><h2>The plan: predicted before the first boot</h2>"]
    pts = plan.get("points") or {}
    sampled = " (a quasi-random sample of the space)" if pts.get("sampled") else ""
    out.append(f"<p>This study started from the plan <code>{esc(plan.get('source', '?'))}</code> "
               f"({esc(plan.get('created') or '')}): {display.num(pts.get('predicted'))} configurations "
               f"predicted{esc(sampled)}, {display.num(pts.get('feasible'))} feasible as predicted, "
               f"{display.num(pts.get('infeasible'))} confidently infeasible and "
               f"{display.num(pts.get('likely_infeasible'))} likely infeasible; its "
               f"{len(plan.get('picks') or [])} picks were booted first, without an accelerator-hour spent on "
               "the prediction.</p>")
    reasons = [(kind, r["reason"], r["count"]) for kind, key in (("confidently", "infeasible"),
                                                                  ("likely", "likely_infeasible"))
               for r in plan.get(key) or []]
    if reasons:
        out.append(table(["infeasible", "reason", "configurations"], reasons))
    names = d.names[:3]
    rows, on_front = [], 0
    for pick in plan.get("picks") or []:
        t = seed_trial(d.study, f"{PLAN_SEED} {pick.get('rank')}")
        pred = pick.get("predicted") or {}
        rec = d.record(t) if t is not None else None
        row: list = [pick.get("rank"), t.number if t is not None else "-",
                     rec.status_text if rec is not None else "not run"]
        measured = rec is not None and rec.ok and t.values
        on_front += bool(t is not None and t.number in d.pareto)
        for i, name in enumerate(names):
            band = (pred.get("bands") or {}).get(name) or [None, None]
            p = pred.get(name)
            text = f"{display.metric(name, p)} ({display.metric(name, band[0])} .. {display.metric(name, band[1])})"
            row.append((text, p))
            row.append(_pred_obs(p, t.values[i] if measured else None, lambda v, n=name: display.metric(n, v)))
        rows.append(row)
    if rows:
        head = ["pick", "trial", "status"]
        for name in names:
            head += [f"{display.short(name)} predicted (band)", "predicted / measured"]
        out.append(table(head, rows, cls="sortable", table_id="plan-picks"))
        out.append(f"<p>{on_front} of the {len(rows)} picks are on the measured front.</p>")
    return "".join(out) + "</section>"
