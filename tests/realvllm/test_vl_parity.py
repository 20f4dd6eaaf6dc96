"""random-mm on the tier's tiny vision-language model (vlmodel.py), checked against vLLM 0.32.0's own
RandomMultiModalDataset run in the genuine venv with the model's tokenizer loaded as vLLM loads it
(transformers): the same texts, text lengths, image counts and sizes, request by request.

This is the cheap half of the VL parity check (no server: ~10 s). The genuine half boots vLLM serving
that model and runs `vllm bench serve` and `bucket-tuner bench` with the same command lines; a VL boot
costs more than this tier's budget allows, so it is benchmarks/vl_parity.py, its figures in
benchmarks/README.md (request for request the same input tokens, images included, as the server
counts them: both clients report the server's usage.prompt_tokens).
"""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace

import pytest

pytestmark = [
    pytest.mark.realvllm,
    pytest.mark.xdist_group("realvllm"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc"),
]

LIMIT = '{"image": 3, "video": 0}'
BUCKETS = "{(256, 256, 1): 0.5, (720, 1280, 1): 0.25, (333, 500, 1): 0.25}"
NUM, SEED, IN_LEN, OUT_LEN = 12, 7, 64, 8

# Runs under the vLLM venv's python: vLLM's sampling, the image sizes read back from its JPEG data URLs.
VLLM_SIDE = """
import base64, io, json, sys
from PIL import Image
from vllm.tokenizers import get_tokenizer
from vllm.benchmarks.datasets.datasets import RandomMultiModalDataset
model, num, seed, in_len, out_len, limit, buckets = sys.argv[1:8]
tok = get_tokenizer(model)
reqs = RandomMultiModalDataset(random_seed=int(seed)).sample(
    tokenizer=tok, num_requests=int(num), input_len=int(in_len), output_len=int(out_len), base_items_per_request=2,
    num_mm_items_range_ratio=0.5, limit_mm_per_prompt=json.loads(limit), bucket_config=eval(buckets))
def size(item):
    data = base64.b64decode(item["image_url"]["url"].split(",", 1)[1])
    return list(Image.open(io.BytesIO(data)).size)
print(json.dumps({"num_special": tok.num_special_tokens_to_add(), "requests": [
    {"text": r.prompt, "prompt_len": r.prompt_len, "output_len": r.expected_output_len,
     "images": [size(m) for m in (r.multi_modal_data or [])]} for r in reqs]}))
"""


def test_random_mm_requests_are_vllms_on_the_vl_tokenizer(vllm_env):
    from tuner.load.datasets import build_workload
    from tuner.load.tokenizer import load_vocab

    run = subprocess.run([str(vllm_env.python), "-c", VLLM_SIDE, str(vllm_env.vl_model), str(NUM), str(SEED),
                          str(IN_LEN), str(OUT_LEN), LIMIT, BUCKETS],
                         capture_output=True, text=True, timeout=300, check=False,
                         env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "VLLM_NO_USAGE_STATS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    args = Namespace(dataset_name="random-mm", backend="openai-chat", num_prompts=NUM, seed=SEED,
                     random_input_len=IN_LEN, random_output_len=OUT_LEN, random_range_ratio="0.0",
                     random_prefix_len=0, dataset_path=None, vocab_size=None, input_len=None, output_len=None,
                     random_mm_base_items_per_request=2, random_mm_num_mm_items_range_ratio=0.5,
                     random_mm_limit_mm_per_prompt=LIMIT, random_mm_bucket_config=BUCKETS)
    w = build_workload(args, load_vocab(vllm_env.vl_model))
    ours = [{"text": r.prompt, "prompt_len": r.prompt_len, "output_len": r.output_len,
             "images": [list(im.size) for im in r.images]} for r in w.requests()]
    assert theirs["num_special"] == 1  # the tokenizer adds a BOS: the text is one token shorter than asked
    assert [r["images"] for r in ours] == [r["images"] for r in theirs["requests"]]
    assert len({tuple(map(tuple, r["images"])) for r in ours}) > 3  # the mix really varies
    assert ours == theirs["requests"]
