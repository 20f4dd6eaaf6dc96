"""How fast a study's boots teach the model a node it was not told about (issue 33, item 5).

The tuner is told Gaudi 2; the node is a Gaudi 3 (more memory: more KV blocks, so other decode buckets),
or compiles faster than the documented constants, or both. Each sequence boots five configurations of a
shipped space, one after the other, as a study does: before each boot the model predicts its warm-up,
calibrated by the boots before it (perfmodel/target.predict_calibrated, the trial's own call); the boot's
log lines go through the tuner's BootTracker, and its calibration sample is what
trial.run.record_model_check stores (TrialPrediction.prior_facts against the observed facts,
calibration.observation_sample). The error of the next boot's warm-up prediction after 0..4 boots is
|predicted / true - 1|, over many sequences. The truth's warm-up carries a per-configuration factor
exp(N(0, --config-sd)) and per-step noise exp(N(0, --step-sd)): what a real node adds to the model.

--live runs the real study loop against the simulator instead (tuner.sim, Gaudi 3 with --sim-hardware,
the tuner told Gaudi 2; a few seeds, minutes): the error of each booted trial's calibrated prediction.

Usage: python benchmarks/calibration_boots.py [--seeds N] [--live] [--spaces ...] [--scenarios ...]
Prints markdown tables. Run it on an older checkout (PYTHONPATH) for before/after figures.
"""

from __future__ import annotations

import argparse
import inspect
import math
import random
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tuning.boot import boot_events  # noqa: E402
from tuner.perfmodel import Corrections  # noqa: E402
from tuner.perfmodel import target as M  # noqa: E402
from tuner.perfmodel.calibration import Calibration, observation_sample  # noqa: E402
from tuner.perfmodel.projection import BootTracker  # noqa: E402
from tuner.plan.points import space_points  # noqa: E402
from tuner.space.schema import SearchSpace  # noqa: E402

FAST = {"prompt_warmup": 0.6, "decode_warmup": 0.6, "capture": 0.6}
# name -> (the node's device, how its compiles differ from the documented constants)
SCENARIOS = {"hidden-gaudi3": ("gaudi3", {}), "hidden-gaudi3-fast": ("gaudi3", FAST), "fast-node": ("gaudi2", FAST)}
SPACES = ("fork-1.21-linear", "fork-1.22-exponential", "vllm-gaudi")
BOOTS = 5
MODEL = "llama-3.1-8b"


def _aligned(tp) -> bool:
    """Whether this checkout compares a boot's steps at its own memory (prior_facts takes what it showed)."""
    return "observed" in inspect.signature(tp.prior_facts).parameters


def boot_sample(tp, real) -> dict:
    """A boot of `real` read as the trial reads it, and the calibration sample the trial stores."""
    tracker = BootTracker(tp.calibrated)
    for t, event in boot_events(real):
        tracker.on_event(event, t)
    observed = {**tracker.facts(), "kv_blocks": real.num_blocks if real.memory else None,
                "graphs": len(real.graphed_prompt) + len(real.graphed_decode) if tracker.finished_s else None}
    prior = tp.prior_facts(observed) if _aligned(tp) else tp.prior_facts()
    return observation_sample(prior, observed)


def sequence(space: SearchSpace, scenario: str, seed: int, config_sd: float, step_sd: float) -> list[float]:
    """Errors of the warm-up predictions of BOOTS boots in a row (the first with the prior alone)."""
    device, factors = SCENARIOS[scenario]
    told = M.ModelTarget(space.release, M.DeviceModel("gaudi2", MODEL, "bf16"))
    node = M.ModelTarget(space.release, M.DeviceModel(device, MODEL, "bf16"))
    rng = random.Random(seed)
    pool = space_points(space, 300, seed=seed).values
    rng.shuffle(pool)
    samples: list[dict] = []
    errors: list[float] = []
    while pool and len(errors) < BOOTS:
        settings = space.settings_for(pool.pop())
        real = M.predict(node, settings, Corrections(**factors))
        told.calibration = Calibration.from_samples(samples)
        tp = M.predict_calibrated(told, settings)
        if real is None or real.failure or real.skip_warmup or tp is None or tp.calibrated.failure:
            continue
        f = math.exp(rng.gauss(0.0, config_sd))
        real = replace(real, steps=[replace(s, seconds=s.seconds * f * math.exp(rng.gauss(0.0, step_sd)))
                                    for s in real.steps])
        true_s = sum(s.seconds for s in real.steps) + real.sampler_seconds
        errors.append(abs(tp.calibrated.warmup_seconds / true_s - 1.0))
        samples.append(boot_sample(tp, real))
    return errors


def offline(args) -> str:
    rows = ["| space | node | after 0 boots | 1 | 2 | 3 | 4 |", "|---|---|---|---|---|---|---|"]
    for name in args.spaces.split(","):
        space = SearchSpace.load(ROOT / "search_spaces" / f"{name}.yaml")
        for scenario in args.scenarios.split(","):
            runs = [sequence(space, scenario, seed, args.config_sd, args.step_sd) for seed in range(args.seeds)]
            cells = []
            for k in range(BOOTS):
                errs = [r[k] for r in runs if len(r) > k]
                cells.append(f"{100 * statistics.mean(errs):.1f}% (max {100 * max(errs):.0f}%)" if errs else "-")
            rows.append(f"| {name} | {scenario} | " + " | ".join(cells) + " |")
            print(rows[-1], file=sys.stderr, flush=True)
    return "\n".join(rows)


LIVE_SPACE = {
    "name": "hidden", "release": "fork-1.22",
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
    "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16, 32, 64]},
                   "gpu_memory_utilization": {"type": "categorical", "choices": [0.7, 0.8, 0.9]}},
}


def live(args) -> str:
    """The study loop against the simulator (a Gaudi 3, the tuner told Gaudi 2)."""
    from tuner.load.workload import RandomWorkload
    from tuner.serve.backends import Backend
    from tuner.study.options import Constraints, Objectives, StudyOptions
    from tuner.study.run import run_study
    from tuner.trial import run as T

    rows = ["| node | seed | trial 1 (prior) | 2 | 3 | 4 | 5 (after 4 boots) | 6 |",
            "|---|---|---|---|---|---|---|---|"]
    for scenario in args.scenarios.split(","):
        device, factors = SCENARIOS[scenario]
        extra = ["--sim-hardware", *(f"{k}={v}" for k, v in factors.items())] if factors else []
        for seed in range(args.live_seeds):
            backend = Backend("sim", model=MODEL, sim_release="fork-1.22", sim_device=device, time_scale=0.2,
                              startup_time_scale=0.02, extra_args=extra)
            ctx = T.TrialContext(backend=backend, workload=RandomWorkload(200, 16, num_prompts=16), release="fork-1.22",
                                 device_model=M.DeviceModel("gaudi2", MODEL, "bf16"),
                                 load=T.LoadOptions(max_concurrency=8, warmup_requests=2))
            with tempfile.TemporaryDirectory() as tmp:
                opts = StudyOptions(name="boots", results_root=Path(tmp), n_trials=6, enqueue_defaults=False, seed=seed)
                run = run_study(opts, SearchSpace.from_dict(LIVE_SPACE), ctx, Objectives(), Constraints(),
                                install_sigint=False)
                booted = [t for t in sorted(run.study.trials, key=lambda t: t.number) if t.user_attrs.get("booted")]
                errs = [abs(t.user_attrs["predicted"]["warmup_s"] / t.user_attrs["observed"]["warmup_s"] - 1)
                        for t in booted if t.user_attrs.get("observed", {}).get("warmup_s")]
            rows.append(f"| {scenario} | {seed} | " + " | ".join(f"{100 * e:.1f}%" for e in errs) + " |")
            print(rows[-1], file=sys.stderr, flush=True)
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=24, help="sequences of boots per space and node (default 24)")
    ap.add_argument("--spaces", default=",".join(SPACES), help="shipped spaces (search_spaces/NAME.yaml)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"nodes: {', '.join(SCENARIOS)}")
    ap.add_argument("--config-sd", type=float, default=0.05, help="log sd of a configuration's warm-up factor")
    ap.add_argument("--step-sd", type=float, default=0.1, help="log sd of each warm-up step's noise")
    ap.add_argument("--live", action="store_true", help="the study loop against the simulator instead")
    ap.add_argument("--live-seeds", type=int, default=3, help="studies per node with --live (default 3)")
    args = ap.parse_args(argv)
    print(live(args) if args.live else offline(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
