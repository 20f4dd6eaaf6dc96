"""No orphan on a genuine vLLM: a tuner killed with SIGKILL while its `vllm serve` (CPU, API server ->
EngineCore -> Worker, + resource_tracker) is ready and idle; nobody re-runs the tuner, and within
seconds the watchdog has stopped the whole tree. One server start (~40 s), through the fixtures and
machine-wide lock of test_realvllm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tuner.serve.backends import Backend
from tuner.serve.process import find_free_port

from ..conftest import ROOT
from .test_realvllm import (  # the fixtures (vllm_env, one server at a time) come from conftest.py
    BOOT_LIMIT_S,
    KV_BYTES,
    SERVED,
    TreeRecorder,
    listening,
    proc_table,
    server_env,
)

pytestmark = [
    pytest.mark.realvllm,
    pytest.mark.xdist_group("realvllm"),  # one worker runs the tier, in file order (the scheduler in tests/conftest.py)
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc"),
]

TUNER = r"""
import json, sys, time
from tuner.serve.process import ServerProcess
argv, env, log, records, url, port, limit = json.loads(sys.argv[1])
srv = ServerProcess(records_dir=records).start(argv, env, log, port=port)
out = srv.wait_ready(url, boot_timeout_s=limit, warmup_timeout_s=limit)
print(json.dumps({"ok": out.ok, "reason": out.reason, "pid": srv.pid, "pgid": srv.pgid}), flush=True)
time.sleep(900)
"""


def test_killed_tuner_leaves_no_vllm_process(vllm_env, tmp_path):
    port = find_free_port()
    backend = Backend("vllm", model=str(vllm_env.model), served_model_name=SERVED, vllm_command=[str(vllm_env.vllm)],
                      extra_args=["--load-format", "dummy", "--kv-cache-memory-bytes", str(KV_BYTES)])
    argv = backend.argv({"max_model_len": 2048, "enforce_eager": True}, "127.0.0.1", port)
    log = tmp_path / "server.log"
    payload = json.dumps([argv, server_env(tmp_path), str(log), str(tmp_path / "run"),
                          f"http://127.0.0.1:{port}", port, BOOT_LIMIT_S])
    tuner = subprocess.Popen([sys.executable, "-c", TUNER, payload], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    recorder = None
    try:
        info = json.loads(tuner.stdout.readline() or "{}")
        assert info.get("ok"), f"{info}\n{log.read_text()[-3000:] if log.exists() else ''}"
        recorder = TreeRecorder(info["pid"])
        roles = recorder.wait_roles(("api_server", "EngineCore"), timeout_s=20)
        assert {"api_server", "EngineCore"} <= roles, roles
        tree = dict(recorder.seen)
        tuner.kill()  # SIGKILL: no handler, no atexit, no `with` block runs in the tuner
        tuner.wait(10)
        killed_at = time.monotonic()
        while (recorder.alive() or any(p["pgid"] == info["pgid"] and p["state"] not in "ZX"
                                       for p in proc_table().values())) and time.monotonic() - killed_at < 30:
            time.sleep(0.2)
        gone_after = time.monotonic() - killed_at
        assert not recorder.alive(), f"left {gone_after:.0f} s after the kill: {recorder.alive()}"
        assert not any(p["pgid"] == info["pgid"] and p["state"] not in "ZX" for p in proc_table().values())
        assert not listening(port)
        print(f"[realvllm] orphan check: {len(tree)} processes of the killed tuner's vLLM gone "
              f"{gone_after:.1f} s after kill -9")
        assert "watchdog: the tuner is gone" in log.read_text()
        # the watchdog removes the record once its escalation has returned (a moment after the last exit)
        while list((tmp_path / "run").glob("server-*.json")) and time.monotonic() - killed_at < 40:
            time.sleep(0.2)
        assert not list((tmp_path / "run").glob("server-*.json"))
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
        tuner.stdout.close()
        if recorder is not None:
            recorder.stop()
            recorder.kill_all()
