"""KV blocks and warm-up for the offline commands (`buckets`, `calc`), before anything boots.

A thin helper over the performance model (tuner/perfmodel, `predict_startup`): the KV block count the
release would allocate for this model, device and memory settings, and the warm-up it would take,
with a band. Without a calibrated study the model runs on its documented constants, which one boot can
move by about x2 (tuner/perfmodel/calibration.py, PRIOR_SD): the band is the prediction with the
warm-up factors one predictive standard deviation either way. `tune --calibrate-from LOG` (or explain
--model-shape on a log) narrows it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..buckets import ServerConfig
from . import MODEL_HELP, UsageError

DEVICES = ("gaudi2", "gaudi3")
_WARMUP_FACTORS = ("prompt_warmup", "decode_warmup", "capture")


@dataclass
class OfflinePrediction:
    model: str  # "llama-3.1-8b on gaudi2 (bf16, gpu_memory_utilization 0.9)"
    kv_blocks: int | None = None
    warmup_s: float | None = None
    band_s: tuple[float, float] | None = None
    failure: str | None = None  # the model predicts the start fails: where and why
    figures: dict | None = None  # the model's own figures, from its config (model_figures)

    def to_json(self) -> dict:
        return {"model": self.model, "model_figures": self.figures, "kv_blocks": self.kv_blocks,
                "warmup_s": _round(self.warmup_s),
                "warmup_band_s": [round(b, 1) for b in self.band_s] if self.band_s else None,
                "failure": self.failure}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def add_model_flags(p, *, title: str = "prediction (the performance model; nothing is booted)") -> None:
    g = p.add_argument_group(title)
    g.add_argument("--model-shape", default="llama-3.1-8b",
                   help=f"{MODEL_HELP} (default llama-3.1-8b)")
    g.add_argument("--device", default="gaudi2", choices=DEVICES, help="default gaudi2")
    g.add_argument("--dtype", default="bf16", choices=("bf16", "fp8"))
    g.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F",
                   help="vLLM's --gpu-memory-utilization (default 0.9): sets the KV cache size")
    g.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N")


def check_model_flags(args) -> None:
    from ..perfmodel.hardware import model_for

    try:
        model_for(args.model_shape)
    except ValueError as exc:  # UnknownModelError names the model, the closest ones and the way on
        raise UsageError(f"--model-shape: {exc}") from None
    if not 0 < args.gpu_memory_utilization <= 1:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    if args.tensor_parallel_size < 1:
        raise UsageError(f"--tensor-parallel-size must be at least 1, got {args.tensor_parallel_size}")


def model_figures(name: str, dtype: str, tp: int, hf_overrides: str | None = None) -> dict:
    """What the model is, per card, as read from its config (with the server's --hf-overrides over it): KV
    bytes per token (bf16 and fp8 KV cache), weight bytes, parameters; the figures `buckets --json` reports
    and the text's model line."""
    from ..perfmodel.hardware import model_for

    shape = model_for(name, hf_overrides)
    figures = {**shape.describe(), "tensor_parallel_size": tp,
               "kv_bytes_per_token": {"bf16": shape.kv_bytes_per_token("bf16", tp),
                                      "fp8": shape.kv_bytes_per_token("fp8", tp)},
               "weight_bytes_per_card": shape.weight_bytes(dtype, tp)}
    state = shape.recurrent
    if state is not None:  # a hybrid: one state per sequence in each recurrent layer (tuner/models/recurrent.py)
        try:
            per_layer = state.page_bytes(tp)
        except ValueError:  # a dimension the ranks do not split: the server refuses to build it
            per_layer = None
        figures["recurrent_state"] = {"kind": state.kind, "layers": state.layers,
                                      "bytes_per_sequence_per_layer": per_layer}
    return figures


def model_line(figures: dict) -> str:
    """One line of the model's figures for the offline commands' text."""
    f = figures
    moe = f" ({f['active_params'] / 1e9:.1f}B active, {f['experts_per_token']} of {f['experts']} experts)" \
        if f["experts"] else ""
    mla = ", MLA" if f["mla"] else ""
    how = [f["quantization"], f.get("stored_as")] if f.get("quantization") else []
    stored = f" ({' '.join(dict.fromkeys(w for w in how if w))})" if how else ""  # "gptq int4", "fp8"
    return (f"model: {f['name']} ({f['architecture']}; {f['source']}): {f['total_params'] / 1e9:.1f}B parameters"
            f"{moe}, {f['attention_layers']} of {f['layers']} layers cache K/V{mla}, "
            f"{f['max_position']:,}-token context; per card at TP "
            f"{f['tensor_parallel_size']}: {f['kv_bytes_per_token']['bf16']:,} KV bytes per token (bf16), "
            f"{f['weight_bytes_per_card'] / 1024**3:.2f} GiB of weights{stored}{_state_words(f)}")


def _state_words(f: dict) -> str:
    state = f.get("recurrent_state")
    if not state:
        return ""
    per = state["bytes_per_sequence_per_layer"]
    size = f"{per / 1024**2:.2f} MiB per sequence each" if per else "a state TP does not divide"
    return f"; {state['layers']} recurrent layers ({state['kind']}): {size}"


def predict(release: str, cfg: ServerConfig, args) -> OfflinePrediction:
    """The model's KV blocks and warm-up (with its band) for `cfg` on `release`; cfg.num_hpu_blocks is
    ignored (the model computes its own)."""
    from ..perfmodel import ServerInputs, SimSettings, predict_startup
    from ..perfmodel.calibration import Calibration
    from ..perfmodel.corrections import Corrections

    sim = SimSettings(model=args.model_shape, device=args.device, dtype=args.dtype, tp=args.tensor_parallel_size,
                      gpu_memory_utilization=args.gpu_memory_utilization)
    inputs = ServerInputs(block_size=cfg.block_size, max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_model_len,
                          max_num_batched_tokens=cfg.max_num_batched_tokens, prefix_caching=cfg.prefix_caching,
                          max_num_prefill_seqs=cfg.max_num_prefill_seqs)
    out = OfflinePrediction(model=f"{args.model_shape} on {args.device} ({args.dtype}, gpu_memory_utilization "
                                  f"{args.gpu_memory_utilization:g}"
                                  + (f", TP {args.tensor_parallel_size})" if args.tensor_parallel_size > 1 else ")"))
    out.figures = model_figures(args.model_shape, args.dtype, args.tensor_parallel_size)
    pred = predict_startup(release, sim, inputs, dict(cfg.env))
    if pred.memory is not None and pred.num_blocks > 0:
        out.kv_blocks = pred.num_blocks
    if pred.failure is not None:
        out.failure = f"{pred.failure.phase}: {pred.failure.message}"
        return out
    out.warmup_s = pred.warmup_seconds
    fits = Calibration().fits()
    band = []
    for z in (-1.0, 1.0):
        corr = replace(Corrections(), **{k: fits[k].at(z) for k in _WARMUP_FACTORS})
        band.append(predict_startup(release, sim, inputs, dict(cfg.env), corrections=corr).warmup_seconds)
    out.band_s = (min(band), max(band))
    return out


def warmup_text(p: OfflinePrediction) -> str:
    """'about 3 min 20 s (1 min 38 s to 6 min 50 s) for llama-3.1-8b on gaudi2 (...)', or why there is none."""
    from ..vocabulary import display

    if p.failure:
        return f"the model predicts this start fails ({p.failure})"
    low, high = p.band_s
    return (f"about {display.seconds(p.warmup_s)} ({display.seconds(low)} to {display.seconds(high)}: the "
            f"uncalibrated model, one standard deviation) for {p.model}")


def with_blocks(cfg: ServerConfig, blocks: int) -> ServerConfig:
    return replace(cfg, num_hpu_blocks=blocks)
