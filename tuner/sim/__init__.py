"""The simulated vLLM-on-Gaudi server: cost model, scheduler, startup log, HTTP front.

* costmodel.predict_startup: pure prediction of a start (KV blocks, buckets, graphs, warmup, failures)
* clocks.run_virtual: a workload on the engine in simulated time, deterministic, no HTTP
* serve.main: the `sim-serve` command (drop-in for `vllm serve`)
"""

from .clocks import RunResult, run_virtual, summarize
from .costmodel import ServerInputs, SimSettings, StartupPrediction, predict_startup

__all__ = ["RunResult", "ServerInputs", "SimSettings", "StartupPrediction", "predict_startup", "run_virtual",
           "summarize"]
