"""A configuration another worker is running is not booted again at the same time (tuner/study/screen.py,
Screen.claim / wait_for): the later claim waits for the running trial and reuses its measurement.
In process with parallel slots and a virtual runner, then two `bucket-tuner tune` processes on one
SQLite study on the simulator (the PostgreSQL case is in tests/study/nodes/test_postgres_nodes.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState

from ..conftest import ROOT
from .test_study_e2e import FAST, SPACE, assert_no_server_left, load, write_space

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

TWO_CONFIGS = {**SPACE, "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}}}
# The same configuration proposed twice in a row: the second worker to ask gets it while the first runs it.
PROPOSALS = [{"max_num_seqs": 8}, {"max_num_seqs": 8}, {"max_num_seqs": 16}]


def enqueue(study: optuna.Study) -> None:
    for values in PROPOSALS:
        study.enqueue_trial(values)


def in_process_study(tmp_path, remeasure: int):
    """Two slots of one tuner, a runner that takes a while and notes which configurations ran at once."""
    from tuner.load.workload import FixedWorkload
    from tuner.serve.backends import Backend
    from tuner.space.schema import SearchSpace
    from tuner.study.options import Constraints, Objectives, StudyOptions, open_study
    from tuner.study.run import run_study
    from tuner.trial.run import Slot, TrialContext, TrialResult

    space = SearchSpace.from_dict(TWO_CONFIGS)
    ctx = TrialContext(backend=Backend(kind="sim", model="m"), workload=FixedWorkload(10, 10, num_prompts=1))
    opts = StudyOptions(name="elsewhere", results_root=tmp_path, sampler="random", n_trials=2,
                        enqueue_defaults=False, slots=[Slot(0), Slot(1)], remeasure=remeasure)
    enqueue(open_study(opts, space, Objectives()))
    running, lock, boots, most = Counter(), threading.Lock(), [], Counter()

    def second_decided() -> bool:
        """The other slot's trial of the same configuration waits for this boot, or boots beside it (remeasure)."""
        trials = optuna.load_study(study_name=opts.name, storage=opts.storage_url).get_trials(deepcopy=False)
        with lock:
            booted = len(boots) >= 2
        return booted or any("waited_for" in t.user_attrs for t in trials)

    def runner(ctx, settings, trial_dir, slot, stop):
        seqs = settings.server["max_num_seqs"]
        with lock:
            running[seqs] += 1
            most[seqs] = max(most[seqs], running[seqs])
            boots.append(seqs)
            first = len(boots) == 1
        # the first boot runs until the other slot's trial of the same configuration has decided to wait for it
        # (or to boot beside it), however slow the machine: holding it only until that trial was asked let a busy
        # machine finish this boot before the other looked (it then reused the result without waiting)
        deadline = time.monotonic() + 60
        while first and not second_decided() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        with lock:
            running[seqs] -= 1
        return TrialResult(status="ok", metrics={"output_throughput": float(seqs), "p99_ttft_ms": 10.0},
                           observed={"warmup_s": 5.0}, booted=True)

    run = run_study(opts, space, ctx, Objectives(), Constraints(), install_sigint=False, runner=runner)
    return run.study, boots, most


def test_a_configuration_running_in_another_slot_is_waited_for_and_reused(tmp_path):
    study, boots, most = in_process_study(tmp_path, remeasure=1)
    trials = sorted(study.trials, key=lambda t: t.number)
    assert most[8] == 1, "max_num_seqs=8 was booted twice at once"
    assert sorted(boots) == [8, 16]
    # whichever of the two trials of max_num_seqs=8 claimed it first booted it (the slots ask in one order and may
    # claim in the other); the other waited for it
    eights = [t for t in trials if t.params.get("max_num_seqs") == 8]
    second = next(t for t in eights if "waited_for" in t.user_attrs)
    first = next(t for t in eights if t is not second)
    assert second.user_attrs["waited_for"] == [first.number] and first.user_attrs["booted"]
    assert second.user_attrs["screened"] == "reused" and not second.user_attrs["booted"]
    assert second.user_attrs["reason"].startswith(f"reused from trial {first.number}")
    assert second.values == first.values
    assert not study.get_trials(states=(TrialState.RUNNING,))


def test_remeasure_lets_that_many_boots_of_a_configuration_run_at_once(tmp_path):
    study, boots, most = in_process_study(tmp_path, remeasure=2)
    assert most[8] == 2 and boots.count(8) == 2  # two measurements asked for: both booted, together
    assert not any(t.user_attrs.get("waited_for") for t in study.trials)


def _claims(tmp_path):
    from tuner.study.screen import Screen

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", directions=["maximize"])
    screen = Screen(study, SimpleNamespace(progress=None, say=lambda text: None), remeasure=1)
    a, b = study.ask(), study.ask()
    return study, screen, a, b


def test_the_later_claim_waits_and_the_earlier_never_does(tmp_path):
    study, screen, a, b = _claims(tmp_path)
    assert screen.claim(a, "k") == []  # the first claim boots
    assert [t.number for t in screen.claim(b, "k")] == [a.number]
    assert screen.claim(study.ask(), "other") == []
    settings = SimpleNamespace(params={}, server={})
    threading.Timer(0.5, lambda: study.tell(a, [1.0])).start()
    t0 = time.monotonic()
    assert screen.wait_for(b, screen.claim(b, "k"), threading.Event(), settings, poll_s=0.05) is None
    assert time.monotonic() - t0 >= 0.4  # it waited for the tell
    assert study.trials[b.number].user_attrs["waited_for"] == [a.number]


def test_a_stop_while_waiting_records_the_trial_as_interrupted(tmp_path):
    _, screen, a, b = _claims(tmp_path)
    screen.claim(a, "k")
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    result = screen.wait_for(b, screen.claim(b, "k"), stop, SimpleNamespace(params={"x": 1}, server={}), poll_s=0.05)
    assert result.status == "interrupted" and "waiting for trial(s) [0]" in result.reason


def test_two_tuners_on_one_sqlite_study_never_boot_one_configuration_at_once(tmp_path):
    space, results = write_space(tmp_path, TWO_CONFIGS), tmp_path / "results"
    (results / "e2e").mkdir(parents=True)
    enqueue(optuna.create_study(study_name="e2e", storage=f"sqlite:///{results / 'e2e' / 'study.db'}",
                                directions=["maximize", "minimize", "minimize"]))
    cmd = [sys.executable, "-m", "tuner.cli", "tune", "--space", str(space), "--results", str(results),
           "--n-trials", "2", "--no-seed-defaults", "--no-report", *FAST, "--startup-time-scale", "0.01"]
    tuners = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    errs = [t.communicate(timeout=240)[1] for t in tuners]
    assert [t.returncode for t in tuners] == [0, 0], errs
    if assert_no_collision(load(tmp_path), {t.pid for t in tuners}):
        assert any("waiting for its result instead of booting" in e for e in errs), errs


def assert_no_collision(study: optuna.Study, pids: set[int]) -> bool:
    """Each configuration booted once and the second trial of max_num_seqs=8 reused the first's result; nothing
    left running. True when the second waited for the first while it ran (the two tuners' claims met). On a
    busy machine one tuner can start so late that the first trial had already ended: then the second reused
    it without waiting, which is right too (the waiting itself: test_the_later_claim_waits_...)."""
    trials = sorted(study.trials, key=lambda t: t.number)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    booted = Counter(t.params["max_num_seqs"] for t in trials if t.user_attrs.get("booted"))
    assert booted == {8: 1, 16: 1}, [(t.number, t.params, t.user_attrs.get("status")) for t in trials]
    first, second = trials[0], trials[1]
    assert second.user_attrs["screened"] == "reused" and second.values == first.values
    waited = "waited_for" in second.user_attrs
    if waited:
        assert second.user_attrs["waited_for"] == [first.number], second.user_attrs
        owners = {first.user_attrs["owner"]["pid"], second.user_attrs["owner"]["pid"]}
        assert owners == pids, "the two trials of one configuration came from the two tuners"
    assert_no_server_left(study)
    return waited
