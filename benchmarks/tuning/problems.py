"""The tuning problems: search space, hardware, workload and hypervolume reference point of each."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tuner.load.workload import RandomWorkload
from tuner.perfmodel import target as M
from tuner.serve.backends import Backend
from tuner.space.schema import SearchSpace
from tuner.study.options import Objectives
from tuner.trial import run as T

OBJECTIVES = Objectives()  # output_throughput (max), p99_ttft_ms (min), warmup_s (min)
DIRECTIONS = OBJECTIVES.directions


@dataclass
class Problem:
    key: str
    title: str
    space: dict  # tuner.space.schema schema; every parameter categorical, so every proposal is a grid point
    quick_choices: dict  # parameter -> the fewer choices --quick keeps
    device: str
    model: str
    cards: int  # accelerator-hours = seconds x cards / 3600
    input_len: int
    output_len: int
    range_ratio: float
    num_prompts: int
    request_rate: float  # Poisson arrivals, as vllm bench serve --request-rate
    warmup_budget_s: float  # a constraint for everyone; the full method also rejects / aborts above it
    throughput_ref: float  # reference point: (throughput_ref, latency_ref_ms, warmup_budget_s)
    latency_ref_ms: float
    # the noise scenarios' SLO pick: the highest throughput whose p99 TTFT meets it (export --max-latency)
    slo_ms: float | None = None

    @property
    def release(self) -> str:
        return self.space["release"]

    @property
    def reference(self) -> tuple[float, float, float]:
        return (self.throughput_ref, self.latency_ref_ms, self.warmup_budget_s)

    def search_space(self, quick: bool, coarse: bool = False) -> SearchSpace:
        data = json.loads(json.dumps(self.space))
        for name, spec in data["parameters"].items():
            if quick and name in self.quick_choices:
                spec["choices"] = list(self.quick_choices[name])
            c = spec["choices"]
            if coarse and len(c) > 3:  # auto_tune-style lattice: low, middle, high
                spec["choices"] = [c[0], c[len(c) // 2], c[-1]]
        return SearchSpace.from_dict(data, source=f"<{self.key}>")

    def workload(self) -> RandomWorkload:
        return RandomWorkload(self.input_len, self.output_len, self.range_ratio, num_prompts=self.num_prompts)

    def context(self, reject_budget: float | None = None) -> T.TrialContext:
        backend = Backend("sim", model=self.model, sim_release=self.release, sim_device=self.device,
                          sim_model=self.model)
        return T.TrialContext(backend=backend, workload=self.workload(), release=self.release,
                              device_model=M.DeviceModel(self.device, self.model, "bf16"),
                              load=T.LoadOptions(max_concurrency=None, request_rate=self.request_rate),
                              limits=T.Limits(warmup_budget_s=reject_budget))


def cat(*values, **when) -> dict:
    return {"type": "categorical", "choices": list(values), **({"when": when} if when else {})}


STEPS = {"VLLM_PROMPT_BS_BUCKET_STEP": (1, 2, 4, 8), "VLLM_PROMPT_SEQ_BUCKET_STEP": (128, 256, 512),
         "VLLM_DECODE_BS_BUCKET_STEP": (8, 16, 32), "VLLM_DECODE_BLOCK_BUCKET_STEP": (128, 256, 512)}
STEPS_QUICK = {"max_num_seqs": [16, 32, 64, 128], "VLLM_PROMPT_BS_BUCKET_STEP": [1, 4],
               "VLLM_DECODE_BS_BUCKET_STEP": [8, 32], "VLLM_DECODE_BLOCK_BUCKET_STEP": [128, 512]}
DERIVED = {"VLLM_PROMPT_BS_BUCKET_MAX": "min(max_num_seqs, max_num_batched_tokens // block_size)",
           "VLLM_DECODE_BS_BUCKET_MAX": "max_num_seqs"}
SERVER_8B = {"max_model_len": 4096, "block_size": 128, "max_num_batched_tokens": 8192}
CHAT = {"device": "gaudi2", "model": "llama-3.1-8b", "cards": 1, "input_len": 512, "output_len": 256,
        "range_ratio": 0.5, "num_prompts": 200, "request_rate": 6.5, "warmup_budget_s": 600.0,
        "throughput_ref": 700.0, "latency_ref_ms": 1000.0, "slo_ms": 300.0}


def problems() -> dict[str, Problem]:
    mem = {"max_num_seqs": cat(16, 32, 64, 96, 128), "VLLM_GRAPH_RESERVED_MEM": cat(0.02, 0.1)}
    linear = Problem(  # no VLLM_EXPONENTIAL_BUCKETING: linear is 1.21's default, and the upgrade relies on it
        "linear", "fork-1.21.2, linear buckets + graph memory, Gaudi 2, Llama-3.1-8B bf16, chat-like",
        {"name": "bench-1.21.2", "release": "fork-1.21.2", "server": SERVER_8B, "derived": DERIVED,
         "parameters": {**mem, "VLLM_GRAPH_PROMPT_RATIO": cat(0.1, 0.3), **{k: cat(*v) for k, v in STEPS.items()}}},
        STEPS_QUICK, **CHAT)
    pad = {"VLLM_BUCKETING_STRATEGY": "pad"}
    gaudi = Problem(
        "gaudi", "gaudi-main, exponential / padding-aware + memory, Gaudi 3, Llama-3.1-70B bf16 TP2, long prompts",
        {"name": "bench-gaudi-main", "release": "gaudi-main",
         "server": {"max_model_len": 16384, "block_size": 128, "tensor_parallel_size": 2},
         "env": {"PT_HPU_LAZY_MODE": "1"},  # lazy mode: HPU graphs, so graph memory is a real trade-off
         "parameters": {"VLLM_BUCKETING_STRATEGY": cat("exp", "pad"), "max_num_seqs": cat(8, 16, 32, 64),
                        "max_num_batched_tokens": cat(2048, 4096, 8192),
                        "gpu_memory_utilization": cat(0.85, 0.9, 0.95),
                        "VLLM_GRAPH_RESERVED_MEM": cat(0.05, 0.1, 0.2, 0.3),
                        "VLLM_DECODE_BS_BUCKET_PAD_PERCENT": cat(10, 25, 50, **pad),
                        "VLLM_PROMPT_QUERY_BUCKET_PAD_PERCENT": cat(10, 25, 50, **pad)}},
        {"gpu_memory_utilization": [0.85, 0.95], "VLLM_GRAPH_RESERVED_MEM": [0.05, 0.3],
         "VLLM_DECODE_BS_BUCKET_PAD_PERCENT": [10, 50], "VLLM_PROMPT_QUERY_BUCKET_PAD_PERCENT": [10, 50]},
        device="gaudi3", model="llama-3.1-70b", cards=2, input_len=4096, output_len=256, range_ratio=0.5,
        num_prompts=100, request_rate=0.6, warmup_budget_s=900.0, throughput_ref=75.0, latency_ref_ms=15000.0,
        slo_ms=3000.0)
    upgrade = Problem(
        "upgrade", "fork-1.22 after an upgrade from 1.21.2 (problem linear's workload and hardware)",
        {"name": "bench-1.22", "release": "fork-1.22", "server": SERVER_8B, "derived": DERIVED,
         "parameters": {"VLLM_EXPONENTIAL_BUCKETING": cat("true", "false"), **mem,
                        **{k: cat(*v, VLLM_EXPONENTIAL_BUCKETING="false") for k, v in STEPS.items()}}},
        STEPS_QUICK, **CHAT)
    return {p.key: p for p in (linear, gaudi, upgrade)}
