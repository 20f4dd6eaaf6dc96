"""The model's entry point: what a configuration will do on a target, before anything boots.

A *target* is what the model predicts for: the release that reads the settings, the device and model
shape, the study's calibration and, for the serving figures, the workload and its arrivals. The trial's
context is one (tuner/trial/run.py TrialContext has these fields); log calibration, the screen, the
proposals and the cache modes pass the same kind of object, so nothing here calls back into a trial.

    predict             the release's buckets and the startup prediction (prior or given corrections)
    predict_calibrated  the prior and the calibrated prediction with their bounds (checks.TrialPrediction)
    predict_serving     the load test's figures on the model's virtual clock (serving.run_virtual)
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from ..load.arrivals import gamma_send_offsets
from ..load.workload import Workload
from ..vocabulary.numbers import length_or_auto, token_count
from ..vocabulary.speculative import merged_config
from .calibration import Calibration
from .checks import TrialPrediction, predict_trial
from .corrections import Corrections
from .costs import ServerInputs, SimSettings
from .hardware import BF16, FP8, normalize_dtype, normalize_kv_dtype
from .predict import predict_startup
from .prediction import StartupPrediction


@dataclass
class DeviceModel:
    """What the target hardware and model are, for pre-boot prediction (None: no prediction)."""

    device: str = "gaudi2"
    model: str = "llama-3.1-8b"
    dtype: str = "bf16"
    hf_overrides: str | None = None  # the server's --hf-overrides (canonical JSON): the model is read with them
    # server options the command line gives beyond the space's (tune --server-args "--tensor-parallel-size 2"):
    # they come last on it, so they win over the space's, as on the server's own command line
    server_args: tuple[tuple[str, Any], ...] = ()


class Arrivals(Protocol):
    """How requests arrive in the predicted load test (the trial's LoadOptions has these fields)."""

    request_rate: float
    burstiness: float
    max_concurrency: int | None


class Target(Protocol):
    """What a prediction is for. `release` or `device_model` None: no model, every prediction is None."""

    release: str | None
    device_model: DeviceModel | None
    calibration: Calibration | None


class ServingTarget(Target, Protocol):
    workload: Workload
    load: Arrivals


@dataclass
class LoadShape:
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None


@dataclass
class ModelTarget:
    """A target built without a trial (a log's calibration, an offline command, a plan)."""

    release: str | None
    device_model: DeviceModel | None
    calibration: Calibration | None = None
    workload: Workload | None = None
    load: LoadShape | None = None


_PREDICTIONS: dict[str, Any] = {}  # pure function of its key; callers never mutate a prediction


def predict(target: Target, settings, corrections: Corrections | None = None,
            cached_recipes: frozenset = frozenset()) -> StartupPrediction | None:
    """The release's buckets and the performance model's startup prediction, or None without a model.
    `settings`: a space.TrialSettings (server flags and env); `corrections`: the calibrated ones (default:
    the documented prior); `cached_recipes`: recipe keys found in a recipe cache
    (recipecache.warmupmode.cached_prediction)."""
    if target.release is None or target.device_model is None:
        return None
    from ..buckets.owncode import bucket_source

    corrections = corrections or Corrections()
    # bucket_source: the release's own bucketing code may replace the engine's lists (tune --release auto)
    key = json.dumps([target.release, asdict(target.device_model), settings.server, settings.env,
                      corrections.to_dict(), sorted(cached_recipes), bucket_source()], sort_keys=True, default=str)
    if key in _PREDICTIONS:
        return _PREDICTIONS[key]

    sim, inputs = model_inputs(target.device_model, settings)
    pred = predict_startup(target.release, sim, inputs, settings.env, cached_recipes, corrections=corrections)
    if len(_PREDICTIONS) >= 2048:  # a study asks again for what it predicted (reuse key, screening, the run)
        _PREDICTIONS.pop(next(iter(_PREDICTIONS)))
    _PREDICTIONS[key] = pred
    return pred


def predict_calibrated(target: Target, settings) -> TrialPrediction | None:
    """The prior and the calibrated prediction (target.calibration), with their bounds; None without a model."""
    return predict_trial(lambda corr: predict(target, settings, corr), target.calibration)


def model_inputs(dm: DeviceModel, settings) -> tuple[SimSettings, ServerInputs]:
    """What the model reads of a configuration: the hardware and model, and the scheduler-level flags."""
    s = {**settings.server, **dict(dm.server_args)}
    dtype = _weights(dm.dtype, s)
    sim = SimSettings(
        model=dm.model,
        device=dm.device,
        dtype=dtype,
        kv_dtype=_kv_cache(s, dtype),
        tp=int(s.get("tensor_parallel_size", 1)),
        gpu_memory_utilization=float(s.get("gpu_memory_utilization", 0.9)),
        enforce_eager=bool(s.get("enforce_eager", False)),
        hf_overrides=dm.hf_overrides,
    )
    inputs = ServerInputs(
        block_size=int(s.get("block_size", 128)),
        max_num_seqs=_int_or_none(s.get("max_num_seqs")),
        max_model_len=_count(s.get("max_model_len"), length_or_auto),
        max_num_batched_tokens=_count(s.get("max_num_batched_tokens"), token_count),
        prefix_caching=s.get("enable_prefix_caching"),
        max_num_prefill_seqs=s.get("max_num_prefill_seqs"),
        num_gpu_blocks_override=_int_or_none(s.get("num_gpu_blocks_override")),
        limit_mm_per_prompt=_json_text(s.get("limit_mm_per_prompt")),
        mamba_cache_dtype=str(s.get("mamba_cache_dtype") or "auto"),
        mamba_ssm_cache_dtype=str(s.get("mamba_ssm_cache_dtype") or "auto"),
        **speculative_inputs(s),
    )
    return sim, inputs


def speculative_inputs(server: dict) -> dict:
    """ServerInputs' fields of a server's speculative options: --speculative-config with the --spec-* shortcuts
    merged in, or why vLLM refuses the combination."""
    try:
        return {"speculative_config": merged_config(server.get("speculative_config"), server.get("spec_method"),
                                                    server.get("spec_model"), _int_or_none(server.get("spec_tokens")))}
    except ValueError as e:
        return {"refused": str(e)}


def _weights(told: str, server: dict) -> str:
    """The weights' format: FP8 when told so (tune --dtype fp8), else as the server's --dtype / --quantization
    give it, as the simulator reads them (hardware.normalize_dtype)."""
    if told == FP8 or not (server.get("dtype") or server.get("quantization")):
        return told
    try:
        return normalize_dtype(server.get("dtype"), server.get("quantization"))
    except ValueError:  # a --dtype the model does not price: as told
        return told


def _kv_cache(server: dict, dtype: str) -> str:
    """The KV cache's format as the server's --kv-cache-dtype gives it (fp8, fp8_inc: a byte a value)."""
    try:
        return normalize_kv_dtype(server.get("kv_cache_dtype"), dtype)
    except ValueError:
        return BF16


def _count(value, parse) -> int | None:
    """A token count a space may write as vLLM's CLI takes it ("32k", "auto")."""
    return parse(value) if isinstance(value, str) else value


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


def _json_text(value) -> str | None:
    """A server option that vLLM takes as JSON (a dict in a search space), as its command line gives it."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else value


SERVING_KEYS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms")


def predict_serving(target: ServingTarget, pred: StartupPrediction) -> dict[str, float]:
    """The load test's figures as the model predicts them (the scheduler on the virtual clock)."""
    from .serving import run_virtual  # the engine and the metrics: loaded only when serving is predicted

    requests = serving_requests(target)
    if requests is None:
        return {}
    summary = run_virtual(pred, requests, max_concurrency=target.load.max_concurrency).summary()
    return {k: float(summary[k]) for k in SERVING_KEYS if summary.get(k) is not None}


def serving_requests(target: ServingTarget) -> list[tuple[float, int, int]] | None:
    """The predicted load test's requests, (send offset, input tokens, output tokens), in the workload's
    order; None for a workload without lengths (nothing to predict)."""
    w, lo = target.workload, target.load
    try:
        ins, outs = w.lengths()
    except NotImplementedError:
        return None
    rng = np.random.default_rng([getattr(w, "seed", 0), 0x41525256])
    times = gamma_send_offsets(len(ins), lo.request_rate, lo.burstiness, rng)
    return list(zip(times, ins, outs))
