"""More of `vllm bench serve`'s flags, with vLLM 0.32's meanings: --lora-modules/--lora-assignment,
--logprobs, --insecure, --timed-trace-label-*, --self-timed/--no-self-timed, --disable-shuffle and
--no-oversample (vllm/benchmarks/serve.py and datasets/datasets.py)."""

from __future__ import annotations

import json
import sys
from argparse import Namespace

import pytest

from tuner.cli import main
from tuner.load.client import LoadGenerator
from tuner.load.datasets import build_workload, custom, sharegpt
from tuner.load.workload import FixedWorkload
from tuner.serve.ports import find_free_port
from tuner.serve.process import ServerProcess


def _specs(n: int):
    return FixedWorkload(input_len=8, output_len=2, num_prompts=n, seed=0).requests()


def test_adapters_in_turn_or_drawn_with_the_seed():
    specs = _specs(6)
    gen = LoadGenerator("http://127.0.0.1:1", "base", lora_modules=["a", "b", "c"], lora_assignment="round-robin")
    gen.assign_adapters([s.index for s in specs], seed=0)
    assert [gen.payload(s)["model"] for s in specs] == ["a", "b", "c", "a", "b", "c"]
    drawn = []
    for _ in range(2):
        gen = LoadGenerator("http://127.0.0.1:1", "base", lora_modules=["a", "b"])
        gen.assign_adapters([s.index for s in _specs(40)], seed=3)
        drawn.append([gen.payload(s)["model"] for s in _specs(40)])
    assert drawn[0] == drawn[1] and set(drawn[0]) == {"a", "b"}  # seeded, and both drawn
    plain = LoadGenerator("http://127.0.0.1:1", "base")
    plain.assign_adapters([0, 1], seed=0)
    assert plain.payload(specs[0])["model"] == "base"
    with pytest.raises(ValueError, match="lora_assignment"):
        LoadGenerator("http://127.0.0.1:1", "m", lora_modules=["a"], lora_assignment="shuffle")


def test_logprobs_go_to_the_completions_api_only():
    spec = _specs(1)[0]
    assert LoadGenerator("http://127.0.0.1:1", "m", logprobs=5).payload(spec)["logprobs"] == 5
    assert "logprobs" not in LoadGenerator("http://127.0.0.1:1", "m").payload(spec)
    chat = LoadGenerator("http://127.0.0.1:1", "m", api="openai-chat", logprobs=5)
    assert "logprobs" not in chat.payload(spec)


def _sharegpt_file(tmp_path, n=6):
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([{"conversations": [{"value": f"question number {i} here"}, {"value": "answer"}]}
                             for i in range(n)]))
    return p


def test_disable_shuffle_keeps_the_files_order_and_no_oversample_sends_fewer(tmp_path):
    p = _sharegpt_file(tmp_path)
    kept = sharegpt(p, 4, 0, None, 5, shuffle=False)
    assert kept.prompts == [f"question number {i} here" for i in range(4)]
    shuffled = sharegpt(p, 6, 0, None, 5)
    assert sorted(shuffled.prompts) == sorted(f"question number {i} here" for i in range(6))
    assert shuffled.prompts != [f"question number {i} here" for i in range(6)]
    assert len(sharegpt(p, 10, 0, None, 5).prompts) == 10                     # topped up, as vLLM does
    assert len(sharegpt(p, 10, 0, None, 5, oversample=False).prompts) == 6    # --no-oversample
    c = tmp_path / "c.jsonl"
    c.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(5)))
    assert custom(c, 3, 0, None, 4, shuffle=False).prompts == ["p0", "p1", "p2"]
    assert len(custom(c, 8, 0, None, 4, oversample=False).prompts) == 5


def _args(**kw) -> Namespace:
    base = dict(num_prompts=None, input_len=None, output_len=None, vocab_size=32000, dataset_name="timed_trace",
                dataset_path=None, seed=0, timed_trace_chunk_hash_size=16, timed_trace_sec_multiplier=1.0,
                self_timed=None, random_input_len=64, random_output_len=8, random_range_ratio="0.0",
                random_prefix_len=0)
    return Namespace(**{**base, **kw})


def test_timed_trace_labels_name_the_files_own_fields(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"ts": 10 + i, "isl": 20 + i, "osl": 3, "blocks": [1, 2]}) + "\n"
                         for i in range(3)))
    labels = dict(timed_trace_label_timestamp="ts", timed_trace_label_input_length="isl",
                  timed_trace_label_output_length="osl", timed_trace_label_hash_ids="blocks")
    w = build_workload(_args(dataset_path=p, **labels))
    assert w.lengths() == ([20, 21, 22], [3, 3, 3]) and w.timestamps() == [0.0, 1.0, 2.0]
    assert w.hash_ids == [[1, 2]] * 3
    untimed = build_workload(_args(dataset_path=p, self_timed=False, **labels))
    assert untimed.timestamps() is None and untimed.lengths() == w.lengths()
    # a row without the named field names the file's own name of it
    p.write_text(json.dumps({"ts": 1, "osl": 3}) + "\n")
    with pytest.raises(ValueError, match=r"t.jsonl:1: field 'isl' is missing"):
        build_workload(_args(dataset_path=p, **labels))
    with pytest.raises(ValueError, match="--self-timed is only for --dataset-name timed_trace or trace"):
        build_workload(_args(dataset_name="random", self_timed=True))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_lora_adapters_and_a_relabelled_trace_on_the_sim(tmp_path):
    """Round-robin over a served adapter and one the server does not have: exactly every other request is
    refused, with the server's words, so the adapters' names are what was sent."""
    port = find_free_port()
    argv = [sys.executable, "-m", "tuner.sim", "llama", "--sim-model", "llama-3.1-8b", "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", "1024", "--enable-lora", "--lora-modules", "sql=/loras/sql",
            '{"name": "chat", "path": "/loras/chat"}', "--sim-time-scale", "0.2", "--sim-startup-time-scale", "0.002"]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"ts": i * 0.05, "isl": 30 + i, "osl": 4}) + "\n" for i in range(6)))
    with ServerProcess(records_dir=tmp_path / "run") as srv:
        srv.start(argv, {"PATH": "/usr/bin:/bin"}, tmp_path / "server.log", port=port)
        assert srv.wait_ready(f"http://127.0.0.1:{port}", boot_timeout_s=30, warmup_timeout_s=30).ok
        common = ["bench", "--host", "127.0.0.1", "--port", str(port), "--model", "llama", "--disable-tqdm",
                  "--dataset-name", "timed_trace", "--dataset-path", str(trace), "--timed-trace-label-timestamp", "ts",
                  "--timed-trace-label-input-length", "isl", "--timed-trace-label-output-length", "osl",
                  "--logprobs", "2", "--vocab-size", "32000", "--time-scale", "0.2"]
        assert main([*common, "--lora-modules", "sql", "chat", "--result-file", str(tmp_path / "ok.json")]) == 0
        ok = json.loads((tmp_path / "ok.json").read_text())
        assert ok["completed"] == 6 and ok["input_lens"] == [30, 31, 32, 33, 34, 35] and ok["output_lens"] == [4] * 6
        assert main([*common, "--lora-modules", "sql", "gone", "--lora-assignment", "round-robin",
                     "--result-file", str(tmp_path / "half.json")]) == 0
        half = json.loads((tmp_path / "half.json").read_text())
        assert half["completed"] == 3 and half["failed"] == 3
        assert [bool(e) for e in half["errors"]] == [False, True] * 3
        assert all("`gone` does not exist" in e for e in half["errors"] if e)
    assert srv.stop_report.clean


def _self_signed(tmp_path):
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate to test --insecure with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=60)
    return cert, key


def test_insecure_reaches_a_server_with_a_self_signed_certificate(tmp_path, capsys):
    """vLLM's --insecure: without it the certificate is refused, as vLLM's client refuses it."""
    import asyncio
    import ssl
    import threading

    from aiohttp import web

    cert, key = _self_signed(tmp_path)
    chunk = lambda i: 'data: {"choices":[{"index":0,"text":" t"}]}\n\n'  # noqa: E731

    async def completions(request):
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(body["max_tokens"]):
            await resp.write(chunk(i).encode())
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
        await resp.write(f'data: {json.dumps({"choices": [], "usage": usage})}\n\ndata: [DONE]\n\n'.encode())
        return resp

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "m", "root": "m"}]})

    async def chat(request):  # one chunk per token; usage counts the text's words
        body = await request.json()
        words = len(body["messages"][0]["content"][0]["text"].split())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(body["max_completion_tokens"]):
            await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":" t"}}]}\n\n')
        usage = {"prompt_tokens": words, "completion_tokens": body["max_completion_tokens"]}
        await resp.write(f'data: {json.dumps({"choices": [], "usage": usage})}\n\ndata: [DONE]\n\n'.encode())
        return resp

    async def tokenize(request):  # a word-level tokenizer: one id per word (its letters' sum), no specials
        body = await request.json()
        return web.json_response({"tokens": [sum(map(ord, w)) % 997 + 3 for w in body["prompt"].split()]})

    async def detokenize(request):
        return web.json_response({"prompt": " ".join(f"w{i}" for i in (await request.json())["tokens"])})

    loop, started, port = asyncio.new_event_loop(), threading.Event(), find_free_port()

    def serve():
        asyncio.set_event_loop(loop)
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_post("/tokenize", tokenize)
        app.router.add_post("/detokenize", detokenize)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        common = ["bench", "--base-url", f"https://127.0.0.1:{port}", "--model", "m", "--num-prompts", "3",
                  "--random-input-len", "8", "--random-output-len", "2", "--vocab-size", "1000", "--disable-tqdm"]
        assert main([*common, "--insecure", "--result-file", str(tmp_path / "ok.json")]) == 0
        assert json.loads((tmp_path / "ok.json").read_text())["completed"] == 3
        capsys.readouterr()
        main([*common, "--result-file", str(tmp_path / "refused.json")])
        refused = json.loads((tmp_path / "refused.json").read_text())
        assert refused["completed"] == 0 and all("certificate verify failed" in e.lower() for e in refused["errors"])
        # chat text sized by the server's /tokenize over the same unverified connection
        capsys.readouterr()
        assert main([*common, "--backend", "openai-chat", "--insecure", "--random-input-len", "12",
                     "--result-file", str(tmp_path / "chat.json")]) == 0
        assert "sizing them with the server's /tokenize" in capsys.readouterr().err
        chat = json.loads((tmp_path / "chat.json").read_text())
        assert chat["completed"] == 3 and chat["input_lens"] == [12, 12, 12]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
