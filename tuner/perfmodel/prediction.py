"""What a start of one configuration does before it serves: the prediction's data types (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..buckets import BucketPlan, ServerConfig
from .corrections import Corrections
from .costs import CostModel, MemorySplit, SimSettings, recipe_key
from .hardware import MiB
from .rules import ReleaseRules


@dataclass(frozen=True)
class WarmupStep:
    kind: str  # "compile", "capture" or "compile+capture"
    phase: str  # "prompt" or "decode"
    index: int  # 1-based, as the release prints it
    total: int
    bucket: tuple
    seconds: float
    free_mem: float  # device bytes free when the release prints the line
    cache_hit: bool = False
    graph_mem: float = 0.0  # memory the captured graph keeps
    label: str = ""  # multimodal steps: the modality, as the release's line names it


class StepRow(NamedTuple):
    """A WarmupStep with the same fields, as a tuple: bulk prediction (a plan of a whole space) makes
    hundreds per configuration, and a tuple costs a fifth of a frozen dataclass."""

    kind: str
    phase: str
    index: int
    total: int
    bucket: tuple
    seconds: float
    free_mem: float
    cache_hit: bool = False
    graph_mem: float = 0.0
    label: str = ""


@dataclass(frozen=True)
class StepSums:
    """The warmup steps of a bulk prediction that kept none (capture.plan_warmup keep_steps=False): their
    seconds per correction that scales them (projection.correction_of), and the compiling part of them."""

    prompt_warmup: float = 0.0
    decode_warmup: float = 0.0
    capture: float = 0.0
    compile: float = 0.0
    multimodal_warmup: float = 0.0

    @property
    def total(self) -> float:
        return self.prompt_warmup + self.decode_warmup + self.capture + self.multimodal_warmup


@dataclass(frozen=True)
class GraphBudget:
    free_mem: float
    graph_free_mem: float
    prompt: float
    decode: float
    prompt_ratio: float


@dataclass(frozen=True)
class Failure:
    phase: str  # config, buckets, load, profile, kv, warmup
    message: str  # the last line a real server prints (exception class and text)
    exit_code: int = 1
    at_step: int | None = None  # warmup failures: index into StartupPrediction.steps


@dataclass
class StartupPrediction:
    profile: str
    rules: ReleaseRules
    sim: SimSettings
    env: dict
    config: ServerConfig | None = None
    memory: MemorySplit | None = None
    blocks_override: tuple[int, int] | None = None  # --num-gpu-blocks-override: (the profiled blocks, the told)
    auto_fit: tuple[int, int, float] | None = None  # --max-model-len auto: (model length, fitted length, KV bytes)
    plan: BucketPlan | None = None
    steps: list[WarmupStep] = field(default_factory=list)
    budget: GraphBudget | None = None
    graphed_prompt: list = field(default_factory=list)  # in the release's capture order
    graphed_decode: list = field(default_factory=list)
    prompt_graph_mem: float = 0.0
    decode_graph_mem: float = 0.0
    warmed_prompt: frozenset = frozenset()
    warmed_decode: frozenset = frozenset()
    skip_warmup: bool = False
    lazy: bool = True
    graphs: bool = True  # HPU graphs captured at all
    load_seconds: float = 0.0
    profile_seconds: float = 0.0
    sampler_seconds: float = 0.0
    failure: Failure | None = None
    corrections: Corrections = Corrections()
    step_sums: StepSums | None = None  # bulk prediction: the steps' sums instead of the steps
    vision: Any = None  # perfmodel.vision.VisionPhase of a multimodal model (None: no vision warm-up)
    warmed_images: frozenset = frozenset()  # image buckets (vision.image_key) the warm-up compiled
    hybrid: Any = None  # hybridcache.HybridLayout of a hybrid model's KV pool (None: attention layers only)
    draft_weights: float = 0.0  # an MTP draft's layers on one rank (costs.draft_weights), loaded after the model

    @property
    def steps_seconds(self) -> float:
        return self.step_sums.total if self.step_sums is not None else sum(s.seconds for s in self.steps)

    @property
    def num_blocks(self) -> int:
        return self.memory.num_blocks if self.memory else 0

    @property
    def warmup_seconds(self) -> float:
        """What "Warmup finished in N secs" reports: buckets, captures and the sampler."""
        return self.steps_seconds + self.sampler_seconds

    @property
    def cost(self) -> CostModel:
        return CostModel(self.sim, self.config.block_size if self.config else 128, self.compiled_mode,
                         self.corrections, self.hybrid, self.draft_weights)

    @property
    def kv_block_tokens(self) -> int:
        """Tokens one KV block holds for a request (a hybrid's attention block is larger than the kernel's)."""
        return self.hybrid.attn_block_tokens if self.hybrid else self.config.block_size

    @property
    def state_blocks(self) -> int:
        """Blocks every running request holds for its recurrent states (a hybrid's; 0 otherwise)."""
        return self.hybrid.state_blocks_per_request(bool(self.config.prefix_caching)) if self.hybrid else 0

    @property
    def compiled_mode(self) -> bool:
        return not self.lazy and not self.sim.enforce_eager

    def recipe_id(self, phase: str, bucket: tuple) -> str:
        """The recipe-cache key of one compiled shape of this start (its KV-cache size included)."""
        return recipe_key(self.profile, self.sim, self.config.block_size, self.num_blocks, phase, bucket)


def devmem_error(size: int) -> str:
    # What the Habana PyTorch bridge raises when an HBM allocation fails.
    return ("RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::"
            f"{size} ({size // MiB})MB")
