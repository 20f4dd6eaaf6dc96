"""A hybrid model's recurrent state per sequence (tuner.models.recurrent), checked against the genuine vLLM of this
tier: for every hybrid config of the catalogue, the real hybrid configs of tests/data/model-configs-hybrid and
transformers' own default configs of the families with no real file here, vLLM's model class (resolved through its
ModelRegistry, configs only: no weights, no boot) gives its state shapes and dtypes through
get_mamba_state_shape_from_config / get_mamba_state_dtype_from_config at TP 1, 2 and 4, without and with
speculative tokens, and under several --mamba-cache-dtype / --mamba-ssm-cache-dtype settings; ours must be the
same, with the same page bytes (vLLM's MambaSpec.page_size_bytes), or fail where vLLM fails (a dimension TP does
not divide, a dtype KDA refuses).

The vLLM side is a real ModelConfig, CacheConfig and ParallelConfig; the VllmConfig around them is a plain object
with the attributes those classmethods read (model_config, cache_config, parallel_config, speculative_config,
num_speculative_tokens), because a whole VllmConfig cannot be built on this CPU build for every architecture. The
config-driven SSM dtype (model_executor/models/config.py: Qwen3.5's mamba_ssm_dtype, NemotronH's
mamba_ssm_cache_dtype) is applied as vLLM applies it, by the architecture's MODELS_CONFIG_MAP entry.
Vision-language configs are read through their text part under the text model's class (the CPU build cannot
import the multimodal classes without torchvision); the class's state rule is the same.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tuner.models import catalogue
from tuner.models.hfconfig import load_config, text_part
from tuner.models.recurrent import recurrent_spec

pytestmark = [pytest.mark.realvllm, pytest.mark.xdist_group("realvllm")]

HYBRID_DATA = Path(__file__).resolve().parents[1] / "data" / "model-configs-hybrid"
TPS = (1, 2, 4)
SPECS = (0, 2)
# (--mamba-cache-dtype, --mamba-ssm-cache-dtype)
CACHE_DTYPES = (("auto", "auto"), ("auto", "bfloat16"), ("float32", "auto"), ("auto", "float16"))
# text-only classes of the composite configs (same state rule as the composite's class)
TEXT_CLASSES = {"qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
                "kimi_linear": "KimiLinearForCausalLM"}
# Classes the CPU build cannot import (qwen3_5.py imports qwen3_vl.py, which needs torchvision), read by vLLM
# under a class whose state classmethods are the same code: Qwen3_5(Moe)ForCausalLM's and
# Qwen3NextForCausalLM's get_mamba_state_shape/dtype_from_config are both gated_delta_net_state_shape/dtype of
# hf_text_config's linear_* fields. The config's own architecture still picks the config.py dtype rule.
STAND_INS = {"Qwen3_5ForCausalLM": "Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM": "Qwen3NextForCausalLM"}
# Families without a real config.json here: transformers' class defaults, written by transformers itself in the
# vLLM venv (class, architecture, overrides that make a hybrid where the default has no attention layer).
DEFAULTS = {
    "Granite-4-H (granitemoehybrid, Mamba2)": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
                                               {"layer_types": ["mamba", "mamba", "mamba", "attention"] * 8}),
    "Falcon-H1 (Mamba2 beside attention)": ("FalconH1Config", "FalconH1ForCausalLM", {}),
    "Zamba2 (Mamba2, shared attention)": ("Zamba2Config", "Zamba2ForCausalLM", {}),
    "Jamba (Mamba1)": ("JambaConfig", "JambaForCausalLM", {}),
    "LFM2 (short conv)": ("Lfm2Config", "Lfm2ForCausalLM",
                          {"layer_types": ["conv", "conv", "full_attention"] * 10 + ["conv", "conv"],
                           "conv_dim": 2560}),
    "LFM2-MoE (short conv)": ("Lfm2MoeConfig", "Lfm2MoeForCausalLM",
                              {"layer_types": ["conv", "conv", "full_attention"] * 10 + ["conv", "conv"]}),
    "OLMo-Hybrid (Gated DeltaNet)": ("OlmoHybridConfig", "OlmoHybridForCausalLM", {}),
}

SCRIPT = r'''
import json, os, sys, types
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

def write_defaults(spec_file):
    import transformers
    for folder, (cls_name, arch, overrides) in json.load(open(spec_file)).items():
        cfg = getattr(transformers, cls_name)(**overrides)
        cfg.architectures = [arch]
        os.makedirs(folder, exist_ok=True)
        cfg.save_pretrained(folder)

def figures(folder, tps, specs, cache_dtypes):
    import math
    from vllm.config import CacheConfig, ModelConfig, ParallelConfig
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP
    from vllm.utils.torch_utils import get_dtype_size

    as_class = os.path.join(folder, "as_class.json")  # read under another class with the same state rule
    stand_in = json.load(open(as_class)) if os.path.isfile(as_class) else None
    mc = ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype="bfloat16",
                     hf_overrides={"architectures": [stand_in]} if stand_in else {})
    cls, arch = ModelRegistry.resolve_model_cls(mc.architectures, model_config=mc)
    rule = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]  # the config.py rule's key
    out = {"folder": folder, "class": cls.__name__, "arch": arch, "rows": []}
    for tp in tps:
        for n in specs:
            for conv_dt, ssm_dt in cache_dtypes:
                cc = CacheConfig(mamba_cache_dtype=conv_dt, mamba_ssm_cache_dtype=ssm_dt)
                spec = types.SimpleNamespace(num_speculative_tokens=n) if n else None
                vc = types.SimpleNamespace(model_config=mc, cache_config=cc,
                                           parallel_config=ParallelConfig(tensor_parallel_size=tp),
                                           speculative_config=spec, num_speculative_tokens=n)
                if rule in MODELS_CONFIG_MAP:  # the config-driven SSM dtype, as VllmConfig applies it
                    MODELS_CONFIG_MAP[rule].verify_and_update_config(vc)
                row = {"tp": tp, "num_spec": n, "cache": conv_dt, "ssm": ssm_dt}
                try:
                    shapes = [list(s) for s in cls.get_mamba_state_shape_from_config(vc)]
                    dtypes = [str(d).removeprefix("torch.") for d in cls.get_mamba_state_dtype_from_config(vc)]
                    row.update(shapes=shapes, dtypes=dtypes, page_bytes=sum(
                        math.prod(s) * get_dtype_size(d) for s, d in zip(
                            cls.get_mamba_state_shape_from_config(vc), cls.get_mamba_state_dtype_from_config(vc))))
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                out["rows"].append(row)
    return out

if sys.argv[1] == "--defaults":
    write_defaults(sys.argv[2])
    sys.exit(0)
args = json.loads(sys.argv[1])
for folder in args["folders"]:
    try:
        print(json.dumps(figures(folder, args["tps"], args["specs"], args["cache_dtypes"])), flush=True)
    except Exception as exc:
        print(json.dumps({"folder": folder, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}), flush=True)
'''


def _hybrid_catalogue() -> list[str]:
    out = []
    for model_id, path in catalogue().items():
        if recurrent_spec(load_config(path)) is not None:
            out.append(model_id)
    return out


def _cases() -> list[str]:
    return ([f"catalogue:{m}" for m in _hybrid_catalogue()]
            + [f"data:{p.stem}" for p in sorted(HYBRID_DATA.glob("*.json"))]
            + [f"defaults:{name}" for name in DEFAULTS])


def _as_text_model(config: dict) -> dict:
    """A composite config as its text model's causal-LM config (the class the CPU build can import)."""
    if not any(isinstance(config.get(k), dict) for k in ("text_config",)):
        return config
    text = dict(text_part(config))
    text["architectures"] = [TEXT_CLASSES[text["model_type"]]]
    return text


def write_case_folder(folder: Path, path: Path) -> None:
    """A model folder vLLM's ModelConfig reads: the config (a composite's text part) and, where the CPU build
    cannot import its class, the stand-in class it is read under."""
    folder.mkdir()
    config = _as_text_model(json.loads(path.read_text()))
    (folder / "config.json").write_text(json.dumps(config))
    if config["architectures"][0] in STAND_INS:
        (folder / "as_class.json").write_text(json.dumps(STAND_INS[config["architectures"][0]]))


@pytest.fixture(scope="module")
def vllm_state(vllm_env, tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("hybrid")
    script = root / "recurrent_figures.py"
    script.write_text(SCRIPT)
    folders: dict[str, Path] = {}
    for case in _cases():
        source, name = case.split(":", 1)
        folder = root / name.replace("/", "__").replace(" ", "_").replace("(", "").replace(")", "").replace(",", "")
        if source == "defaults":
            folders[case] = folder
            continue
        write_case_folder(folder, catalogue()[name] if source == "catalogue" else HYBRID_DATA / f"{name}.json")
        folders[case] = folder
    defaults = {str(folders[f"defaults:{n}"]): list(DEFAULTS[n]) for n in DEFAULTS}
    (root / "defaults.json").write_text(json.dumps(defaults))
    run = subprocess.run([str(vllm_env.python), str(script), "--defaults", str(root / "defaults.json")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    args = {"folders": [str(f) for f in folders.values()], "tps": list(TPS), "specs": list(SPECS),
            "cache_dtypes": [list(c) for c in CACHE_DTYPES]}
    run = subprocess.run([str(vllm_env.python), str(script), json.dumps(args)], capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0, run.stderr[-2000:]
    by_folder = {d["folder"]: d for d in map(json.loads, run.stdout.splitlines())}
    return {case: by_folder[str(folder)] for case, folder in folders.items()}


def _ours(spec, row) -> dict:
    try:
        return {"shapes": [list(s) for s in spec.shapes(row["tp"], row["num_spec"])],
                "dtypes": list(spec.dtypes("bfloat16", row["cache"], row["ssm"])),
                "page_bytes": spec.page_bytes(row["tp"], "bfloat16", row["cache"], row["ssm"], row["num_spec"])}
    except ValueError as e:
        return {"error": str(e)}


def _layer_rule_shapes(spec, row):
    """The shapes vLLM's layer itself uses where its model classmethod leaves out the speculative tokens: LFM2's
    ShortConv.get_state_shape passes num_spec (the MambaSpec the KV-cache manager sizes comes from the layer),
    Lfm2ForCausalLM / Lfm2MoeForCausalLM.get_mamba_state_shape_from_config do not."""
    return spec.kind == "short_conv" and row["num_spec"] > 0


@pytest.mark.parametrize("case", _cases())
def test_recurrent_state_equals_vllm_own(vllm_state, case, tmp_path):
    theirs = vllm_state[case]
    assert "error" not in theirs, f"vLLM could not read the {case} config: {theirs['error']}"
    config = json.loads((Path(theirs["folder"]) / "config.json").read_text())
    file = tmp_path / "config.json"
    file.write_text(json.dumps(config))
    spec = recurrent_spec(load_config(file))
    assert spec is not None, f"{case}: vLLM's {theirs['class']} keeps a state; we found none"
    compared = 0
    for row in theirs["rows"]:
        ours = _ours(spec, row)
        where = f"{case} TP {row['tp']} num_spec {row['num_spec']} cache {row['cache']} ssm {row['ssm']}"
        if "error" in row:
            assert "error" in ours, f"{where}: vLLM fails ({row['error']}), ours gives {ours}"
            continue
        assert "error" not in ours, f"{where}: ours fails ({ours['error']}), vLLM gives {row}"
        if _layer_rule_shapes(spec, row):
            conv = list(spec.shapes(row["tp"], 0)[0])
            assert row["shapes"] == [conv], where  # the classmethod: no room for the speculative tokens
            assert ours["shapes"] == [[conv[0] + row["num_spec"], conv[1]]], where
            continue
        assert ours["shapes"] == row["shapes"], where
        assert ours["dtypes"] == row["dtypes"], where
        assert ours["page_bytes"] == row["page_bytes"], where
        compared += 1
    assert compared > 0, f"{case}: no case vLLM could size"
