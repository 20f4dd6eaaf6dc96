"""`bucket-tuner compare`: two or more studies side by side, the first the baseline (with --html also as a
self-contained page); or, with `--release BASE OTHER`, the bucket sets two releases build from the same
settings, diffed offline (tuner/results/releasediff.py). The release diff's settings come from an env
file (`--env-file best.env`, its `# vllm serve flags:` header line included), from a study's balanced pick or
`--trial N` (the study given as the positional), or from flags; --env and the server flags given here override
them."""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path
from typing import Any

from rich.markup import escape

from ..buckets import get_profile
from ..buckets.release_flag import add_release
from ..results.export import FLAGS_HEADER
from . import UsageError, add_allow_unknown, check_env_names, parse_env_pairs, prepare_output
from .studyargs import load_study, numbered_trial

_SERVER_FLAGS = ("max_num_seqs", "max_model_len", "max_num_batched_tokens", "block_size")


def register(sub) -> None:
    p = sub.add_parser("compare", help="two or more studies (or releases) side by side; the first is the baseline")
    p.add_argument("studies", nargs="*", metavar="STUDY", help="study names or folders, baseline first")
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--storage", help="one Optuna storage URL holding all the studies")
    p.add_argument("--html", type=Path, help="also write the comparison page (a self-contained HTML file) here; "
                   "missing folders are created")
    add_release_flags(p)  # compare --release BASE OTHER: the bucket sets two releases build, offline
    p.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    from ..report.compare_page import write_compare_html
    from ..results.compare import compare_studies, print_comparison

    if args.releases:
        check_release_args(args)
        study = trial = None
        if args.studies:  # the settings of this study's pick (or --trial N)
            from ..results.export import ExportError, Filters, pick_trial

            study = load_study(args.studies[0], args.results, args.storage)[0]
            try:
                trial = (numbered_trial(study, args.trial) if args.trial is not None
                         else pick_trial(study, "balanced", Filters()))
            except ExportError as exc:
                raise UsageError(str(exc)) from None
        return cmd_release_diff(args, study, trial)
    refuse_release_flags(args)
    if len(args.studies) < 2:
        raise UsageError(f"compare needs at least two studies (or --release BASE OTHER), got "
                         f"{len(args.studies)}{': ' + args.studies[0] if args.studies else ''}")
    studies = [load_study(name, args.results, args.storage)[0] for name in args.studies]
    try:
        cmp = compare_studies(*studies)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print_comparison(cmp)
    if args.html:
        write_compare_html(cmp, studies, prepare_output(args.html, "--html"))
        print(f"comparison page: {args.html}")
    return 0


def add_release_flags(p) -> None:
    g = p.add_argument_group("release diff (offline: nothing is booted)")
    add_release(g, "diff the buckets these two release profiles build from the same settings, e.g. "
                   "--release fork-1.21.2 gaudi-main; the settings: --env-file, or the balanced pick "
                   "(--trial N) of the one STUDY given, or the flags below", aliases=("--releases",), nargs=2,
                metavar=("BASE", "OTHER"), dest="releases")
    g.add_argument("--env-file", type=Path, metavar="FILE", help="an env file (e.g. an export's best.env)")
    g.add_argument("--env", action="append", metavar="NAME=VALUE", help="a variable (overrides the file's)")
    add_allow_unknown(g)
    g.add_argument("--trial", type=int, metavar="N", help="with a STUDY: this trial instead of the balanced pick")
    for name in _SERVER_FLAGS:
        g.add_argument("--" + name.replace("_", "-"), type=int, dest=name)
    g.add_argument("--num-hpu-blocks", type=int, metavar="N",
                   help="KV blocks for both (default: each release's own, as the performance model predicts)")
    g.add_argument("--device", choices=("gaudi2", "gaudi3"), help="for the prediction (default: the study's, "
                                                                    "else gaudi2)")
    g.add_argument("--model-shape", help="for the prediction (default: the study's, else llama-3.1-8b): "
                   "a catalogue name, a cached Hugging Face id, a model folder or a config.json")
    g.add_argument("--json", action="store_true", help="print one JSON object")


def refuse_release_flags(args) -> None:
    """The release-diff flags mean nothing for a comparison of studies: say so instead of ignoring them."""
    given = [flag for flag, value in (("--env-file", args.env_file), ("--env", args.env), ("--trial", args.trial),
                                      ("--num-hpu-blocks", args.num_hpu_blocks), ("--device", args.device),
                                      ("--model-shape", args.model_shape), ("--json", args.json or None),
                                      ("--allow-unknown", args.allow_unknown or None),
                                      *((f"--{n.replace('_', '-')}", getattr(args, n)) for n in _SERVER_FLAGS))
             if value is not None]
    if given:
        raise UsageError(f"{given[0]} is for the release diff: add --release BASE OTHER")


def read_env_file(path: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """(variables, server options) of an env file: NAME=VALUE lines, and the export's flags header."""
    from ..serve.backends import server_options
    from ..vocabulary.textfile import read_text

    lines = read_text(path, "--env-file").lines()  # a Notepad or PowerShell save is UTF-16
    env: dict[str, str] = {}
    server: dict[str, Any] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if line.startswith(FLAGS_HEADER):
            try:
                server = server_options(shlex.split(line[len(FLAGS_HEADER):]))
            except ValueError:
                raise UsageError(f"--env-file {path}, line {number}: cannot read the flags {line!r}") from None
            continue
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--env-file {path}, line {number}: expected NAME=VALUE, got {line[:80]!r}")
        env[name.strip()] = value.strip()
    return env, server


def _from_study(study, trial) -> tuple[dict[str, str], dict[str, Any], dict[str, str], str]:
    """(env, server options, device and model, a description) of a study's trial."""
    from ..results.export import export_env
    from ..vocabulary.record import TrialRecord

    env, _ = export_env(trial, None)  # the trial's own variables, as its env file sets them (no secrets)
    rec = TrialRecord.from_frozen(trial)
    backend = study.user_attrs.get("backend") or {}
    model = {k: v for k, v in (("device", backend.get("device")), ("model", backend.get("sim_model"))) if v}
    return env, dict(rec.server), model, f"study {study.study_name}, trial {trial.number}"


def check_release_args(args) -> None:
    """What --release BASE OTHER refuses before anything is read."""
    from ..buckets import BucketConfigError, get_profile

    if len(args.studies) > 1:
        raise UsageError(f"--release diffs one configuration: give at most one STUDY, got {len(args.studies)}")
    if args.html:
        raise UsageError("--html is for comparing studies; --release prints its diff (or --json)")
    if args.trial is not None and not args.studies:
        raise UsageError(f"--trial {args.trial} needs the STUDY it belongs to")
    if args.studies and args.env_file:
        raise UsageError("give the settings once: a STUDY or --env-file, not both")
    for name in args.releases:
        try:
            get_profile(name)
        except BucketConfigError as exc:
            raise UsageError(f"--release: {exc}") from None


def cmd_release_diff(args, study=None, trial=None) -> int:
    """The diff of args.releases for the settings of `trial` (of `study`), --env-file, or the flags."""
    from ..results.releasediff import diff_releases

    check_release_args(args)
    env: dict[str, str] = {}
    server: dict[str, Any] = {}
    model: dict[str, str] = {}
    source = "flags"
    warnings: list[str] = []
    if trial is not None:
        env, server, model, source = _from_study(study, trial)
    elif args.env_file:
        env, server = read_env_file(args.env_file)
        source = str(args.env_file)
        warnings += check_env_names(env, args.releases, f"--env-file {args.env_file}:", args)
    given = parse_env_pairs(args.env)
    warnings += check_env_names(given, args.releases, "--env", args)
    env.update(given)
    for name in _SERVER_FLAGS:
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
            server[name] = value
    if args.num_hpu_blocks is not None and args.num_hpu_blocks < 1:
        raise UsageError(f"--num-hpu-blocks must be a positive integer, got {args.num_hpu_blocks}")
    if args.device:
        model["device"] = args.device
    if args.model_shape:
        model["model"] = args.model_shape
    if "model" in model:
        from ..perfmodel.hardware import model_for

        try:
            model_for(model["model"])
        except ValueError as exc:
            raise UsageError(f"--model-shape: {exc}") from None
    diff = diff_releases(*args.releases, server, env, args.num_hpu_blocks, **model)
    if args.json:
        print(json.dumps({**diff_json(diff, source), "name_warnings": warnings}))
    else:
        for w in warnings:
            print(f"warning: {w}")
        print_release_diff(diff, source)
    return 0


def diff_json(diff, source: str) -> dict[str, Any]:
    builds = []
    for b in diff.builds:
        plan = b.plan
        builds.append({"release": b.release, "refused": b.refused, "kv_blocks": b.kv_blocks, "kv_source": b.kv_source,
                       "predicted": b.predicted, "strategy": plan.strategy if plan else None,
                       "counts": {"prompt": len(plan.prompt), "decode": len(plan.decode),
                                  "unified": len(plan.unified)} if plan else None,
                       "warnings": plan.warnings if plan else []})
    phases = [{"phase": p.phase, "counts": list(p.counts), "common": p.common, "note": p.note,
               "removed": [list(x) for x in p.removed], "added": [list(x) for x in p.added]} for p in diff.phases]
    settings = [{"name": s.name, "values": list(s.values), "why": s.why} for s in diff.settings]
    return {"settings_from": source, "releases": list(diff.releases), "builds": builds, "phases": phases,
            "settings": settings}


def _few(buckets: list, shown: int) -> str:
    text = ", ".join(str(tuple(b)) for b in buckets[:shown])
    return text + (f" and {len(buckets) - shown} more" if len(buckets) > shown else "")


def print_release_diff(diff, source: str, console=None) -> None:
    """The diff as text: every line within the console (80 columns off a terminal), each warning once."""
    from rich.console import Console
    from rich.table import Table

    from ..results.releasediff import SHOWN
    from ..vocabulary import display

    console = console or Console()
    width = console.width   # 80 unless a wider terminal (or COLUMNS) says otherwise

    def say(text: str, indent: str = "", *, bold: str = "") -> None:
        lines = textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                              break_on_hyphens=False)
        if bold and lines and lines[0].startswith(indent + bold):   # the lead words in bold, the rest as text
            console.print(f"{indent}[bold]{escape(bold)}[/]{escape(lines[0][len(indent + bold):])}")
            lines = lines[1:]
        for line in lines:
            console.print(line, markup=False, highlight=False)

    a, b = diff.builds
    say(f"Release diff: {a.release} (baseline) vs {b.release}; settings from {source}; nothing booted")
    t = Table(width=width)
    t.add_column("", no_wrap=True)
    t.add_column(a.release, overflow="fold", ratio=1)
    t.add_column(b.release, overflow="fold", ratio=1)

    def plan_row(label, fn):
        t.add_row(label, *[fn(x) if x.plan is not None else "-" for x in (a, b)])

    t.add_row("builds", *["refused: " + x.refused if x.refused else "ok" for x in (a, b)])
    plan_row("strategy", lambda x: x.plan.strategy)
    t.add_row("KV blocks", *[f"{x.kv_blocks} ({x.kv_source})" if x.kv_blocks else "-" for x in (a, b)])
    plan_row("prompt buckets", lambda x: str(len(x.plan.prompt)))
    plan_row("decode buckets", lambda x: str(len(x.plan.decode)))
    if any(x.plan is not None and x.plan.unified for x in (a, b)):
        plan_row("unified buckets", lambda x: str(len(x.plan.unified)))
    t.add_row("predicted warmup (2-sd range)", *[
        display.band(x.predicted["warmup_s"], x.predicted.get("warmup_low_s"), x.predicted.get("warmup_high_s"),
                     source=x.predicted.get("warmup_from")) if "warmup_s" in x.predicted
        else x.predicted.get("failure", "-") for x in (a, b)])
    for key in ("prompt_graphs", "decode_graphs"):
        t.add_row(f"predicted {key.replace('_', ' ')}", *[str(x.predicted.get(key, "-")) for x in (a, b)])
    console.print(t)
    for p in diff.phases:
        head = f"{p.phase}: {p.counts[0]} -> {p.counts[1]} buckets"
        if p.common is None:
            say(f"{head} ({p.note})", bold=f"{p.phase}:")
            continue
        say(f"{head}; {p.common} in both", bold=f"{p.phase}:")
        if p.removed:
            say(f"only in {a.release} ({len(p.removed)}): {_few(p.removed, SHOWN)}", "  ")
        if p.added:
            say(f"only in {b.release} ({len(p.added)}): {_few(p.added, SHOWN)}", "  ")
        if p.note:
            say(f"({p.note})", "  ")
    if diff.settings:
        lead = "Settings the releases treat differently"
        say(f"{lead} ({a.release} -> {b.release}; the ones the settings give first)", bold=lead)
        for s in diff.settings:
            say(f"{s.name}  {s.values[0]} -> {s.values[1]}: {s.why}", "  ")
    for line in release_warnings(diff):
        say(line)


def release_warnings(diff) -> list[str]:
    """Each build's warnings, once: the banners a non-linear strategy prints per linear variable it
    overwrites become one line with the switch that keeps the values."""
    from ..buckets.base import LINEAR, is_overwrite_banner

    out = []
    for x in diff.builds:
        warnings = x.plan.warnings if x.plan else []
        banners = [w for w in warnings if is_overwrite_banner(w) and not w.startswith("*")]
        if banners:
            profile = get_profile(x.release)
            switch = " --env ".join(f"{k}={v}" for k, v in profile.strategy_env(LINEAR).items())
            fix = (f"; to use them, add --env {switch}" if LINEAR in profile.strategies
                   else f" ({x.release} has no linear bucketing)")
            out.append(f"{x.release} warns: its {x.plan.strategy} bucketing overwrites {len(banners)} of the linear "
                       f"bucket variables given (one warning per variable in its log){fix}")
        out += [f"{x.release} warns: {w}" for w in warnings if not is_overwrite_banner(w)]
    return out
