"""The calibrated corrections to the documented cost model: a small, explainable set of factors.

Each factor multiplies one documented constant (1.0 = the prior of docs/calibration.md); what boots
showed moves them (calibration.py). Time factors are per warmup phase, memory is a factor on the
bytes of one KV block, a factor on HPU-graph memory and an offset on the free device memory, and the
serving factors scale the decode and prefill step times the load test implies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class Corrections:
    load: float = 1.0  # weights load
    profile: float = 1.0  # profiling run
    prompt_warmup: float = 1.0  # each prompt bucket's warmup step (compile, or compile + capture)
    decode_warmup: float = 1.0  # each decode bucket's warmup step
    capture: float = 1.0  # a separate HPU-graph capture step (fork <= 1.21)
    kv_block: float = 1.0  # bytes of one KV block (the KV-memory model)
    graph_mem: float = 1.0  # HPU-graph memory per captured graph
    free_mem_offset_gib: float = 0.0  # device memory free after weights and profiling, added
    decode_step: float = 1.0
    prefill_step: float = 1.0
    cache_hit: float = 1.0  # what a recipe-cache hit still costs of a compile (costs.CACHE_HIT)
    multimodal_warmup: float = 1.0  # each multimodal (vision-encoder) warm-up step

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> Corrections:
        names = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in (data or {}).items() if k in names})

    def scaled(self, **factors: float) -> Corrections:
        """These corrections with some factors multiplied (a scenario of the benchmark's truth)."""
        return replace(self, **{k: getattr(self, k) * v for k, v in factors.items()})

    def warmup_factor(self, kind: str, phase: str) -> float:
        if kind == "capture":
            return self.capture
        if phase == "multimodal":
            return self.multimodal_warmup
        return self.prompt_warmup if phase == "prompt" else self.decode_warmup


IDENTITY = Corrections()
