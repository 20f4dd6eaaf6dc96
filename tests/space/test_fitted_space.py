"""Search over fitted bucket sets: the `type: fitted` parameter, its placement on the study's workload,
the reuse key, a short study on the simulator, and the export of the picked set's bucket file."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import yaml

from tuner.cli import main
from tuner.load.workload import RandomWorkload
from tuner.logparse import GeneratedBuckets, parse_line
from tuner.space.fit import fit_workload
from tuner.space.fit.bucketfile import parse_bucket_file
from tuner.space.fitted import bind_fitted, bucket_set_digest, pin_to_trial
from tuner.space.schema import SearchSpace, SpaceError

ROOT = Path(__file__).resolve().parents[2]
# The token budget holds the eight longest prompts at once (8 x 720 < 8192): the end-to-end study below
# never chunks a prompt, whatever the timing (see test_no_arrival_timing_leaves_the_fitted_set).
SPACE = {
    "name": "fitted",
    "release": "gaudi-main",
    "server": {"max_model_len": 2048, "block_size": 128, "max_num_batched_tokens": 8192},
    "parameters": {
        "prompt_buckets": {"type": "fitted", "phase": "prompt", "low": 2, "high": 6},
        "decode_buckets": {"type": "fitted", "phase": "decode", "low": 2, "high": 6},
        "max_num_seqs": {"type": "categorical", "choices": [8, 16]},
    },
}


def space(**changes) -> SearchSpace:
    data = copy.deepcopy(SPACE)
    for name, spec in changes.items():
        if spec is None:
            data["parameters"].pop(name)
        else:
            data["parameters"][name] = spec
    return SearchSpace.from_dict(data, source="s.yaml")


def workload() -> RandomWorkload:
    return RandomWorkload(input_len=400, output_len=24, range_ratio=0.8, num_prompts=24, seed=0)


def ctx(release="gaudi-main", concurrency=8):
    return SimpleNamespace(release=release, workload=workload(), load=SimpleNamespace(max_concurrency=concurrency))


# ------------------------------------------------------------------------------------------ schema

def test_fitted_parameters_are_int_counts_per_phase():
    s = space()
    assert [(p.name, p.key, p.type, p.low, p.high) for p in s.fitted_parameters] == [
        ("prompt_buckets", "prompt", "int", 2, 6), ("decode_buckets", "decode", "int", 2, 6)]
    assert s.grid()["prompt_buckets"] == [2, 3, 5, 6]  # searched like any int (model seeds use the grid)
    assert s.check_release("gaudi-main") == [] and s.check_release("gaudi-0.15.1") == []


@pytest.mark.parametrize("changes, message", [
    ({"decode_buckets": None}, "needs a count for both phases; no fitted parameter has phase: decode"),
    ({"decode_buckets": {"type": "fitted", "phase": "ctx", "low": 1, "high": 2}}, "phase: prompt or phase: decode"),
    ({"decode_buckets": {"type": "fitted", "phase": "decode", "low": 0, "high": 2}}, "low must be a bucket count"),
    ({"decode_buckets": {"type": "fitted", "phase": "decode", "low": 5, "high": 2}}, "low=5 is greater than high=2"),
    ({"decode_buckets": {"type": "fitted", "phase": "decode", "low": 1, "high": 2, "env": "VLLM_X"}},
     "takes no env: or server:"),
    ({"decode_buckets": {"type": "fitted", "phase": "decode", "choices": [2, 0]}}, "bucket counts (integers >= 1)"),
    ({"decode_buckets": {"type": "fitted", "phase": "decode", "choices": [2], "low": 1}}, "without low/high"),
    ({"max_num_seqs": {"type": "int", "low": 8, "high": 16, "phase": "decode"}}, "belongs to type: fitted"),
])
def test_bad_fitted_parameters_are_refused_by_name(changes, message):
    with pytest.raises(SpaceError, match="s.yaml") as err:
        space(**changes)
    assert message in str(err.value)


def test_fitted_counts_from_a_list_are_categorical(tmp_path):
    s = space(decode_buckets={"type": "fitted", "phase": "decode", "choices": [2, 5]})
    p = s.fitted_parameters[1]
    assert (p.type, p.target, p.choices) == ("categorical", "fitted", (2, 5))
    bind_fitted(s, ctx(), tmp_path)
    assert s.settings_for({"prompt_buckets": 2, "decode_buckets": 5, "max_num_seqs": 8}).fitted == {
        "prompt": 2, "decode": 5}


def test_a_fixed_bucket_file_beside_fitted_counts_is_refused():
    data = dict(SPACE, env={"VLLM_BUCKETING_FROM_FILE": "/tmp/x.txt"})
    with pytest.raises(SpaceError, match="VLLM_BUCKETING_FROM_FILE is set by the fitted parameters"):
        SearchSpace.from_dict(data, source="s.yaml")


@pytest.mark.parametrize("release", ["fork-1.21.2", "fork-1.22"])
def test_releases_without_bucket_files_refuse_the_space_naming_release_and_parameter(release):
    with pytest.raises(SpaceError) as err:
        space().check_release(release)
    text = str(err.value)
    assert "\n" not in text and release in text and "'prompt_buckets'" in text and "VLLM_BUCKETING_FROM_FILE" in text


def test_counts_without_a_bound_workload_are_an_error_not_a_guess():
    with pytest.raises(SpaceError, match="need the study's workload"):
        space().settings_for({"prompt_buckets": 2, "decode_buckets": 2, "max_num_seqs": 8})


# ------------------------------------------------------------------------------------------ placement

def test_the_file_holds_the_optimal_set_of_the_workload_for_the_counts(tmp_path):
    s = space()
    bind_fitted(s, ctx(concurrency=8), tmp_path)
    settings = s.settings_for({"prompt_buckets": 3, "decode_buckets": 2, "max_num_seqs": 16})
    assert settings.fitted == {"prompt": 3, "decode": 2}
    path = Path(settings.env["VLLM_BUCKETING_FROM_FILE"])
    assert path.is_absolute() and path.parent == tmp_path / "buckets"
    prompt, decode = parse_bucket_file(path.read_text())
    # decode batch sizes: powers of two up to min(max_num_seqs 16, concurrency 8)
    fit = fit_workload(workload(), block_size=128, decode_bs=[1, 2, 4, 8], max_buckets=6, seed=0)
    assert prompt == [(1, q, 0) for q in fit.prompt(3).boundaries]
    assert decode == sorted((bs, 1, c) for bs in (1, 2, 4, 8) for c in fit.decode(bs, 2).boundaries)
    assert len(prompt) == 3 and len(decode) == 4 * 2


def test_same_counts_same_file_other_counts_other_file(tmp_path):
    a, b = space(), space()
    bind_fitted(a, ctx(), tmp_path / "a")
    bind_fitted(b, ctx(), tmp_path / "b")
    values = {"prompt_buckets": 4, "decode_buckets": 3, "max_num_seqs": 8}
    pa, pb = (Path(x.settings_for(values).env["VLLM_BUCKETING_FROM_FILE"]) for x in (a, b))
    assert pa.read_text() == pb.read_text() and pa.name == pb.name  # deterministic, named by content
    other = Path(a.settings_for(dict(values, decode_buckets=4)).env["VLLM_BUCKETING_FROM_FILE"])
    assert other != pa and other.read_text() != pa.read_text()
    assert bucket_set_digest(str(pa)) == bucket_set_digest(str(pb)) != bucket_set_digest(str(other))


def test_a_booting_trial_gets_its_own_copy(tmp_path):
    s = space()
    bind_fitted(s, ctx(), tmp_path)
    settings = s.settings_for({"prompt_buckets": 2, "decode_buckets": 2, "max_num_seqs": 8})
    pinned = pin_to_trial(settings, tmp_path / "trials" / "0003")
    own = tmp_path / "trials" / "0003" / "buckets.txt"
    assert pinned.env["VLLM_BUCKETING_FROM_FILE"] == str(own.absolute())
    assert own.read_text() == Path(settings.env["VLLM_BUCKETING_FROM_FILE"]).read_text()
    assert pinned.fitted == settings.fitted and settings.env != pinned.env  # the original is untouched


def test_bind_needs_a_gaudi_release(tmp_path):
    from tuner.vocabulary.errors import StudyError

    with pytest.raises(StudyError, match="'prompt_buckets'.*release profile that reads bucket files"):
        bind_fitted(space(), ctx(release=None), tmp_path)
    assert bind_fitted(SearchSpace.load(ROOT / "search_spaces" / "vllm-gaudi.yaml"), ctx(), tmp_path) is None


def test_the_shipped_fitted_space_loads_for_the_plugin_releases():
    s = SearchSpace.load(ROOT / "search_spaces" / "vllm-gaudi-fitted.yaml")
    assert {p.key for p in s.fitted_parameters} == {"prompt", "decode"}
    for release in ("gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main"):
        SearchSpace.load(ROOT / "search_spaces" / "vllm-gaudi-fitted.yaml").check_release(release)


# ------------------------------------------------------------------------------------- end to end

FAST = ["--num-prompts", "24", "--num-warmups", "2", "--max-concurrency", "8", "--random-input-len", "400",
        "--random-range-ratio", "0.8", "--random-output-len", "24", "--time-scale", "0.2",
        "--startup-time-scale", "0.002", "--no-seed-defaults"]


def test_no_arrival_timing_leaves_the_fitted_set(tmp_path):
    """Which shapes a live load makes depends on how many requests reach the server between two steps,
    so on how busy the machine is: a client that stalls while its 8 requests finish sends the next 8 at
    once. The study below asserts that no shape outside the fitted set ever ran, so it holds for the worst
    arrival, on the virtual clock: the 8 longest prompts waiting together (a budget under their sum
    chunks the last one into a (1, q, ctx blocks) prompt no file lists), and the 8 largest decode
    contexts in one batch (every decode batch is at most that)."""
    from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
    from tuner.perfmodel.engine import Engine, SimRequest

    ins, outs = workload().lengths()
    longest = sorted(zip(ins, outs), reverse=True)[:8]
    peaks = sorted((-(-(i + o - 1) // 128) for i, o in zip(ins, outs)), reverse=True)  # blocks at the last token

    def compiled(budget: int, values: dict) -> list:
        s = space()
        bind_fitted(s, ctx(), tmp_path / str(budget))
        settings = s.settings_for(values)
        inputs = ServerInputs(block_size=128, max_num_seqs=values["max_num_seqs"], max_model_len=2048,
                              max_num_batched_tokens=budget)
        pred = predict_startup("gaudi-main", SimSettings(model="meta-llama/Llama-3.1-8B-Instruct"), inputs,
                               settings.env)
        _, decode = parse_bucket_file(Path(settings.env["VLLM_BUCKETING_FROM_FILE"]).read_text())
        for bs in (1, 2, 4, 8):  # a batch of up to bs sequences pads into the bs buckets
            assert sum(peaks[:bs]) <= max(c for b, _, c in decode if b == bs)
        engine = Engine(pred)
        for n, (i, o) in enumerate(longest):
            engine.add_request(SimRequest(str(n), i, o, 0.0))
        out, now = [], 0.0
        while engine.has_work():
            res = engine.step(now)
            now += res.duration
            out += [(s.phase, s.raw) for s in res.shapes if s.compiled]
        return out

    for values in ({"prompt_buckets": 3, "decode_buckets": 2, "max_num_seqs": 8},
                   {"prompt_buckets": 2, "decode_buckets": 4, "max_num_seqs": 16}):
        assert compiled(SPACE["server"]["max_num_batched_tokens"], values) == []
        chunked = compiled(4096, values)  # the budget this test had: its study flipped on a busy machine
        assert [phase for phase, _ in chunked] == ["prompt"] and chunked[0][1][2] > 0


def logged_buckets(log: Path) -> dict[str, list[tuple]]:
    out = {}
    for line in log.read_text().splitlines():
        ev = parse_line(line)
        if isinstance(ev, GeneratedBuckets):
            assert ev.complete
            out[ev.phase] = sorted(ev.buckets)
    return out


def test_a_study_over_fitted_sets_boots_each_trial_from_its_fitted_file(tmp_path):
    results = tmp_path / "results"
    db = f"sqlite:///{results / 'fitted' / 'study.db'}"
    (results / "fitted").mkdir(parents=True)
    seeded = optuna.create_study(study_name="fitted", storage=db, directions=["maximize", "minimize", "minimize"])
    for p in ({"prompt_buckets": 3, "decode_buckets": 2, "max_num_seqs": 8},
              {"prompt_buckets": 3, "decode_buckets": 2, "max_num_seqs": 8},   # the same set: reused
              {"prompt_buckets": 2, "decode_buckets": 4, "max_num_seqs": 16}):
        seeded.enqueue_trial(p)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE))
    assert main(["tune", "--space", str(path), "--results", str(results), "--n-trials", "2", *FAST]) == 0
    study = optuna.load_study(study_name="fitted", storage=db)
    first, again, other = sorted(study.trials, key=lambda t: t.number)[:3]
    assert [t.user_attrs["status"] for t in (first, again, other)] == ["ok"] * 3
    assert again.user_attrs["screened"] == "reused"
    assert again.user_attrs["effective_key"] == first.user_attrs["effective_key"] != other.user_attrs["effective_key"]

    for t in (first, other):
        folder = results / "fitted" / "trials" / f"{t.number:04d}"
        own = folder / "buckets.txt"
        assert t.user_attrs["env"]["VLLM_BUCKETING_FROM_FILE"] == str(own.absolute())
        prompt, decode = parse_bucket_file(own.read_text())
        # what `bucket-tuner fit` gives for the same workload, counts and decode batch sizes
        sizes = "1,2,4,8"
        fit_out = tmp_path / f"fit-{t.number}.txt"
        assert main(["fit", "--random-input-len", "400", "--random-range-ratio", "0.8", "--random-output-len", "24",
                     "--num-prompts", "24", "--decode-bs", sizes, "--prompt-buckets", str(t.params["prompt_buckets"]),
                     "--decode-buckets", str(t.params["decode_buckets"]), "-o", str(fit_out)]) == 0
        assert (prompt, decode) == parse_bucket_file(fit_out.read_text())
        # the simulated server lists exactly those buckets, and the load needed no other shape
        assert logged_buckets(folder / "server.log") == {"prompt": prompt, "decode": decode}
        assert t.user_attrs["observed"]["not_warmed_up"] == 0
        assert t.user_attrs["observed"]["prompt_buckets"] == len(prompt)
        assert t.user_attrs["predicted"]["decode_buckets"] == len(decode)
    assert not (results / "fitted" / "trials" / "0001" / "buckets.txt").exists()  # reused: never booted

    # tune's own best.env points at best.buckets.txt beside it, a copy of its trial's file
    best = (results / "fitted" / "best.env").read_text()
    beside = results / "fitted" / "best.buckets.txt"
    assert f"VLLM_BUCKETING_FROM_FILE={beside.absolute()}\n" in best
    picked = int(best.split(", trial ")[1].split(",")[0])
    source = study.trials[picked].user_attrs.get("observed", {}).get("reused_from", picked)
    assert beside.read_text() == (results / "fitted" / "trials" / f"{source:04d}" / "buckets.txt").read_text()

    # export: the bucket file beside the env file, VLLM_BUCKETING_FROM_FILE naming it, `set -a; .` works
    out = tmp_path / "deploy" / "best.env"
    assert main(["export", "fitted", "--results", str(results), "--trial", str(other.number), "-o", str(out)]) == 0
    copy = tmp_path / "deploy" / "best.buckets.txt"
    assert copy.read_text() == (results / "fitted" / "trials" / f"{other.number:04d}" / "buckets.txt").read_text()
    text = out.read_text()
    assert f"VLLM_BUCKETING_FROM_FILE={copy.absolute()}\n" in text
    assert "# VLLM_BUCKETING_FROM_FILE is absolute" in text
    shown = subprocess.run(["bash", "-c", f"set -a; . {out}; set +a; env"], capture_output=True, text=True,
                           check=True, cwd=tmp_path)
    assert f"VLLM_BUCKETING_FROM_FILE={copy.absolute()}" in shown.stdout.splitlines()

    # the reused trial exports the set of the trial that was booted for it
    out2 = tmp_path / "deploy2" / "again.env"
    assert main(["export", "fitted", "--results", str(results), "--trial", str(again.number), "-o", str(out2)]) == 0
    assert (tmp_path / "deploy2" / "again.buckets.txt").read_text() == (
        results / "fitted" / "trials" / "0000" / "buckets.txt").read_text()
