"""Export for how people start vLLM: beside the env file, a `vllm serve --config` YAML and a serve.sh.
Both are started here (on the simulator, which reads --config as vLLM does) and must build the very
buckets the trial's own server built; the genuine vLLM starts from them in tests/realvllm."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
import yaml

from tuner.cli import main
from tuner.report.startup import read_log
from tuner.results.deploy import script_text
from tuner.serve.configfile import expand_config
from tuner.serve.ports import find_free_port
from tuner.serve.process import ServerProcess
from tuner.serve.vllmconfig import config_mapping

from ..study.test_study_e2e import FAST, load, write_space

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

SPACE = {
    "name": "ship-it",
    "release": "fork-1.21.2",
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048,
               "enable_prefix_caching": False},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}},
}


def _start(argv, env, tmp_path, name, port):
    srv = ServerProcess(records_dir=tmp_path / f"run-{name}")
    srv.start(argv, env, tmp_path / f"{name}.log", port=port)
    outcome = srv.wait_ready(f"http://127.0.0.1:{port}", boot_timeout_s=60, warmup_timeout_s=60)
    report = srv.stop()
    assert outcome.ok, f"{name}: {outcome.reason}\n" + "\n".join(outcome.log_tail[-20:])
    assert report.clean, report
    return read_log(tmp_path / f"{name}.log")


def _buckets(facts):
    return {phase: list(g.buckets) for phase, g in facts.generated.items()}


def test_the_exported_yaml_and_script_start_the_trials_server(tmp_path):
    results = tmp_path / "results"
    assert main(["tune", "--space", str(write_space(tmp_path, SPACE)), "--results", str(results), "--n-trials", "2",
                 "--served-model-name", "my-llama", "--server-args", "--max-num-prefill-seqs 4", *FAST]) == 0
    study = load(tmp_path, "ship-it")
    out = tmp_path / "ship" / "pick.env"
    assert main(["export", "ship-it", "--results", str(results), "-o", str(out)]) == 0
    conf, script = out.with_name("pick.vllm.yaml"), out.with_name("pick.serve.sh")
    assert conf.is_file() and script.is_file() and script.stat().st_mode & 0o111
    trial = [t for t in study.trials if f"trial {t.number}," in out.read_text()][0]
    own = _buckets(read_log(results / "ship-it" / "trials" / f"{trial.number:04d}" / "server.log"))
    assert own

    data = yaml.safe_load(conf.read_text())
    assert data["max-num-seqs"] == trial.params["max_num_seqs"] and data["enable-prefix-caching"] is False
    assert data["served-model-name"] == "my-llama" and data["max-num-prefill-seqs"] == 4
    assert data["model"] == study.user_attrs["backend"]["model"]

    # serve.sh: the env file's variables and the command line; our --host/--port go to the server
    port = find_free_port()
    facts = _start(["sh", str(script), "--host", "127.0.0.1", "--port", str(port)], {"PATH": "/usr/bin:/bin"},
                   tmp_path, "script", port)
    assert _buckets(facts) == own

    # the YAML through --config, with the env file's variables (set -a; . pick.env)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if line and not line.startswith("#"))
    port = find_free_port()
    head = script.read_text().splitlines()[-1].split()[1:4]  # exec PYTHON -m tuner.sim ...
    facts = _start([*head, "--config", str(conf), "--host", "127.0.0.1", "--port", str(port)],
                   {"PATH": "/usr/bin:/bin", **env}, tmp_path, "config", port)
    assert _buckets(facts) == own


def test_script_quotes_every_value_and_leaves_secrets_out(tmp_path):
    tail = ["/models/my model", "--max-num-seqs", "64", "--enforce-eager", "--no-enable-prefix-caching",
            "--served-model-name", "a b", "--api-key", "***", "--chat-template", "{{ '$HOME' }}; rm -rf /"]
    from tuner.serve.vllmconfig import without_secrets

    kept, dropped = without_secrets(tail)
    assert dropped == ["--api-key"] and "***" not in kept
    text = script_text("t", {"VLLM_X": "a b$c", "PT_Y": "it's"}, ["/opt/v env/bin/vllm", "serve"], kept, dropped)
    (tmp_path / "s.sh").write_text(text.replace("exec ", "exec printf '%s\\n' ", 1))  # print the argv it runs
    env_dump = tmp_path / "s2.sh"
    env_dump.write_text(text.replace(text.splitlines()[-1], 'printf "%s|%s\\n" "$VLLM_X" "$PT_Y"'))
    shown = subprocess.run(["sh", str(tmp_path / "s.sh"), "--port", "9"], capture_output=True, text=True,
                           check=True, env={"PATH": "/usr/bin:/bin", "HOME": "/nowhere"}).stdout.splitlines()
    assert shown == ["/opt/v env/bin/vllm", "serve", *kept, "--port", "9"]  # nothing expanded, nothing split
    assert subprocess.run(["sh", str(env_dump)], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin"}).stdout == "a b$c|it's\n"
    assert "--api-key left out" in text
    with pytest.raises(ValueError, match="redacted"):  # a scrubbed credential cannot be shipped as if it worked
        without_secrets(["m", "--download-dir", "https://user:***@mirror/models"])


def test_yaml_keys_give_back_the_same_flags_through_vllms_reading(tmp_path):
    tail = ["m", "--max-num-seqs", "64", "--gpu-memory-utilization", "0.9", "--enforce-eager",
            "--no-enable-prefix-caching", "--dtype", "bfloat16", "--block-size", "128", "--seed", "007"]
    data = config_mapping(tail)
    assert data == {"model": "m", "max-num-seqs": 64, "gpu-memory-utilization": 0.9, "enforce-eager": True,
                    "enable-prefix-caching": False, "dtype": "bfloat16", "block-size": 128, "seed": "007"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    known = {"--no-enable-prefix-caching"}
    assert expand_config(["--config", str(path), "--port", "1"], known) == [*tail, "--port", "1"]
    assert shlex.split(shlex.join(tail)) == tail
