"""What a served model is, read from its own config.json exactly as vLLM reads it; used alike by the
bucket engine's callers, the performance model, the load client and the simulator.

    dtypes      bf16 / fp8 and their bytes per element
    hfconfig    config.json -> TextConfig: layers, KV heads, head size, MLA, layer kinds, experts (vLLM's rules)
    params      parameter counts per layer: total, active per token, experts, embeddings, vision tower
    shape       ModelShape: KV bytes per token per rank, weight bytes as stored or served, graph memory
    locate      a name -> its shape: a folder or config.json, the local HF cache, the shipped catalogue
    catalogue/  real config.json files of validated models, with SOURCES.md (data, not code)
"""

from .dtypes import BF16, DTYPE_BYTES, FP8
from .hfconfig import ModelConfigError, TextConfig, load_config, read_config
from .locate import UnknownModelError, catalogue, known_names, resolve
from .shape import ModelShape, shape_from_config

__all__ = ["BF16", "DTYPE_BYTES", "FP8", "ModelConfigError", "ModelShape", "TextConfig", "UnknownModelError",
           "catalogue", "known_names", "load_config", "read_config", "resolve", "shape_from_config"]
