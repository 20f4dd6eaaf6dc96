"""The tuner as it is deployed, on a genuine vLLM (CPU 0.32.0), in four server boots:

1. a two-trial study on the tier's tiny Llama (max_num_seqs 4 and 64, the one knob with a visible
   effect on CPU), its servers given an API key through --server-args, with the options that only
   change what happens around a boot: a load sweep (two load points on each server) and a cached
   warm-up that cannot be (no recipes on CPU: said once, the cold warm-up scored). Two servers, one at
   a time, none of their processes left; the report of a real CPU run claims nothing it did not
   measure, and the export (env file, `vllm serve --config` YAML, serve.sh) leaves the key out;
2. the genuine vLLM started from that serve.sh (the key given to the script): `bucket-tuner bench`
   against vLLM's own client on it, with the command lines people use: chat prompts sized like vLLM's
   (input tokens within 2%), 1,800-token chat prompts on a 2,048-token server (as many completed),
   a missing key named as a 401, vLLM's exit status (and --fail-on-errors);
3. the genuine vLLM started from the YAML with `vllm serve MODEL2 --config` and an alias: the second
   model, whose tokenizer differs in vocabulary, specials, template and BOS: with no --model the
   model behind the alias gives the tokenizer, chat parity again, and without a tokenizer one line
   says the chat length is not controlled; that server was started by a tuner in a process of its own,
   which is then killed with SIGKILL: its watchdog leaves no process and no record behind.

Figures (ours vs vLLM's client, the study's trials) are printed at the end of the module.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
import yaml

from tuner.serve.ports import find_free_port
from tuner.serve.process import ServerProcess

from ..conftest import ROOT
from .conftest import _FIGURES
from .test_realvllm import (
    BOOT_LIMIT_S,
    KV_BYTES,
    SERVED,
    VOCAB,
    TreeRecorder,
    bucket_tuner,
    listening,
    proc_table,
    server_env,
    venv_processes,
)

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
    "description": "the tiny CPU model, 2,048-token context, eager (no compile phase: ~1 min a boot here); "
                   "max_num_seqs is the knob with a visible effect (4 halves throughput and multiplies TTFT)",
    "server": {"max_model_len": MAX_LEN, "block_size": 32, "max_num_batched_tokens": MAX_LEN, "enforce_eager": True},
    "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
    "parameters": {"max_num_seqs": {"type": "categorical", "choices": [4, 64]}},
}
PROMPTS, IN_LEN, OUT_LEN = 32, 64, 32
KEY_LINE = "HTTP 401 Unauthorized: the server requires an API key; set OPENAI_API_KEY"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _run(argv, env, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


def _run_together(*runs: tuple[list, dict], timeout=600) -> list[subprocess.CompletedProcess]:
    """Several clients at once against one server (vLLM's client spends most of its ~10 s importing):
    what each sends and counts does not depend on the others, only the timings would."""
    procs = [subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for argv, env in runs]
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


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
@dataclass
class Study:
    root: Path
    folder: Path           # the study's results folder
    out: str
    err: str
    wall_s: float
    tuner_pid: int
    recorder: TreeRecorder  # every process the tuner started, recorded while it ran
    strays: set[int]        # vLLM processes with the study's HOME left after it, not there before

    def exported_trial(self) -> dict:
        """The result.json of the trial the env file was exported from (its header names it)."""
        head = (self.folder / "best.env").read_text().splitlines()[0]
        number = int(head.split(", trial ", 1)[1].split(",", 1)[0])
        return json.loads((self.folder / "trials" / f"{number:04d}" / "result.json").read_text())


@pytest.fixture(scope="module")
def study(vllm_env, tmp_path_factory):
    root = tmp_path_factory.mktemp("deployed")
    (root / "space.yaml").write_text(yaml.safe_dump(SPACE))
    env = {**server_env(root / "client"), "OPENAI_API_KEY": KEY}  # the tuner's own load test needs the key
    cmd = [*bucket_tuner(), "tune", "--space", root / "space.yaml", "--backend", "vllm",
           "--vllm-command", vllm_env.vllm, "--model", vllm_env.model, "--served-model-name", SERVED,
           "--server-args", f"--load-format dummy --kv-cache-memory-bytes {KV_BYTES} --api-key {KEY}",
           "--n-trials", "2", "--sampler", "grid", "--sampler-seed", "1", "--no-seed-defaults",
           "--results", root / "results", "--vocab-size", VOCAB, "--dataset-name", "fixed",
           "--random-input-len", IN_LEN, "--random-output-len", OUT_LEN, "--num-prompts", PROMPTS,
           "--max-concurrency", "8", "--num-warmups", "2", "--load-sweep", "concurrency=1,8",
           "--warmup", "cached", "--shared-recipe-cache", root / "recipes",
           "--boot-timeout", BOOT_LIMIT_S, "--warmup-timeout", BOOT_LIMIT_S]
    before = set(venv_processes(vllm_env.venv, root / "client" / "home"))
    t0 = time.monotonic()
    proc = subprocess.Popen([str(a) for a in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=root, start_new_session=True)
    recorder = TreeRecorder(proc.pid, interval_s=0.3)
    try:
        try:
            out, err = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # the tuner stops its servers on the way out
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
            pytest.fail(f"tune did not finish in 900 s\n{out[-3000:]}\n{err[-3000:]}")
        wall = time.monotonic() - t0
        recorder.stop()
        assert proc.returncode == 0, f"rc={proc.returncode}\n{out[-3000:]}\n{err[-3000:]}"
        strays = set(venv_processes(vllm_env.venv, root / "client" / "home")) - before
        _FIGURES.append(f"study (2 trials, key-protected servers, load sweep, cached warm-up asked): {wall:.0f} s wall")
        yield Study(root, root / "results" / "deployed", out, err, wall, proc.pid, recorder, strays)
    finally:
        recorder.stop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        recorder.kill_all()


def test_two_trial_study_end_to_end(study):
    """Two trials through the real path, with the options that only change what happens around a boot
    checked on the same two boots:

    * `--load-sweep concurrency=1,8`: one boot, two load points, both recorded with their own vLLM
      result, the trial reporting the last one;
    * `--warmup cached --shared-recipe-cache DIR`: the variable is ignored there (no Gaudi bridge, no
      recipes); the tool says so once, falls back to cold and scores the cold warmup it measured."""
    folder, out, err = study.folder, study.out, study.err
    for name in ("report.html", "trials.csv", "pareto.csv", "best.env"):
        assert (folder / name).is_file(), f"{name} missing; stderr:\n{err}"
    assert "Pareto front" in out, out
    assert "Pareto" in (folder / "report.html").read_text()
    best = (folder / "best.env").read_text()
    assert "# vllm serve flags: " in best and "--max-num-seqs" in best, best
    assert "VLLM_CPU_KVCACHE_SPACE=1" in best.splitlines(), best

    rows = list(csv.DictReader((folder / "trials.csv").open()))
    assert len(rows) == 2, rows
    tuned = optuna.load_study(study_name="deployed", storage=f"sqlite:///{folder / 'study.db'}")
    results = {}
    for row in sorted(rows, key=lambda r: int(r["number"])):
        number = int(row["number"])
        result = results[number] = json.loads((folder / "trials" / f"{number:04d}" / "result.json").read_text())
        obs, metrics, params = result["observed"], result["metrics"], result["params"]
        assert row["status"] == "ok", (row["status"], row["reason"])
        assert 0 < obs["warmup_s"] < BOOT_LIMIT_S
        assert obs["stop"]["leftover"] == [] and obs["stop"]["ended_by"] == "SIGINT", obs["stop"]
        assert obs["stop"]["exit_code"] == 0, obs["stop"]  # an idle vLLM honours SIGINT
        argv = result["argv"]  # the searched value and the space's fixed ones reached the real command line
        assert argv[argv.index("--max-num-seqs") + 1] == str(params["max_num_seqs"])
        assert argv[argv.index("--max-num-batched-tokens") + 1] == str(MAX_LEN) and "--enforce-eager" in argv
        assert argv[argv.index("--api-key") + 1] == "***"  # given to the server, masked in the record

        # the load sweep: both points measured on the one server, the last one reported
        points = obs["load_sweep"]
        assert [(p["point"], p["selected"]) for p in points] == [("concurrency=1", False), ("concurrency=8", True)]
        for p, limit in zip(points, (1, 8)):
            m = p["metrics"]
            assert p["status"] == "ok" and m["completed"] == PROMPTS and m["failed"] == 0
            assert m["total_output_tokens"] == PROMPTS * OUT_LEN and m["total_input_tokens"] == PROMPTS * IN_LEN
            bench = json.loads(open(p["bench_json"]).read())
            assert bench["max_concurrency"] == limit and bench["completed"] == PROMPTS
            assert bench["max_concurrent_requests"] <= limit  # the exact peak the client held in flight
        # the trial reports the last point; its first-run window is the first point's, the one after ready
        # (tuner/load/firstrun.py: the 2 warm-pass requests against the measured run's first 2, as on the simulator)
        first_run = {k: v for k, v in metrics.items() if k.startswith(("first_", "warm_"))}
        assert {k: v for k, v in metrics.items() if k not in first_run} == points[1]["metrics"]
        assert metrics["output_throughput"] > 0
        assert first_run == {k: v for k, v in points[0]["metrics"].items() if k.startswith(("first_", "warm_"))}
        assert first_run["first_requests"] == first_run["warm_requests"] == obs["first_run_window"] == 2
        assert first_run["first_p99_ttft_ms"] > 0 and first_run["first_output_throughput"] > 0
        assert obs["first_run_not_warmed_up"] == 0  # a CPU vLLM logs no "was not warmed-up"

        # the cached warmup is impossible here: the cold one measured and scored instead
        (t,) = [t for t in tuned.trials if t.number == number]
        assert obs["warmup_source"] == "launch to ready" and obs["warmup_cold_s"] == obs["warmup_s"]
        assert obs.get("warmup_cached_s") is None and "recipe_cache_hit_rate" not in obs
        assert t.values[2] == obs["warmup_s"]
        assert "PT_HPU_RECIPE_CACHE_CONFIG" not in result["env"]
        _FIGURES.append(
            f"  trial {number}: max_num_seqs={params['max_num_seqs']}: {metrics['output_throughput']:.0f} out "
            f"tok/s, p99 TTFT {metrics['p99_ttft_ms']:.0f} ms, median TPOT {metrics['median_tpot_ms']:.1f} ms, "
            f"warmup (launch to ready) {obs['warmup_s']:.1f} s, trial {result['timings']['total_s']:.0f} s; "
            "load sweep " + "; ".join(f"{p['point']} {p['metrics']['output_throughput']:.0f} tok/s, p99 TTFT "
                                      f"{p['metrics']['p99_ttft_ms']:.0f} ms" for p in points))
    assert sorted(r["params"]["max_num_seqs"] for r in results.values()) == [4, 64]  # the whole grid, once each
    sweep_rows = list(csv.DictReader((folder / "load_sweep.csv").open()))
    assert [(r["point"], r["selected"]) for r in sweep_rows] == [
        ("concurrency=1", "False"), ("concurrency=8", "True")] * 2, sweep_rows
    said = " ".join(err.split())
    assert "--warmup cached:" in said and "falling back to the cold warmup" in said, err
    assert said.count("ignores PT_HPU_RECIPE_CACHE_CONFIG") == 1, err
    assert tuned.user_attrs["warmup_mode"] == "cold"
    assert not any(p.is_file() for p in (study.root / "recipes").rglob("*")), "the CPU server wrote recipes?"

    # Two servers ran (each a full tree), one at a time, and none of their processes is left.
    # (Counted as the tuner's own children: a transient fork of an API server carries its command line.)
    seen = study.recorder.seen
    apis = [pid for pid, rec in seen.items() if rec["ppid"] == study.tuner_pid and "api_server" in rec["roles"]]
    assert len(apis) == 2, seen
    assert {"EngineCore", "Worker", "resource_tracker"} <= study.recorder.roles()
    assert not study.recorder.alive(), f"left behind: {study.recorder.alive()}"
    assert not study.strays, study.strays


def test_the_report_of_a_cpu_run_claims_nothing_it_did_not_measure(study):
    from tests.report.test_report import sections

    folder = study.folder
    text = sections((folder / "report.html").read_text())
    trial = study.exported_trial()  # the report's pick
    assert trial["status"] == "ok" and trial["metrics"]["completed"] == PROMPTS, trial["reason"]
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
    folder = study.folder
    for name in ("best.env", "best.vllm.yaml", "best.serve.sh"):
        text = (folder / name).read_text()
        assert KEY not in text and "***" not in text, name
    assert "--api-key left out" in (folder / "best.serve.sh").read_text()
    assert "--api-key left out" in (folder / "best.vllm.yaml").read_text()
    conf = yaml.safe_load((folder / "best.vllm.yaml").read_text())
    assert conf["served-model-name"] == SERVED and conf["max-model-len"] == MAX_LEN and conf["enforce-eager"] is True
    assert conf["load-format"] == "dummy" and "api-key" not in conf
    # nor is it kept anywhere else: records, the study's database, the servers' logs (vLLM 0.32 masks it in
    # its non-default args itself; older releases printed it, which tests/serve/test_server.py covers)
    files = [f for f in folder.rglob("*") if f.is_file()]
    assert not [f for f in files if KEY.encode() in f.read_bytes()], "the key was stored"
    logs = [f for f in files if f.name == "server.log"]
    assert len(logs) == 2 and all("'api_key': " in f.read_text(errors="replace") for f in logs), logs


# ------------------------------------------------------------------------------------ 2: serve.sh
@pytest.fixture(scope="class")
def script_server(study, vllm_env):
    root, folder = study.root, study.folder
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
        (model,) = _models(script_server.base_url, KEY)
        assert model["id"] == SERVED and model["root"] == str(vllm_env.model)
        trial = study.exported_trial()
        log = script_server.log.read_text(errors="replace")
        assert f"'max_num_seqs': {trial['params']['max_num_seqs']}" in log and "'enforce_eager': True" in log
        with pytest.raises(urllib.error.HTTPError):  # the key given to the script reached the server
            _models(script_server.base_url)


    def test_a_missing_key_is_named_as_401(self, study, script_server, vllm_env):
        root = study.root
        env = server_env(root / "nokey")
        line = ["--base-url", script_server.base_url, "--model", vllm_env.model, "--served-model-name", SERVED,
                "--num-prompts", "4", "--random-input-len", "32", "--random-output-len", "4", "--disable-tqdm"]
        ours, theirs = _run_together(([*bucket_tuner(), "bench", *line], env),
                                     ([vllm_env.vllm, "bench", "serve", "--backend", "vllm", *line], env))
        assert ours.returncode == 2 and KEY_LINE in ours.stderr, ours.stderr[-2000:]
        _FIGURES.append(f"missing key: ours exit {ours.returncode}: {ours.stderr.strip().splitlines()[-1][:150]}; "
                        f"vLLM's client exit {theirs.returncode}, "
                        f"{'Unauthorized' in theirs.stdout + theirs.stderr and 'says Unauthorized' or 'no 401 named'}")


    def test_chat_prompts_carry_vllms_token_counts(self, study, script_server, vllm_env, tmp_path):
        root = study.root
        args = (script_server.base_url, vllm_env.model, 40, 128, 8)
        theirs, ours = _run_together(
            ([vllm_env.vllm, "bench", "serve", *_chat_line(*args, tmp_path / "theirs", SERVED)], _keyed(root, "c1")),
            ([*bucket_tuner(), "bench", *_chat_line(*args, tmp_path / "ours", SERVED)], _keyed(root, "c2")))
        assert theirs.returncode == 0, theirs.stdout[-2000:] + theirs.stderr[-2000:]
        assert ours.returncode == 0, ours.stdout[-2000:] + ours.stderr[-2000:]
        d, v = _result(tmp_path / "ours"), _result(tmp_path / "theirs")
        assert d["completed"] == v["completed"] == 40
        _parity("chat 40 x 128 (tiny Llama, BOS tokenizer)", d, v)
        assert "sized_by" in d["tuner_chat_prompts"] and d["tuner_chat_prompts"]["sized_by"]


    def test_long_chat_prompts_complete_as_vllms_do(self, study, script_server, vllm_env, tmp_path):
        root = study.root
        args = (script_server.base_url, vllm_env.model, 10, 1800, 128)
        theirs, ours = _run_together(
            ([vllm_env.vllm, "bench", "serve", *_chat_line(*args, tmp_path / "theirs", SERVED)], _keyed(root, "l1")),
            ([*bucket_tuner(), "bench", *_chat_line(*args, tmp_path / "ours", SERVED)], _keyed(root, "l2")))
        assert theirs.returncode == 0 and ours.returncode == 0, ours.stderr[-2000:]
        d, v = _result(tmp_path / "ours"), _result(tmp_path / "theirs")
        _parity(f"long chat 10 x 1800 + 128 on a {MAX_LEN}-token server", d, v)
        assert d["completed"] >= v["completed"] and d["completed"] == 10, d.get("tuner_failures")


    def test_exit_status_is_vllms_and_fail_on_errors_is_the_gate(self, study, script_server, vllm_env, tmp_path):
        """Prompts longer than the server's context: every request fails with the server's HTTP 400."""
        root = study.root
        line = ["--base-url", script_server.base_url, "--model", vllm_env.model, "--served-model-name", SERVED,
                "--dataset-name", "random", "--num-prompts", "6", "--random-input-len", str(MAX_LEN + 100),
                "--random-output-len", "4", "--disable-tqdm"]
        theirs, ours, strict = _run_together(
            ([vllm_env.vllm, "bench", "serve", "--backend", "vllm", *line], _keyed(root, "e1")),
            ([*bucket_tuner(), "bench", *line], _keyed(root, "e2")),
            ([*bucket_tuner(), "bench", *line, "--fail-on-errors"], _keyed(root, "e3")))
        assert "Failed requests:                         6" in theirs.stdout, theirs.stdout[-2000:]
        assert ours.returncode == theirs.returncode == 0, (ours.returncode, theirs.returncode)
        assert "maximum context length" in ours.stdout and "exit status 0, as vllm bench serve's" in ours.stderr
        assert strict.returncode == 1 and "6 of 6 requests failed" in strict.stderr
        _FIGURES.append(f"exit status, all 6 requests failed: vLLM's client {theirs.returncode}, ours "
                        f"{ours.returncode}, ours --fail-on-errors {strict.returncode}: "
                        f"{strict.stderr.strip().splitlines()[-1][:140]}")


# ------------------------------------------------------------------------------------ 3: --config
# A tuner in a process of its own starts the server (our launcher, with its watchdog) and waits; the
# class's last test kills that tuner with SIGKILL: no handler, no atexit, no `with` block runs in it.
TUNER = r"""
import json, sys, time
from tuner.serve.process import ServerProcess
argv, env, log, records, url, port, limit = json.loads(sys.argv[1])
srv = ServerProcess(records_dir=records).start(argv, env, log, port=port)
out = srv.wait_ready(url, boot_timeout_s=limit, warmup_timeout_s=limit)
print(json.dumps({"ok": out.ok, "reason": out.reason, "pid": srv.pid, "pgid": srv.pgid}), flush=True)
time.sleep(900)
"""


class KillableTuner:
    """A genuine server started by a tuner process we can kill, its tree recorded from the start."""

    def __init__(self, argv, env, tmp: Path, port: int):
        self.tmp, self.port, self.base_url = tmp, port, f"http://127.0.0.1:{port}"
        self.log, self.records = tmp / "server.log", tmp / "run"
        payload = json.dumps([[str(a) for a in argv], env, str(self.log), str(self.records), self.base_url, port,
                              BOOT_LIMIT_S])
        t0 = time.monotonic()
        self.tuner = subprocess.Popen([sys.executable, "-c", TUNER, payload], stdout=subprocess.PIPE, text=True,
                                      cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
        self.recorder = TreeRecorder(self.tuner.pid)
        self.info = json.loads(self.tuner.stdout.readline() or "{}")
        self.ready_s = time.monotonic() - t0
        if not self.info.get("ok"):
            self.close()
            raise AssertionError(f"{self.info}\n{self.log.read_text()[-3000:] if self.log.exists() else ''}")

    def close(self):
        """Whatever happened: the tuner gone, its watchdog given its time, then nothing of the tree left."""
        if self.tuner.poll() is None:
            self.tuner.kill()
            self.tuner.wait()
        self.tuner.stdout.close()
        deadline = time.monotonic() + 40
        while self.recorder.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.recorder.stop()
        left = self.recorder.alive()
        self.recorder.kill_all()
        assert not left, f"left behind: {left}"


@pytest.fixture(scope="class")
def config_server(study, vllm_env):
    root, folder = study.root, study.folder
    env = server_env(root / "config")
    env.update(line.split("=", 1) for line in (folder / "best.env").read_text().splitlines()
               if line and not line.startswith("#"))
    port = find_free_port()
    server = KillableTuner([vllm_env.vllm, "serve", vllm_env.model2, "--config", folder / "best.vllm.yaml",
                            "--served-model-name", ALIAS2, "--host", "127.0.0.1", "--port", port], env,
                           root / "config", port)
    _FIGURES.append(f"vLLM started from best.vllm.yaml (model 2): launch to /health 200 in {server.ready_s:.1f} s")
    try:
        yield server
    finally:
        server.close()


class TestFromConfigFile:
    """`vllm serve MODEL2 --config best.vllm.yaml --served-model-name chat-small`: the trial's flags on the
    second model (command-line model and flags win over the file's); then the tuner that started it is
    killed, and its watchdog leaves no process of it."""

    def test_the_config_file_gives_the_trials_flags(self, study, config_server, vllm_env):
        (model,) = _models(config_server.base_url)
        assert model["id"] == ALIAS2 and model["root"] == str(vllm_env.model2)
        trial = study.exported_trial()
        log = config_server.log.read_text(errors="replace")
        assert f"'max_num_seqs': {trial['params']['max_num_seqs']}" in log and "'enforce_eager': True" in log
        assert f"'max_model_len': {MAX_LEN}" in log

    def test_no_model_reads_the_tokenizer_of_the_model_behind_the_alias(self, study, config_server, vllm_env,
                                                                         tmp_path):
        root = study.root
        args = (config_server.base_url, None, 40, 128, 8)
        theirs, ours = _run_together(
            ([vllm_env.vllm, "bench", "serve", *_chat_line(*args, tmp_path / "theirs")], server_env(root / "a1")),
            ([*bucket_tuner(), "bench", *_chat_line(*args, tmp_path / "ours")], server_env(root / "a2")))
        assert theirs.returncode == 0, theirs.stdout[-2000:] + theirs.stderr[-2000:]
        assert ours.returncode == 0, ours.stdout[-2000:] + ours.stderr[-2000:]
        assert f"First model name: {ALIAS2}, first model id: {vllm_env.model2}" in ours.stdout
        d, v = _result(tmp_path / "ours"), _result(tmp_path / "theirs")
        assert d["model_id"] == v["model_id"] == str(vllm_env.model2)
        assert d["tuner_vocab"]["vocab_source"] == f"tokenizer {vllm_env.model2}"
        assert d["tuner_vocab"]["vocab_size"] == 3000 and "not controlled" not in ours.stderr
        assert d["completed"] == v["completed"] == 40
        _parity("chat 40 x 128 (model 2: ChatML, no BOS, vocab 3000; no --model, alias)", d, v)

    def test_chat_without_a_tokenizer_on_disk_is_sized_by_the_servers(self, study, config_server, tmp_path):
        """An alias with no tokenizer on the client's disk: the genuine server's /tokenize and /detokenize size
        the text (64 tokens, ChatML adds no BOS), its template adds its own, and one line says so."""
        root = study.root
        run = _run([*bucket_tuner(), "bench", *_chat_line(config_server.base_url, ALIAS2, 4, 64, 4, tmp_path)],
                   server_env(root / "n1"))
        assert run.returncode == 0, run.stderr[-2000:]
        said = [line for line in run.stderr.splitlines() if "sizing them with the server's /tokenize" in line]
        assert len(said) == 1 and repr(ALIAS2) in said[0] and "not controlled" not in run.stderr
        d = _result(tmp_path)
        assert d["tuner_chat_prompts"]["tokenizer_check"].startswith("no tokenizer offline")
        assert 64 <= d["total_input_tokens"] / 4 <= 64 + 24, d["total_input_tokens"]
        _FIGURES.append(f"chat without a tokenizer on disk (4 x 64 asked): {d['total_input_tokens'] / 4:.0f} input "
                        "tokens per request, sized by the server's /tokenize")

    def test_a_killed_tuner_leaves_no_vllm_process(self, config_server):
        """SIGKILL to the tuner while its `vllm serve` (API server -> EngineCore -> Worker, +
        resource_tracker) is ready and idle; nobody re-runs the tuner, and within seconds the watchdog
        has stopped the whole tree and removed its record."""
        server, info = config_server, config_server.info
        roles = server.recorder.wait_roles(("api_server", "EngineCore"), timeout_s=20)
        assert {"api_server", "EngineCore"} <= roles, roles
        tree = {pid: rec for pid, rec in server.recorder.seen.items() if pid != server.tuner.pid}
        server.tuner.kill()  # SIGKILL
        server.tuner.wait(10)
        killed_at = time.monotonic()

        def group_alive() -> bool:
            return any(p["pgid"] == info["pgid"] and p["state"] not in "ZX" for p in proc_table().values())

        while (server.recorder.alive() or group_alive()) and time.monotonic() - killed_at < 30:
            time.sleep(0.2)
        gone_after = time.monotonic() - killed_at
        assert not server.recorder.alive(), f"left {gone_after:.0f} s after the kill: {server.recorder.alive()}"
        assert not group_alive() and not listening(server.port)
        _FIGURES.append(f"orphan check: {len(tree)} processes of the killed tuner's vLLM gone {gone_after:.1f} s "
                        "after kill -9")
        assert "watchdog: the tuner is gone" in server.log.read_text(errors="replace")
        # the watchdog removes the record once its escalation has returned (a moment after the last exit)
        while list(server.records.glob("server-*.json")) and time.monotonic() - killed_at < 40:
            time.sleep(0.2)
        assert not list(server.records.glob("server-*.json"))
