"""Problem "fitted" of the tuning-efficiency benchmark (`--problems fitted`): bucket sets fitted to the workload against
min/step/max ranges, on the same skewed chat workload, hardware and release (issue #15 item 5).

Two spaces on gaudi-main (Gaudi 2, Llama-3.1-8B bf16, lazy mode so graphs cost memory), both with the
same memory knobs (max_num_seqs, VLLM_GRAPH_RESERVED_MEM):
  fitted         prompt and decode bucket counts (`type: fitted`): each proposal boots the least-padding
                 set for those counts, fitted to the workload (tuner/space/fitted.py)
  fitted-ranges  the release's own range strategies: exponential (its default), or linear with the
                 prompt-query, decode-block and decode-batch steps searched
The workload is a chat trace with a long tail (log-normal lengths: prompts median ~340, p90 ~1,050, max
~2,500 tokens; answers median ~155). Each space's true table and its studies are those of the main
benchmark (true_table, run_contender: the real study loop on the virtual clock); this module adds the
comparison on one scale: hypervolume against the union of both true fronts at equal accelerator-hours,
the best throughput within the warmup budget, and the padding each way's best configuration wastes.
"""

from __future__ import annotations

import atexit
import json
import shutil
import statistics
import tempfile
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np

from benchmarks.tuning.problems import DIRECTIONS, Problem, cat
from benchmarks.tuning.scoring import score
from benchmarks.tuning.truth import TABLES, feasible, front, objective_vector
from tuner.buckets import get_profile
from tuner.load.arrivals import gamma_send_offsets
from tuner.load.trace import TraceWorkload
from tuner.perfmodel import target as M
from tuner.sim import run_virtual
from tuner.space.fit.shapes import decode_block_totals
from tuner.space.fitted import bind_fitted
from tuner.study.pareto import hypervolume
from tuner.vocabulary.status import TrialStatus

KEYS = ("fitted", "fitted-ranges")
N_PROMPTS = 200
_STORE: list[Path] = []  # one folder of fitted bucket files per run (forked workers inherit it)


@lru_cache(maxsize=1)
def chat_long_tail() -> TraceWorkload:
    """Deterministic log-normal chat lengths: most prompts short, a long tail up to ~2,500 tokens."""
    rng = np.random.default_rng(15)
    ins = np.clip(np.round(rng.lognormal(np.log(300), 0.9, N_PROMPTS)), 16, 3800).astype(int).tolist()
    outs = np.clip(np.round(rng.lognormal(np.log(150), 0.7, N_PROMPTS)), 8, 1024).astype(int).tolist()
    return TraceWorkload(ins, outs, source="chat-long-tail (log-normal, seed 15)", seed=0)


class FittedProblem(Problem):
    """A Problem on the long-tailed trace; a fitted space gets its bucket files from the workload."""

    def workload(self):
        return chat_long_tail()

    def search_space(self, quick: bool, coarse: bool = False):
        space = super().search_space(quick, coarse)
        if not _STORE:  # called outside run() (a script, a test): a folder removed at exit
            _STORE.append(Path(tempfile.mkdtemp(prefix="tuning-fitted-")))
            atexit.register(shutil.rmtree, _STORE[0], True)
        bind_fitted(space, self.context(), _STORE[0])
        return space


def problems() -> dict[str, Problem]:
    mem = {"max_num_seqs": cat(16, 32, 64, 128), "VLLM_GRAPH_RESERVED_MEM": cat(0.02, 0.1)}
    mem_quick = {"max_num_seqs": [32, 64, 128]}
    lin = {"VLLM_BUCKETING_STRATEGY": "lin"}
    common = dict(device="gaudi2", model="llama-3.1-8b", cards=1, input_len=340, output_len=155, range_ratio=0.0,
                  num_prompts=N_PROMPTS, request_rate=10.0, warmup_budget_s=600.0, throughput_ref=700.0,
                  latency_ref_ms=5000.0)
    base = {"release": "gaudi-main", "server": {"max_model_len": 4096, "block_size": 128,
                                                 "max_num_batched_tokens": 8192},
            "env": {"PT_HPU_LAZY_MODE": "1"}}
    fitted = FittedProblem(
        "fitted", "gaudi-main, bucket sets fitted to the workload (counts per phase) + memory, Gaudi 2, "
        "Llama-3.1-8B bf16, chat with a long tail",
        {**base, "name": "bench-fitted", "parameters": {
            "prompt_buckets": {"type": "fitted", "phase": "prompt", "choices": [2, 3, 4, 6, 8, 12]},
            "decode_buckets": {"type": "fitted", "phase": "decode", "choices": [2, 3, 4, 6, 8]}, **mem}},
        {"prompt_buckets": [2, 4, 8], "decode_buckets": [2, 4, 8], **mem_quick}, **common)
    ranges = FittedProblem(
        "fitted-ranges", "gaudi-main, exponential / linear min/step/max ranges + memory (problem fitted's "
        "workload and hardware)",
        {**base, "name": "bench-fitted-ranges", "parameters": {
            "VLLM_BUCKETING_STRATEGY": cat("exp", "lin"), **mem,
            "VLLM_PROMPT_QUERY_BUCKET_STEP": cat(128, 256, 512, 1024, **lin),
            "VLLM_DECODE_BLOCK_BUCKET_STEP": cat(32, 128, 256, 512, **lin),
            "VLLM_DECODE_BS_BUCKET_STEP": cat(8, 16, 32, **lin)}},
        {"VLLM_PROMPT_QUERY_BUCKET_STEP": [256, 1024], "VLLM_DECODE_BLOCK_BUCKET_STEP": [32, 256],
         "VLLM_DECODE_BS_BUCKET_STEP": [8, 32], **mem_quick}, **common)
    return {p.key: p for p in (fitted, ranges)}


def workload_text() -> str:
    ins, outs = chat_long_tail().lengths()
    q = np.percentile(ins, [50, 90, 100])
    return (f"chat trace with a long tail, {len(ins)} prompts: prompt tokens median {q[0]:.0f}, p90 {q[1]:.0f}, "
            f"max {q[2]:.0f}; output median {np.median(outs):.0f}; {problems()['fitted'].request_rate:g} req/s Poisson")


# ------------------------------------------------------------------------------------------ padding

_PADDING: dict[tuple[str, str], dict] = {}


def padding(problem: Problem, params: dict) -> dict:
    """Cached `_padding` (the report asks for the same configuration once per seed that found it)."""
    key = (problem.key, json.dumps(params, sort_keys=True))
    if key not in _PADDING:
        _PADDING[key] = _padding(problem, params)
    return _PADDING[key]


def _padding(problem: Problem, params: dict) -> dict:
    """The padding of one configuration on the workload, as the release pads: prompts one at a time
    (padded tokens = bucket batch x query), and decode at the batch sizes the serving run really had,
    each with steady-state context (decode_block_totals), padded to the release's decode bucket."""
    settings = problem.search_space(False).settings_for(params)
    pred = M.predict(problem.context(), settings)
    profile, plan, w = get_profile(pred.profile), pred.plan, problem.workload()
    ins, outs = w.lengths()
    padded = [profile.pad_prompt(plan, 1, n, 0).bucket for n in ins]
    prompt_share = 1 - sum(ins) / sum(b[0] * b[1] for b in padded)
    times = gamma_send_offsets(len(ins), problem.request_rate, 1.0, np.random.default_rng([w.seed, 0x41525256]))
    run = run_virtual(pred, list(zip(times, ins, outs)), keep_steps=True)
    sizes = Counter(s.bs for *_, shapes in run.steps for s in shapes if s.phase == "decode")
    real = pad = rows = rows_padded = 0.0
    block = int(settings.server.get("block_size", 128))
    for bs, steps in sizes.items():
        totals = decode_block_totals(w, bs, block, samples=200, seed=bs)
        buckets = [profile.pad_decode(plan, bs, t).bucket for t in totals]
        real += steps * statistics.fmean(totals)
        pad += steps * statistics.fmean(b[2] for b in buckets)
        rows += steps * bs
        rows_padded += steps * statistics.fmean(b[0] for b in buckets)
    return {"prompt_pad_share": round(prompt_share, 4), "decode_block_pad_share": round(1 - real / pad, 4),
            "decode_batch_pad_share": round(1 - rows / rows_padded, 4),
            "buckets": [len(plan.prompt), len(plan.decode)]}


# ------------------------------------------------------------------------------------------ report

def best_within_budget(evals, budget: float):
    ok = [e for e in evals if feasible(e, budget)]
    return max(ok, key=lambda e: (e.metrics["output_throughput"], -e.warmup_s)) if ok else None


def _held(curve, hours: float) -> float:
    return max([r for h, r in curve if h <= hours + 1e-9], default=0.0)


def _best_found(run: dict, hours: float) -> dict | None:
    """The best-throughput feasible trial a study held after `hours` accelerator-hours."""
    spent, best = 0.0, None
    for t in run["trials"]:
        spent += t["accelerator_s"] / 3600
        if spent > hours + 1e-9:
            break
        ok = t["feasible"] and t["status"] == TrialStatus.OK.value
        if ok and (best is None or t["values"][0] > best["values"][0]):
            best = t
    return best


def report(probs: dict, fronts: dict, runs: list[dict], budgets: list[int]) -> dict:
    """Both spaces on one scale: the union of their true fronts (same reference point)."""
    fit_p = probs["fitted"]
    union = front(fronts[("fitted", "nominal")]["front"] + fronts[("fitted-ranges", "nominal")]["front"])
    union_hv = hypervolume(union, fit_p.reference, DIRECTIONS)
    out = {"workload": workload_text(), "union_hv": union_hv, "spaces": {}, "contenders": {}}
    for key in KEYS:
        p, f, table = probs[key], fronts[(key, "nominal")], TABLES[(key, "nominal")]
        best = best_within_budget(table.values(), p.warmup_budget_s)
        bal = f["balanced"]
        out["spaces"][key] = {
            "points": f["points"], "feasible": f["feasible"], "hv_share_of_union": f["hv"] / union_hv,
            "best": best and {"params": best.params, "objectives": objective_vector(best),
                              "padding": padding(p, best.params)},
            "balanced": bal and {"params": bal.params, "objectives": objective_vector(bal),
                                 "padding": padding(p, bal.params)}}
    # equal accelerator-hours: what each full study spent on its largest budget (the cheaper way first)
    spend = {}
    for key in KEYS:
        full = [score(r, probs[key], union_hv, budgets) for r in runs
                if (r["problem"], r["contender"]) == (key, "full") and "trials" in r]
        at = [s["curve"][-1][0] for s in full if s["curve"]]
        spend[key] = statistics.mean(at) if at else None
    hours = sorted(h for h in spend.values() if h)
    out["equal_hours"] = hours
    for r in runs:
        if "trials" not in r or r["problem"] not in KEYS:
            continue
        s = score(r, probs[r["problem"]], union_hv, budgets)
        entry = out["contenders"].setdefault(r["contender"], {}).setdefault(r["problem"], [])
        row = {"seed": r["seed"], "hv": [_held(s["curve"], h) for h in hours], "best_throughput": []}
        for h in hours:
            b = _best_found(r, h)
            row["best_throughput"].append(b["values"][0] if b else None)
        if hours:
            b = _best_found(r, hours[-1])
            row["best_params"] = b and b["params"]
        entry.append(row)
    for per in out["contenders"].values():
        for key, rows in per.items():
            per[key] = {"seeds": len(rows),
                        "hv": [statistics.mean(r["hv"][i] for r in rows) for i in range(len(hours))],
                        "best_throughput": [statistics.mean(r["best_throughput"][i] or 0.0 for r in rows)
                                            for i in range(len(hours))],
                        "padding": _mean_padding(probs[key], [r.get("best_params") for r in rows])}
    return out


def _mean_padding(problem, params_list) -> dict | None:
    pads = [padding(problem, p) for p in params_list if p]
    if not pads:
        return None
    return {k: round(statistics.mean(x[k] for x in pads), 4) for k in ("prompt_pad_share", "decode_block_pad_share")}


def markdown(rep: dict) -> str:
    def obj(v):
        return f"{v[0]:.0f} tok/s, p99 TTFT {v[1]:.0f} ms, warmup {v[2]:.0f} s"

    def pad(x):
        return "—" if not x else (f"prompt {100 * x['prompt_pad_share']:.0f}%, decode blocks "
                                  f"{100 * x['decode_block_pad_share']:.0f}%")

    hours = rep["equal_hours"]
    out = ["### fitted: bucket sets fitted to the workload vs min/step/max ranges (gaudi-main)", "",
           f"Workload: {rep['workload']}. Hypervolumes are shares of the union of both true fronts "
           "(same reference point).", "",
           "| space | configurations (feasible) | true front's share of the union | best within the warmup budget "
           "| its padding | balanced point | its padding |", "|---|---|---|---|---|---|---|"]
    for key, s in rep["spaces"].items():
        out.append(f"| {key} | {s['points']} ({s['feasible']}) | {s['hv_share_of_union']:.3f} | "
                   f"{obj(s['best']['objectives']) if s['best'] else '—'} | {pad(s['best'] and s['best']['padding'])} "
                   f"| {obj(s['balanced']['objectives']) if s['balanced'] else '—'} | "
                   f"{pad(s['balanced'] and s['balanced']['padding'])} |")
    out += ["", "| contender | space | " + " | ".join(f"HV @ {h:.2f} h" for h in hours) + " | "
            + " | ".join(f"best tok/s @ {h:.2f} h" for h in hours) + " | padding of its best |",
            "|---|---|" + "---|" * (2 * len(hours) + 1)]
    for name, per in rep["contenders"].items():
        for key, a in per.items():
            out.append(f"| {name} | {key} | " + " | ".join(f"{x:.3f}" for x in a["hv"]) + " | "
                       + " | ".join(f"{x:.0f}" for x in a["best_throughput"]) + f" | {pad(a['padding'])} |")
    return "\n".join(out) + "\n"


def run(args, names: list[str], seeds: list[int], log, run_all) -> dict:
    """Tables, studies (nominal scenario; the contenders asked for, no --seed-from) and the report.
    `run_all`: the entry point's (tuning_efficiency.run_all), which builds tables and runs studies."""
    probs = problems()
    _STORE.append(Path(tempfile.mkdtemp(prefix="tuning-fitted-")))  # before the pools fork
    try:
        fronts, runs = run_all(args, probs, list(KEYS), ["nominal"],
                                  [n for n in names if n != "full+seed-from"], seeds, log)
        rep = report(probs, fronts, runs, args.budgets)
    finally:
        shutil.rmtree(_STORE.pop(), ignore_errors=True)
    rep["true_fronts"] = {k: {"front": fronts[(k, "nominal")]["front"], "hv": fronts[(k, "nominal")]["hv"]}
                          for k in KEYS}
    return rep
