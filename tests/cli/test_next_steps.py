"""A finished run ends with the next commands to type, best.serve.sh and best.vllm.yaml among them (issue 34)."""

from __future__ import annotations

from tuner.commands.tunenext import next_steps


def _folder(tmp_path):
    study = tmp_path / "results" / "night"
    study.mkdir(parents=True)
    for name in ("best.env", "best.serve.sh", "best.vllm.yaml", "report.html"):
        (study / name).write_text("x")
    return study


def test_next_steps_name_the_script_the_config_and_the_report(tmp_path):
    study = _folder(tmp_path)
    lines = next_steps(study, "night", tmp_path / "results", 0, study / "report.html", simulated=False)
    text = "\n".join(lines)
    assert lines[1] == f"Next, in the study's folder: {study}"
    assert "  sh best.serve.sh --port 8000" in lines      # trial 0 is a pick too
    assert "  set -a; . ./best.env; set +a; vllm serve --config best.vllm.yaml" in lines
    assert "  open report.html" in lines and "  bucket-tuner report night --results .." in lines
    assert "--pick throughput" in text and "hardware" not in text
    assert all(len(line) <= 80 for line in lines[2:])   # the folder is printed whole, to be copied


def test_a_simulated_study_says_nothing_ran_on_hardware(tmp_path):
    study = _folder(tmp_path)
    text = " ".join(next_steps(study, "night", tmp_path / "results", 3, None, simulated=True))
    assert "Nothing ran on hardware" in " ".join(text.split()) and "--backend vllm" in text


def test_without_a_pick_no_script_is_offered(tmp_path):
    study = _folder(tmp_path)
    text = "\n".join(next_steps(study, "night", tmp_path / "results", None, None, simulated=False))
    assert "best.serve.sh" not in text and "bucket-tuner report night" in text
