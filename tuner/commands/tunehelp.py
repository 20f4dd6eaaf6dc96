"""`tune --help` for a first reading: examples at the top, the flags most runs need first, the rest in
their groups, and the rarely needed ones under a heading of their own at the end."""

from __future__ import annotations

import argparse
import textwrap

EXAMPLES = """\
examples:
  the demo, on the built-in simulated server (about two minutes):
    bucket-tuner tune --space demo --n-trials 20 --max-concurrency 48
  a night on a Gaudi node, with a latency limit and a warm-up budget:
    bucket-tuner tune --space search_spaces/fork-1.22-exponential.yaml \\
        --backend vllm --model meta-llama/Llama-3.1-8B-Instruct \\
        --timeout 8h --n-trials 50 --slo p99_ttft_ms=2000 --warmup-budget 10m
  the same study again resumes it; another question needs a new name:
    bucket-tuner tune --space demo --study demo-c8 --max-concurrency 8 \\
        --fork-from demo

The flags most runs need come first; the rarely needed ones are at the end."""

USAGE = "bucket-tuner tune --space SPACE [--study NAME] [--n-trials N] [options]"

COMMON = ("--space", "--study", "--n-trials", "--timeout", "--backend", "--model", "--release", "--device",
          "--max-concurrency", "--request-rate", "--dataset-name", "--slo", "--warmup-budget", "--seed-from")
RARE = ("--allow-unknown", "--heartbeat-grace", "--storage-outage", "--no-report", "--served-model-name",
        "--no-release-check", "--vllm-command", "--no-prediction", "--time-scale", "--startup-time-scale",
        "--sim-noise", "--boot-timeout", "--warmup-timeout", "--sampler-seed", "--remeasure", "--no-screening",
        "--no-seed-defaults", "--percentile-metrics", "--timed-trace-chunk-hash-size",
        "--timed-trace-sec-multiplier", "--vocab-size", "--sharegpt-output-len", "--custom-output-len",
        "--num-warmups", "--metric-percentiles", "--burstiness", "--goodput", "--allow-recompiles",
        "--allow-failed-requests", "--latency-stat")


PLAIN_HELP = {"--model": "the model the server serves (default meta-llama/Llama-3.1-8B-Instruct)",
              "--max-concurrency": "requests in flight at once during each trial's load test (default 16)",
              "--no-report": "write no report.html, CSVs or best.env at the end",
              "--served-model-name": "the name the server answers to (vLLM's --served-model-name)"}


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The description's examples as written; the flags' help wrapped as usual."""


def arrange(p: argparse.ArgumentParser) -> None:
    """Examples in the description, a short usage line, the common flags first and the rare ones last.
    argparse has no public way to move a flag between groups: the groups' lists are rearranged here, once,
    after every flag is added (help order only; parsing is unchanged)."""
    p.usage = USAGE
    p.formatter_class = _Formatter
    p.description = f"{textwrap.fill(p.description, 78)}\n\n{EXAMPLES}"
    # argparse's own lists, read and rearranged in this one place (no public API moves a flag)
    actions, groups = p._actions, p._action_groups  # noqa: SLF001
    by_flag = {s: a for a in actions for s in a.option_strings}
    missing = [f for f in COMMON + RARE if f not in by_flag]
    if missing:   # a renamed flag must be renamed here too
        raise RuntimeError(f"tune --help arranges flags it does not have: {', '.join(missing)}")
    for flag, text in PLAIN_HELP.items():   # flags shared with `bench` that say nothing here
        by_flag[flag].help = by_flag[flag].help or text
    moved = set(COMMON + RARE)
    for group in groups:
        _members(group)[:] = [a for a in _members(group) if not set(a.option_strings) & moved]
    common = p.add_argument_group("the flags most runs need")
    _members(common)[:] = [by_flag[f] for f in COMMON]
    rare = p.add_argument_group("rarely needed")
    _members(rare)[:] = [by_flag[f] for f in RARE]
    groups.remove(common)
    groups.insert(0, common)   # before "options" (-h and the study's storage)
    groups[:] = [g for g in groups if _members(g) or g is common]


def _members(group) -> list:
    return group._group_actions  # noqa: SLF001
