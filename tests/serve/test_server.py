"""tuner/serve/process.py against tests/fake_vllm_server.py.

Every fake process (children, grandchildren, the one that escapes with setsid) carries a per-test
--tag in its command line; after each test the `fake` fixture stops what is left and then proves,
by scanning /proc, that no process with that tag and no member of any server's group survives.
No assertion depends on speed; timings only bound how long a test waits.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tuner.serve import process as srvmod
from tuner.serve.ports import find_free_port, port_in_use
from tuner.serve.process import (
    OutcomeKind,
    ServerProcess,
    cleanup_stale_groups,
    device_env,
)
from tuner.serve.redact import redact_argv, redact_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fake_vllm_server.py"
FAST = dict(grace_int_s=1.0, grace_term_s=1.0, grace_kill_s=2.0)
# Where a test expects the polite signal to work, a grace no busy machine outlasts: stop() returns as soon
# as the tree is gone, so it costs nothing when the server exits at once.
POLITE = dict(grace_int_s=15.0, grace_term_s=5.0, grace_kill_s=2.0)


# ------------------------------------------------------------------------------------ helpers
def stat(pid):
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return {"state": f[0], "ppid": int(f[1]), "pgid": int(f[2]), "start": int(f[19])}


def live(pid):
    s = stat(pid)
    return s is not None and s["state"] not in "ZX"


def group_members(pgid):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and (s := stat(name)) and s["pgid"] == pgid and s["state"] not in "ZX":
            out.append(int(name))
    return out


def tagged(tag):
    """Live processes whose command line carries `tag`."""
    out = []
    for name in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if name.isdigit() and tag.encode() in cmd and live(name):
            out.append(int(name))
    return out


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


def child_pids(log_lines):
    return {int(line.split("child pid=")[1].split()[0])
            for line in log_lines if "child pid=" in line}


class Watch:
    """Stands in for the lead's log parser: on_line callback plus the flags wait_ready asks for."""

    def __init__(self):
        self.lines, self.times = [], []

    def __call__(self, line, t):
        self.lines.append(line)
        self.times.append(t)

    def warmup(self):
        return any("Warming up model" in line for line in self.lines)

    def oom(self):
        return any("out of memory" in line for line in self.lines)


@pytest.fixture
def fake(tmp_path):
    tag = uuid.uuid4().hex
    servers = []

    def argv(*flags, port):
        return [sys.executable, str(FAKE), "--tag", tag, "--host", "127.0.0.1",
                "--port", str(port), *map(str, flags)]

    def make(*flags, port=None, on_line=None, check_port=False):
        port = port or find_free_port()
        srv = ServerProcess(records_dir=tmp_path / "run", on_line=on_line)
        servers.append(srv)
        srv.start(argv(*flags, port=port), dict(os.environ), tmp_path / f"s{len(servers)}.log",
                  port=port if check_port else None)
        return srv, f"http://127.0.0.1:{port}"

    make.tag, make.argv, make.records = tag, argv, tmp_path / "run"
    yield make

    for srv in servers:
        srv.stop(**FAST)
    left = tagged(tag)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    for srv in servers:
        assert srv.alive_pids() == []
        if srv.pgid:
            assert group_members(srv.pgid) == [], f"group {srv.pgid} not empty"
    assert not list(make.records.glob("*.json")), "records of stopped servers must be removed"


def ready(srv, url, watch=None, **kw):
    kw.setdefault("boot_timeout_s", 15)
    kw.setdefault("warmup_timeout_s", 15)
    return srv.wait_ready(url, warmup_started=watch.warmup if watch else None, **kw)


# ------------------------------------------------------------------------------------ start / ready
def test_ready_log_lines_and_clean_sigint_stop(fake, tmp_path):
    w = Watch()
    srv, url = fake("--boot-s", 0.2, "--warmup-s", 0.2, "--bind-early", "--spawn-children", 1,
                    on_line=w)
    out = ready(srv, url, w)
    assert out.kind is OutcomeKind.READY and out.ok, out
    assert out.warmup_started_s is not None and 0 <= out.warmup_started_s <= out.elapsed_s
    assert srv.check() is None
    wait_for(lambda: child_pids(w.lines), what="child log line")
    assert any("Warming up done." in line for line in w.lines)
    assert w.times == sorted(w.times)
    record = json.loads(next(fake.records.glob("*.json")).read_text())
    assert record["pgid"] == srv.pgid == srv.pid and record["argv0"] == sys.executable

    report = srv.stop(**POLITE)
    assert report.ended_by == "SIGINT" and report.clean and report.exit_code == 0
    assert set(report.alive_before["SIGINT"]) >= {srv.pid} | child_pids(w.lines)
    assert srv.stop() is report  # idempotent
    logged = (tmp_path / "s1.log").read_text().splitlines()
    assert logged == w.lines == srv.log_tail()
    assert any("[shutdown]" in line for line in w.lines)  # shutdown lines are delivered too


def test_broken_on_line_callback_does_not_stop_log_following(fake):
    def explode(line, t):
        raise ValueError("parser bug")
    srv, url = fake(on_line=explode)
    assert ready(srv, url).kind is OutcomeKind.READY
    assert any("Application startup complete" in line for line in srv.log_tail())


def test_context_manager_stops_on_exception(fake, tmp_path):
    srv = ServerProcess(records_dir=fake.records)
    port = find_free_port()
    with pytest.raises(RuntimeError):
        with srv:
            srv.start(fake.argv("--spawn-children", 2, port=port), dict(os.environ),
                      tmp_path / "cm.log")
            assert ready(srv, f"http://127.0.0.1:{port}").ok
            pgid = srv.pgid
            raise RuntimeError("trial failed")
    assert srv.stop_report is not None and srv.stop_report.clean
    assert group_members(pgid) == []


# ------------------------------------------------------------------------------------ failures
def test_boot_failure_keeps_exit_code_and_log_tail(fake):
    srv, url = fake("--exit-code-at-boot", 7)
    out = ready(srv, url)
    assert out.kind is OutcomeKind.BOOT_FAILURE and out.exit_code == 7
    assert "before warmup" in out.reason
    assert any("Engine core initialization failed" in line for line in out.log_tail)


def test_missing_executable_is_a_boot_failure(tmp_path):
    srv = ServerProcess(records_dir=tmp_path / "run")
    srv.start(["/nonexistent/vllm", "serve"], dict(os.environ), tmp_path / "x.log")
    out = srv.wait_ready("http://127.0.0.1:9", boot_timeout_s=1, warmup_timeout_s=1)
    assert out.kind is OutcomeKind.BOOT_FAILURE and "could not start" in out.reason
    assert "could not start" in (tmp_path / "x.log").read_text()
    assert srv.stop().ended_by is None


def test_port_in_use_errno_98(fake):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert port_in_use(port)
        srv, url = fake("--bind-early", port=port)
        out = ready(srv, url)
    assert out.kind is OutcomeKind.PORT_IN_USE and out.exit_code == 1, out
    assert "Errno 98" in out.reason
    assert not port_in_use(port)


def test_port_in_use_logged_by_a_server_that_hangs_on(fake):
    srv, url = fake("--print-port-in-use")
    out = ready(srv, url)
    assert out.kind is OutcomeKind.PORT_IN_USE and out.exit_code is None
    assert srv.check() is None  # still running: stop() in the fixture must clean it up


class _ReusePortHealth(ThreadingHTTPServer):
    """An 'orphaned vLLM': answers /health 200 on a port bound with SO_REUSEPORT."""
    daemon_threads = True

    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def serve_orphan(port):
    httpd = _ReusePortHealth(("127.0.0.1", port), _Ok)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return httpd


@pytest.fixture
def orphan_on_port():
    httpd = serve_orphan(find_free_port())
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_port_held_with_reuseport_is_refused_before_start(fake, orphan_on_port):
    srv, url = fake("--bind-early", port=orphan_on_port, check_port=True)
    assert srv.pid is None
    out = ready(srv, url)
    assert out.kind is OutcomeKind.PORT_IN_USE and "before start" in out.reason


def test_health_answered_by_another_listener_is_not_ready(fake, tmp_path):
    # A vLLM-style bind succeeds next to a SO_REUSEPORT holder, so no Errno 98 ever comes; the
    # 200 we get may be the other server's. Start ours first, then the "orphan" appears.
    port = find_free_port()
    srv, url = fake("--bind-early", "--boot-s", 30, port=port)
    wait_for(lambda: port_in_use(port), what="fake to bind")
    httpd = serve_orphan(port)
    try:
        out = ready(srv, url)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert out.kind is OutcomeKind.PORT_IN_USE and "also listen" in out.reason, out


def test_boot_timeout(fake):
    w = Watch()
    srv, url = fake("--boot-s", 30, on_line=w)
    out = ready(srv, url, w, boot_timeout_s=0.5)
    assert out.kind is OutcomeKind.BOOT_TIMEOUT and out.warmup_started_s is None
    assert srv.check() is None


def test_warmup_limit_replaces_boot_limit(fake):
    w = Watch()
    srv, url = fake("--boot-s", 0.0, "--warmup-s", 30, on_line=w)
    out = ready(srv, url, w, boot_timeout_s=1.0, warmup_timeout_s=1.5)
    assert out.kind is OutcomeKind.WARMUP_TIMEOUT, out
    # the boot limit (1.0 s) stopped counting once warmup had started
    assert out.elapsed_s - out.warmup_started_s >= 1.5 and out.elapsed_s > 1.0


def test_warmup_oom(fake):
    w = Watch()
    srv, url = fake("--print-oom", on_line=w)
    out = ready(srv, url, w, oom_seen=w.oom)
    assert out.kind is OutcomeKind.WARMUP_OOM, out
    assert any("out of memory" in line for line in out.log_tail)


def test_abort_over_budget(fake):
    w = Watch()
    srv, url = fake("--warmup-s", 30, on_line=w)
    why = "projected warmup 900 s exceeds the 600 s budget"
    out = ready(srv, url, w, should_abort=lambda: why if w.warmup() else None)
    assert out.kind is OutcomeKind.WARMUP_OVER_BUDGET and out.reason == why
    assert out.warmup_started_s is not None


def test_crash_after_ready(fake):
    srv, url = fake("--crash-after-ready-s", 0.3, "--crash-exit-code", 3)
    assert ready(srv, url).kind is OutcomeKind.READY
    out = wait_for(srv.check, what="crash")
    assert out.kind is OutcomeKind.CRASH and out.exit_code == 3
    assert any("EngineDeadError" in line for line in out.log_tail)


# ------------------------------------------------------------------------------------ stopping
@pytest.mark.parametrize("flags, ended_by", [
    ([], "SIGINT"),
    (["--ignore-sigint"], "SIGTERM"),
    (["--ignore-sigint", "--ignore-sigterm"], "SIGKILL"),
])
def test_stop_escalates_over_the_whole_tree(fake, flags, ended_by):
    w = Watch()
    srv, url = fake(*flags, "--spawn-children", 2, "--grandchild", "--setsid-child", on_line=w)
    assert ready(srv, url).ok
    kids = wait_for(lambda: len(child_pids(w.lines)) == 4 and child_pids(w.lines), what="4 kids")
    escaped = [p for p in kids if stat(p)["pgid"] != srv.pgid]
    assert len(escaped) == 1  # the setsid child really left the group

    # a short grace for a signal the tree ignores, a long one for the signal it obeys (see POLITE)
    report = srv.stop(grace_int_s=15.0 if ended_by == "SIGINT" else 0.5,
                      grace_term_s=15.0 if ended_by == "SIGTERM" else 0.5, grace_kill_s=5.0)
    assert report.ended_by == ended_by and report.clean, report
    steps = ["SIGINT", "SIGTERM", "SIGKILL"]
    assert list(report.alive_before) == steps[:steps.index(ended_by) + 1]
    assert set(report.alive_before["SIGINT"]) == kids | {srv.pid}
    assert [p for p in kids | {srv.pid} if live(p)] == []
    assert group_members(srv.pgid) == []


# ------------------------------------------------------------------------------------ killed tuner
TUNER = r"""
import json, os, sys, time
from tuner.serve.process import ServerProcess, install_signal_handlers
argv, records, log, url = json.loads(sys.argv[1])
install_signal_handlers()
# no watchdog: these tests are about the fallbacks (atexit, cleanup_stale_groups); tests/study/nodes
# covers the watchdog
srv = ServerProcess(records_dir=records, watchdog=False).start(argv, dict(os.environ), log)
assert srv.wait_ready(url, boot_timeout_s=15, warmup_timeout_s=15).ok
deadline = time.monotonic() + 10
while not srv.group.escaped and time.monotonic() < deadline:  # wait for the watcher's sweep
    time.sleep(0.05)
time.sleep(0.2)
print(json.dumps({"pgid": srv.pgid, "escaped": list(srv.group.escaped)}), flush=True)
time.sleep(60)
"""


def run_tuner(fake, tmp_path):
    port = find_free_port()
    argv = fake.argv("--spawn-children", 1, "--setsid-child", port=port)
    args = json.dumps([argv, str(fake.records), str(tmp_path / "t.log"),
                       f"http://127.0.0.1:{port}"])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    tuner = subprocess.Popen([sys.executable, "-c", TUNER, args], stdout=subprocess.PIPE, env=env,
                             cwd=ROOT, text=True)
    info = json.loads(tuner.stdout.readline())
    assert info["escaped"], "the tuner should have tracked the setsid child"
    return tuner, info


def test_stale_groups_of_a_killed_tuner_are_cleaned_up(fake, tmp_path):
    tuner, info = run_tuner(fake, tmp_path)
    tuner.kill()  # SIGKILL: no atexit, no __exit__; the server group is orphaned
    tuner.wait()
    tuner.stdout.close()
    pgid = info["pgid"]
    assert group_members(pgid) and all(live(p) for p in info["escaped"])
    assert len(list(fake.records.glob("*.json"))) == 1

    assert cleanup_stale_groups(fake.records, grace_term_s=2.0) == [pgid]
    assert group_members(pgid) == []
    assert not any(live(p) for p in info["escaped"])
    assert cleanup_stale_groups(fake.records) == []  # records are gone


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_tuner_stops_its_servers(fake, tmp_path, sig):
    tuner, info = run_tuner(fake, tmp_path)
    tuner.send_signal(sig)
    assert tuner.wait(timeout=60) != 0  # its stop escalates over ~25 s at worst
    tuner.stdout.close()
    assert group_members(info["pgid"]) == []
    assert not any(live(p) for p in info["escaped"])
    assert not list(fake.records.glob("*.json"))


def _record(dirpath, pgid, leader_start, cmdline, *, owner_pid=None, owner_start=-1, host=None):
    dirpath.mkdir(parents=True, exist_ok=True)
    rec = {"pgid": pgid, "pid": pgid, "argv0": cmdline[0], "cmdline": cmdline,
           "leader_start": leader_start, "log_path": "x.log", "escaped": {},
           "host": host or socket.gethostname(), "boot_id": srvmod._boot_id(),
           "owner_pid": owner_pid or os.getpid(), "owner_start": owner_start}
    path = dirpath / f"server-{rec['host']}-{pgid}.json"
    path.write_text(json.dumps(rec))
    return path


def test_stale_record_never_kills_an_unrelated_process(fake, tmp_path):
    d = tmp_path / "records"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", fake.tag],
                             start_new_session=True)  # a group leader like our servers
    try:
        real = redact_argv(wait_for(lambda: Path(f"/proc/{other.pid}/cmdline").read_bytes(),
                                    what="cmdline").decode().split("\0")[:-1])
        start = stat(other.pid)["start"]
        recycled = _record(d, other.pid, start - 1, real)          # same pid, older process
        renamed = _record(d / "b", other.pid, start, ["vllm", "serve"])  # cmdline does not match
        foreign = _record(d / "c", other.pid, start, real, host="another-node")
        owned = _record(d / "e", other.pid, start, real, owner_pid=other.pid, owner_start=start)
        for folder in (d, d / "b", d / "c", d / "e"):
            assert cleanup_stale_groups(folder, grace_term_s=0.5) == []
        assert live(other.pid)
        assert not recycled.exists() and not renamed.exists()  # stale: removed
        assert foreign.exists() and owned.exists()  # not ours to judge / owner still alive
        gone = _record(d / "g", 4_000_000, 1, ["vllm"])  # no such group any more
        assert cleanup_stale_groups(d / "g") == [] and not gone.exists()
    finally:
        other.kill()
        other.wait()


# ------------------------------------------------------------------------------------ helpers
def test_redact_env_and_argv():
    env = {"HF_TOKEN": "hf_abc", "VLLM_API_KEY": "k", "DB_PASSWORD": "p",
           "AWS_SECRET_ACCESS_KEY": "s", "VLLM_PROMPT_BS_BUCKET_MAX": "64", "PATH": "/usr/bin",
           "STORAGE": "postgresql://tuner:hunter2@db/optuna"}
    red = redact_env(env)
    assert {k for k, v in red.items() if v == "***"} == {"HF_TOKEN", "VLLM_API_KEY", "DB_PASSWORD",
                                                         "AWS_SECRET_ACCESS_KEY"}
    assert red["STORAGE"] == "postgresql://tuner:***@db/optuna" and red["PATH"] == "/usr/bin"
    assert env["HF_TOKEN"] == "hf_abc"  # input untouched

    argv = ["vllm", "serve", "m", "--api-key", "sk-1", "--hf-token=hf_2",
            "--max-num-batched-tokens", "8192", "--tokenizer", "t", "HF_TOKEN=hf_3",
            "--port", "8000"]
    assert redact_argv(argv) == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***",
                                 "--max-num-batched-tokens", "8192", "--tokenizer", "t",
                                 "HF_TOKEN=***", "--port", "8000"]


def test_secrets_stay_out_of_records_and_tuner_log(fake, caplog):
    caplog.set_level("INFO", logger="tuner.serve.process")
    srv, url = fake("--api-key", "sk-secret-123")
    assert ready(srv, url).ok
    assert "sk-secret-123" not in next(fake.records.glob("*.json")).read_text()
    assert "sk-secret-123" not in caplog.text and "--api-key '***'" in caplog.text


def test_what_the_server_prints_of_its_secrets_is_scrubbed(fake, tmp_path):
    """vLLM logs its non-default arguments, --api-key's value among them: the lines handed on (watcher,
    tail, failure reasons) never carry it, and the kept log is rewritten without it once stopped."""
    seen = []
    srv, url = fake("--api-key", "sk-secret-123", on_line=lambda line, t: seen.append(line))
    assert ready(srv, url).ok
    said = [line for line in seen if "non-default args" in line]
    assert said and "'api_key': ['***']" in said[0] and not any("sk-secret-123" in line for line in seen)
    assert not any("sk-secret-123" in line for line in srv.log_tail())
    srv.stop(**FAST)
    log = (tmp_path / "s1.log").read_text()
    assert "non-default args" in log and "sk-secret-123" not in log and "'api_key': ['***']" in log
    assert not list(tmp_path.glob("*.scrub"))


def test_secret_values_are_what_redaction_hides():
    from tuner.serve.redact import scrub, secret_values

    argv = ["vllm", "serve", "m", "--api-key", "sk-1234", "--hf-token=hf_5678", "--port", "8000",
            "--max-num-seqs", "64", "--db", "postgresql://tuner:hunter2@db/optuna"]
    env = {"HF_TOKEN": "hf_abcdef", "VLLM_API_KEY": "1", "PATH": "/usr/bin", "MODE": "8000"}
    found = secret_values(argv, env)
    assert sorted(found) == ["hf_5678", "hf_abcdef", "hunter2", "sk-1234"]  # "1" too short to scrub text
    assert scrub("args: {'api_key': ['sk-1234'], 'port': 8000} hunter2", found) == \
        "args: {'api_key': ['***'], 'port': 8000} ***"


def test_device_env():
    assert device_env(["0", "1"]) == {"HABANA_VISIBLE_MODULES": "0,1"}
    assert device_env([4, 5, 6, 7]) == {"HABANA_VISIBLE_MODULES": "4,5,6,7"}
    assert device_env(None) == {} and device_env(["0"], kind="sim") == {}
    assert device_env(["2"], kind="cuda") == {"CUDA_VISIBLE_DEVICES": "2"}
    for bad in (["8"], ["0", "0"], ["x"]):
        with pytest.raises(ValueError):
            device_env(bad)


def test_find_free_port_and_port_in_use():
    port = find_free_port()
    assert 0 < port < 65536 and not port_in_use(port)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", port))  # bound, not listening: how vLLM holds it during boot
        assert port_in_use(port)


# ------------------------------------------------------------------------------------ PID 1
AS_PID1 = r"""
import json, os, sys, time
from pathlib import Path
from tuner.serve.process import ServerProcess
argv, log, url = json.loads(sys.argv[1])
assert os.getpid() == 1
srv = ServerProcess(watchdog=False).start(argv, dict(os.environ), log)
assert srv.wait_ready(url, boot_timeout_s=15, warmup_timeout_s=15).ok
deadline = time.monotonic() + 10
while len(srv.group.alive()) < 3 and time.monotonic() < deadline:
    time.sleep(0.05)
report = srv.stop(grace_int_s=0.5, grace_term_s=0.5, grace_kill_s=2.0)
time.sleep(0.3)
zombies = [int(p) for p in os.listdir("/proc") if p.isdigit()
           and Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[0] == "Z"]
print(json.dumps({"ended_by": report.ended_by, "zombies": zombies}), flush=True)
"""


def test_as_pid_1_the_stopped_tree_leaves_no_defunct_process(fake, tmp_path):
    """A container's PID 1 inherits every orphan: a tree killed at once (its children die with their
    parent) would stay <defunct> under the tuner unless it reaps them."""
    prefix = ["unshare", "--pid", "--fork", "--mount-proc"]
    probe = subprocess.run([*prefix, "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode:
        pytest.skip("unshare --pid --fork --mount-proc is not permitted here")
    port = find_free_port()
    argv = fake.argv("--ignore-sigint", "--ignore-sigterm", "--spawn-children", 2, port=port)
    args = json.dumps([argv, str(tmp_path / "pid1.log"), f"http://127.0.0.1:{port}"])
    run = subprocess.run([*prefix, sys.executable, "-c", AS_PID1, args], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {"ended_by": "SIGKILL", "zombies": []}, seen


def test_a_free_port_is_one_no_outgoing_connection_can_take():
    """Below the kernel's ephemeral range (the ports of client sockets and of bind(0)), free, never twice."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [find_free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(10000 <= p < low and not port_in_use(p) for p in ports), ports


def test_a_server_started_in_another_thread_never_makes_a_chosen_port_look_taken(tmp_path):
    """Parallel slots: a child forked while another thread's port probe is bound holds a copy of that probe
    until it execs, so the port just chosen read as in use (a spurious PORT_IN_USE, about 1% of probes beside
    three threads starting processes, before ports.PROBE_LOCK). Bounded: 3 s of probes."""
    stop = threading.Event()

    def starter(i: int) -> None:
        n = 0
        while not stop.is_set():
            srv = ServerProcess(records_dir=tmp_path / f"run{i}-{n}")
            srv.start(["/bin/true"], {"PATH": "/usr/bin:/bin"}, tmp_path / f"t{i}.log")
            srv.stop(grace_int_s=2, grace_term_s=2, grace_kill_s=2)
            n += 1

    threads = [threading.Thread(target=starter, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    taken = probes = 0
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            probes += 1
            taken += port_in_use(find_free_port())
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert probes > 100 and taken == 0, (taken, probes)


BAR_SCRIPT = r"""
import sys, time
print("INFO 01-01 00:00:00 [hpu_model_runner.py:1] Warming up", flush=True)
for i in (1, 2):
    sys.stderr.write(f"\rPrompt warmup processing:  {50 * i}%|#####     | {i}/3 [00:0{i}<00:01,  1.00s/it]")
    sys.stderr.flush()
    time.sleep(0.2)
time.sleep(60)
"""


def test_a_tqdm_bar_reaches_the_watcher_redraw_by_redraw_while_it_is_open(tmp_path):
    """The plugin's warm-up bar ends its line only when it closes; each "\\r" redraw is a line as it lands."""
    seen: list[str] = []
    srv = ServerProcess(records_dir=tmp_path / "run", on_line=lambda line, t: seen.append(line))
    srv.start([sys.executable, "-c", BAR_SCRIPT], dict(os.environ), tmp_path / "bar.log")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("2/3 [" in line for line in seen):
            srv.wait_ready("http://127.0.0.1:9", boot_timeout_s=0.2, warmup_timeout_s=0.2)  # pumps the log
        bars = [line for line in seen if "warmup processing" in line]
        assert [b.split("| ")[1].split(" ")[0] for b in bars] == ["1/3", "2/3"], seen
        assert all("\r" not in line for line in seen)
    finally:
        srv.stop(grace_int_s=2, grace_term_s=2, grace_kill_s=2)
