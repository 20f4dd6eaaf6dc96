"""The product end to end on the simulator: a study with good, rejected and failing trials; storage,
CSVs, report, export and compare; a tuner killed mid-trial and resumed; two workers on one storage;
optuna-dashboard reading the storage.
"""

from __future__ import annotations

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
import yaml

from tuner.cli import main

from ..conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

SPACE = {
    "name": "e2e",
    "release": "fork-1.21.2",
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [8, 16]},
        # 64 is above the prompt batch maximum (= max_num_seqs): the release refuses it before boot.
        "VLLM_PROMPT_BS_BUCKET_MIN": {"type": "categorical", "choices": [1, 64]},
        # The simulator's fault switch, through the environment like any other server setting.
        "fault": {"env": "BUCKET_TUNER_SIM_FAULT", "type": "categorical", "choices": ["none", "oom-warmup"]},
    },
}
FAST = ["--num-prompts", "24", "--num-warmups", "2", "--max-concurrency", "8", "--random-input-len", "200",
        "--random-output-len", "24", "--time-scale", "0.2", "--startup-time-scale", "0.002"]


def write_space(tmp_path: Path, data=SPACE) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def sim_processes() -> dict[int, str]:
    """Simulator processes alive on this machine, pid -> command line."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if "tuner.sim" in cmd and state not in "ZX":
            out[int(entry.name)] = cmd
    return out


def ports_of(study: optuna.Study) -> set[str]:
    ports = set()
    for t in study.trials:
        argv = t.user_attrs.get("argv") or []
        if "--port" in argv:
            ports.add(argv[argv.index("--port") + 1])
    return ports


def assert_no_server_left(study: optuna.Study):
    ports = ports_of(study)
    left = {pid: cmd for pid, cmd in sim_processes().items() if any(f"--port {p} " in cmd + " " for p in ports)}
    assert not left, f"server processes left behind: {left}"


def load(tmp_path: Path, name: str = "e2e") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'results' / name / 'study.db'}")


def test_study_end_to_end(tmp_path, capsys):
    space = write_space(tmp_path)
    results = tmp_path / "results"
    # Fix the first four proposals: good, rejected before boot, OOM in warmup, good.
    (results / "e2e").mkdir(parents=True)
    study = optuna.create_study(study_name="e2e", storage=f"sqlite:///{results / 'e2e' / 'study.db'}",
                                directions=["maximize", "minimize", "minimize"])
    for values in ({"max_num_seqs": 8, "VLLM_PROMPT_BS_BUCKET_MIN": 1, "fault": "none"},
                   {"max_num_seqs": 8, "VLLM_PROMPT_BS_BUCKET_MIN": 64, "fault": "none"},
                   {"max_num_seqs": 8, "VLLM_PROMPT_BS_BUCKET_MIN": 1, "fault": "oom-warmup"},
                   {"max_num_seqs": 16, "VLLM_PROMPT_BS_BUCKET_MIN": 1, "fault": "none"}):
        study.enqueue_trial(values)

    code = main(["tune", "--space", str(space), "--results", str(results), "--n-trials", "4", *FAST])
    out = capsys.readouterr()
    assert code == 0, out.err

    study = load(tmp_path)
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.user_attrs["status"] for t in trials[:4]] == ["ok", "invalid_config", "warmup_oom", "ok"]
    ok, rejected, oom, ok2 = trials[:4]
    # The rejection was screened: it does not count toward --n-trials, so a fifth proposal ran.
    assert rejected.user_attrs["screened"] == "rejected"
    assert len([t for t in trials if not t.user_attrs.get("screened")]) == 4
    # The rejected trial cost no boot: no argv, no server log, and its reason names the variable.
    assert "argv" not in rejected.user_attrs or not rejected.user_attrs["argv"]
    assert "VLLM_PROMPT_BS_BUCKET_MIN" in rejected.user_attrs["reason"]
    assert not (results / "e2e" / "trials" / "0001" / "server.log").exists()
    assert rejected.state == optuna.trial.TrialState.COMPLETE and not rejected.user_attrs["feasible"]
    # The OOM trial booted, failed in warmup, and kept its log.
    assert (results / "e2e" / "trials" / "0002" / "server.log").exists()
    assert oom.user_attrs["feasible"] is False
    # Good trials: measured, predicted bucket counts equal the ones the server logged.
    for t in (ok, ok2):
        assert t.user_attrs["feasible"] is True
        assert t.values[0] > 0 and t.values[1] > 0 and t.values[2] > 0
        pred, obs = t.user_attrs["predicted"], t.user_attrs["observed"]
        assert pred["prompt_buckets"] == obs["prompt_buckets"] and pred["decode_buckets"] == obs["decode_buckets"]
        assert obs["warmup_source"] == "log: Warmup finished"
        bench = json.loads(Path(t.user_attrs["artifacts"]["bench_json"]).read_text())
        assert bench["completed"] == 24 and bench["failed"] == 0
        assert bench["total_output_tokens"] == 24 * 24  # exact output lengths (ignore_eos)
    assert {t.number for t in study.best_trials} & {1, 2} == set()
    assert_no_server_left(study)

    # Files of the study.
    folder = results / "e2e"
    trials_csv = (folder / "trials.csv").read_text().splitlines()
    assert len(trials_csv) == len(trials) + 1 and "status" in trials_csv[0]
    assert any("invalid_config" in line for line in trials_csv)
    assert "Pareto" in (folder / "report.html").read_text()
    env_text = (folder / "best.env").read_text()
    assert "# bucket-tuner export: study e2e" in env_text
    # The env file loads with `set -a; . file` (and docker's --env-file syntax: NAME=VALUE lines).
    shown = subprocess.run(["bash", "-c", f"set -a; . {folder / 'best.env'}; env"], capture_output=True,
                           text=True, check=True).stdout
    assert "VLLM_GRAPH_RESERVED_MEM=" in shown and "VLLM_EXPONENTIAL_BUCKETING=false" in shown
    for line in env_text.splitlines():
        assert line.startswith("#") or ("=" in line and " " not in line and '"' not in line)

    # export and compare commands.
    out = str(tmp_path / "t.env")
    assert main(["export", "e2e", "--results", str(results), "--pick", "throughput", "-o", out]) == 0
    assert "pick throughput" in (tmp_path / "t.env").read_text()
    assert main(["export", "e2e", "--results", str(results), "--max-warmup", "0.001"]) == 2
    assert "none of the" in capsys.readouterr().err
    assert main(["compare", "e2e", "e2e", "--results", str(results), "--html", str(tmp_path / "c.html")]) == 0
    assert "hypervolume" in capsys.readouterr().out
    assert (tmp_path / "c.html").exists()


def _tune_cmd(space: Path, results: Path, n: int, extra=()) -> list[str]:
    return [sys.executable, "-m", "tuner.cli", "tune", "--space", str(space), "--results", str(results),
            "--n-trials", str(n), "--no-seed-defaults", *FAST, *extra]


def test_killed_tuner_resumes_without_losing_or_duplicating_trials(tmp_path):
    space = write_space(tmp_path, {**SPACE, "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [8, 16]},
        "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [4, 8]}}})
    results = tmp_path / "results"
    # A slow startup (scale 0.02: a few seconds of warmup) so the kill lands mid-trial.
    cmd = _tune_cmd(space, results, 3, ["--startup-time-scale", "0.02"])
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    db = results / "e2e" / "study.db"
    deadline = time.monotonic() + 60
    victim = None
    while time.monotonic() < deadline and victim is None:
        time.sleep(0.2)
        if not db.exists():
            continue
        try:
            running = [t for t in load(tmp_path).trials if t.state == optuna.trial.TrialState.RUNNING]
        except Exception:
            continue
        for t in running:
            if t.number >= 1 and "Warmup" in _read(results / "e2e" / "trials" / f"{t.number:04d}" / "server.log"):
                victim = t.number
    assert victim is not None, "no trial reached warmup in time"
    groups = [json.loads(r.read_text())["pgid"] for r in (results / "e2e" / "run").glob("server-*.json")]
    assert groups and all(_members(g) for g in groups), "the victim's server should be running"
    # this study's simulators only: tests running beside this one have their own
    orphans_before = set(sim_processes()) & {pid for g in groups for pid in _members(g)}
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    # Its watchdog stops the killed tuner's server within seconds, before anyone re-runs the tuner.
    deadline = time.monotonic() + 15
    while any(_members(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_members(g) for g in groups), "the killed tuner's server outlived it"

    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "left running by a tuner that died" in second.stderr
    study = load(tmp_path)
    states = {t.number: (t.state.name, t.user_attrs.get("status")) for t in study.trials}
    assert states[victim] == ("FAIL", "tuner_died")
    # Counted trials only: a proposal of an already measured configuration is answered from its record.
    complete = [t for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE and not t.user_attrs.get("screened")]
    assert len(complete) == 3
    # The interrupted parameters ran again exactly once.
    victim_params = next(t.params for t in study.trials if t.number == victim)
    rerun = [t for t in complete if t.user_attrs.get("requeued_from") == victim]
    assert len(rerun) == 1 and rerun[0].params == victim_params
    assert not (set(sim_processes()) & orphans_before), "the orphaned server was not stopped"
    assert_no_server_left(study)


def _members(pgid: int) -> list[int]:
    """Live processes of a process group."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split() if entry.name.isdigit() else None
        except OSError:
            continue
        if fields and int(fields[2]) == pgid and fields[0] not in "ZX":
            out.append(int(entry.name))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_two_workers_share_one_study(tmp_path):
    space = write_space(tmp_path, {**SPACE, "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [8, 16]},
        "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [2, 4, 8]}}})
    results = tmp_path / "results"
    cmd = _tune_cmd(space, results, 4)
    workers = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outs = [w.communicate(timeout=240) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [err for _, err in outs]
    study = load(tmp_path)
    complete = [t for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE and not t.user_attrs.get("screened")]
    # Each worker checks the shared count before asking: at most one extra trial per worker.
    assert 4 <= len(complete) <= 5
    assert len({t.number for t in study.trials}) == len(study.trials)
    owners = {t.user_attrs["owner"]["pid"] for t in complete}
    # Both ran trials of the shared study; or, on a machine so busy that one started after the other had run
    # them all, the late one read the shared count and booted nothing ("4 already: 0 to boot")
    for worker, (out, err) in zip(workers, outs):
        said = " ".join((err + out).split())
        assert worker.pid in owners or "already: 0 to boot" in said, said[-2000:]
    assert all(t.user_attrs["status"] == "ok" for t in complete)
    assert_no_server_left(study)


def test_optuna_dashboard_opens_the_storage(tmp_path):
    from optuna_dashboard import wsgi

    from tuner.space.schema import SearchSpace
    from tuner.study.options import Constraints, Objectives, StudyOptions, open_study
    from tuner.study.tell import tell_result
    from tuner.trial.run import TrialResult

    space = SearchSpace.from_dict(SPACE)
    opts = StudyOptions(name="dash", results_root=tmp_path)
    study = open_study(opts, space, Objectives())
    good = TrialResult(status="ok", metrics={"output_throughput": 100.0, "p99_ttft_ms": 50.0},
                       observed={"warmup_s": 30.0})
    bad = TrialResult(status="warmup_oom", observed={"warmup_s": 12.0})
    for result in (good, bad):
        tell_result(study, study.ask(), result, Objectives(), Constraints())
    app = wsgi(opts.storage_url)

    def get(path):
        status = {}
        body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
                             "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "0", "wsgi.url_scheme": "http",
                             "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr},
                            lambda s, h, exc_info=None: status.setdefault("s", s)))
        return status["s"], body

    status, body = get("/api/studies")
    assert status.startswith("200"), body[:300]
    studies = json.loads(body)["study_summaries"]
    assert [s["study_name"] for s in studies] == ["dash"]
    status, body = get(f"/api/studies/{studies[0]['study_id']}")
    assert status.startswith("200"), body[:300]
    detail = json.loads(body)
    assert detail["trials"][0]["values"] == [100.0, 50.0, 30.0]
    # Feasibility is visible to the dashboard: the OOM trial carries a violated constraint (the
    # dashboard's own best-trials list ignores constraints; Optuna's honours them).
    assert detail["trials"][0]["constraints"] and all(v <= 0 for v in detail["trials"][0]["constraints"])
    assert any(v > 0 for v in detail["trials"][1]["constraints"])
    assert [t.number for t in study.best_trials] == [0]
    assert {a["key"] for a in detail["trials"][0]["user_attrs"]} >= {"status", "feasible", "observed"}


def test_ctrl_c_stops_the_trial_cleanly_and_keeps_everything(tmp_path):
    space = write_space(tmp_path, {**SPACE, "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [8, 16]}}})
    results = tmp_path / "results"
    cmd = _tune_cmd(space, results, 2, ["--startup-time-scale", "0.02"])
    tuner = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = results / "e2e" / "trials" / "0000" / "server.log"
    deadline = time.monotonic() + 60
    while "[Warmup]" not in _read(log) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "[Warmup]" in _read(log), "the first trial never reached warmup"
    tuner.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal does
    _, err = tuner.communicate(timeout=60)
    assert tuner.returncode == 130, err[-2000:]
    assert "interrupted" in err
    study = load(tmp_path)
    first = study.trials[0]
    assert first.state == optuna.trial.TrialState.FAIL and first.user_attrs["status"] == "interrupted"
    assert_no_server_left(study)
    # Resuming runs the interrupted parameters again and finishes the study.
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-2000:]
    study = load(tmp_path)
    complete = [t for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE and not t.user_attrs.get("screened")]
    assert len(complete) == 2
    assert any(t.user_attrs.get("requeued_from") == 0 and t.params == first.params for t in complete)
    assert_no_server_left(study)


def test_a_bad_derived_expression_fails_the_run_clearly_and_keeps_the_record(tmp_path, capsys):
    data = {**SPACE, "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}},
            "derived": {"VLLM_DECODE_BS_BUCKET_MAX": "max_num_seqs // 0"}}
    space = write_space(tmp_path, data)
    code = main(["tune", "--space", str(space), "--results", str(tmp_path / "results"), "--n-trials", "2",
                 "--no-seed-defaults", *FAST])
    assert code == 2
    assert "derived 'VLLM_DECODE_BS_BUCKET_MAX'" in capsys.readouterr().err
    study = load(tmp_path)
    # The one trial that was asked is kept, with the reason; the run stopped instead of looping.
    assert [t.user_attrs.get("status") for t in study.trials] == ["tuner_error"]
    assert "failed with these values: integer division or modulo by zero" in study.trials[0].user_attrs["reason"]


def test_parallel_slots_run_trials_at_once(tmp_path):
    space = write_space(tmp_path, {**SPACE, "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [8, 16]},
        "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [2, 4, 8]}}})
    results = tmp_path / "results"
    code = main(["tune", "--space", str(space), "--results", str(results), "--n-trials", "4", "--slots", "2",
                 "--no-seed-defaults", *FAST])
    assert code == 0
    study = load(tmp_path)
    # Counted trials: a proposal of a configuration the other slot runs waits for it and is answered
    # from its record (screened "reused", tests/study/test_running_elsewhere.py).
    complete = [t for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE and not t.user_attrs.get("screened")]
    assert len(complete) == 4 and all(t.user_attrs["status"] == "ok" for t in complete)
    assert {t.user_attrs["slot"] for t in complete} == {0, 1}
    spans = sorted((t.datetime_start, t.datetime_complete) for t in complete)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), "no two trials overlapped in time"
    ports = [t.user_attrs["argv"][t.user_attrs["argv"].index("--port") + 1] for t in complete]
    assert len(set(ports)) == 4
    assert_no_server_left(study)


def test_grid_sampler_runs_past_its_grid_with_ask_and_tell(tmp_path):
    """Optuna's GridSampler calls study.stop() when its grid is covered; ask/tell refuses that."""
    from tuner.space.schema import SearchSpace
    from tuner.study.options import Constraints, Objectives, StudyOptions
    from tuner.study.run import run_study
    from tuner.trial.run import TrialContext, TrialResult

    space = SearchSpace.from_dict({**SPACE, "parameters": {"max_num_seqs": {"type": "categorical",
                                                                            "choices": [8, 16]}}})
    from tuner.load.workload import FixedWorkload
    from tuner.serve.backends import Backend

    ctx = TrialContext(backend=Backend(kind="sim", model="m"), workload=FixedWorkload(10, 10, num_prompts=1))

    def runner(ctx, settings, trial_dir, slot, stop):
        return TrialResult(status="ok", metrics={"output_throughput": float(settings.server["max_num_seqs"]),
                                                 "p99_ttft_ms": 10.0}, observed={"warmup_s": 5.0})

    opts = StudyOptions(name="grid", results_root=tmp_path, sampler="grid", n_trials=3, enqueue_defaults=False)
    run = run_study(opts, space, ctx, Objectives(), Constraints(), install_sigint=False, runner=runner)
    assert [t.state.name for t in run.study.trials] == ["COMPLETE"] * 3
    assert {t.params["max_num_seqs"] for t in run.study.trials[:2]} == {8, 16}
