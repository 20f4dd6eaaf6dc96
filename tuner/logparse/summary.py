"""`WatchSummary`: the snapshot of everything a `LogWatcher` has learned."""

from __future__ import annotations

from dataclasses import dataclass

from .events import (
    BucketConfig,
    BucketNotPrepared,
    BucketVariable,
    GeneratedBuckets,
    GraphBudget,
    GraphCaptured,
    KvCacheSize,
    MemorySplit,
    ModelLoaded,
    NotWarmedUp,
    OmittedBuckets,
    OutOfMemory,
    Traceback,
    UsableBlocks,
    WarmupFinished,
)


@dataclass(frozen=True)
class WatchSummary:
    """Everything a LogWatcher has learned so far (a snapshot; later feeds do not change it)."""

    stage: str                                        # startup | warmup | ready | serving
    bucket_configs: dict[str, BucketConfig]           # phase -> last config line
    bucket_variables: dict[str, BucketVariable]
    exponential_overrides: tuple[str, ...]
    generated: dict[str, GeneratedBuckets]            # phase -> last "Generated" line
    omitted: dict[str, OmittedBuckets]
    memory_split: MemorySplit | None
    usable_blocks: UsableBlocks | None
    hpu_blocks: int | None                         # KV blocks allocated on the device (N)
    model_loaded: ModelLoaded | None
    kv_cache: KvCacheSize | None
    graph_budget: GraphBudget | None
    warmup_steps: dict[str, tuple[int, int]]          # phase key -> (done, total), in order seen
    graph_captured: dict[str, GraphCaptured]
    warmup_finished: WarmupFinished | None
    warmup_skipped: bool
    not_warmed_up: tuple[NotWarmedUp, ...]            # distinct shapes, first occurrence
    buckets_not_prepared: tuple[BucketNotPrepared, ...]
    preemptions: int
    oom: OutOfMemory | None
    oom_stage: str | None
    errors: tuple[str, ...]
    tracebacks: tuple[Traceback, ...]
    listening_url: str | None
    startup_complete: bool
    engine_version: str | None
    platform: str | None
    engine_init_s: float | None
    compile_s: float | None
    # VLLM_HPU_LOG_STEP_GRAPH_COMPILATION lines: engine steps that compiled while ready/serving, the
    # graphs they compiled, and every graph any such line counted
    compile_steps_under_load: int = 0
    compilations_under_load: int = 0
    compilations_logged: int = 0

    @property
    def prompt_buckets(self) -> tuple[tuple[int, ...], ...] | None:
        return generated_buckets(self.generated, "prompt")

    @property
    def decode_buckets(self) -> tuple[tuple[int, ...], ...] | None:
        return generated_buckets(self.generated, "decode")


def generated_buckets(generated: dict, phase: str) -> tuple[tuple[int, ...], ...] | None:
    """The bucket list of the last "Generated N <phase> buckets" line, None before one was seen."""
    g = generated.get(phase)
    return g.buckets if g else None
