"""A hybrid model's KV pool (tuner/perfmodel/hybridcache.py) against the genuine vLLM of this tier, the part vLLM
computes: for every Gated DeltaNet hybrid of the catalogue and the NemotronH configs of
tests/data/model-configs-hybrid, at TP 1 and 2,

* the attention block and the padded state page: vLLM's own Platform._align_hybrid_block_size, given an attention
  backend whose one kernel block is 128 tokens (the HPU backend's get_supported_kernel_block_sizes) and the
  plugin's --block-size of 128;
* the layer groups, the block count for a given memory and the capacity it logs ("KV cache size: N tokens,
  Maximum concurrency ..."): kv_cache_utils' get_kv_cache_groups, get_kv_cache_config_from_groups and
  get_kv_cache_capacity, on the layers' specs as vLLM builds them (its model class's state shapes and dtypes, its
  ModelConfig's KV heads and head size and layer counts), with and without prefix caching.

What vllm-gaudi adds on top (the reset of a Qwen3.5 hybrid's --block-size, the memory cut for separately
allocated states) is read from its source and tested in tests/perfmodel/test_hybrid_cache.py; here the memory
handed to vLLM is the cut one, so the block counts must agree exactly.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.realvllm.test_recurrent_state_vllm import HYBRID_DATA, write_case_folder
from tuner.models import catalogue
from tuner.models.hfconfig import load_config
from tuner.models.recurrent import recurrent_spec
from tuner.models.shape import shape_from_config
from tuner.perfmodel.hybridcache import hybrid_layout

pytestmark = [pytest.mark.realvllm, pytest.mark.xdist_group("realvllm")]

TPS = (1, 2)
MEMORIES = (6 * 2**30, 37 * 2**30 + 12345, 61 * 2**30)  # KV bytes handed to vLLM (after the plugin's cut)
MAX_LENS = (4096, 32768)

SCRIPT = r'''
import json, os, sys, types
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
import torch
from vllm.config import CacheConfig, ModelConfig, ParallelConfig
from vllm.model_executor.models import ModelRegistry
from vllm.model_executor.models.config import MODELS_CONFIG_MAP
from vllm.platforms.interface import Platform
from vllm.v1.core import kv_cache_utils as ku
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec


class HpuLikeBackend:  # the one property of vllm-gaudi's attention backend the alignment reads
    @staticmethod
    def get_supported_kernel_block_sizes():
        return [128]

    @staticmethod
    def customize_spec(spec):
        return spec

    @staticmethod
    def get_name():
        return "HPU_ATTN"


Platform._find_non_ssm_backends = classmethod(lambda cls, vllm_config: [HpuLikeBackend])


def figures(case):
    folder = case["folder"]
    as_class = os.path.join(folder, "as_class.json")
    stand_in = json.load(open(as_class)) if os.path.isfile(as_class) else None
    rule = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
    mc = ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype="bfloat16",
                     hf_overrides={"architectures": [stand_in]} if stand_in else {})
    cls, _ = ModelRegistry.resolve_model_cls(mc.architectures, model_config=mc)
    out = []
    for tp in case["tps"]:
        pc = ParallelConfig(tensor_parallel_size=tp)
        for prefix in (False, True):
            cc = CacheConfig(block_size=128, mamba_cache_mode="align" if prefix else "none")
            cc.kv_cache_layout = "LBHNC"
            vc = types.SimpleNamespace(model_config=mc, cache_config=cc, parallel_config=pc, speculative_config=None,
                                       num_speculative_tokens=0,
                                       attention_config=types.SimpleNamespace(hisparse_config=None),
                                       scheduler_config=types.SimpleNamespace(disable_hybrid_kv_cache_manager=False),
                                       device_config=types.SimpleNamespace(device_type="hpu"))
            if rule in MODELS_CONFIG_MAP:  # the config-driven SSM dtype (Qwen3.5, NemotronH), as VllmConfig applies it
                MODELS_CONFIG_MAP[rule].verify_and_update_config(vc)
            Platform._align_hybrid_block_size(vc, HpuLikeBackend)
            block, padded = cc.block_size, cc.mamba_page_size_padded
            shapes = cls.get_mamba_state_shape_from_config(vc)
            dtypes = cls.get_mamba_state_dtype_from_config(vc)
            n_attn = mc.get_num_layers_by_block_type(pc, "attention")
            blocks_listed = getattr(mc.hf_text_config, "layers_block_type", None) or []
            if not n_attn:  # transformers 5's NemotronH says "full_attention", which this count misses; the model
                n_attn = sum(t == "full_attention" for t in blocks_listed)  # class builds an attention layer for it
            kind = "linear_attention" if getattr(mc.hf_text_config, "layer_types", None) else "mamba"
            n_state = mc.get_num_layers_by_block_type(pc, kind)
            specs = {}
            for i in range(n_attn):
                specs[f"attn.{i}"] = FullAttentionSpec(block_size=block, num_kv_heads=mc.get_num_kv_heads(pc),
                                                       head_size=mc.get_head_size(), dtype=torch.bfloat16)
            for i in range(n_state):
                specs[f"state.{i}"] = MambaSpec(block_size=block, shapes=tuple(shapes), dtypes=tuple(dtypes),
                                                page_size_padded=padded, mamba_cache_mode=cc.mamba_cache_mode)
            groups = ku.get_kv_cache_groups(vc, specs)
            row = {"tp": tp, "prefix": prefix, "block": block, "padded": padded, "n_attn": n_attn,
                   "n_state": n_state, "groups": sorted([type(g.kv_cache_spec).__name__, len(g.layer_names)]
                                                        for g in groups), "pools": []}
            for memory in case["memories"]:
                for mml in case["max_lens"]:
                    mc.max_model_len = mml
                    cfg = ku.get_kv_cache_config_from_groups(vc, groups, memory)
                    tokens, concurrency = ku.get_kv_cache_capacity(vc, cfg)
                    row["pools"].append({"memory": memory, "max_len": mml, "blocks": cfg.num_blocks,
                                         "tokens": tokens, "concurrency": concurrency})
            out.append(row)
    return out


for case in json.loads(sys.argv[1]):
    try:
        print(json.dumps({"folder": case["folder"], "rows": figures(case)}), flush=True)
    except Exception as exc:
        print(json.dumps({"folder": case["folder"], "error": f"{type(exc).__name__}: {str(exc)[:400]}"}), flush=True)
'''


def _cases() -> dict[str, Path]:
    out = {m: p for m, p in catalogue().items() if (spec := recurrent_spec(load_config(p))) is not None
           and spec.kind == "gdn_attention"}
    out.update({p.stem: p for p in sorted(HYBRID_DATA.glob("nvidia__*.json"))})
    return out


@pytest.fixture(scope="module")
def vllm_pool(vllm_env, tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("pool")
    script = root / "pool_figures.py"
    script.write_text(SCRIPT)
    cases, folders = [], {}
    for name, path in _cases().items():
        folder = root / name.replace("/", "__")
        write_case_folder(folder, path)
        folders[name] = str(folder)
        cases.append({"folder": str(folder), "tps": list(TPS), "memories": list(MEMORIES), "max_lens": list(MAX_LENS)})
    run = subprocess.run([str(vllm_env.python), str(script), json.dumps(cases)], capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0, run.stderr[-2000:]
    by_folder = {d["folder"]: d for d in map(json.loads, run.stdout.splitlines())}
    return {name: by_folder[folder] for name, folder in folders.items()}


@pytest.mark.parametrize("name", list(_cases()))
def test_hybrid_pool_equals_vllm_own(vllm_pool, name):
    theirs = vllm_pool[name]
    assert "error" not in theirs, f"vLLM could not lay out {name}: {theirs['error']}"
    shape = shape_from_config(load_config(_cases()[name]), name, "test")
    spec = shape.recurrent
    for row in theirs["rows"]:
        tp, prefix = row["tp"], row["prefix"]
        where = f"{name} TP {tp} prefix caching {prefix}"
        assert (shape.attention_layers, spec.layers) == (row["n_attn"], row["n_state"]), where
        # the plugin's model type rule (a Qwen3.5 hybrid's block size reset) is moot at --block-size 128
        layout = hybrid_layout("gaudi-main", "", shape.attention_layers, shape.attn_page_token_bytes("bf16", tp),
                               spec.layers, spec.page_bytes(tp), spec.kind, 128, prefix)
        assert (layout.attn_block_tokens, layout.page_bytes) == (row["block"], row["padded"]), where
        # groups of each kind, the largest as many layers as the group size (vLLM deals a kind's layers out to its
        # groups in turn, so the last ones may hold one fewer: the padding the block still pays for)
        kinds = [k for k, _ in row["groups"]]
        assert (kinds.count("FullAttentionSpec"), kinds.count("MambaSpec")) == (layout.attention_groups,
                                                                                layout.state_groups), where
        assert max(n for _, n in row["groups"]) == layout.group_size, where
        for pool in row["pools"]:
            at = f"{where}, {pool['memory']} bytes, max_model_len {pool['max_len']}"
            blocks = pool["memory"] // layout.block_bytes  # vLLM's part: the plugin's cut is already applied
            assert blocks == pool["blocks"], at
            assert layout.max_concurrency(blocks, pool["max_len"], prefix) == pytest.approx(pool["concurrency"]), at
            assert layout.kv_tokens(blocks, pool["max_len"], prefix) == pool["tokens"], at
