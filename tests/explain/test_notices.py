"""What a vllm-gaudi server says it did other than asked, or of its setup, read into notices: each line below is
the plugin's own format string (vllm-gaudi main @091bbadd, file and line in the comments) filled in, inserted into
the composed main log at the point of the start where the plugin prints it. Before, every one was an unread line;
the INC (FP8) load showed the host-side figure as the device weights."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.cli import main

LOG = Path(__file__).parents[1] / "data" / "log-samples" / "composed" / "vllm-gaudi-main_qwen3-30b-a3b_tp2.log"
W0 = "(Worker_TP0 pid=1330) "
API = "(APIServer pid=1200) "

AT_START = [  # after platform.py:261, 10:00:03
    API + "WARNING 08-21 10:00:03 [platform.py:230] The HPU backend currently does not support torch.float16. "
          "Using bfloat16 instead.",
    API + "WARNING 08-21 10:00:03 [platform.py:242] Using Contiguous PA, disabling prefix caching",
    API + "INFO 08-21 10:00:03 [platform.py:272] [HPU] INC quantization detected, loading weights to CPU first",
]
AT_LOAD = [  # the host-side weights line (hpu_model_runner.py:4814) is replaced by these
    W0 + "INFO 08-21 10:01:05 [hpu_model_runner.py:4814] Loading model weights took 0.1250 GB",
    W0 + "INFO 08-21 10:01:05 [hpu_model_runner.py:4817] Preparing model with INC..",
    W0 + "INFO 08-21 10:01:09 [hpu_model_runner.py:4873] Preparing model with INC took 15.2031 GB",
    W0 + "INFO 08-21 10:01:09 [hpu_worker.py:124] Profiling enabled. Traces will be saved to: /tmp/vllm_traces",
    W0 + "WARNING 08-21 10:01:09 [hpu_worker.py:414] Invalid VLLM_GRAPH_RESERVED_MEM value, using default 0.1",
    W0 + "INFO 08-21 10:01:09 [hpu_worker.py:473] HPU hybrid cache: reducing available KV cache memory by 37.5% "
         "(factor=0.625) for separate per-spec allocations (padded_page=3 MiB, real_attn=1.5 MiB, real_mamba=3.3 MiB).",
]
SERVING = [  # before the shutdown, 10:07:06
    W0 + "WARNING 08-21 10:07:06 [common.py:285] Fallback ctx 9024 exceeds max prepared decode bucket ctx 8192, "
         "capping.",
    W0 + "WARNING 08-21 10:07:06 [common.py:285] Fallback ctx 9024 exceeds max prepared decode bucket ctx 8192, "
         "capping.",
    W0 + "INFO 08-21 10:07:07 [hpu_worker.py:667] Moving model to CPU for sleep mode took -28.48 GiB of device memory "
         "(80.02 GiB/126.5 GiB used) and 28.6 GiB of host memory (123.4 GiB/1007 GiB used)",
]


def _composed(tmp_path) -> Path:
    out = []
    for line in LOG.read_text().splitlines():
        if "[hpu_model_runner.py:4814] Loading model weights took" in line:
            out += AT_LOAD if line.startswith(W0) else []   # the other rank's copy goes: one rank's view
            continue
        if "[launcher.py:254] [shutdown]" in line:
            out += SERVING
        out.append(line)
        if "[platform.py:261]" in line:
            out += AT_START
    path = tmp_path / "notices.log"
    path.write_text("\n".join(out) + "\n")
    return path


def test_each_line_is_a_notice_once_and_nothing_is_left_unread(tmp_path, capsys):
    assert main(["explain", str(_composed(tmp_path)), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["reading"]["unread"] == 0, d["reading"]["unread_examples"]
    kinds = [n["kind"] for n in d["notices"]]
    assert kinds == ["dtype_fallback", "contiguous_pa", "inc", "lazy_mode", "recipe_cache", "host_cores", "host_ram",
                     "profiling", "graph_reserved_invalid", "hybrid_kv_reduced", "decode_ctx_capped", "sleep_mode"]
    by = {n["kind"]: n for n in d["notices"]}
    assert by["dtype_fallback"]["values"] == {"asked": "torch.float16", "used": "bfloat16"}
    assert by["hybrid_kv_reduced"]["values"]["pct"] == "37.5"
    assert by["decode_ctx_capped"]["count"] == 2 and by["decode_ctx_capped"]["serving"]
    assert "freed 28.48 GiB" in by["sleep_mode"]["words"]
    assert "kept between starts" in by["recipe_cache"]["words"]


def test_inc_weights_are_the_device_figure_and_its_quantisation_a_phase(tmp_path, capsys):
    assert main(["explain", str(_composed(tmp_path)), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["memory_bytes"]["weights"] == round(15.2031 * 2**30)       # not the host-side 0.125 GB
    phases = {p["name"]: p["seconds"] for p in d["warmup"]["phases"]}
    assert phases["INC quantisation"] == 4.0                           # 10:01:05 -> 10:01:09
    assert main(["explain", str(_composed(tmp_path))]) == 0
    text = capsys.readouterr().out
    notices = text[text.index("Server notices"):text.index("At runtime")].replace("\n  ", " ")
    assert "the server runs bfloat16 instead" in notices and "profiling is on" in notices
    runtime = text[text.index("At runtime"):]
    assert "past the largest prepared decode bucket (8192): capped (2 times)" in runtime.replace("\n  ", " ")


def test_a_stated_torch_compile_mode_is_not_read_as_lazy_from_graph_lines():
    """Graph warm-up lines prefer the lazy-mode release (fork 1.22 over fork-main); a log whose bridge banner says
    PT_HPU_LAZY_MODE = 0 ran torch.compile whatever its lines say, so the graph lines decide nothing there."""
    from tuner.explain import explain

    readme = LOG.parents[1] / "fork-v0.9.0.1-gaudi-1.22_readme_exponential.log"
    lines = [x for x in readme.read_text().splitlines() if not x.startswith("# SOURCE")]
    assert explain(lines).release.preferred == "fork-1.22"
    assert explain([" PT_HPU_LAZY_MODE = 1", *lines]).release.preferred == "fork-1.22"
    stated = explain([" PT_HPU_LAZY_MODE = 0", *lines]).release
    assert stated.preferred != "fork-1.22" and not any("lazy mode" in d for d in stated.decided_by)
