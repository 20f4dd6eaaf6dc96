"""One study, one question: a re-run that changes what the measurements answer is refused with the
difference named; the same question resumes; --fork-from seeds a new study with the old one's front."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tuner.load.workload import RandomWorkload
from tuner.perfmodel import target as M
from tuner.serve.backends import Backend
from tuner.space.schema import SearchSpace
from tuner.study.options import Constraints, Objectives, StudyOptions
from tuner.study.question import QUESTION_ATTR, differences
from tuner.study.run import run_study
from tuner.trial import run as T
from tuner.trial.result import TrialResult
from tuner.vocabulary.errors import StudyError
from tuner.vocabulary.status import TrialStatus

SPACE = {"name": "q", "release": "fork-1.22",
         "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
         "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}}}


def _ctx(release="fork-1.22", concurrency=8, input_len=200, device="gaudi2", model="llama-3.1-8b", dtype="bf16",
         extra=()):
    backend = Backend("sim", model=model, sim_release=release, sim_device=device, sim_model=model,
                      extra_args=list(extra))
    return T.TrialContext(backend=backend, workload=RandomWorkload(input_len, 16, num_prompts=8), release=release,
                          device_model=M.DeviceModel(device, model, dtype),
                          load=T.LoadOptions(max_concurrency=concurrency, warmup_requests=0))


def _runner(ctx, settings, trial_dir, slot, stop_event):  # no boot: the question is what is checked
    return TrialResult(status=TrialStatus.OK, booted=True, params=settings.params, server=settings.server,
                       metrics={"output_throughput": 100.0, "p99_ttft_ms": 50.0}, observed={"warmup_s": 10.0})


def _run(tmp_path, ctx, constraints=Constraints(), objectives=Objectives(), n=1):
    opts = StudyOptions(name="night", results_root=tmp_path, n_trials=n, enqueue_defaults=False, screening=False)
    return run_study(opts, SearchSpace.from_dict(SPACE), ctx, objectives, constraints, install_sigint=False,
                     runner=_runner)


@pytest.mark.parametrize("change, named", [
    (dict(ctx=_ctx(concurrency=48)), "load.max_concurrency: 8 -> 48"),
    (dict(ctx=_ctx(input_len=900)), "workload.input_len: 200 -> 900"),
    (dict(ctx=_ctx(release="fork-1.21.2")), "release: \"fork-1.22\" -> \"fork-1.21.2\""),
    (dict(ctx=_ctx(model="llama-3.1-70b")), "target.model: \"llama-3.1-8b\" -> \"llama-3.1-70b\""),
    (dict(ctx=_ctx(device="gaudi3")), "target.device: \"gaudi2\" -> \"gaudi3\""),
    (dict(ctx=_ctx(dtype="fp8")), "target.dtype"),
    (dict(ctx=_ctx(extra=["--enable-prefix-caching"])), "server.server_args"),
    (dict(ctx=_ctx(), constraints=Constraints(slos_ms={"p99_ttft_ms": 2000})), "constraints.slos_ms.p99_ttft_ms"),
    (dict(ctx=_ctx(), objectives=Objectives(latency_metric="tpot")), "objectives"),
])
def test_a_rerun_asking_another_question_is_refused_with_the_difference_named(tmp_path, change, named):
    first = _run(tmp_path, _ctx())
    assert first.study.user_attrs[QUESTION_ATTR]["load"]["max_concurrency"] == 8
    with pytest.raises(StudyError) as e:
        _run(tmp_path, n=2, **change)
    msg = str(e.value)
    assert named in msg and "--fork-from night" in msg and "--study NEW" in msg
    assert len(first.study.trials) == 1  # nothing was added to the old study


def test_the_same_question_resumes_the_study(tmp_path):
    _run(tmp_path, _ctx())
    again = _run(tmp_path, _ctx(), n=2)
    assert len([t for t in again.study.trials if t.state.is_finished()]) == 2


def test_differences_name_every_leaf():
    assert differences({"a": {"b": 1, "c": [1, 2]}}, {"a": {"b": 2, "c": [1, 2], "d": None}}) == ["a.b: 1 -> 2"]


def test_the_command_line_refuses_and_fork_from_seeds_a_new_study(tmp_path):
    base = [sys.executable, "-m", "tuner.cli", "tune", "--space", "demo", "--n-trials", "1", "--time-scale", "0.001",
            "--startup-time-scale", "0.001", "--study", "night", "--results", str(tmp_path), "--no-report"]
    first = subprocess.run(base + ["--max-concurrency", "16"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    other = subprocess.run(base + ["--max-concurrency", "4"], capture_output=True, text=True, timeout=300)
    assert other.returncode == 2 and "load.max_concurrency: 16 -> 4" in other.stderr
    fork = [a if a != "night" else "day" for a in base] + ["--max-concurrency", "4", "--fork-from", "night"]
    forked = subprocess.run(fork, capture_output=True, text=True, timeout=300)
    assert forked.returncode == 0, forked.stderr
    assert "pareto of night" in forked.stdout + forked.stderr


def test_every_trial_line_and_the_summary_say_how_each_trial_was_settled(tmp_path, capsys):
    from tuner.commands.tuneprogress import trial_line
    from tuner.report import print_pareto

    space = dict(SPACE, parameters={"max_num_seqs": {"type": "categorical", "choices": [8]}})  # one configuration
    opts = StudyOptions(name="settled", results_root=tmp_path, n_trials=1, enqueue_defaults=False)
    lines = []
    run = run_study(opts, SearchSpace.from_dict(space), _ctx(), Objectives(), Constraints(), install_sigint=False,
                    runner=_runner, on_trial=lambda n, r: lines.append(trial_line(n, r, Objectives(), Constraints(),
                                                                                   1.0)))
    opts2 = StudyOptions(name="settled", results_root=tmp_path, n_trials=2, enqueue_defaults=False)
    run = run_study(opts2, SearchSpace.from_dict(space), _ctx(), Objectives(), Constraints(), install_sigint=False,
                    runner=_runner, on_trial=lambda n, r: lines.append(trial_line(n, r, Objectives(), Constraints(),
                                                                                   1.0)))
    assert lines[0].startswith("trial 0 (measured): ")
    assert any(line.startswith("trial 1 (reused from trial 0): ") for line in lines[1:])
    print_pareto(run.study)
    out = capsys.readouterr().out
    from tuner.vocabulary.record import records

    settled = [r.settled for r in records(run.study.trials)]
    assert settled[0] == "measured" and settled[1] == "reused"
    assert f"settled: measured {settled.count('measured')}, reused {settled.count('reused')} (" in out
