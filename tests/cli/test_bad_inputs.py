"""Everyday mistakes across every subcommand: one clear line, the right exit status, nothing touched.

Each row runs `bucket-tuner ARGS` (in-process, through `tuner.cli.main`) inside a copy of a small
workspace: a real study made by `tune` on the simulator, a text file, an empty file, a garbage file,
a damaged copy of the study, an SQLite file that is not an Optuna storage, bad space and trace files.
It asserts the exit status (2: the command or an input file is wrong; 1: a server, storage or disk
failed), that no traceback is shown, that the culprit is named, that no password is shown, and that
every file in the workspace is byte-identical afterwards (and, unless the row says the command may
create its own files, that nothing was added).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tuner.cli import main
from tuner.serve.ports import find_free_port

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

PASSWORD = "hunter2-Secret"
SPACE = {
    "name": "ok",
    "release": "fork-1.21.2",
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}},
}
FAST = ["--num-prompts", "12", "--num-warmups", "1", "--max-concurrency", "4", "--random-input-len", "200",
        "--random-output-len", "16", "--time-scale", "0.2", "--startup-time-scale", "0.002"]
DEAD_PORT = find_free_port()  # nothing listens here (the rows that use it never start a server)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The files a user has lying around, made once; each test works on a copy."""
    ws = tmp_path_factory.mktemp("workspace")
    (ws / "space.yaml").write_text(yaml.safe_dump(SPACE))
    cwd = os.getcwd()
    os.chdir(ws)
    try:
        assert main(["tune", "--space", "space.yaml", "--n-trials", "2", "--no-report", *FAST]) == 0
    finally:
        os.chdir(cwd)
    shutil.rmtree(ws / "results" / "ok" / "run", ignore_errors=True)
    db = (ws / "results" / "ok" / "study.db").read_bytes()
    (ws / "notes.txt").write_text("meeting notes\n")
    (ws / "empty.db").write_bytes(b"")
    (ws / "garbage.db").write_bytes(b"this is not a database\n" * 20)
    (ws / "damaged.db").write_bytes(db[:100] + b"\xff" * 5000 + db[5100:])  # header intact, pages not
    with sqlite3.connect(ws / "other.db") as con:
        con.execute("CREATE TABLE notes (text TEXT)")
    (ws / "results" / "empty").mkdir()
    (ws / "results" / "empty" / "study.db").write_bytes(b"")
    (ws / "deploy").mkdir()
    (ws / "search_spaces").mkdir()
    (ws / "search_spaces" / "demo.yaml").write_text(yaml.safe_dump(dict(SPACE, name="demo")))
    typo = dict(SPACE, parameters={**SPACE["parameters"],
                                   "VLLM_PROMPT_SEQ_BUCKET_STEPS": {"type": "categorical", "choices": [128, 256]}})
    (ws / "typo.yaml").write_text(yaml.safe_dump(typo))
    (ws / "envtypo.yaml").write_text(yaml.safe_dump(dict(SPACE, env={"VLLM_EXPONENTIAL_BUCKETNG": "false"})))
    (ws / "typo.env").write_text("VLLM_PROMPT_SEQ_BUCKT_STEP=256\nVLLM_DECODE_BS_BUCKET_STEP=16\n")
    (ws / "broken.yaml").write_text("parameters: [unclosed\n")
    (ws / "long.yaml").write_text(yaml.safe_dump(dict(SPACE, server={**SPACE["server"], "max_model_len": 262144})))
    (ws / "nobounds.yaml").write_text(yaml.safe_dump(
        dict(SPACE, parameters={"max_num_seqs": {"type": "int", "low": 64, "high": 16}})))
    (ws / "trace.jsonl").write_text('{"input_len": 100, "output_len": 10}\n{"input_len": -3, "output_len": 10}\n')
    (ws / "trace.csv").write_text("prompt,output\n100,10\n")
    (ws / "trace.bin.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    return ws


@dataclass
class Case:
    args: list[str]
    code: int
    culprit: str  # must appear in the error line
    may_create: bool = False  # a writer (tune) may create its own study files before it fails

    def __str__(self) -> str:
        return " ".join(self.args)[:60]


DB = "results/ok/study.db"
PG = f"postgresql://tuner:{PASSWORD}@db.invalid/tuning"
TUNE = ["tune", "--space", "space.yaml", "--n-trials", "1"]
BENCH = ["bench", "--base-url", f"http://127.0.0.1:{DEAD_PORT}", "--model", "m", "--num-prompts", "2", "--quiet"]
BUCKETS = ["buckets", "--release", "fork-1.21.2", "--max-num-seqs", "16", "--max-model-len", "1024",
           "--max-num-batched-tokens", "2048", "--num-hpu-blocks", "100"]
RELEASES = ["compare", "--release", "fork-1.21.2", "gaudi-main", "--max-model-len", "2048", "--max-num-seqs", "16"]

CASES = [
    # tune
    Case(["tune", "--space", "nope.yaml"], 2, "nope.yaml"),
    Case(["tune", "--space", "broken.yaml"], 2, "broken.yaml: not valid YAML"),
    Case(["tune", "--space", "nobounds.yaml"], 2, "low=64 is greater than high=16"),
    Case(["tune", "--space", "typo.yaml"], 2, "did you mean VLLM_PROMPT_SEQ_BUCKET_STEP?"),
    Case(["tune", "--space", "envtypo.yaml"], 2, "did you mean VLLM_EXPONENTIAL_BUCKETING?"),
    Case([*TUNE, "--storage", "sqlite:///notes.txt/study.db"], 2, "notes.txt is a file"),
    Case([*TUNE, "--storage", "sqlite:///garbage.db"], 2, "garbage.db is not an SQLite database"),
    Case([*TUNE, "--storage", "sqlite:///other.db"], 2, "other.db is a database but not an Optuna"),
    Case([*TUNE, "--storage", "sqlite:///damaged.db"], 2, "damaged.db is a damaged SQLite database"),
    Case([*TUNE, "--storage", PG], 1, "postgresql://tuner:***@db.invalid/tuning"),
    Case([*TUNE, "--results", "notes.txt"], 2, "notes.txt is a file"),
    Case([*TUNE, "--slo", "p99_ttft_ms=fast"], 2, "p99_ttft_ms=fast"),
    Case([*TUNE, "--slo", "p99_ttft_ms=nan"], 2, "p99_ttft_ms=nan"),
    Case([*TUNE, "--slo", "p99_ttft=3000"], 2, "--slo p99_ttft: not a latency"),  # every trial would miss it
    Case([*TUNE, "--slo", "first_p99_ttft_ms=3000", "--num-warmups", "0"], 2, "--num-warmups 0 sends none"),
    Case([*TUNE, "--n-trials", "0"], 2, "--n-trials"),
    Case([*TUNE, "--latency-stat", "p95"], 2, "--latency-stat 'p95'"),
    Case([*TUNE, "--timeout", "-5"], 2, "--timeout"),
    Case([*TUNE, "--warmup-budget", "-1"], 2, "--warmup-budget"),
    Case([*TUNE, "--sampler-seed", "-1"], 2, "--sampler-seed"),
    Case([*TUNE, "--server-args", '--load-format "dummy'], 2, "No closing quotation"),
    Case([*TUNE, "--server-args", """--hf-overrides '{"max_position_embeddings":65536'"""], 2,
         "--server-args: --hf-overrides '{\"max_position_embeddings\":65536': expected a JSON object"),
    Case(["models", "Qwen/Qwen3-8B", "--hf-overrides", "[1]"], 2, "--hf-overrides '[1]': expected a JSON object"),
    Case([*TUNE, "--devices", ";;"], 2, "--devices ';;'"),
    Case([*TUNE, "--max-concurrency", "0"], 2, "--max-concurrency"),
    Case([*TUNE, "--model-shape", "llama-9b"], 2, "llama-9b"),
    # every trial would be refused by the server's config check: said once, with the model's own length
    Case(["tune", "--space", "long.yaml", "--n-trials", "1"], 2,
         "max_model_len 262144 is longer than --model meta-llama/Llama-3.1-8B-Instruct serves: 131,072 tokens"),
    Case(["plan", "--space", "long.yaml"], 2, "max_model_len 262144 is longer than --model"),
    Case([*TUNE, "--device", "gaudi9"], 2, "gaudi9"),  # the simulator knows its devices; prediction alone would not
    Case(["tune", "--space", "deploy"], 2, "deploy: is a folder"),
    # paths are paths: a separator, a YAML suffix or a ~ is never looked up as a space's name
    Case(["tune", "--space", "search_spaces/demo.yml"], 2,
         "search_spaces/demo.yml: search-space file not found; did you mean search_spaces/demo.yaml?"),
    Case(["tune", "--space", "demo.yaml"], 2,
         "demo.yaml: search-space file not found; did you mean search_spaces/demo.yaml (or --space demo)?"),
    Case(["tune", "--space", "search_spaces"], 2, "search_spaces: is a folder, not a search-space file (its spaces: "
         "demo.yaml)"),
    Case(["tune", "--space", "search_spaces/"], 2, "search_spaces/: is a folder"),  # as written
    Case(["tune", "--space", "Space.yaml"], 2,
         "Space.yaml: search-space file not found; space.yaml differs only in case"),
    Case(["tune", "--space", "search_spaces/Demo.yaml"], 2, "search_spaces/demo.yaml differs only in case"),
    Case(["tune", "--space", "~/space.yaml"], 2, "~/space.yaml: the ~ was not expanded"),
    Case([*TUNE, "--release", "fork-9.9"], 2, "fork-9.9"),
    Case([*TUNE, "--dataset-name", "trace", "--dataset-path", "trace.jsonl"], 2, "trace.jsonl:2"),
    Case([*TUNE, "--seed-from", "nosuch"], 2, "results/nosuch/study.db"),
    Case(["tune", "--space"], 2, "--space"),
    Case([*TUNE, "--backend", "vllm", "--vllm-command", "/opt/nowhere/vllm"], 2, "'/opt/nowhere/vllm' is not an"),
    Case([*TUNE, "--release", "auto"], 2, "--release auto reads the node's installed vLLM packages"),
    Case([*TUNE, "--backend", "vllm", "--vllm-command", "/bin/true", "--release", "auto"], 2,
         "cannot tell which Python runs '/bin/true'"),
    # bench
    Case(BENCH, 1, f"http://127.0.0.1:{DEAD_PORT}: connection refused"),
    Case([*BENCH[:2], f"http://admin:{PASSWORD}@127.0.0.1:{DEAD_PORT}", *BENCH[3:]], 1, "admin:***@127.0.0.1"),
    Case([*BENCH[:2], "127.0.0.1:8000", *BENCH[3:]], 2, "127.0.0.1:8000"),
    Case([*BENCH[:2], "http://127.0.0.1:99999", *BENCH[3:]], 2, "http://127.0.0.1:99999"),
    Case([*BENCH, "--goodput", "latency:50"], 2, "'latency'"),
    Case([*BENCH, "--goodput", "ttft:-5"], 2, "ttft:-5"),
    Case([*BENCH, "--dataset-name", "trace", "--dataset-path", "trace.csv"], 2, "lacks field 'input_len'"),
    Case([*BENCH, "--dataset-name", "trace", "--dataset-path", "trace.bin.jsonl"], 2, "trace.bin.jsonl"),
    Case([*BENCH, "--dataset-name", "trace", "--dataset-path", "missing.csv"], 2, "missing.csv"),
    Case([*BENCH, "--metric-percentiles", "0,101"], 2, "--metric-percentiles"),
    Case([*BENCH, "--request-rate", "0"], 2, "--request-rate"),
    Case([*BENCH, "--burstiness", "nan"], 2, "--burstiness"),
    # buckets, profiles, calc
    Case([*BUCKETS[:2], "fork-0.1", *BUCKETS[3:]], 2, "fork-0.1"),
    Case(["buckets", "--release", "gaudi-main", "--max-num-seqs", "16", "--max-model-len", "2.5K"], 2,
         "'2.5K': decimals are not allowed with binary suffixes like K; did you mean 2.5k?"),
    Case([*BUCKETS, "--env", "VLLM_PROMPT_SEQ_BUCKET_STEP"], 2, "VLLM_PROMPT_SEQ_BUCKET_STEP"),
    Case([*BUCKETS, "--env", "VLLM_DECODE_BS_BUCKET_STPE=16"], 2, "did you mean VLLM_DECODE_BS_BUCKET_STEP?"),
    Case([*BUCKETS[:4], "-1", *BUCKETS[5:]], 2, "max_num_seqs"),
    Case([*BUCKETS[:2], "fork-1.17", *BUCKETS[3:], "--strategy", "exponential"], 2, "'exponential'"),
    Case([*BUCKETS, "--bucket-file", "notes.txt"], 2, "fork-1.21.2 cannot read bucket files"),
    Case([*BUCKETS[:2], "gaudi-main", *BUCKETS[3:], "--bucket-file", "nofile.txt"], 2, "nofile.txt: file not found"),
    Case([*BUCKETS[:2], "gaudi-main", *BUCKETS[3:], "--bucket-file", "notes.txt", "--env",
          "VLLM_BUCKETING_FROM_FILE=other.txt"], 2, "name two files"),
    Case(["profiles", "--bogus"], 2, "--bogus"),
    Case(["calc", "--bs-list", "16,abc"], 2, "'abc'"),
    Case(["calc", "--range-ratio", "1.5"], 2, "1.5"),
    Case(["calc", "--release", "fork-0.1"], 2, "fork-0.1"),
    Case(["calc", "--release", "fork-1.21.2", "--model-shape", "llama-9b"], 2, "llama-9b"),
    Case([*BUCKETS[:-2], "--num-hpu-blocks", "0"], 2, "--num-hpu-blocks"),
    Case([*BUCKETS[:-2], "--gpu-memory-utilization", "1.5"], 2, "--gpu-memory-utilization"),
    # report
    Case(["report", "nope"], 2, "results/nope/study.db"),
    Case(["report", "okk"], 2, "did you mean ok? (studies in results: empty, ok)"),
    Case(["report", "ok", "--storage", "sqlite:///notes.txt"], 2, "notes.txt is not an SQLite database"),
    Case(["report", "ok", "--storage", "sqlite:///empty.db"], 2, "empty.db is an empty file"),
    Case(["report", "empty"], 2, "results/empty/study.db is an empty file"),
    # a database file named instead of a study: read as one, its faults named
    Case(["report", "garbage.db"], 2, "garbage.db is not an SQLite database"),
    Case(["report", "other.db"], 2, "other.db is a database but not an Optuna"),
    Case(["export", "missing.db"], 2, "no study at missing.db"),
    Case(["report", "ok", "--storage", "sqlite:///garbage.db"], 2, "garbage.db"),
    Case(["report", "ok", "--storage", "sqlite:///damaged.db"], 2, "damaged.db is a damaged SQLite database"),
    Case(["report", "ok", "--storage", "sqlite:///other.db"], 2, "other.db is a database but not an Optuna"),
    Case(["report", "ok", "--storage", "sqlite:///missing.db"], 2, "missing.db"),
    Case(["report", "ok", "--storage", "sqlite:///results"], 2, "results is a folder"),
    Case(["report", "ok", "--storage", PG], 1, "postgresql://tuner:***@db.invalid/tuning"),
    Case(["report", "ok", "--storage", "nosuchdb://x"], 2, "nosuchdb"),
    Case(["report", "wrong", "--storage", f"sqlite:///{DB}"], 2, "no study named 'wrong'"),
    # export
    Case(["export", "ok", "-o", "notes.txt/best.env"], 2, "notes.txt is a file"),
    Case(["export", "ok", "-o", "deploy"], 2, "deploy: is a folder"),
    Case(["export", "ok", "--where", "p99_ttft_ms=abc"], 2, "p99_ttft_ms=abc"),
    Case(["export", "ok", "--max-warmup", "0"], 2, "warmup <= 0"),
    Case(["export", "ok", "--max-warmup", "4x"], 2, "'4x' is not a duration"),
    Case(["export", "ok", "--max-warmup", "1s"], 2, "would admit it"),
    Case([*TUNE, "--warmup-budget", "1h30"], 2, "'1h30' is not a duration"),
    Case([*TUNE, "--dataset-name", "sonnet"], 2, "--dataset-name sonnet: not supported: vLLM builds"),
    Case([*TUNE, "--dataset-name", "random-rerank"], 2, "load a pooling model's rerank API with bucket-tuner bench"),
    Case([*TUNE, "--dataset-name", "randm"], 2, "did you mean random?"),
    Case([*TUNE, "--percentile-metrics", "tpot,itl"], 2, "the study needs ttft"),
    Case([*TUNE, "--percentile-metrics", "ttft,ttfb"], 2, "'ttfb' is not one of"),
    Case(["tune", "--space", "demoo", "--n-trials", "1"], 2, "did you mean"),
    Case(["export", "ok", "--pick", "fastest"], 2, "fastest"),
    Case(["export", "ok", "--storage", "sqlite:///empty.db", "-o", "new/best.env"], 2, "empty.db"),
    Case(["export"], 2, "which study?"),
    Case(["export", "--study", "nope"], 2, "results/nope/study.db"),
    Case(["report", "ok", "--study", "other"], 2, "two different studies given: 'ok' and --study 'other'"),
    # compare
    Case(["compare", "ok", "nope"], 2, "results/nope/study.db"),
    Case(["compare", "ok", "ok", "--html", "notes.txt/cmp.html"], 2, "notes.txt is a file"),
    Case(["compare", "ok", "empty"], 2, "results/empty/study.db is an empty file"),
    Case([*RELEASES, "--env-file", "typo.env"], 2, "did you mean VLLM_PROMPT_SEQ_BUCKET_STEP?"),
    Case([*RELEASES, "--env", "VLLM_GRAPH_RESERVED_MEMORY=0.1"], 2, "did you mean VLLM_GRAPH_RESERVED_MEM?"),
    Case([*RELEASES, "--json", "--env", "PT_HPU_LAZY_MOD=1"], 2, "did you mean PT_HPU_LAZY_MODE?"),
    # fit and explain
    Case(["fit", "--dataset-path", "trace.bin.jsonl"], 2, "trace.bin.jsonl"),
    Case(["fit", "--release", "fork-0.1"], 2, "fork-0.1"),
    Case(["fit", "-o", "notes.txt/buckets.txt"], 2, "notes.txt is a file"),
    Case(["fit", "-o", "notes.txt"], 2, "notes.txt exists; pass --force"),
    Case(["fit", "--prompt-buckets", "0"], 2, "--prompt-buckets"),
    Case(["fit", "--release", "fork-1.21.2", "-o", "fits/b.txt"], 2, "fork-1.21.2 cannot read a bucket file"),
    Case(["explain", "missing.log"], 2, "missing.log"),
    Case(["explain", "deploy"], 2, "not a file: deploy"),
    Case(["explain", "notes.txt", "--block-size", "0"], 2, "--block-size"),
    # sim-serve and the top level
    Case(["sim-serve", "llama", "--sim-model", "llama-9b"], 2, "llama-9b"),
    Case(["sim-serve", "llama", "--port", "abc"], 2, "'abc'"),
    Case(["frobnicate"], 2, "frobnicate"),
]


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root -> the sha256 of its bytes ('dir' for folders)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def here(workspace, tmp_path, monkeypatch) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(workspace, ws)
    monkeypatch.chdir(ws)
    monkeypatch.delenv("BUCKET_TUNER_DEBUG", raising=False)
    return ws


def test_the_table_is_long_enough_and_covers_every_subcommand():
    assert len(CASES) >= 30
    commands = {c.args[0] for c in CASES}
    assert {"tune", "bench", "buckets", "profiles", "calc", "report", "export", "compare", "fit", "explain",
            "sim-serve"} <= commands


# ids without the port: each xdist worker collects its own DEAD_PORT, and the ids must agree
@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c).replace(str(DEAD_PORT), "PORT"))
def test_bad_input_gives_one_clear_line(case: Case, here: Path, capsys):
    before = snapshot(here)
    code, output = run_cli(case.args, capsys)
    after = snapshot(here)
    assert code == case.code, output
    assert "Traceback" not in output
    assert "internal error" not in output
    assert case.culprit in output, output
    assert PASSWORD not in output
    error_lines = [ln for ln in output.splitlines() if "error:" in ln]
    assert len(error_lines) == 1, output
    changed = {p for p in before if before[p] != after.get(p)}
    assert not changed, f"changed or removed: {changed}"
    if not case.may_create:
        assert set(after) == set(before), f"created: {set(after) - set(before)}"


def test_readers_leave_a_study_byte_identical(here: Path, capsys):
    before = (here / DB).read_bytes()
    assert run_cli(["report", "ok"], capsys)[0] == 0
    assert run_cli(["export", "ok"], capsys)[0] == 0
    assert run_cli(["compare", "ok", "ok"], capsys)[0] == 0
    assert run_cli(["report", "--study", "ok"], capsys)[0] == 0  # tune's spelling works here too
    assert (here / DB).read_bytes() == before
    assert not (here / "results" / "ok" / "study.db-journal").exists()


def test_outputs_create_missing_folders_and_say_so(here: Path, capsys):
    code, output = run_cli(["export", "ok", "-o", "deploy/missing/best.env"], capsys)
    assert code == 0, output
    assert "created folder deploy/missing for --output" in output
    assert "VLLM_" in (here / "deploy" / "missing" / "best.env").read_text()
    code, output = run_cli(["fit", "--num-prompts", "50", "-o", "fits/a/buckets.txt"], capsys)
    assert code == 0, output
    assert "created folder fits/a for --output" in output and (here / "fits" / "a" / "buckets.txt").is_file()


def test_debug_shows_the_traceback(here: Path, capsys, monkeypatch):
    code, output = run_cli(["report", "ok", "--storage", "sqlite:///empty.db", "--debug"], capsys)
    assert code == 2 and "Traceback" in output and "empty.db is an empty file" in output
    monkeypatch.setenv("BUCKET_TUNER_DEBUG", "1")
    code, output = run_cli(["calc", "--range-ratio", "2"], capsys)
    assert code == 2 and "Traceback" in output


def test_an_unexpected_exception_says_where_its_trace_is(here: Path, capsys, monkeypatch, tmp_path):
    from tuner.commands import calc

    def broken(args):
        raise KeyError(f"bug near postgresql://u:{PASSWORD}@h/db")

    monkeypatch.setattr(calc, "cmd_calc", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    code, output = run_cli(["calc"], capsys)
    assert code == 1
    assert "Traceback" not in output and PASSWORD not in output
    assert "internal error: KeyError" in output
    trace_file = Path(output.split("the full trace is in ")[1].split(";")[0])
    assert trace_file.parent == tmp_path
    text = trace_file.read_text()
    assert "Traceback" in text and "raise KeyError" in text and PASSWORD not in text


def test_a_storage_failing_mid_run_is_a_runtime_failure(here: Path, capsys, monkeypatch):
    import optuna

    from tuner.commands import calc

    def storage_gone(args):
        try:
            raise sqlite3.OperationalError("disk I/O error")
        except sqlite3.OperationalError as exc:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from exc

    monkeypatch.setattr(calc, "cmd_calc", storage_gone)
    code, output = run_cli(["calc"], capsys)
    assert code == 1 and "Traceback" not in output
    assert "the study storage failed: disk I/O error" in output


def test_other_releases_variables_stay_a_warning_listed_once(here: Path):
    from tuner.space.schema import SearchSpace

    # fork-1.17 has no decode block dimension; fork-1.18+ reads it. Two parameters set it.
    sp = SearchSpace.from_dict(dict(SPACE, release="fork-1.17", env={}, parameters={
        "max_num_seqs": {"type": "int", "low": 16, "high": 64, "step": 16},
        "block_step": {"env": "VLLM_DECODE_BLOCK_BUCKET_STEP", "type": "categorical", "choices": [128, 256]},
        "block_step_big": {"env": "VLLM_DECODE_BLOCK_BUCKET_STEP", "type": "categorical", "choices": [512],
                           "when": {"max_num_seqs": 64}},
    }))
    notes = sp.check_release("fork-1.17")
    assert [p.name for p in sp.parameters] == ["max_num_seqs"]
    assert len(notes) == 1 and "VLLM_DECODE_BLOCK_BUCKET_STEP" in notes[0]
