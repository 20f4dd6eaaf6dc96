"""`bucket-tuner bench` in place of `vllm bench serve` against a genuine vLLM (CPU 0.32.0, the tier's tiny
local Llama whose tokenizer has 2,048 tokens): vLLM's own command lines run unchanged, with no
--vocab-size, and agree with vLLM's client run the same way on the same server.

The checks run on the shared server of tests/realvllm/test_realvllm.py (TestOneServer calls them before
its clean-stop test), so the tier pays for no extra server start.
"""

from __future__ import annotations

import json
import subprocess
import time

N, IN, OUT, CONC = 40, 128, 64, 8  # the workload


def vllm_line(s, env, result_dir, label: str) -> list[str]:
    """A vLLM user's command line: the model by path (its tokenizer is there), the served name."""
    from .test_realvllm import SERVED

    return ["bench", "serve", "--backend", "vllm", "--model", str(env.model), "--served-model-name", SERVED,
            "--host", "127.0.0.1", "--port", str(s.port), "--dataset-name", "random", "--random-input-len",
            str(IN), "--random-output-len", str(OUT), "--num-prompts", str(N), "--max-concurrency", str(CONC),
            "--save-result", "--result-dir", str(result_dir), "--label", label, "--metadata", "run=ci",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--disable-tqdm",
            "--temperature", "0"]


def _run(argv, env, timeout=600):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def _one(folder):
    files = sorted(folder.glob("*.json"))
    assert len(files) == 1, files
    return files[0], json.loads(files[0].read_text())


def vllm_command_line_verbatim_matches_vllms_client(shared_server, vllm_env, tmp_path):
    from .test_realvllm import _FIGURES, SERVED, bucket_tuner, server_env

    s, env = shared_server, server_env(tmp_path / "client")
    # a fresh CPU server is slow on its first batches: warm it so neither client pays for that
    warm = _run([*bucket_tuner(), "bench", "--model", str(vllm_env.model), "--served-model-name", SERVED,
                 "--base-url", s.base_url, "--num-prompts", "16", "--random-input-len", str(IN),
                 "--random-output-len", str(OUT), "--max-concurrency", str(CONC), "--disable-tqdm"], env)
    assert warm.returncode == 0, warm.stdout[-2000:] + warm.stderr[-2000:]
    t0 = time.monotonic()
    theirs = _run([str(vllm_env.vllm), *vllm_line(s, vllm_env, tmp_path / "theirs", "vllm")], env)
    assert theirs.returncode == 0, theirs.stdout[-3000:] + theirs.stderr[-3000:]
    t1 = time.monotonic()
    ours = _run([*bucket_tuner(), "bench", *vllm_line(s, vllm_env, tmp_path / "ours", "vllm")[2:]], env)
    assert ours.returncode == 0, ours.stdout[-3000:] + ours.stderr[-3000:]
    t2 = time.monotonic()
    their_file, v = _one(tmp_path / "theirs")
    our_file, d = _one(tmp_path / "ours")
    # the same file name pattern: {label}-{rate}qps-concurrency{N}-{model basename}-{date}.json
    assert our_file.name.rsplit("-", 2)[0] == their_file.name.rsplit("-", 2)[0]
    # every field vLLM wrote, we wrote (ours adds tuner_* ones)
    missing = [k for k in v if k not in d]
    assert not missing, missing
    assert d["run"] == "ci" and d["label"] == "vllm" and d["backend"] == "vllm"
    # no --vocab-size: the tokenizer was read from the model folder; 100 % complete, exact tokens
    assert d["completed"] == N and d["failed"] == 0, d.get("tuner_failures")
    assert d["total_input_tokens"] == N * IN and d["total_output_tokens"] == N * OUT
    assert d["tuner_vocab"]["vocab_size"] == 2048 and d["tuner_vocab"]["special_ids"] >= 4
    assert v["completed"] == N
    ratio = d["output_throughput"] / v["output_throughput"]
    _FIGURES.append(f"drop-in: vLLM's client {v['output_throughput']:.0f} out tok/s ({t1 - t0:.0f} s wall, "
                    f"{v['total_input_tokens']} in tokens), ours {d['output_throughput']:.0f} "
                    f"({t2 - t1:.0f} s, {d['total_input_tokens']} in): ours/vllm {ratio:.2f}")
    # The ratio is a measured figure (printed with the tier's figures), not asserted: a test never asserts
    # speed, and on a shared 2-core machine one client's run can be slowed by anything else running.

def _text_bench(base_url, model, backend, endpoint, out, env) -> dict:
    """8 requests of 32 in / 8 out through a text API (chat or responses); the detailed result."""
    from .test_realvllm import bucket_tuner

    run = _run([*bucket_tuner(), "bench", "--backend", backend, "--endpoint", endpoint, "--model", model,
                "--base-url", base_url, "--num-prompts", "8", "--random-input-len", "32", "--random-output-len", "8",
                "--max-concurrency", "4", "--save-result", "--save-detailed", "--result-dir", str(out),
                "--disable-tqdm"], env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    _, d = _one(out)
    assert d["completed"] == 8 and d["output_lens"] == [8] * 8 and all(d["generated_texts"])
    return d


def chat_backend_and_server_learned_vocabulary(shared_server, tmp_path):
    from .test_realvllm import SERVED, bucket_tuner, server_env

    s, env = shared_server, server_env(tmp_path / "client")
    d = _text_bench(s.base_url, SERVED, "openai-chat", "/v1/chat/completions", tmp_path / "chat", env)
    # --model is the served name, so no tokenizer on disk: the server's /tokenize sized the text (31 tokens
    # and the BOS), and its chat template added about a dozen (by hand: 42-44 for a 32-token input)
    assert d["tuner_chat_prompts"]["tokenizer_check"].startswith("no tokenizer offline"), d["tuner_chat_prompts"]
    assert all(36 <= n <= 50 for n in d["input_lens"]), d["input_lens"]
    # the Responses API: typed events, the usage in response.completed (input_tokens: the chat template's too)
    r = _text_bench(s.base_url, SERVED, "openai-responses", "/v1/responses", tmp_path / "responses", env)
    # the same prompts in the same chat template; vLLM 0.32's responses route renders one token more on
    # this model (42 -> 43, by hand), so the prompt is the same text, not another draw
    assert all(0 <= b - a <= 2 for a, b in zip(d["input_lens"], r["input_lens"])), (d["input_lens"], r["input_lens"])
    # --model is the served name: no tokenizer on disk, so the valid ids come from the server
    # with vLLM 0.32's probes, profiler calls and timeline on the same run
    probe = _run([*bucket_tuner(), "bench", "--model", SERVED, "--base-url", s.base_url, "--num-prompts", "8",
                  "--random-input-len", "64", "--random-output-len", "8", "--disable-tqdm",
                  "--result-file", str(tmp_path / "probe.json"), "--probe-request-rate", "20", "--profile",
                  "--plot-timeline", "--result-dir", str(tmp_path / "plots"), "--result-filename", "run.json"], env)
    assert probe.returncode == 0, probe.stdout[-3000:] + probe.stderr[-3000:]
    d = json.loads((tmp_path / "probe.json").read_text())
    assert d["completed"] == 8 and d["tuner_vocab"]["vocab_size"] == 2048
    assert "the server rejects ids from 2048 on" in probe.stderr
    assert d["probe_completed"] >= 1 and d["probe_failed"] == 0 and "Probe requests completed:" in probe.stdout
    assert "/start_profile answered HTTP 404" in probe.stderr  # this server runs without --profiler-config
    assert (tmp_path / "plots" / "run.timeline.html").is_file()

def server_error_gives_exit_1_and_the_servers_message(shared_server, tmp_path):
    from .test_realvllm import _FIGURES, SERVED, bucket_tuner, server_env

    s, env = shared_server, server_env(tmp_path / "client")
    bad = _run([*bucket_tuner(), "bench", "--model", SERVED, "--base-url", s.base_url, "--num-prompts", "6",
                "--random-input-len", "64", "--random-output-len", "4", "--vocab-size", "32000",
                "--disable-tqdm", "--fail-on-errors"], env)  # (without it: vLLM's 0, tests/realvllm/test_deployed)
    assert bad.returncode == 1
    assert "is out of vocabulary" in bad.stdout and "requests failed" in bad.stderr
    _FIGURES.append("server error: " + bad.stderr.strip().splitlines()[-1][:160])
