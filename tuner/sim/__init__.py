"""The simulated vLLM-on-Gaudi server: the embedded default backend of bucket-tuner.

    python -m tuner.sim MODEL [vllm serve flags] [--release fork-1.17 ... gaudi-main] \
        [--sim-device gaudi2|gaudi3] [--sim-model llama-3.1-8b|llama-3.1-70b] [--sim-time-scale 0.02] \
        [--sim-seed N] [--sim-noise SIGMA] [--sim-fault NAME[:k=v,...]] [--sim-log-style lines|tqdm]

The cost model it runs (devices, model shapes, release cost rules, predict_startup) is the tuner's
own performance model, tuner/perfmodel/, run with the corrections of the hardware it plays.

Modules, one idea each:
    clocks      LiveDriver: the model's scheduler (tuner/perfmodel/engine.py) on a time-scaled asyncio clock;
                run_virtual (no sleeping, deterministic) is the model's own, tuner/perfmodel/serving.py
    startup     the release's startup log in simulated time, failures in their phase
    logfmt      release-shaped log prefixes and byte formatting
    recipe_cache  PT_HPU_RECIPE_CACHE_CONFIG folder on disk
    http        OpenAI-compatible aiohttp front (/health, /v1/models, /v1/completions, /metrics)
    faults      --sim-fault modes
    serve       the `sim-serve` command: main(argv)
"""

from ..perfmodel import ServerInputs, SimSettings, StartupPrediction, predict_startup
from ..perfmodel.serving import RunResult, run_virtual, summarize

__all__ = ["RunResult", "ServerInputs", "SimSettings", "StartupPrediction", "predict_startup", "run_virtual",
           "summarize"]
