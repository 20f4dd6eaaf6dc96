"""Several nodes, one study, on a genuine PostgreSQL (see conftest.py): each `bucket-tuner tune`
process stands for one node, with its own --devices slots and its own results folder, on the
simulator. Covers: trials shared exactly, a node killed for good, a database restart, a database
that cannot be reached, report/export/optuna-dashboard from anywhere."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.serve.ports import find_free_port
from tuner.study import nodes

from ...conftest import ROOT
from ..test_study_e2e import FAST, SPACE, write_space
from .conftest import PASSWORD

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

# Six configurations and the grid sampler: with asks serialized across nodes, no configuration is
# proposed twice, so a configuration booted twice would be a bug, not the sampler's choice.
GRID_SPACE = {**SPACE, "parameters": {
    "max_num_seqs": {"type": "categorical", "choices": [8, 16]},
    "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [2, 4, 8]}}}


def tune_cmd(space: Path, results: Path, url: str, n: int, devices: str, extra=()) -> list[str]:
    return [sys.executable, "-m", "tuner.cli", "tune", "--space", str(space), "--results", str(results),
            "--storage", url, "--study", "multinode", "--n-trials", str(n), "--no-seed-defaults",
            "--sampler", "grid", "--devices", devices, "--no-report", *FAST, *extra]


def start_node(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    out = open(log, "wb")
    try:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=out,
                                start_new_session=True)
    finally:
        out.close()


def load(url: str) -> optuna.Study:
    return optuna.load_study(study_name="multinode", storage=nodes.storage_url(url))


def group_alive(pgid: int) -> list[int]:
    """Live processes of a process group, read from /proc here (not through tuner.serve.process)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in "ZX":
                alive.append(int(entry.name))
    return alive


def stop_all(procs) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def pw(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", PASSWORD)  # for this process's own reads of the study


def test_three_nodes_share_one_study_exactly(tmp_path, pg_url, pg_env, pw):
    space = write_space(tmp_path, GRID_SPACE)
    groups = ["0,1;2,3", "4,5", "6,7"]  # node 0 runs two slots at once
    procs = [start_node(tune_cmd(space, tmp_path / f"node{i}", pg_url, 6, devices),
                        pg_env, tmp_path / f"node{i}.log") for i, devices in enumerate(groups)]
    try:
        for p in procs:
            p.wait(timeout=240)
    finally:
        stop_all(procs)
    errs = [(tmp_path / f"node{i}.log").read_text()[-1500:] for i in range(3)]
    assert [p.returncode for p in procs] == [0, 0, 0], errs

    study = load(pg_url)
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.number for t in trials] == list(range(6)), "every trial number exactly once, none extra"
    assert all(t.state == TrialState.COMPLETE and t.user_attrs["status"] == "ok" for t in trials)
    configs = [tuple(sorted(t.params.items())) for t in trials]
    assert len(set(configs)) == 6, f"a configuration was booted twice: {configs}"
    owners = {t.user_attrs["owner"]["pid"] for t in trials}
    assert owners <= {p.pid for p in procs} and len(owners) >= 2, owners
    # Each node ran its trials in its own slots and kept their files in its own results folder.
    for t in trials:
        node = [p.pid for p in procs].index(t.user_attrs["owner"]["pid"])
        assert t.user_attrs["slot"] < len(groups[node].split(";"))
        assert (tmp_path / f"node{node}" / "multinode" / "trials" / f"{t.number:04d}" / "result.json").exists()
        assert t.user_attrs["env"] and PASSWORD not in json.dumps(t.user_attrs)
    argv_ports = {t.user_attrs["argv"][t.user_attrs["argv"].index("--port") + 1] for t in trials}
    assert len(argv_ports) == 6

    # report and export on any machine (here: a fresh folder) read every node's trials.
    elsewhere = tmp_path / "laptop"
    report = subprocess.run([sys.executable, "-m", "tuner.cli", "report", "multinode", "--results", str(elsewhere),
                             "--storage", pg_url], cwd=ROOT, env=pg_env, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr[-2000:]
    rows = list(csv.DictReader((elsewhere / "multinode" / "trials.csv").open()))
    assert sorted(int(r["number"]) for r in rows) == list(range(6))
    export = subprocess.run([sys.executable, "-m", "tuner.cli", "export", "multinode", "--results", str(elsewhere),
                             "--storage", pg_url, "--pick", "throughput"], cwd=ROOT, env=pg_env,
                            capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr[-2000:]
    best = max(trials, key=lambda t: t.values[0])
    assert f"trial {best.number}" in export.stdout

    # optuna-dashboard reads the same storage (psycopg 3 URL, as documented).
    from optuna_dashboard import wsgi

    app = wsgi(nodes.storage_url(pg_url))

    def get(path):
        status = {}
        body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
                             "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "0", "wsgi.url_scheme": "http",
                             "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr},
                            lambda s, h, exc_info=None: status.setdefault("s", s)))
        assert status["s"].startswith("200"), body[:300]
        return json.loads(body)

    summaries = get("/api/studies")["study_summaries"]
    assert [s["study_name"] for s in summaries] == ["multinode"]
    detail = get(f"/api/studies/{summaries[0]['study_id']}")
    assert sorted(t["number"] for t in detail["trials"]) == list(range(6))


def _server_record(results: Path, owner_pid: int, trial_log: Path) -> dict | None:
    for path in (results / "multinode" / "run").glob("server-*.json"):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("owner_pid") == owner_pid and Path(rec["log_path"]) == trial_log:
            return rec
    return None


def test_a_node_killed_mid_trial_is_failed_and_rerun_by_another(tmp_path, pg_url, pg_env, pw):
    space = write_space(tmp_path, GRID_SPACE)
    slow = ["--startup-time-scale", "0.02", "--heartbeat-grace", "4"]  # a few seconds of warmup
    a = start_node(tune_cmd(space, tmp_path / "a", pg_url, 3, "0,1", slow), pg_env, tmp_path / "a.log")
    b = start_node(tune_cmd(space, tmp_path / "b", pg_url, 3, "2,3", slow), pg_env, tmp_path / "b.log")
    try:
        victim, record = None, None
        deadline = time.monotonic() + 90
        while victim is None and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                running = load(pg_url).get_trials(states=(TrialState.RUNNING,))
            except Exception:  # the study is being created
                continue
            for t in running:
                if (t.user_attrs.get("owner") or {}).get("pid") != a.pid:
                    continue
                log = tmp_path / "a" / "multinode" / "trials" / f"{t.number:04d}" / "server.log"
                if "[Warmup]" in _read(log) and (record := _server_record(tmp_path / "a", a.pid, log)):
                    victim = t
        assert victim is not None, "node a never reached warmup: " + _read(tmp_path / "a.log")[-1500:]
        assert group_alive(record["pgid"]), "the victim's server should be running before the kill"
        environ = Path(f"/proc/{record['pid']}/environ").read_bytes().split(b"\0")
        assert not [v for v in environ if v.startswith(b"PGPASSWORD=")], "the database password reached a server"
        os.kill(a.pid, signal.SIGKILL)  # the tuner only; never restarted
        killed_at = time.monotonic()
        a.wait(10)
        while group_alive(record["pgid"]) and time.monotonic() - killed_at < 15:
            time.sleep(0.1)
        assert not group_alive(record["pgid"]), "the dead node's server outlived it by 15 s"
        assert "watchdog" in _read(Path(record["log_path"]))
        b.wait(timeout=180)
    finally:
        stop_all([a, b])
    assert b.returncode == 0, _read(tmp_path / "b.log")[-2000:]
    assert f"trial {victim.number} lost its tuner on another node" in _read(tmp_path / "b.log")

    study = load(pg_url)
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.number for t in trials] == list(range(len(trials)))
    died = [t for t in trials if t.state == TrialState.FAIL]
    assert [(t.number, t.user_attrs["status"]) for t in died] == [(victim.number, "tuner_died")]
    assert f"pid {b.pid}" in died[0].user_attrs["reason"]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3 and len(trials) == 4, "counts exact: 3 finished + the dead one"
    rerun = [t for t in complete if t.user_attrs.get("requeued_from") == victim.number]
    assert len(rerun) == 1 and rerun[0].params == victim.params
    assert rerun[0].user_attrs["owner"]["pid"] == b.pid
    # No configuration was booted twice, except the re-run of the dead node's.
    configs = [tuple(sorted(t.params.items())) for t in complete]
    assert len(set(configs)) == 3

    # `bucket-tuner report` lists them all.
    report = subprocess.run([sys.executable, "-m", "tuner.cli", "report", "multinode", "--results",
                             str(tmp_path / "b"), "--storage", pg_url], cwd=ROOT, env=pg_env,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / "b" / "multinode" / "trials.csv").open()))
    assert sorted(int(r["number"]) for r in rows) == list(range(4))
    assert {r["number"]: r["status"] for r in rows}[str(victim.number)] == "tuner_died"


def test_postgres_restarted_under_a_running_study(tmp_path, own_pg_server, pg_env, pw):
    url = own_pg_server.url(own_pg_server.create_database())
    space = write_space(tmp_path, GRID_SPACE)
    # Heartbeats every second (grace 6 s): storage calls are bound to meet the dead database.
    node = start_node(tune_cmd(space, tmp_path / "n", url, 2, "0,1",
                               ["--startup-time-scale", "0.02", "--heartbeat-grace", "6"]),
                      pg_env, tmp_path / "n.log")
    try:
        log = tmp_path / "n" / "multinode" / "trials" / "0000" / "server.log"
        deadline = time.monotonic() + 60
        while "[Warmup]" not in _read(log) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "[Warmup]" in _read(log), _read(tmp_path / "n.log")[-1500:]
        own_pg_server.stop()  # every connection of the tuner dies with it
        time.sleep(3)  # down for a while: heartbeats and the end of trial 0 meet a dead database
        own_pg_server.start()
        node.wait(timeout=180)
    finally:
        stop_all([node])
    err = _read(tmp_path / "n.log")
    assert node.returncode == 0, err[-2000:]
    assert "unreachable" in err and "reachable again" in err
    study = load(url)
    assert [(t.number, t.state, t.user_attrs["status"]) for t in study.trials] == [
        (n, TrialState.COMPLETE, "ok") for n in range(2)]


def test_database_unreachable_at_start_names_the_url_without_its_password(tmp_path):
    space = write_space(tmp_path, GRID_SPACE)
    port = find_free_port()  # nothing listens there
    url = f"postgresql://tuner:hunter2secret@127.0.0.1:{port}/tuning"
    run = subprocess.run(tune_cmd(space, tmp_path / "r", url, 2, "0,1"), cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1, run.stderr[-2000:]  # a runtime failure (exit 1), not a usage error
    assert f"127.0.0.1:{port}/tuning" in run.stderr and "tuner:***@" in run.stderr
    assert "hunter2secret" not in run.stderr
    assert "PGPASSWORD" in run.stderr  # the warning about a password on the command line
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("bucket-tuner tune: error: cannot open the study storage"), last
    # The same URL from the environment (how the deploy templates pass it): no argv warning.
    env = {**os.environ, "BUCKET_TUNER_STORAGE": url}
    cmd = tune_cmd(space, tmp_path / "r", url, 2, "0,1")
    del cmd[cmd.index("--storage"):cmd.index("--storage") + 2]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "hunter2secret" not in run.stderr and "PGPASSWORD" not in run.stderr
    assert f"127.0.0.1:{port}/tuning" in run.stderr


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning",
                            "ignore:Heartbeat of storage is supposed to be used")
def test_the_reaper_fails_only_silent_trials_of_other_tuners(pg_url, pw):
    """fail_stale_trials on PostgreSQL, in process: a silent trial of another host is failed and its
    parameters enqueued once; a beating one and our own silent one are left running."""
    from tuner.study.options import make_storage

    study = optuna.create_study(storage=make_storage(pg_url, grace_s=2), study_name="reap")
    me, other = {"host": "here", "pid": 1}, {"host": "elsewhere", "pid": 2}
    trials = {}
    for name, owner in (("dead", other), ("live", other), ("mine", me)):
        t = trials[name] = study.ask()
        t.suggest_int("x", 0, 100)
        t.set_user_attr("owner", owner)
        beat = nodes.Heartbeat(study, t)  # the first beat is immediate
        if name != "live":
            beat.stop()
        else:
            live_beat = beat
    time.sleep(4)  # > grace: the silent ones are stale, the live one has beaten meanwhile
    assert nodes.fail_stale_trials(study, me) == [trials["dead"].number]
    assert nodes.fail_stale_trials(study, me) == []  # once only
    by_number = {t.number: t for t in study.get_trials()}
    dead = by_number[trials["dead"].number]
    assert dead.state == TrialState.FAIL and dead.user_attrs["status"] == "tuner_died"
    assert "host elsewhere, pid 2" in dead.user_attrs["reason"]
    assert by_number[trials["live"].number].state == TrialState.RUNNING
    assert by_number[trials["mine"].number].state == TrialState.RUNNING
    (waiting,) = study.get_trials(states=(TrialState.WAITING,))
    assert waiting.user_attrs["requeued_from"] == dead.number
    assert nodes.others_running(study, me)  # the live one: this node waits for it before leaving
    live_beat.stop()


def test_a_long_outage_stops_cleanly_and_the_same_command_resumes(tmp_path, own_pg_server, pg_env, pw):
    url = own_pg_server.url(own_pg_server.create_database())
    space = write_space(tmp_path, GRID_SPACE)
    cmd = tune_cmd(space, tmp_path / "n", url, 2, "0,1",
                   ["--startup-time-scale", "0.02", "--heartbeat-grace", "6", "--storage-outage", "3"])
    node = start_node(cmd, pg_env, tmp_path / "n.log")
    try:
        log = tmp_path / "n" / "multinode" / "trials" / "0000" / "server.log"
        deadline = time.monotonic() + 60
        while "[Warmup]" not in _read(log) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "[Warmup]" in _read(log), _read(tmp_path / "n.log")[-1500:]
        own_pg_server.stop()  # down for longer than --storage-outage
        node.wait(timeout=120)
    finally:
        stop_all([node])
    err = _read(tmp_path / "n.log")
    assert node.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("bucket-tuner tune: error: the study storage") and "stayed unreachable" in last, last
    assert PASSWORD not in err and "Traceback" not in err
    # The trial it was running is on disk; its server was stopped on the way out.
    assert (tmp_path / "n" / "multinode" / "trials" / "0000" / "result.json").exists()
    assert not list((tmp_path / "n" / "multinode" / "run").glob("server-*.json"))

    own_pg_server.start()
    again = subprocess.run(cmd, cwd=ROOT, env=pg_env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr[-2000:]
    study = load(url)
    states = sorted((t.number, t.state.name, t.user_attrs.get("status")) for t in study.trials)
    assert states[0] == (0, "FAIL", "tuner_died")  # failed and enqueued again on resume
    assert [s[1:] for s in states[1:]] == [("COMPLETE", "ok")] * 2
    assert any(t.user_attrs.get("requeued_from") == 0 for t in study.trials)


def test_two_nodes_never_boot_one_configuration_at_once(tmp_path, pg_url, pg_env, pw):
    """The same configuration proposed to both nodes (enqueued twice in a row): the node that gets it
    second waits for the other's trial and reuses its result (tuner/study/screen.py, Screen.claim)."""
    from ..test_running_elsewhere import TWO_CONFIGS, assert_no_collision, enqueue

    space = write_space(tmp_path, TWO_CONFIGS)
    enqueue(optuna.create_study(study_name="multinode", storage=nodes.storage_url(pg_url),
                                directions=["maximize", "minimize", "minimize"]))
    procs = [start_node(tune_cmd(space, tmp_path / f"node{i}", pg_url, 2, devices,
                                 ["--sampler", "random", "--startup-time-scale", "0.01"]),
                        pg_env, tmp_path / f"node{i}.log") for i, devices in enumerate(["0,1", "2,3"])]
    try:
        for p in procs:
            p.wait(timeout=240)
    finally:
        stop_all(procs)
    errs = [_read(tmp_path / f"node{i}.log") for i in range(2)]
    assert [p.returncode for p in procs] == [0, 0], [e[-1500:] for e in errs]
    assert_no_collision(load(pg_url), {p.pid for p in procs})
    assert any("waiting for its result instead of booting" in e for e in errs)
