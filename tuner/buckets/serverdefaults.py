"""What each release sets max_num_seqs and max_num_batched_tokens to when `vllm serve` is not given them.

Read from the sources of each release as `vllm serve` runs it on an HPU (OpenAI API server usage context,
VLLM_USE_V1 unset, a text generation model), the one place every caller takes these defaults from.

v0 fork (HabanaAI/vllm-fork, every profile): the engine is v0. Chunked prefill is switched on by default
only on CUDA (arg_utils.py: `is_gpu` for max_model_len > 32K), so it stays off on an HPU, max_num_seqs is
256, and SchedulerConfig sets the budget to max(max_model_len, 2048), raised to 5120 for a multimodal model
(1.19 on) and, from 1.22, cut to max_num_seqs * max_model_len. On 1.21.2 / 1.21.3 / 1.22 the V1 oracle
falls back to V0 on a non-CUDA platform when VLLM_USE_V1 is unset; main and 1.23 refuse V1 on an HPU.
The HPU platform's check_and_update_config leaves both values alone (1.22+: it resets the budget to
max(max_model_len, 2048) for an MLA model only, which the rows do not model).

v1 vllm-gaudi: vLLM's EngineArgs picks the usage-context table by device memory (>= 70 GiB: 8192 tokens and
1024 sequences for the API server). vllm-gaudi's platform does not implement get_device_total_memory in
v0.10.1 (the base raises NotImplementedError, the try/except makes it 0) and returns 0 on purpose from
v0.15.1 on (platform.py: "a value of 0 is returned to preserve the current logic"), so a Gaudi2/3 gets the
small table: 2048 tokens and 256 sequences. Chunked prefill is on for a generation model, so the budget
is 2048 (not max(max_model_len, 2048)); from vLLM v0.15.1 it is cut to max_num_seqs * max_model_len, and
a defaulted max_num_seqs is cut to the budget. vllm-gaudi's check_and_update_config overrides neither.

Not modelled (the rows hold the text generation case): pooling models (fork: at least 32768; v1: chunked
prefill depends on the pooler type), vLLM v0.26+'s floor for multimodal prefix-LM models (Gemma 4) and
--performance-mode throughput (doubles both on v1 from v0.26.0).
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import get_profile

MAX_NUM_SEQS = 256  # every profile's default (v0 EngineArgs / _set_default_args_v0; v1's small table)
_FLOOR = 2048  # vLLM's DEFAULT_MAX_NUM_BATCHED_TOKENS / the small table's API-server budget


@dataclass(frozen=True)
class EngineDefaults:
    chunked_prefill: bool  # the default on an HPU: False on the v0 fork, True on v1
    cap_by_seqs: bool  # a defaulted budget is cut to max_num_seqs * max_model_len
    multimodal_floor: int | None  # a defaulted v0 budget is raised to this for a multimodal model
    source: str  # where it was read


_V0_EARLY = "vllm/engine/arg_utils.py (max_num_seqs, chunked prefill); vllm/config.py SchedulerConfig.__init__"
_V0 = "vllm/engine/arg_utils.py _set_default_args_v0; vllm/config.py SchedulerConfig.__post_init__"
_V1 = ("vllm-project/vllm vllm/engine/arg_utils.py {fn} at v{vllm}; vllm-gaudi vllm_gaudi/platform.py "
       "{total} at {tag}")
DEFAULTS: dict[str, EngineDefaults] = {
    # vllm-fork tags (commit): the files above at that tag.
    "fork-1.17": EngineDefaults(False, False, None, f"vllm-fork v0.5.3.post1-Gaudi-1.17.0 (1e0e492): {_V0_EARLY}"),
    "fork-1.18": EngineDefaults(False, False, None, f"vllm-fork v0.5.3.post1+Gaudi-1.18.0 (8492294): {_V0_EARLY}"),
    "fork-1.19": EngineDefaults(False, False, 5120, f"vllm-fork v0.6.4.post2+Gaudi-1.19.0 (faf27e2): {_V0_EARLY}"),
    "fork-1.20": EngineDefaults(False, False, 5120, "vllm-fork v0.6.6.post1+Gaudi-1.20.0 (6af2f67): "
                                "vllm/engine/arg_utils.py __post_init__ (256 unless VLLM_USE_V1); vllm/config.py"),
    "fork-1.21.0": EngineDefaults(False, False, 5120, "vllm-fork v0.7.2+Gaudi-1.21.0 (0275ce4): as fork-1.20"),
    # fork-1.21.3 (v0.8.5.post1+Gaudi-1.21.3, 3bcdfd4) is an alias: its two files read the same.
    "fork-1.21.2": EngineDefaults(False, False, 5120, f"vllm-fork v0.7.2+Gaudi-1.21.2 (9f1222c): {_V0}"),
    "fork-1.22": EngineDefaults(False, True, 5120, f"vllm-fork v0.9.0.1+Gaudi-1.22.0 (2e9b2b3): {_V0}"),
    "fork-main": EngineDefaults(False, True, 5120, f"vllm-fork habana_main (95af700): {_V0}"),
    "fork-1.23": EngineDefaults(False, True, 5120, f"vllm-fork v1.23.0 (6ecf39c): {_V0}"),
    "gaudi-0.10.1": EngineDefaults(True, False, None, _V1.format(
        fn="_set_default_args_v1", vllm="0.10.1", total="(no get_device_total_memory)", tag="v0.10.1 (ab65f9b)")),
    "gaudi-0.15.1": EngineDefaults(True, True, None, _V1.format(
        fn="get_batch_defaults / _set_default_max_num_seqs_and_batched_tokens_args", vllm="0.15.1",
        total="get_device_total_memory returns 0", tag="v0.15.1 (5d6a2db)")),
    # gaudi-0.27.0 (vLLM v0.27.0) is an alias: vLLM's two functions read the same there.
    "gaudi-0.26.0": EngineDefaults(True, True, None, _V1.format(
        fn="get_batch_defaults / _set_default_max_num_seqs_and_batched_tokens_args", vllm="0.26.0",
        total="get_device_total_memory returns 0", tag="v0.26.0 (b059f9c)")),
    # vllm-gaudi main (091bbad) runs vLLM 14617c2 (its stable-commit branch), not read itself: the same
    # logic in vLLM v0.26.0, v0.27.0 and v0.32.0 (v0.32 adds a >= 160 GiB row, unreached with 0).
    "gaudi-main": EngineDefaults(True, True, None, _V1.format(
        fn="as v0.26.0 (vLLM 14617c2 itself not read)", vllm="0.26.0..0.32.0",
        total="get_device_total_memory returns 0", tag="main (091bbad)")),
}


@dataclass(frozen=True)
class Resolved:
    max_num_seqs: int
    max_num_batched_tokens: int
    notes: dict[str, str]  # a defaulted setting -> why it has that value


def engine_defaults(profile: str) -> EngineDefaults:
    return DEFAULTS[get_profile(profile).name]  # aliases resolve; an unknown name raises


def resolve(profile: str, max_model_len: int, max_num_seqs: int | None = None,
            max_num_batched_tokens: int | None = None, multimodal: bool = False) -> Resolved:
    """The two settings as the release ends up with them, the given ones kept, with a note per default."""
    d, name = engine_defaults(profile), get_profile(profile).name
    seqs = MAX_NUM_SEQS if max_num_seqs is None else max_num_seqs
    notes: dict[str, str] = {}
    budget = max_num_batched_tokens
    if budget is None:
        if d.chunked_prefill:
            budget, why = _FLOOR, f"{_FLOOR}: v1 engine, chunked prefill on, HPU reports 0 device memory"
        else:
            budget, why = max(max_model_len, _FLOOR), f"max(max_model_len, {_FLOOR}): v0 engine, no chunked prefill"
        if multimodal and d.multimodal_floor and budget < d.multimodal_floor:
            budget, why = d.multimodal_floor, f"{why}, at least {d.multimodal_floor} for a multimodal model"
        if d.cap_by_seqs and seqs * max_model_len < budget:
            budget, why = seqs * max_model_len, f"{why}, at most max_num_seqs x max_model_len"
        notes["max_num_batched_tokens"] = f"not given: vLLM's default for {name}, {why}"
    if max_num_seqs is None:
        why = str(MAX_NUM_SEQS)
        if d.chunked_prefill and budget < seqs:  # v1 cuts a defaulted max_num_seqs to the budget
            seqs, why = budget, f"{MAX_NUM_SEQS}, at most the token budget (v1 engine)"
        notes["max_num_seqs"] = f"not given: vLLM's default for {name}, {why}"
    return Resolved(seqs, budget, notes)
