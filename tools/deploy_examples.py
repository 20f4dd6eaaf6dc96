"""deploy/kubernetes/vllm-serve.yaml and deploy/slurm/serve.sbatch: what `bucket-tuner export -o best.env`
writes beside an env file (best.k8s.yaml, best.sbatch), for the configuration deploy/ tunes (Llama 3.1 70B,
TP 2, Gaudi 3, fork-1.22, exponential buckets, 64 sequences), sized from the performance model's
uncalibrated prediction: nothing measured, so the band is the prior's, wide. A study's export uses the
pick's measured weights load and warm-up and its calibrated band instead.

Maintainer tool; tests/project/test_deploy_examples.py checks the files are what it writes. Usage:

    python -m tools.deploy_examples          # rewrite both files
    python -m tools.deploy_examples --check  # exit 1 when either differs
"""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.uncertainty import warmup_band
from tuner.results.orchestrators import k8s_text, sbatch_text
from tuner.results.startlimits import start_limits
from tuner.vocabulary.record import TrialRecord

ROOT = Path(__file__).resolve().parent.parent
K8S, SLURM = ROOT / "deploy" / "kubernetes" / "vllm-serve.yaml", ROOT / "deploy" / "slurm" / "serve.sbatch"
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
RELEASE, SHAPE, DEVICE, TP = "fork-1.22", "llama-3.1-70b", "gaudi3", 2
SERVER = {"max_model_len": 4096, "block_size": 128, "max_num_batched_tokens": 8192, "max_num_seqs": 64}
ENV = {"VLLM_EXPONENTIAL_BUCKETING": "true"}


def predicted() -> dict:
    """The record's `predicted` figures of the example: cold and cached warm-up with their 2-sd bands."""
    sim = SimSettings(model=SHAPE, device=DEVICE, dtype="bf16", tp=TP)
    inputs = ServerInputs(**SERVER)
    cold = predict_startup(RELEASE, sim, inputs, ENV)
    keys = frozenset(cold.recipe_id(phase, b) for phase, buckets in (("prompt", cold.plan.prompt),
                                                                     ("decode", cold.plan.decode)) for b in buckets)
    cached = predict_startup(RELEASE, sim, inputs, ENV, cached_recipes=keys)
    out = {"load_s": round(cold.load_seconds, 2), "profile_s": round(cold.profile_seconds, 2)}
    for mode, pred in (("cold", cold), ("cached", cached)):
        band = warmup_band(pred, None)
        out.update({f"warmup_{mode}_s": round(band.central, 2), f"warmup_{mode}_low_s": round(band.low, 2),
                    f"warmup_{mode}_high_s": round(band.high, 2)})
    return out


def texts() -> dict[Path, str]:
    rec = TrialRecord(number=0, state=None, values=None, params={}, status="ok", predicted=predicted())
    limits = start_limits(rec)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in SERVER.items()]
    title = (f"an example of `bucket-tuner export -o best.env` (best.k8s.yaml, best.sbatch): {MODEL}, TP {TP}, "
             f"{DEVICE}, {RELEASE}, sized from the uncalibrated model (tools/deploy_examples.py)")
    command = ["vllm", "serve", MODEL, f"--tensor-parallel-size={TP}", *flags]
    return {K8S: k8s_text(title, "vllm-llama70b", command, TP, "best.env", limits),
            SLURM: sbatch_text(title, "vllm-llama70b", "best.serve.sh", limits)}


def main(argv: list[str]) -> int:
    stale = [path for path, text in texts().items() if not path.is_file() or path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} differs from what tools/deploy_examples.py writes")
        return 1 if stale else 0
    for path, text in texts().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
