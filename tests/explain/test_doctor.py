"""`doctor` on four simulated servers, each started so that one cause limits it under the load it gets
(vLLM flags only, no simulator switch: the scheduler's own limits do it), and a closed-loop client keeps
that load on while the doctor samples /metrics. Only the queue's shape is asserted (who waits, how full
the KV cache is), which a slow machine stretches in time but does not change."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import pytest

from tuner.cli import main
from tuner.explain.doctor import ServerSettings, diagnose, read_log
from tuner.explain.serverload import MetricsError, Window, fetch_metrics, parse_metrics, read_sample, sample_server
from tuner.serve.ports import find_free_port
from tuner.serve.process import ServerProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

MODEL = "llama-3.1-8b"
# limit -> (the server's flags, the client's concurrency, prompt tokens, output tokens)
SERVERS = {
    # 2 requests at a time on a server that runs 32: nothing ever waits for long
    "load": (["--max-num-seqs", "32"], 2, 128, 64),
    # 16 at a time on 4 sequences: 12 wait while the KV cache is nearly empty
    "max_num_seqs": (["--max-num-seqs", "4"], 16, 128, 64),
    # 2,000-token prompts through a 256-token budget per step: a few run, the rest wait, KV nearly empty
    "token_budget": (["--max-num-seqs", "64", "--max-num-batched-tokens", "256", "--max-model-len", "4096"],
                     24, 2000, 16),
    # 5% of the free device memory: 228 KV blocks (29k tokens) for 48 x 1,400 tokens
    "kv_cache": (["--max-num-seqs", "64", "--gpu-memory-utilization", "0.05", "--max-model-len", "4096"],
                 48, 1000, 400),
}
WINDOW_S, INTERVAL_S = 1.2, 0.1


class Load:
    """A closed-loop client: `concurrency` requests always in flight, until stopped."""

    def __init__(self, base: str, concurrency: int, prompt_len: int, output_len: int):
        self.body = {"model": MODEL, "max_tokens": output_len, "ignore_eos": True}
        self.prompt_len, self.sent = prompt_len, 0
        self.base, self.concurrency = base, concurrency
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with aiohttp.ClientSession() as session:
            async def one():
                while not self.stop.is_set():
                    # a prompt of its own each time: the server's prefix cache must not serve one from another
                    self.sent += 1
                    prompt = [100 + (self.sent * 7919 + j) % 30000 for j in range(self.prompt_len)]
                    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                        async with session.post(self.base + "/v1/completions",
                                                json={**self.body, "prompt": prompt}) as resp:
                            await resp.read()
            tasks = [asyncio.ensure_future(one()) for _ in range(self.concurrency)]
            while not self.stop.is_set():
                await asyncio.sleep(0.05)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


@contextlib.contextmanager
def simulated(tmp_path, name: str, flags: list[str]):
    port = find_free_port()
    log = tmp_path / f"{name}.log"
    argv = [sys.executable, "-m", "tuner.sim", MODEL, "--host", "127.0.0.1", "--port", str(port), "--release",
            "gaudi-main", "--sim-time-scale", "0.1", "--sim-startup-time-scale", "0.0005", *flags]
    with ServerProcess() as srv:
        srv.start(argv, dict(os.environ), log, port=port)
        base = f"http://127.0.0.1:{port}"
        outcome = srv.wait_ready(base, boot_timeout_s=120, warmup_timeout_s=120)
        assert outcome.ok, (outcome, log.read_text()[-2000:])
        yield base, log
        srv.stop(grace_int_s=5, grace_term_s=5, grace_kill_s=5)


def _loaded(base: str, concurrency: int, deadline_s: float = 60) -> None:
    """Wait until the client's requests are all in and tokens flow (a slow machine only takes longer)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        s = read_sample(fetch_metrics(base), 0)
        if s.running + s.waiting >= concurrency and s.counters.get("generation_tokens", 0) > 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"the load never reached {concurrency} requests in flight at {base}")


def _doctor(tmp_path, limit: str):
    flags, concurrency, prompt_len, output_len = SERVERS[limit]
    with simulated(tmp_path, limit, flags) as (base, log), Load(base, concurrency, prompt_len, output_len):
        _loaded(base, concurrency)
        if limit == "kv_cache":  # once through the command line, with the start-up log
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = main(["doctor", "--url", base, "--window", str(WINDOW_S), "--interval", str(INTERVAL_S),
                             "--log", str(log), "--max-num-seqs", "64", "--space", "search_spaces/vllm-gaudi.yaml"])
            return code, out.getvalue()
        settings = ServerSettings(max_num_seqs=int(flags[flags.index("--max-num-seqs") + 1]))
        facts = read_log(log, settings)
        return diagnose(base, Window(sample_server(base, WINDOW_S, INTERVAL_S)), settings, facts,
                        "search_spaces/vllm-gaudi.yaml")


def test_doctor_names_the_limit_of_each_simulated_server(tmp_path):
    with ThreadPoolExecutor(len(SERVERS)) as pool:
        found = dict(zip(SERVERS, pool.map(lambda limit: _doctor(tmp_path, limit), SERVERS)))
    for limit in ("load", "max_num_seqs", "token_budget"):
        d = found[limit]
        assert d.limit == limit, (limit, [f.says for f in d.findings], d.figures)
        assert d.settings.kv_blocks and d.settings.source["kv_blocks"] == "the log"
    seqs = found["max_num_seqs"]
    assert seqs.figures["running_max"] <= 4 and seqs.figures["kv_usage"] < 0.5
    assert "max_num_seqs above 4" in seqs.findings[0].why
    assert seqs.findings[0].remedy.startswith("bucket-tuner tune --space search_spaces/vllm-gaudi.yaml "
                                              "--max-concurrency ")
    # its traffic, from vLLM's per-request token histograms over the window
    assert "--random-input-len 128 --random-output-len 64" in seqs.findings[0].remedy
    budget = found["token_budget"]
    assert budget.figures["running_max"] < 64 and budget.figures["kv_usage"] < 0.5
    load = found["load"]
    assert load.figures["queued_share"] < 0.5 and "--load-sweep concurrency=" in load.findings[0].remedy
    code, text = found["kv_cache"]
    assert code == 0
    limit_line = next(line for line in text.splitlines() if line.startswith("limit: "))
    assert limit_line.startswith("limit: KV cache: ") and "of 228 blocks" in limit_line, text
    assert "test the remedy: bucket-tuner plan --space search_spaces/vllm-gaudi.yaml --max-concurrency" in text


def test_metrics_of_both_engines_are_read_and_a_stranger_is_refused():
    v1 = ('vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
          'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
          'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
          'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1024"} 1.0\n'
          'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 5.0\n'
          'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 2.0\n')
    s = read_sample(v1, 0.0)
    assert (s.running, s.waiting, s.kv_usage, s.kv_blocks, s.counters["requests"]) == (3, 2, 0.25, 1024, 7)
    v0 = "# TYPE x gauge\nvllm:num_requests_running 1\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n"
    assert read_sample(v0, 0.0).kv_usage == 0.5
    assert parse_metrics('a_b{l="x \\" y"} 1e3 1700000000\n') == [("a_b", {"l": 'x \\" y'}, 1000.0)]
    with pytest.raises(MetricsError, match="not a vLLM server"):
        read_sample("process_cpu_seconds_total 1.0\n", 0.0)


@pytest.mark.parametrize(("argv", "message"), [
    (["--window", "0"], "--window must be a positive duration"),
    (["--interval", "5", "--window", "2"], "--interval 5 s is longer than --window 2 s"),
    (["--log", "no-such.log"], "--log no-such.log: file not found"),
    (["--max-num-seqs", "0"], "--max-num-seqs must be a positive integer"),
])
def test_bad_doctor_flags_are_named(argv, message, capsys):
    assert main(["doctor", "--url", "http://127.0.0.1:9", *argv]) == 2
    assert message in capsys.readouterr().err
