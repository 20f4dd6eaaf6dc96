"""`bucket-tuner bench` against the simulator: vllm bench serve's flags, stdout labels and JSON fields."""

from __future__ import annotations

import json
import re
import sys

import pytest

from tuner.cli import main
from tuner.serve.ports import find_free_port
from tuner.serve.process import ServerProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def running_sim(tmp_path, name: str = "llama", time_scale: str = "0.2", *extra: str):
    """The simulator serving `name` (llama-3.1-8b's shape) on loopback until the generator is closed; its stop
    is checked clean."""
    port = find_free_port()
    argv = [sys.executable, "-m", "tuner.sim", name, "--sim-model", "llama-3.1-8b", "--host", "127.0.0.1",
            "--port", str(port),
            "--release", "gaudi-main", "--max-num-seqs", "16", "--max-model-len", "1024",
            "--sim-time-scale", time_scale, "--sim-startup-time-scale", "0.002", *extra]
    with ServerProcess(records_dir=tmp_path / "run") as srv:
        srv.start(argv, {"PATH": "/usr/bin:/bin"}, tmp_path / "server.log", port=port)
        outcome = srv.wait_ready(f"http://127.0.0.1:{port}", boot_timeout_s=30, warmup_timeout_s=30)
        assert outcome.ok, outcome.reason
        yield f"http://127.0.0.1:{port}"
    assert srv.stop_report.clean


@pytest.fixture
def sim_server(tmp_path):
    yield from running_sim(tmp_path)


def test_bench_prints_vllm_labels_and_writes_vllm_json(sim_server, tmp_path, capsys):
    out_file = tmp_path / "res" / "bench.json"
    code = main(["bench", "--base-url", sim_server, "--model", "llama", "--num-prompts", "20",
                 "--random-input-len", "300", "--random-output-len", "20", "--random-range-ratio", "0.5",
                 "--max-concurrency", "4", "--goodput", "ttft:100000", "tpot:100000", "--num-warmups", "2",
                 "--time-scale", "0.2", "--quiet", "--result-file", str(out_file),
                 "--percentile-metrics", "ttft,tpot,itl,e2el"])
    out = capsys.readouterr().out
    assert code == 0
    for label in ("Successful requests:", "Request throughput (req/s):", "Output token throughput (tok/s):",
                  "Mean TTFT (ms):", "P99 TPOT (ms):", "Request goodput (req/s):"):
        assert label in out
    data = json.loads(out_file.read_text())
    assert data["completed"] == 20 and data["failed"] == 0
    # Exact output lengths: the usage counts equal what each request asked for.
    assert sum(data["output_lens"]) == data["total_output_tokens"]
    lo, hi = data["tuner_workload"]["output_len_bounds"]
    assert lo == 10 and hi == 30 and all(lo <= n <= hi for n in data["output_lens"])
    assert data["tuner_workload"]["range_ratio_convention"].startswith("vllm-range-ratio")
    # Every SLO generous: every request is good.
    assert data["request_goodput"] == pytest.approx(data["request_throughput"])
    for key in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "std_e2el_ms", "max_concurrent_requests"):
        assert key in data
    assert data["max_concurrent_requests"] <= 4


@pytest.mark.parametrize("args,needle", [
    (["--random-range-ratio", "1.0"], "range_ratio"),
    (["--goodput", "ttft=5"], "--goodput expects NAME:NUMBER"),
    (["--metric-percentiles", "99,abc"], "--metric-percentiles"),
    (["--dataset-name", "trace"], "--dataset-path"),
    (["--num-prompts", "0"], "--num-prompts"),
])
def test_bad_bench_flags_name_the_value(args, needle, capsys):
    code = main(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", *args])
    assert code == 2
    assert needle in capsys.readouterr().err


# ------------------------------------------------------------------ vllm bench serve command lines, verbatim


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1]


def test_vllm_command_line_with_host_port_save_result_label_and_metadata(sim_server, tmp_path, capsys):
    """No --vocab-size: the sim names no tokenizer, so the valid ids are learned from its answers."""
    code = main(["bench", "--backend", "vllm", "--model", "llama", "--host", "127.0.0.1", "--port",
                 _port(sim_server), "--dataset-name", "random", "--random-input-len", "100",
                 "--random-output-len", "10", "--num-prompts", "12", "--max-concurrency", "4", "--save-result",
                 "--result-dir", str(tmp_path / "res"), "--label", "nightly", "--metadata", "tp=1", "build=abc",
                 "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--ignore-eos",
                 "--temperature", "0", "--disable-tqdm", "--request-id-prefix", "run1-", "--seed", "3"])
    out = capsys.readouterr().out
    assert code == 0, out
    files = list((tmp_path / "res").glob("*.json"))
    assert len(files) == 1
    assert re.fullmatch(r"nightly-infqps-concurrency4-llama-\d{8}-\d{6}\.json", files[0].name)
    d = json.loads(files[0].read_text())
    assert (d["backend"], d["endpoint_type"], d["label"], d["model_id"]) == ("vllm", "vllm", "nightly", "llama")
    assert d["tp"] == "1" and d["build"] == "abc" and d["num_prompts"] == 12
    assert d["completed"] == 12 and d["total_output_tokens"] == 120 and d["total_input_tokens"] == 1200
    assert "p50_ttft_ms" in d and "p99_e2el_ms" in d and "p90_ttft_ms" not in d
    assert not any(k in d for k in ("input_lens", "output_lens", "ttfts", "itls", "errors", "generated_texts"))
    assert "latencies" in d and "queue_times" in d  # vLLM keeps these two without --save-detailed
    assert d["burstiness"] == 1.0 and d["request_rate"] == "inf"
    assert d["tuner_vocab"]["vocab_size"] == 128256  # the sim's llama-3.1 shape, learned from the server
    for label in ("Maximum request concurrency:", "---------------Time to First Token----------------",
                  "P50 TTFT (ms):", "P99 E2EL (ms):"):
        assert label in out


@pytest.mark.parametrize("backend, endpoint", [("openai-chat", "/v1/chat/completions"),
                                               ("openai-responses", "/v1/responses")])
def test_vllm_text_command_lines_with_save_detailed_and_result_filename(sim_server, tmp_path, backend, endpoint):
    code = main(["bench", "--backend", backend, "--endpoint", endpoint, "--model", "llama",
                 "--base-url", sim_server, "--num-prompts", "6", "--random-input-len", "50",
                 "--random-output-len", "5", "--save-result", "--save-detailed", "--result-dir", str(tmp_path),
                 "--result-filename", "text.json", "--disable-tqdm"])
    assert code == 0
    d = json.loads((tmp_path / "text.json").read_text())
    assert d["completed"] == 6 and d["output_lens"] == [5] * 6 and all(d["generated_texts"])
    assert d["backend"] == backend and d["tuner_endpoint"].endswith(endpoint)


def test_the_sims_responses_route_answers_and_refuses_as_vllm_does(sim_server):
    # the route itself, as vLLM answers it: a whole response without stream; its refusals
    url = sim_server + "/v1/responses"
    status, whole = _post(url, {"model": "llama", "input": [{"role": "user", "content": "three words here"}],
                                "max_output_tokens": 3})
    assert status == 200 and whole["object"] == "response" and whole["status"] == "incomplete"
    assert whole["usage"]["output_tokens"] == 3 and whole["usage"]["input_tokens"] == 3 + 4
    assert whole["output"][0]["content"][0]["type"] == "output_text"
    status, err = _post(url, {"model": "llama", "input": [1, 2, 3]})
    assert status == 400 and "input must be" in err["error"]["message"]   # nested, as vLLM from 0.10.1
    status, err = _post(url, {"model": "llama", "input": "word " * 1100})
    assert status == 400 and "even without any output tokens" in err["error"]["message"]


def _post(url: str, body: dict) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_vllm_command_lines_append_ramp_up_and_model_from_server(sim_server, tmp_path):
    common = ["bench", "--base-url", sim_server, "--num-prompts", "6", "--random-input-len", "40",
              "--random-output-len", "4", "--disable-tqdm", "--result-dir", str(tmp_path), "--vocab-size", "32000"]
    for _ in range(2):  # no --model: the server's first model, as vLLM does
        assert main([*common, "--request-rate", "40", "--burstiness", "2", "--append-result",
                     "--result-filename", "runs.json"]) == 0
    lines = [json.loads(x) for x in (tmp_path / "runs.json").read_text().splitlines()]
    assert len(lines) == 2 and all(x["model_id"] == "llama" and x["request_rate"] == 40.0 for x in lines)
    assert main([*common, "--model", "llama", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "20",
                 "--ramp-up-end-rps", "60", "--save-result"]) == 0
    ramp = [p for p in tmp_path.glob("openai-ramp-up-linear-20qps-60qps-llama-*.json")]
    assert len(ramp) == 1
    d = json.loads(ramp[0].read_text())
    assert (d["ramp_up_strategy"], d["ramp_up_start_rps"], d["ramp_up_end_rps"]) == ("linear", 20, 60)


def test_server_errors_exit_non_zero_with_the_servers_message(sim_server, tmp_path, capsys):
    code = main(["bench", "--base-url", sim_server, "--model", "llama", "--num-prompts", "5",
                 "--random-input-len", "20", "--random-output-len", "2", "--vocab-size", "999999",
                 "--seed", "1", "--disable-tqdm", "--fail-on-errors",
                 "--result-file", str(tmp_path / "r.json")])
    cap = capsys.readouterr()
    assert code == 1
    d = json.loads((tmp_path / "r.json").read_text())
    # ids are drawn below 999999 while the sim's vocabulary is 128256: with seed 1, 4 of 5 prompts
    # hold an id the server rejects (the "5 of 40 completed" in miniature)
    failed = [e for e in d["errors"] if e]
    assert d["failed"] == len(failed) == 4
    assert all(re.fullmatch(r"server error: Token id \d+ is out of vocabulary", e) for e in failed)
    assert "Failed requests: 4, by error (1 distinct):" in cap.out
    assert re.search(r"\n +4 x server error: Token id \d+ is out of vocabulary\n", cap.out)
    assert "4 of 5 requests failed" in cap.err and "is out of vocabulary" in cap.err
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--num-prompts", "5",
                 "--random-input-len", "20", "--random-output-len", "2", "--vocab-size", "999999",
                 "--seed", "1", "--disable-tqdm", "--max-failed-ratio", "0.9"]) == 0


def test_custom_text_dataset_runs_on_the_sim(sim_server, tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"Tell me about item {i}, please."}) + "\n" for i in range(5)))
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--dataset-name", "custom",
                 "--dataset-path", str(p), "--num-prompts", "5", "--custom-output-len", "6", "--ignore-eos",
                 "--disable-tqdm", "--result-file", str(tmp_path / "r.json")]) == 0
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["completed"] == 5 and d["output_lens"] == [6] * 5
    assert d["tuner_workload"]["prompt_format"] == "text" and all(n > 0 for n in d["input_lens"])


def test_an_openai_style_base_url_is_taken_as_the_servers_root(sim_server, tmp_path, capsys):
    """`--base-url http://host:8000/v1` (an OpenAI client's) or a pasted route would make vLLM's client ask
    /v1/v1/...: the API path is dropped, said, and the run goes through; credentials are never printed."""
    from tuner.commands import server_root

    assert server_root("http://h:8000/v1") == "http://h:8000" and server_root("http://h:8000/") == "http://h:8000"
    assert server_root("https://proxy/vllm/v1/chat/completions") == "https://proxy/vllm"
    assert server_root("http://user:secret@h:8000/v1") == "http://user:secret@h:8000"
    assert "secret" not in capsys.readouterr().err
    code = main(["bench", "--base-url", sim_server + "/v1/", "--model", "llama", "--num-prompts", "2",
                 "--random-input-len", "16", "--random-output-len", "2", "--disable-tqdm",
                 "--result-file", str(tmp_path / "r.json")])
    assert code == 0 and json.loads((tmp_path / "r.json").read_text())["completed"] == 2
    assert f"the server's root URL is {sim_server}" in capsys.readouterr().err


def test_everyday_mistakes_are_named_before_any_load(sim_server, tmp_path, capsys):
    """A model the server does not serve is named with the ones it does (vLLM's client fails its initial test
    request on it); a request the server refuses outright (a completions body sent to the chat route) is the
    request's fault, not the vocabulary's, and said so."""
    run = ["bench", "--base-url", sim_server, "--num-prompts", "2", "--random-input-len", "16",
           "--random-output-len", "2", "--disable-tqdm", "--result-file", str(tmp_path / "r.json")]
    assert main([*run, "--model", "lama"]) == 2
    assert "--model lama: the server does not serve it; its /v1/models lists llama" in capsys.readouterr().err
    assert main([*run, "--model", "llama", "--endpoint", "/v1/chat/completions"]) == 2
    err = capsys.readouterr().err
    assert "the server refused a one-token request: HTTP 400" in err and "check --backend, --endpoint" in err
    assert "token id" not in err


def test_a_run_the_client_was_paused_in_says_so_and_records_it(sim_server, tmp_path, capsys, monkeypatch):
    # Ctrl-Z then fg during `bench`: its requests in flight waited for the client (tuner/serve/pauses.py)
    import tuner.commands.bench as B

    class Paused:
        def paused_s(self, start, end):
            return 7.0

    monkeypatch.setattr(B, "pause_clock", lambda: Paused())
    out_file = tmp_path / "bench.json"
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--num-prompts", "4", "--random-input-len",
                 "100", "--random-output-len", "8", "--quiet", "--result-file", str(out_file)]) == 0
    assert "the client was stopped for 7 s during the run" in capsys.readouterr().err
    assert json.loads(out_file.read_text())["tuner_paused_s"] == 7.0
