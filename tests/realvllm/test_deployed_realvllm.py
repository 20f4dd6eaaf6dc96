"""The tuner as it is deployed, on a genuine vLLM (CPU 0.32.0), in three server boots:

1. a one-trial study on the tier's tiny Llama, its server given an API key through --server-args: the
   report of a real CPU run claims nothing it did not measure, and the export (env file, `vllm serve
   --config` YAML, serve.sh) leaves the key out;
2. the genuine vLLM started from that serve.sh (the key given to the script): `bucket-tuner bench`
   against vLLM's own client on it, with the command lines people use: chat prompts sized like vLLM's
   (input tokens within 2%), 1,800-token chat prompts on a 2,048-token server (as many completed),
   a missing key named as a 401, vLLM's exit status (and --fail-on-errors);
3. the genuine vLLM started from the YAML with `vllm serve MODEL2 --config` and an alias: the second
   model, whose tokenizer differs in vocabulary, specials, template and BOS: with no --model the
   model behind the alias gives the tokenizer, chat parity again, and without a tokenizer one line
   says the chat length is not controlled.

Figures (ours vs vLLM's client) are printed at the end of the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tuner.serve.process import ServerProcess, find_free_port

from .conftest import _FIGURES
from .test_realvllm import BOOT_LIMIT_S, KV_BYTES, SERVED, TreeRecorder, bucket_tuner, server_env

pytestmark = [
    pytest.mark.realvllm,
    pytest.mark.xdist_group("realvllm"),  # one worker runs the tier, in file order (the scheduler in tests/conftest.py)
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc"),
]

KEY = "tier-test-key-24"   # a throwaway key for a server on 127.0.0.1
ALIAS2 = "chat-small"
MAX_LEN = 2048
SPACE = {
    "name": "deployed",
    "description": "one trial on the tiny CPU model, 2,048-token context, eager (no compile phase)",
    "server": {"max_model_len": MAX_LEN, "block_size": 32, "max_num_batched_tokens": MAX_LEN, "enforce_eager": True},
    "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
    "parameters": {"max_num_seqs": {"type": "categorical", "choices": [16, 32]}},
}
KEY_LINE = "HTTP 401 Unauthorized: the server requires an API key; set OPENAI_API_KEY"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _run(argv, env, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


def _models(base_url: str, key: str | None = None) -> list[dict]:
    req = urllib.request.Request(base_url + "/v1/models", headers={"Authorization": f"Bearer {key}"} if key else {})
    with _NO_PROXY.open(req, timeout=10) as resp:
        return json.loads(resp.read())["data"]


def _result(folder: Path) -> dict:
    files = sorted(folder.glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


class Genuine:
    """A genuine server started from an exported file, stopped by our launcher, nothing left behind."""

    def __init__(self, argv, env, tmp: Path, port: int):
        self.tmp, self.port, self.base_url = tmp, port, f"http://127.0.0.1:{port}"
        self.log = tmp / "server.log"
        self.srv = ServerProcess(records_dir=tmp / "run")
        t0 = time.monotonic()
        self.srv.start([str(a) for a in argv], env, self.log, port=port)
        self.recorder = TreeRecorder(self.srv.pid)
        outcome = self.srv.wait_ready(self.base_url, boot_timeout_s=BOOT_LIMIT_S, warmup_timeout_s=BOOT_LIMIT_S)
        self.ready_s = time.monotonic() - t0
        if not outcome.ok:
            self.close()
            raise AssertionError(f"{outcome.kind.value}: {outcome.reason}\n" + "\n".join(outcome.log_tail[-40:]))

    def close(self):
        try:
            report = self.srv.stop(grace_int_s=3, grace_term_s=3, grace_kill_s=3)
            assert report.clean and not report.leftover, report
        finally:
            self.recorder.stop()
            left = self.recorder.alive()
            self.recorder.kill_all()
        assert not left, f"left behind: {left}"


# ------------------------------------------------------------------------------------ 1: the study
@pytest.fixture(scope="module")
def study(vllm_env, tmp_path_factory):
    root = tmp_path_factory.mktemp("deployed")
    (root / "space.yaml").write_text(yaml.safe_dump(SPACE))
    env = {**server_env(root / "client"), "OPENAI_API_KEY": KEY}  # the tuner's own load test needs the key
    cmd = [*bucket_tuner(), "tune", "--space", root / "space.yaml", "--backend", "vllm",
           "--vllm-command", vllm_env.vllm, "--model", vllm_env.model, "--served-model-name", SERVED,
           "--server-args", f"--load-format dummy --kv-cache-memory-bytes {KV_BYTES} --api-key {KEY}",
           "--n-trials", "1", "--results", root / "results", "--vocab-size", "2000", "--dataset-name", "fixed",
           "--random-input-len", "64", "--random-output-len", "16", "--num-prompts", "16", "--max-concurrency", "8",
           "--boot-timeout", BOOT_LIMIT_S, "--warmup-timeout", BOOT_LIMIT_S, "--sampler-seed", "1",
           "--no-seed-defaults"]
    t0 = time.monotonic()
    proc = _run(cmd, env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _FIGURES.append(f"study (1 trial, key-protected server): {time.monotonic() - t0:.0f} s wall")
    return root, root / "results" / "deployed"


def test_the_report_of_a_cpu_run_claims_nothing_it_did_not_measure(study):
    from tests.report.test_report import sections

    _, folder = study
    text = sections((folder / "report.html").read_text())
    trial = json.loads((folder / "trials" / "0000" / "result.json").read_text())
    assert trial["status"] == "ok" and trial["metrics"]["completed"] == 16, trial["reason"]
    warm = text["warmup"]
    assert "server's own count" not in warm and "launch to ready (timed by the tuner" in warm
    assert "weights (s)" not in warm and "start to weights loaded (s)" in warm
    for absent in ("prompt graphs", "decode graphs", "prompt buckets", "kv blocks"):
        assert absent not in warm, absent
    for absent in ("prompt buckets", "KV blocks pred / obs", "cold / cached warmup"):
        assert absent not in text["trials"], absent
    everything = "".join(text.values())
    assert "HPU graph" not in everything and "HPU-graph" not in everything, everything[:3000]
    assert "simulator" not in text["convergence"]
    table = warm.split("window.PLOTLYENV")[0].split("took", 1)[-1]  # the table's text, before the chart
    _FIGURES.append(f"report warmup table (real CPU run): {table.strip()[:240]}")


def test_the_export_leaves_the_key_out_and_says_so(study):
    _, folder = study
    for name in ("best.env", "best.vllm.yaml", "best.serve.sh"):
        text = (folder / name).read_text()
        assert KEY not in text and "***" not in text, name
    assert "--api-key left out" in (folder / "best.serve.sh").read_text()
    assert "--api-key left out" in (folder / "best.vllm.yaml").read_text()
    conf = yaml.safe_load((folder / "best.vllm.yaml").read_text())
    assert conf["served-model-name"] == SERVED and conf["max-model-len"] == MAX_LEN and conf["enforce-eager"] is True
    assert conf["load-format"] == "dummy" and "api-key" not in conf


# ------------------------------------------------------------------------------------ 2: serve.sh
@pytest.fixture(scope="class")
def script_server(study, vllm_env):
    root, folder = study
    port = find_free_port()
    server = Genuine(["sh", folder / "best.serve.sh", "--host", "127.0.0.1", "--port", port, "--api-key", KEY],
                     server_env(root / "script"), root / "script", port)
    _FIGURES.append(f"vLLM started from best.serve.sh: launch to /health 200 in {server.ready_s:.1f} s")
    try:
        yield server
    finally:
        server.close()


def _keyed(root: Path, name: str) -> dict:
    return {**server_env(root / name), "OPENAI_API_KEY": KEY}


def _chat_line(base_url, model, n, input_len, output_len, out_dir, served=None):
    line = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", base_url,
            "--dataset-name", "random", "--num-prompts", n, "--random-input-len", input_len,
            "--random-output-len", output_len, "--max-concurrency", "8", "--save-result", "--result-dir", out_dir,
            "--disable-tqdm", "--ignore-eos"]
    if model is not None:
        line += ["--model", model]
    if served is not None:
        line += ["--served-model-name", served]
    return line


def _parity(label, ours, theirs, tol=0.02):
    o, v = ours["total_input_tokens"], theirs["total_input_tokens"]
    _FIGURES.append(f"{label}: input tokens ours {o}, vLLM's client {v} ({100 * (o / v - 1):+.2f}%); completed "
                    f"ours {ours['completed']}, vLLM's {theirs['completed']}")
    assert abs(o / v - 1) <= tol, (o, v)


class TestFromServeScript:
    """The genuine vLLM started from best.serve.sh (the key given to the script)."""

    def test_serve_sh_starts_the_trials_server(self, study, script_server, vllm_env):
        _, folder = study
        (model,) = _models(script_server.base_url, KEY)
        assert model["id"] == SERVED and model["root"] == str(vllm_env.model)
        trial = json.loads((folder / "trials" / "0000" / "result.json").read_text())
        log = script_server.log.read_text(errors="replace")
        assert f"'max_num_seqs': {trial['params']['max_num_seqs']}" in log and "'enforce_eager': True" in log
        with pytest.raises(urllib.error.HTTPError):  # the key given to the script reached the server
            _models(script_server.base_url)


    def test_a_missing_key_is_named_as_401(self, study, script_server, vllm_env):
        root, _ = study
        env = server_env(root / "nokey")
        line = ["--base-url", script_server.base_url, "--model", vllm_env.model, "--served-model-name", SERVED,
                "--num-prompts", "4", "--random-input-len", "32", "--random-output-len", "4", "--disable-tqdm"]
        ours = _run([*bucket_tuner(), "bench", *line], env)
        theirs = _run([vllm_env.vllm, "bench", "serve", "--backend", "vllm", *line], env)
        assert ours.returncode == 2 and KEY_LINE in ours.stderr, ours.stderr[-2000:]
        _FIGURES.append(f"missing key: ours exit {ours.returncode}: {ours.stderr.strip().splitlines()[-1][:150]}; "
                        f"vLLM's client exit {theirs.returncode}, "
                        f"{'Unauthorized' in theirs.stdout + theirs.stderr and 'says Unauthorized' or 'no 401 named'}")


    def test_chat_prompts_carry_vllms_token_counts(self, study, script_server, vllm_env, tmp_path):
        root, _ = study
        args = (script_server.base_url, vllm_env.model, 40, 128, 8)
        theirs = _run([vllm_env.vllm, "bench", "serve", *_chat_line(*args, tmp_path / "theirs", SERVED)],
                      _keyed(root, "c1"))
        assert theirs.returncode == 0, theirs.stdout[-2000:] + theirs.stderr[-2000:]
        ours = _run([*bucket_tuner(), "bench", *_chat_line(*args, tmp_path / "ours", SERVED)], _keyed(root, "c2"))
        assert ours.returncode == 0, ours.stdout[-2000:] + ours.stderr[-2000:]
        d, v = _result(tmp_path / "ours"), _result(tmp_path / "theirs")
        assert d["completed"] == v["completed"] == 40
        _parity("chat 40 x 128 (tiny Llama, BOS tokenizer)", d, v)
        assert "sized_by" in d["tuner_chat_prompts"] and d["tuner_chat_prompts"]["sized_by"]


    def test_long_chat_prompts_complete_as_vllms_do(self, study, script_server, vllm_env, tmp_path):
        root, _ = study
        args = (script_server.base_url, vllm_env.model, 10, 1800, 128)
        theirs = _run([vllm_env.vllm, "bench", "serve", *_chat_line(*args, tmp_path / "theirs", SERVED)],
                      _keyed(root, "l1"))
        ours = _run([*bucket_tuner(), "bench", *_chat_line(*args, tmp_path / "ours", SERVED)], _keyed(root, "l2"))
        assert theirs.returncode == 0 and ours.returncode == 0, ours.stderr[-2000:]
        d, v = _result(tmp_path / "ours"), _result(tmp_path / "theirs")
        _parity(f"long chat 10 x 1800 + 128 on a {MAX_LEN}-token server", d, v)
        assert d["completed"] >= v["completed"] and d["completed"] == 10, d.get("tuner_failures")


    def test_exit_status_is_vllms_and_fail_on_errors_is_the_gate(self, study, script_server, vllm_env, tmp_path):
        """Prompts longer than the server's context: every request fails with the server's HTTP 400."""
        root, _ = study
        line = ["--base-url", script_server.base_url, "--model", vllm_env.model, "--served-model-name", SERVED,
                "--dataset-name", "random", "--num-prompts", "6", "--random-input-len", str(MAX_LEN + 100),
                "--random-output-len", "4", "--disable-tqdm"]
        theirs = _run([vllm_env.vllm, "bench", "serve", "--backend", "vllm", *line], _keyed(root, "e1"))
        ours = _run([*bucket_tuner(), "bench", *line], _keyed(root, "e2"))
        strict = _run([*bucket_tuner(), "bench", *line, "--fail-on-errors"], _keyed(root, "e3"))
        assert "Failed requests:                         6" in theirs.stdout, theirs.stdout[-2000:]
        assert ours.returncode == theirs.returncode == 0, (ours.returncode, theirs.returncode)
        assert "maximum context length" in ours.stdout and "exit status 0, as vllm bench serve's" in ours.stderr
        assert strict.returncode == 1 and "6 of 6 requests failed" in strict.stderr
        _FIGURES.append(f"exit status, all 6 requests failed: vLLM's client {theirs.returncode}, ours "
                        f"{ours.returncode}, ours --fail-on-errors {strict.returncode}: "
                        f"{strict.stderr.strip().splitlines()[-1][:140]}")


# ------------------------------------------------------------------------------------ 3: --config
@pytest.fixture(scope="class")
def config_server(study, vllm_env):
    root, folder = study
    env = server_env(root / "config")
    env.update(line.split("=", 1) for line in (folder / "best.env").read_text().splitlines()
               if line and not line.startswith("#"))
    port = find_free_port()
    server = Genuine([vllm_env.vllm, "serve", vllm_env.model2, "--config", folder / "best.vllm.yaml",
                      "--served-model-name", ALIAS2, "--host", "127.0.0.1", "--port", port], env, root / "config", port)
    _FIGURES.append(f"vLLM started from best.vllm.yaml (model 2): launch to /health 200 in {server.ready_s:.1f} s")
    try:
        yield server
    finally:
        server.close()


class TestFromConfigFile:
    """`vllm serve MODEL2 --config best.vllm.yaml --served-model-name chat-small`: the trial's flags on the
    second model (command-line model and flags win over the file's)."""

    def test_the_config_file_gives_the_trials_flags(self, study, config_server, vllm_env):
        _, folder = study
        (model,) = _models(config_server.base_url)
        assert model["id"] == ALIAS2 and model["root"] == str(vllm_env.model2)
        trial = json.loads((folder / "trials" / "0000" / "result.json").read_text())
        log = config_server.log.read_text(errors="replace")
        assert f"'max_num_seqs': {trial['params']['max_num_seqs']}" in log and "'enforce_eager': True" in log
        assert f"'max_model_len': {MAX_LEN}" in log

    def test_no_model_reads_the_tokenizer_of_the_model_behind_the_alias(self, study, config_server, vllm_env,
                                                                         tmp_path):
        root, _ = study
        args = (config_server.base_url, None, 40, 128, 8)
        theirs = _run([vllm_env.vllm, "bench", "serve", *_chat_line(*args, tmp_path / "theirs")],
                      server_env(root / "a1"))
        assert theirs.returncode == 0, theirs.stdout[-2000:] + theirs.stderr[-2000:]
        ours = _run([*bucket_tuner(), "bench", *_chat_line(*args, tmp_path / "ours")], server_env(root / "a2"))
        assert ours.returncode == 0, ours.stdout[-2000:] + ours.stderr[-2000:]
        assert f"First model name: {ALIAS2}, first model id: {vllm_env.model2}" in ours.stdout
        d, v = _result(tmp_path / "ours"), _result(tmp_path / "theirs")
        assert d["model_id"] == v["model_id"] == str(vllm_env.model2)
        assert d["tuner_vocab"]["vocab_source"] == f"tokenizer {vllm_env.model2}"
        assert d["tuner_vocab"]["vocab_size"] == 3000 and "not controlled" not in ours.stderr
        assert d["completed"] == v["completed"] == 40
        _parity("chat 40 x 128 (model 2: ChatML, no BOS, vocab 3000; no --model, alias)", d, v)

    def test_chat_without_a_tokenizer_says_its_length_is_not_controlled(self, study, config_server, tmp_path):
        root, _ = study
        run = _run([*bucket_tuner(), "bench", *_chat_line(config_server.base_url, ALIAS2, 4, 64, 4, tmp_path)],
                   server_env(root / "n1"))
        assert run.returncode == 0, run.stderr[-2000:]
        said = [line for line in run.stderr.splitlines() if "not controlled" in line]
        assert len(said) == 1 and repr(ALIAS2) in said[0]
        d = _result(tmp_path)
        _FIGURES.append(f"chat without a tokenizer (4 x 64 asked): {d['total_input_tokens'] / 4:.0f} input tokens "
                        "per request, said once on stderr")
