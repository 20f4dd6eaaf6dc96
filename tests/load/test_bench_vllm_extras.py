"""More of vllm bench serve 0.32's flags, with its meanings: probes beside the run (--probe-request-rate),
the server's profiler (--profile), the two plots (--plot-timeline, --plot-dataset-stats), the flags that
change nothing here (accepted, and --help says why) and the one refused (--skip-tokenizer-init)."""

from __future__ import annotations

import json
import re

import pytest

from tests.fake_openai_server import PROFILE_KEY, FakeServerConfig
from tests.load.test_bench_chat_auth import ServerThread, _bench
from tests.load.test_bench_cli import sim_server  # noqa: F401
from tuner.cli import main
from tuner.load.plots import itl_labels, parse_thresholds, timeline_segments

RUN = ["--num-prompts", "12", "--random-input-len", "16", "--random-output-len", "4", "--vocab-size", "1000"]


def test_probes_run_beside_the_load_and_are_reported_apart(tmp_path, capsys):
    with ServerThread(FakeServerConfig(model="m", accept_text=True)) as srv:  # a probe is the text "Hi"
        code = _bench(srv, tmp_path, "--model", "m", *RUN, "--max-concurrency", "2", "--probe-request-rate", "50")
        probes = [r for r in srv.log if (r.request_id or "").split("-")[-2:-1] == ["probe"]]
    assert code == 0
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["completed"] == 12 and len(d["input_lens"]) == 12          # probes are not the run's requests
    assert d["probe_completed"] == len(probes) >= 1 and d["probe_failed"] == 0
    assert all(r.max_tokens == 1 for r in probes)
    assert d["probe_median_e2el_ms"] <= d["probe_p99_e2el_ms"] <= d["probe_max_e2el_ms"]
    out = capsys.readouterr().out
    assert "Probe request rate: 50.0 req/s\n" in out and "-Probe Requests-" in out
    assert re.search(rf"\nProbe requests completed: +{len(probes)} *\n", out)
    assert out.index("Total token throughput") < out.index("Probe Requests") < out.index("Time to First Token")


def test_no_probes_no_probe_figures(tmp_path, capsys):
    with ServerThread(FakeServerConfig(model="m")) as srv:
        assert _bench(srv, tmp_path, "--model", "m", *RUN) == 0
    assert not any(k.startswith("probe_") for k in json.loads((tmp_path / "r.json").read_text()))
    assert "Probe Requests" not in capsys.readouterr().out


def test_profile_starts_and_stops_the_servers_profiler_around_the_run(tmp_path, capsys):
    with ServerThread(FakeServerConfig(model="m", profiler=True)) as srv:
        assert _bench(srv, tmp_path, "--model", "m", *RUN, "--profile") == 0
        calls = list(srv.app[PROFILE_KEY])
    assert calls == ["/start_profile", "/stop_profile"]
    out = capsys.readouterr().out
    assert out.index("Starting profiler...") < out.index("Profiler started") < out.index("Stopping profiler...") \
        < out.index("Profiler stopped")


def test_a_server_without_a_profiler_is_named_and_the_run_goes_on(sim_server, tmp_path, capsys):  # noqa: F811
    assert main(["bench", "--base-url", sim_server, "--model", "llama", *RUN, "--profile", "--disable-tqdm"]) == 0
    cap = capsys.readouterr()
    assert "/start_profile answered HTTP 404" in cap.err and "/stop_profile answered HTTP 404" in cap.err
    assert "Profiler started" not in cap.out and "Successful requests:                     12" in cap.out


def test_plots_are_written_beside_the_result_name(tmp_path, capsys):
    with ServerThread(FakeServerConfig(model="m")) as srv:
        assert _bench(srv, tmp_path, "--model", "m", *RUN, "--plot-timeline", "--plot-dataset-stats",
                      "--result-dir", str(tmp_path / "res"), "--result-filename", "run.json") == 0
    timeline, stats = tmp_path / "res" / "run.timeline.html", tmp_path / "res" / "run.dataset_stats.html"
    assert timeline.is_file() and stats.is_file()
    assert not (tmp_path / "res" / "run.json").exists()  # as vLLM: the plots alone do not save the result
    html = timeline.read_text()
    assert '"name":"TTFT"' in html and '"name":"ITL \\u003c 25ms"' in html  # the fake server's gaps are short
    assert "Prompt tokens" in stats.read_text()
    assert f"plot written to {timeline}" in capsys.readouterr().out


def test_timeline_segments_follow_the_thresholds():
    data = {"start_times": [10.0, 10.5, None], "ttfts": [0.2, 0.1, None],
            "itls": [[0.01, 0.03, 0.07], [0.02], []]}
    segs = timeline_segments(data, (25, 50))
    low, mid, high = itl_labels((25, 50))
    assert segs["TTFT"] == [(0, 0.0, 0.2), (1, 0.5, 0.1)]
    assert [s[0] for s in segs[low]] == [0, 1] and [s[2] for s in segs[mid]] == [0.03]
    assert segs[high] == [(0, pytest.approx(0.24), 0.07)]  # after the TTFT and the first two gaps


@pytest.mark.parametrize("text", ["25", "50,25", "a,b", "-1,5"])
def test_bad_thresholds_are_named(text):
    with pytest.raises(ValueError, match="--timeline-itl-thresholds"):
        parse_thresholds(text)


def test_flags_that_change_nothing_are_accepted_and_the_refused_one_says_why(tmp_path, capsys):
    with ServerThread(FakeServerConfig(model="m")) as srv:
        assert _bench(srv, tmp_path, "--model", "m", *RUN, "--use-beam-search", "--no-stream",
                      "--enable-multimodal-chat", "--hf-split", "train", "--no-reranker") == 0
    err = capsys.readouterr().err
    assert "--hf-split: only vLLM's dataset of that name reads it; ignored with --dataset-name random" in err
    assert "--no-reranker: only vLLM's dataset" in err
    assert main(["bench", "--skip-tokenizer-init", *RUN]) == 2
    assert "--skip-tokenizer-init: not supported" in capsys.readouterr().err
    # a vLLM dataset's own flags reach the sentence that refuses the dataset, not "unrecognized arguments"
    assert main(["bench", "--dataset-name", "hf", "--hf-name", "x", "--hf-split", "train"]) == 2
    assert "--dataset-name hf: not supported" in capsys.readouterr().err


def test_a_plot_that_cannot_be_written_is_said_and_the_result_stands(tmp_path, capsys):
    res = tmp_path / "res"
    res.mkdir()
    (res / "run.timeline.html").mkdir()  # a folder where the plot's file would go
    with ServerThread(FakeServerConfig(model="m")) as srv:
        assert _bench(srv, tmp_path, "--model", "m", *RUN, "--plot-timeline", "--save-result",
                      "--result-dir", str(res), "--result-filename", "run.json") == 0
    assert json.loads((res / "run.json").read_text())["completed"] == 12
    assert f"--plot-timeline: could not write {res / 'run.timeline.html'}: Is a directory" in capsys.readouterr().err
