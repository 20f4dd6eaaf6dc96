"""The simulated server as a process: `python -m tuner.sim ...`, exactly as the tuner launches it.

Each test starts it in its own process group with a small time scale, talks HTTP to it, checks the log
lines against the release formats, stops it (SIGINT, then SIGTERM/SIGKILL of the group if needed) and
proves that no process of the group is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from tuner.serve.ports import find_free_port

from .test_sim_startup import FINISHED, FREE, GENERATED, HPU_BLOCKS, PREFIX, WARMUP

CAL_ARGS = ["meta-llama/Llama-3.1-8B-Instruct", "--release", "fork-1.17", "--max-num-seqs", "4",
            "--max-model-len", "2048", "--max-num-batched-tokens", "4096", "--gpu-memory-utilization", "0.5"]
CAL_ENV = {"VLLM_GRAPH_RESERVED_MEM": "0.4"}


def group_members(pgid: int) -> list[int]:
    """Every live process whose process group is `pgid` (from /proc; zombies do not count)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


class SimProcess:
    """One simulated server in its own process group, its combined output in a file."""

    def __init__(self, args: list[str], env: dict | None = None, scale: float = 0.01, port: int | None = None,
                 extra: list[str] | None = None):
        self.port = port or find_free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_file = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        cmd = [sys.executable, "-m", "tuner.sim", *args, "--host", "127.0.0.1", "--port", str(self.port),
               "--sim-time-scale", str(scale), *(extra or [])]
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})})
        self.pgid = self.proc.pid
        self.final_log: str | None = None  # kept once stopped, when the file is gone

    def log(self) -> str:
        if self.final_log is not None:
            return self.final_log
        return Path(self.log_file.name).read_text()

    def health(self) -> int | None:
        try:
            with urllib.request.urlopen(self.base + "/health", timeout=1) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None  # refused: not listening yet

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health() == 200:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"server not ready after {timeout} s:\n{self.log()[-3000:]}")

    def stop(self, sig=signal.SIGINT, grace: float = 5.0) -> int:
        """SIGINT (or `sig`), then SIGTERM and SIGKILL to the whole group; the exit code of the server."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        for follow in (signal.SIGTERM, signal.SIGKILL):
            try:
                self.proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                os.killpg(self.pgid, follow)
        self.proc.wait(5)
        deadline = time.monotonic() + 5
        while group_members(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.final_log is None:  # the file goes, whatever the test asserts next: nothing left in /tmp
            self.final_log = self.log()
            self.log_file.close()
            os.unlink(self.log_file.name)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        assert group_members(self.pgid) == [], "processes left behind"


async def stream_completion(base: str, prompt, max_tokens: int, model: str, timeout: float = 30.0) -> dict:
    """One streamed completion, read the way vllm bench serve reads it."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    out = {"chunks": [], "usage": None, "done": False, "status": None, "bad": [], "error": None, "texts": []}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.post(base + "/v1/completions", json=body) as resp:
                out["status"] = resp.status
                if resp.status != 200:
                    out["body"] = await resp.json()
                    return out
                async for raw in resp.content:
                    line = raw.strip()
                    if not line:
                        continue
                    payload = line[len(b"data: "):]
                    if payload == b"[DONE]":
                        out["done"] = True
                        continue
                    try:
                        obj = json.loads(payload)
                    except json.JSONDecodeError:
                        out["bad"].append(payload)
                        continue
                    if obj.get("choices"):
                        out["chunks"].append(obj)
                        out["texts"].append(obj["choices"][0]["text"])
                    if obj.get("usage"):
                        out["usage"] = obj["usage"]
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        out["error"] = type(e).__name__
    return out


MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def test_serves_streams_with_exact_lengths_and_real_log_formats():
    with SimProcess(CAL_ARGS, CAL_ENV) as srv:
        srv.wait_ready()
        models = json.loads(urllib.request.urlopen(srv.base + "/v1/models").read())
        assert models["data"][0]["id"] == MODEL and models["data"][0]["max_model_len"] == 2048

        async def load():
            lengths = [(100, 7), (900, 33), (1500, 12), (40, 1)]
            return lengths, await asyncio.gather(*(stream_completion(srv.base, list(range(5, 5 + n)), m, MODEL)
                                                    for n, m in lengths))
        lengths, results = asyncio.run(load())
        for (n, m), r in zip(lengths, results):
            assert r["status"] == 200 and r["done"] and not r["bad"]
            assert r["usage"] == {"prompt_tokens": n, "total_tokens": n + m, "completion_tokens": m}
            assert len(r["chunks"]) == m and r["chunks"][-1]["choices"][0]["finish_reason"] == "length"
            assert all(c["object"] == "text_completion" and c["id"].startswith("cmpl-") for c in r["chunks"])
        text = json.loads(urllib.request.urlopen(urllib.request.Request(
            srv.base + "/v1/completions", data=json.dumps({"model": MODEL, "prompt": "Hello there, Gaudi!",
                                                           "max_tokens": 5}).encode(),
            headers={"Content-Type": "application/json"})).read())
        assert text["usage"]["completion_tokens"] == 5 and text["choices"][0]["finish_reason"] == "length"
        unknown = json.dumps({"model": "nope", "prompt": "x", "max_tokens": 1}).encode()
        with pytest.raises(urllib.error.HTTPError) as refused:  # an error answer in vLLM 0.5's flat shape
            urllib.request.urlopen(urllib.request.Request(srv.base + "/v1/completions", data=unknown,
                                                          headers={"Content-Type": "application/json"}))
        err = json.loads(refused.value.read())
        assert refused.value.code == 404 and err["object"] == "error"
        assert err["message"] == "The model `nope` does not exist."
        metrics = urllib.request.urlopen(srv.base + "/metrics").read().decode()
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc",
                     "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_count"):
            assert re.search(rf"^{name}\{{model_name=\"{re.escape(MODEL)}\"\}} [\d.e+-]+$", metrics, re.M), name
        gen = re.search(r"^vllm:generation_tokens_total\{[^}]*\} ([\d.]+)$", metrics, re.M)
        assert float(gen.group(1)) == 7 + 33 + 12 + 1 + 5
        rc = srv.stop()
        log = srv.log().splitlines()
    assert rc == 0
    # 1500 tokens is above the 1.17 warmed prompt range (1024): one runtime compile, in 1.17's format.
    assert re.search(r"^WARNING \S+ \S+ habana_model_runner\.py:\d+\] Configuration: \(prompt, [124], 1536\) "
                     r"was not warmed-up!$", "\n".join(log), re.M)
    msgs = [m.group(5) for m in map(PREFIX.match, log) if m]
    assert any(FREE.search(m) for m in msgs) and any(HPU_BLOCKS.search(m) for m in msgs)
    assert sum(bool(GENERATED.search(m)) for m in msgs) == 2 and any(FINISHED.search(m) for m in msgs)
    assert sum(bool(WARMUP.search(m)) for m in msgs) == 24 + 48 + 15 + 48
    assert all(re.match(r"^INFO \d\d-\d\d \d\d:\d\d:\d\d habana_model_runner\.py:\d+\] \[Warmup\]", l)
               for l in log if "[Warmup]" in l)
    assert "INFO:     Application startup complete." in log and log[-1].startswith("INFO:     Finished server")


def test_health_refused_until_warmup_is_over_and_log_times_are_simulated():
    with SimProcess(CAL_ARGS, CAL_ENV, scale=0.02) as srv:  # ~60 simulated seconds -> ~1.2 s
        time.sleep(0.2)
        assert srv.health() is None  # bound but not listening: connection refused, as vLLM
        srv.wait_ready()
        log = srv.log()
    stamps = [PREFIX.match(l).group(2) for l in log.splitlines() if PREFIX.match(l)]
    secs = lambda s: int(s[-8:-6]) * 3600 + int(s[-5:-3]) * 60 + int(s[-2:])
    span = (secs(stamps[-1]) - secs(stamps[0])) % 86400
    print(f"\nlogged startup span {span} s of simulated time (wall ~{span * 0.02:.1f} s)")
    assert 50 <= span <= 75 and "Warmup finished in 49 secs" in log


def test_3d_release_and_tqdm_warmup_lines():
    args = [MODEL, "--release", "gaudi-main", "--sim-device", "gaudi3", "--max-num-seqs", "8",
            "--max-model-len", "4096"]
    with SimProcess(args, {"PT_HPU_LAZY_MODE": "1"}, scale=0.002) as srv:
        srv.wait_ready()
        r = asyncio.run(stream_completion(srv.base, list(range(10, 3010)), 16, MODEL))
        assert r["usage"]["completion_tokens"] == 16 and r["done"]
        assert srv.stop() == 0
        log = srv.log().splitlines()
    warm = [l for l in log if "[Warmup]" in l]
    assert warm and all(re.match(r"^\[Warmup\]\[(Graph/Prompt|Graph/Decode)\]\[\d+/\d+\] batch_size:\d+ "
                                 r"query_len:\d+ num_blocks:\d+ free_mem:[\d.]+ \w+$", l) for l in warm)
    assert any(re.search(r"\[(exponential|common)\.py:\d+\] Generated \d+ prompt buckets \[bs, query, num_blocks\]", l)
               for l in log)
    assert any("Usable num_blocks:" in l for l in log)


def test_unknown_flag_is_an_error_like_vllm():
    proc = subprocess.run([sys.executable, "-m", "tuner.sim", MODEL, "--max-num-seq", "4", "--bogus-flag"],
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2 and "unrecognized arguments: --bogus-flag" in proc.stderr


def test_address_in_use_exits_non_zero():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        srv = SimProcess(CAL_ARGS, CAL_ENV, port=port)
        rc = srv.proc.wait(90)  # seconds on an idle machine; generous for a loaded CI box
        log = srv.log()
        srv.stop()
    print("\n" + log.strip().splitlines()[-2])
    assert rc == 1 and "OSError: [Errno 98] Address already in use" in log
    assert group_members(srv.pgid) == []


def test_sigint_with_open_streams_ends_them_and_exits():
    # Serving in real time (1500 tokens take ~18 s), starting up in compressed time.
    with SimProcess(CAL_ARGS, CAL_ENV, scale=1.0, extra=["--sim-startup-time-scale", "0.01"]) as srv:
        srv.wait_ready()

        async def run():
            task = asyncio.ensure_future(stream_completion(srv.base, list(range(5, 105)), 1500, MODEL))
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGINT)
            res = await task
            return res, time.monotonic() - t0

        res, took = asyncio.run(run())
        rc = srv.proc.wait(10)
        print(f"\nclient saw {len(res['chunks'])} of 1500 tokens, done={res['done']}, error={res['error']}; "
              f"stream ended {took:.2f} s after SIGINT; exit code {rc}")
        assert rc == 0 and not res["done"] and 0 < len(res["chunks"]) < 1500 and took < 5


def test_impossible_memory_exits_in_its_phase():
    """Llama-3.1-70B in BF16 (131 GiB) on one Gaudi 2 (94.6 GiB): the weight load fails, exit 1."""
    args = ["meta-llama/Llama-3.1-70B-Instruct", "--release", "fork-1.21.2", "--max-model-len", "4096"]
    srv = SimProcess(args)
    rc = srv.proc.wait(90)  # seconds on an idle machine; generous for a loaded CI box
    log = srv.log()
    srv.stop()
    print(f"\nexit {rc}: {log.strip().splitlines()[-1]}")
    assert rc == 1 and "Traceback (most recent call last):" in log
    assert re.search(r"RuntimeError: \[Rank:0\] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::\d+", log)
    assert "Loading model weights took" not in log and "Warmup finished" not in log


def test_recipe_cache_folder_makes_the_second_start_faster(tmp_path):
    env = {**CAL_ENV, "PT_HPU_RECIPE_CACHE_CONFIG": f"{tmp_path}/recipes,False,4096"}
    finished = []
    for _ in range(2):
        with SimProcess(CAL_ARGS, env, scale=0.002) as srv:
            srv.wait_ready()
            finished.append(int(re.search(r"Warmup finished in (\d+) secs", srv.log()).group(1)))
    recipes = len(list((tmp_path / "recipes").glob("*.recipe")))
    print(f"\n{recipes} recipes on disk; Warmup finished in {finished[0]} secs, then {finished[1]} secs")
    assert recipes == 24 + 48 and finished[1] < 0.75 * finished[0]


def _get(url: str, key: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_api_key_guards_the_v1_routes_as_vllm_does(tmp_path):
    """--api-key (several allowed) or $VLLM_API_KEY: every /v1 route wants one of them as a bearer
    token, 401 {"error": "Unauthorized"} otherwise; /health, /metrics and /version stay open. Our own
    client, given no key, names the 401 and the variable to set."""
    with SimProcess([*CAL_ARGS, "--api-key", "sim-key-1", "sim-key-2"], CAL_ENV, scale=0.002) as srv:
        srv.wait_ready()
        assert _get(srv.base + "/v1/models") == (401, b'{"error":"Unauthorized"}')
        assert _get(srv.base + "/v1/models", "wrong")[0] == 401
        assert _get(srv.base + "/v1/models", "sim-key-1")[0] == _get(srv.base + "/v1/models", "sim-key-2")[0] == 200
        assert all(_get(srv.base + path)[0] == 200 for path in ("/health", "/metrics", "/version"))
        line = [sys.executable, "-m", "tuner.cli", "bench", "--base-url", srv.base, "--model", MODEL,
                "--num-prompts", "2", "--random-input-len", "16", "--random-output-len", "2",
                "--result-dir", str(tmp_path), "--save-result", "--disable-tqdm"]
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        without = subprocess.run(line, capture_output=True, text=True, timeout=120, env=env)
        assert without.returncode == 2 and "HTTP 401 Unauthorized" in without.stderr, without.stderr
        keyed = subprocess.run(line, capture_output=True, text=True, timeout=120,
                               env={**env, "OPENAI_API_KEY": "sim-key-2"})
        assert keyed.returncode == 0, keyed.stderr
    with SimProcess(CAL_ARGS, {**CAL_ENV, "VLLM_API_KEY": "env-key"}, scale=0.002) as srv:
        srv.wait_ready()
        assert _get(srv.base + "/v1/models")[0] == 401 and _get(srv.base + "/v1/models", "env-key")[0] == 200
