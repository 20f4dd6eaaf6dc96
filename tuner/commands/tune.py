"""`bucket-tuner tune`: run (or resume) a study; ends with the Pareto table, a report and best.env."""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path

from ..vocabulary.textfile import read_text
from . import (
    DURATION_HELP,
    MODEL_HELP,
    UsageError,
    add_allow_unknown,
    check_folder,
    duration,
    parse_key_values,
    refuse_a_length_past_the_model,
    refuse_a_model_the_release_lacks,
    refuse_images_without_vision,
)
from .bench import add_load_flags, add_workload_flags, check_load_flags, parse_percentiles
from .costargs import add_cost_flags, tune_cost
from .tuneconfirm import add_confirm_flags, confirm_options


def register(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="run or resume a tuning study",
        description="Propose settings with Optuna, boot the server with each, measure warmup and serving, "
        "and keep the Pareto front of throughput, latency and warmup time. Re-running the same command "
        "resumes the study.",
    )
    p.add_argument("--space", required=True,  # as written: a trailing / or ./ tells a path from a name
                   help="search-space YAML (a path: it has a / or a .yaml/.yml suffix), or the name of one in "
                        "search_spaces/ (e.g. demo)")
    add_allow_unknown(p)
    p.add_argument("--study", help="study name (default: the space's name)")
    p.add_argument("--results", type=Path, default=Path("results"), help="output root (default results/)")
    p.add_argument("--storage", help="Optuna storage URL (default $BUCKET_TUNER_STORAGE, else "
                                     "sqlite:///results/<study>/study.db); postgresql://user@host/db to share "
                                     "a study between nodes, its password from PGPASSWORD or ~/.pgpass, never here")
    p.add_argument("--heartbeat-grace", type=duration, default=120.0, metavar="S",
                   help="another node fails a trial whose tuner has been silent this long as tuner_died "
                        "and runs its parameters again (default 120; heartbeats every grace/4, at most 30 s)")
    p.add_argument("--storage-outage", type=duration, default=600.0, metavar="S",
                   help="while the storage is unreachable, retry this long before stopping (default 600)")
    g = p.add_argument_group("server")
    g.add_argument("--backend", choices=("sim", "vllm"), default="sim",
                   help="sim: the built-in simulated vLLM-on-Gaudi server; vllm: a real `vllm serve`")
    g.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct")
    g.add_argument("--served-model-name")
    g.add_argument("--release", help="release profile of the server, or auto: read off the node's installed vllm, "
                                     "vllm-gaudi and vllm-hpu-extension (the default with --backend vllm; "
                                     "--backend sim: the space's)")
    g.add_argument("--no-release-check", action="store_true",
                   help="--backend vllm: do not run the release's own bucketing code (where the node has it) to "
                        "check the engine's buckets")
    g.add_argument("--vllm-command", default="vllm", help="how to run vLLM's CLI (e.g. /opt/venv/bin/vllm)")
    g.add_argument("--server-args", default="", metavar="ARGS",
                   help="extra arguments for the server command line, e.g. '--tensor-parallel-size 2' (split "
                        "like a shell would, never run through one); they come after the space's flags and win, "
                        "and the prediction reads them so, --hf-overrides and a --config YAML too")
    add_model_flags(g)
    g.add_argument("--no-prediction", action="store_true", help="no pre-boot prediction / rejection")
    g.add_argument("--time-scale", type=float, default=0.2,
                   help="sim only: compress simulated serving time by this factor (reported figures "
                        "stay in simulated time)")
    g.add_argument("--startup-time-scale", type=float, default=0.005,
                   help="sim only: compress simulated boot and warmup by this factor")
    g.add_argument("--sim-noise", type=float, default=0.0, help="sim only: run-to-run noise")
    g.add_argument("--boot-timeout", type=duration, default=900.0, metavar="S",
                   help=f"until warmup starts ({DURATION_HELP}; default 15m)")
    g.add_argument("--warmup-timeout", type=duration, default=7200.0, metavar="S",
                   help=f"for warmup ({DURATION_HELP}; default 2h)")
    add_workload_flags(p)
    add_load_flags(p)
    r = p.add_argument_group("results (vllm bench serve names)")
    r.add_argument("--percentile-metrics", metavar="M1,M2",
                   help="the metrics whose percentiles each trial records, of ttft,tpot,itl,e2el (default: all); "
                        "must include the --latency-metric and every --slo metric. vllm bench serve's other "
                        "result flags (--save-result, --result-dir, ...) do not apply: every trial's figures are "
                        "in the study, trials.csv and the trial folders")
    _add_sweep_flags(p)
    o = add_objective_flags(p)
    add_cost_flags(p, study_default=False)
    o.add_argument("--shared-recipe-cache", type=Path, metavar="DIR",
                   help="trials share a recipe cache (PT_HPU_RECIPE_CACHE_CONFIG) in DIR, a subfolder per device, "
                        "release, model, dtype and TP: faster boots; cold warmups of cache hits are predicted and "
                        "the Pareto trials are booted once more, cold, at the end. Local disk only (no NFS)")
    b = p.add_argument_group("budget, sampler, parallelism")
    b.add_argument("--n-trials", type=int, default=20,
                   help="the measured trials (boots) the study should hold, as Optuna's MaxTrialsCallback counts "
                        "a study's trials: a re-run resumes up to N; proposals settled without a boot (reused "
                        "measurements, predicted dominated, rejected before boot) do not count (default 20)")
    b.add_argument("--timeout", type=duration, metavar="S",
                   help=f"wall time for this run ({DURATION_HELP}; e.g. 8h for a night)")
    b.add_argument("--sampler", choices=("tpe", "gp", "nsga2", "random", "grid"), default="tpe")
    b.add_argument("--sampler-seed", type=int, default=0)
    b.add_argument("--slots", type=int, default=1, help="trials at once")
    b.add_argument("--devices", help="device groups, one per slot: '0,1;2,3;4,5;6,7' (sets HABANA_VISIBLE_MODULES)")
    b.add_argument("--remeasure", type=int, default=1, metavar="N",
                   help="boot a configuration already measured (same effective settings) until it has N "
                        "measurements, and tell their mean (noisy hardware); default 1: reuse the record")
    add_confirm_flags(b)
    b.add_argument("--no-screening", action="store_true",
                   help="run and count every proposal: no reuse of measured configurations, no model "
                        "seeds, rejections before boot count toward --n-trials (the previous behaviour)")
    b.add_argument("--calibrate-from", nargs="+", type=Path, metavar="LOG",
                   help="server logs of past boots on this node (a production server, earlier studies): their "
                        "figures calibrate the performance model before the first trial")
    b.add_argument("--seed-from", "--fork-from", dest="seed_from", metavar="STUDY",
                   help="enqueue the Pareto set of another study first: a release upgrade, or the same study's "
                        "question changed (another workload, load, SLO, model or release needs a new study)")
    b.add_argument("--no-seed-defaults", action="store_true",
                   help="do not enqueue the release defaults and the calculator's recommendation")
    b.add_argument("--baseline", type=Path, metavar="FILE",
                   help="what you run today (an env file, a `vllm serve` script or a server log): booted first, "
                        "exactly as given, and the report compares the pick with it first")
    b.add_argument("--from-plan", type=Path, metavar="FILE",
                   help="a plan file (`bucket-tuner plan --out`): its picks are booted first, after the baseline")
    p.add_argument("--no-report", action="store_true")
    from .tunehelp import arrange

    arrange(p)
    p.set_defaults(func=cmd_tune, num_prompts=100, random_input_len=512, random_output_len=128,
                   max_concurrency=16, num_warmups=None, metric_percentiles="50,90,99")


def add_model_flags(g) -> None:
    """What the performance model predicts for (tune and plan)."""
    g.add_argument("--device", default="gaudi2",
                   help="target device, for pre-boot prediction (and the simulator: gaudi2, gaudi3); one the "
                        "performance model lacks gets a generic prior that the first boots calibrate")
    g.add_argument("--model-shape", default=None,
                   help="the model to predict for (and the simulator to play), when --model is not its own config: "
                        f"{MODEL_HELP} (default: --model)")
    g.add_argument("--dtype", default="bf16", choices=("bf16", "fp8"))


def model_shape_of(args) -> str:
    """The model the performance model predicts for: --model-shape, else the served --model itself."""
    return args.model_shape or args.model


def add_objective_flags(p):
    """The study's objectives and limits (tune and plan); returns the group."""
    o = p.add_argument_group("objectives and constraints")
    o.add_argument("--latency-metric", choices=("ttft", "tpot", "itl", "e2el"), default="ttft")
    o.add_argument("--latency-stat", default="p99", help="p50, p90, p99, ... or mean, median")
    o.add_argument("--slo", nargs="+", metavar="METRIC=MS",
                   help="constraints METRIC <= MS: <stat>_<metric>_ms of the load test (stat mean, median or "
                        "pNN, metric ttft, tpot, itl or e2el), e.g. p99_ttft_ms=2000 (or =2s) p99_tpot_ms=80; or "
                        "first_<stat>_ttft_ms, the TTFT of the first requests after ready (a cold replica's "
                        "first wave), e.g. first_p99_ttft_ms=3000")
    o.add_argument("--warmup-budget", type=duration, metavar="S",
                   help=f"reject before boot / abort warmup above it ({DURATION_HELP})")
    o.add_argument("--warmup", choices=("cold", "cached"), default="cold",
                   help="the warmup objective and budget: cold (default: every shape compiled) or cached (a "
                        "deployment with a prepared recipe cache, export --with-cache); the other is shown too")
    o.add_argument("--allow-recompiles", action="store_true", help="do not require zero runtime recompiles")
    o.add_argument("--allow-failed-requests", action="store_true")
    return o


def _add_sweep_flags(p) -> None:
    from ..trial.loadsweep import DEFAULT_BUDGET_S, MAX_POINTS

    s = p.add_argument_group("load sweep (one boot, several load points)")
    s.add_argument("--load-sweep", metavar="KIND=V1,V2,...",
                   help="after warmup, run the load test at each point in order on the same server: "
                        "rate=2,4,8 (--request-rate, requests/s) or concurrency=8,16,32 (--max-concurrency); "
                        f"the other load flags stay as given; at most {MAX_POINTS} points. Every point is "
                        "recorded (trials.csv, load_sweep.csv, the report's trials table)")
    s.add_argument("--objective-from-sweep", choices=("last", "best-within-slo"),
                   help="which point's figures the trial reports: last (default: the last point measured) or "
                        "best-within-slo (the highest throughput among the points meeting --slo without failed "
                        "requests, with that point's latency; none meets them: the closest, infeasible)")
    s.add_argument("--load-sweep-budget", type=duration, default=DEFAULT_BUDGET_S, metavar="S",
                   help=f"server seconds for all the points of one trial (default {DEFAULT_BUDGET_S:g}): a point "
                        "still running then is cut, later ones are skipped; the points measured are kept")


def load_sweep_from_args(args):
    """The --load-sweep of the command line (None without it); refused here, before any boot."""
    from ..trial.loadsweep import LoadSweep, LoadSweepError, parse_load_sweep

    text, mode = getattr(args, "load_sweep", None), getattr(args, "objective_from_sweep", None)
    if text is None:
        if mode is not None:
            raise UsageError(f"--objective-from-sweep {mode} needs --load-sweep, e.g. --load-sweep rate=2,4,8")
        return None
    budget = getattr(args, "load_sweep_budget", None)
    if budget is not None and not budget > 0:
        raise UsageError(f"--load-sweep-budget must be a positive number of seconds, got {budget}")
    try:
        return LoadSweep(points=parse_load_sweep(text), mode=mode or "last",
                         slos_ms=parse_key_values(getattr(args, "slo", None), "--slo"),
                         allow_failed_requests=bool(getattr(args, "allow_failed_requests", False)),
                         budget_s=budget)
    except LoadSweepError as exc:
        raise UsageError(str(exc)) from None


def _slots(args):
    from ..trial.run import Slot

    if args.devices:
        groups = [g.strip() for g in args.devices.split(";") if g.strip()]
        if not groups:
            raise UsageError(f"--devices {args.devices!r} names no device group; e.g. '0,1;2,3'")
        return [Slot(index=i, devices=g.split(",")) for i, g in enumerate(groups)]
    if args.slots < 1:
        raise UsageError(f"--slots must be at least 1, got {args.slots}")
    return [Slot(index=i) for i in range(args.slots)]


def _storage_url(args, console) -> str | None:
    from ..study.storage import redact_url

    url = args.storage or os.environ.get("BUCKET_TUNER_STORAGE") or None
    if args.heartbeat_grace < 2:
        raise UsageError(f"--heartbeat-grace must be at least 2 seconds, got {args.heartbeat_grace:g}")
    if args.storage_outage < 0:
        raise UsageError(f"--storage-outage must be 0 or more seconds, got {args.storage_outage:g}")
    if args.storage and redact_url(args.storage) != args.storage:
        console.print("[yellow]warning:[/] --storage holds a password, which `ps` shows to every user: "
                      "put it in PGPASSWORD or ~/.pgpass (PGPASSFILE), or the whole URL in BUCKET_TUNER_STORAGE")
    return url


def _check_numbers(args) -> None:
    positive = {"--boot-timeout": args.boot_timeout, "--warmup-timeout": args.warmup_timeout,
                "--timeout": args.timeout, "--warmup-budget": args.warmup_budget}
    for flag, value in positive.items():
        if value is not None and not value > 0:
            raise UsageError(f"{flag} must be a positive number of seconds, got {value}")
    if not args.sim_noise >= 0:
        raise UsageError(f"--sim-noise must be 0 or more, got {args.sim_noise}")
    if args.sampler_seed < 0:
        raise UsageError(f"--sampler-seed must be 0 or more, got {args.sampler_seed}")


def _check_latency_stat(stat: str, percentiles) -> None:
    """The objective must be a statistic the load test reports, or every trial would score a penalty."""
    from ..load.metrics import percentile_key

    offered = ["mean", "median"] + [f"p{percentile_key(p)}" for p in percentiles]
    if stat not in offered:
        raise UsageError(f"--latency-stat {stat!r} is not reported; choose one of {', '.join(offered)} "
                         "(add a percentile with --metric-percentiles)")


def percentile_metrics(args) -> tuple[str, ...] | None:
    """--percentile-metrics, checked against what the study needs: the latency objective and the SLO metrics."""
    from ..load.metrics import PERCENTILE_METRICS, QUEUE_METRICS

    if not args.percentile_metrics:
        return None
    metrics = tuple(m.strip() for m in args.percentile_metrics.split(",") if m.strip())
    bad = [m for m in metrics if m not in PERCENTILE_METRICS + QUEUE_METRICS]
    if bad or not metrics:
        raise UsageError(f"--percentile-metrics: {(bad or [args.percentile_metrics])[0]!r} is not one of "
                         f"{','.join(PERCENTILE_METRICS + QUEUE_METRICS)}")
    needed = {args.latency_metric} | {k.split("_")[1] for k in parse_key_values(args.slo, "--slo")
                                      if k.count("_") >= 2 and k.split("_")[1] in PERCENTILE_METRICS}
    missing = sorted(needed - set(metrics))
    if missing:
        raise UsageError(f"--percentile-metrics {args.percentile_metrics}: the study needs {','.join(missing)} "
                         "(the --latency-metric or an --slo metric); add it")
    return metrics


def _known_model(args, console, overrides: str | None = None) -> tuple[str, bool]:
    """(the model to predict for, whether prediction is off). The simulator must know what it plays; a
    genuine vLLM serving a model nothing here knows runs without prediction, saying so. The model is read with
    the server's --hf-overrides."""
    from ..models import UnknownModelError, resolve

    shape = model_shape_of(args)
    try:
        resolve(shape, overrides)
    except UnknownModelError as exc:
        if args.backend == "sim" or args.model_shape:
            flag = "--model-shape" if args.model_shape else "--model"
            raise UsageError(f"{flag}: {exc}") from None
        if console is not None and not args.no_prediction:
            console.print(f"no pre-boot prediction: {exc}", soft_wrap=True)
        return shape, True
    return shape, args.no_prediction


def build_context(args, space, console=None):
    from ..models.overrides import legacy_rope_spelling
    from ..perfmodel.target import DeviceModel
    from ..serve.backends import Backend, server_options
    from ..trial.run import Limits, LoadOptions, TrialContext
    from .tunerelease import choose_release

    if args.backend == "sim" and (args.release or space.release) is None:
        raise UsageError("the simulator needs a release profile: give --release or a space with release:")
    _check_numbers(args)
    check_load_flags(args)
    try:
        vllm_command, extra_args = shlex.split(args.vllm_command), shlex.split(args.server_args)
    except ValueError as exc:  # an unclosed quote
        shown = args.server_args or args.vllm_command
        raise UsageError(f"--server-args / --vllm-command: {exc} in {shown!r}") from None
    server = server_argv(extra_args)  # a --config YAML there read once; reading it again changes nothing
    overrides = server_hf_overrides(server)
    fixed = tuple(sorted(server_options(server).items()))  # they win over the space's
    refuse_server_args_over_tuned(space, dict(fixed))
    if console is not None and (spelling := legacy_rope_spelling(overrides)):
        console.print(f"note: {spelling}", soft_wrap=True)
    shape, no_prediction = _known_model(args, console, overrides)
    flag = '--model-shape' if args.model_shape else '--model'
    refuse_images_without_vision(space, shape, flag, overrides)
    refuse_a_length_past_the_model(space, shape, flag, overrides, dict(fixed).get("max_model_len"))
    refuse_a_model_the_release_lacks(args.release or space.release, shape, flag, overrides)
    if args.backend == "sim":
        from ..perfmodel.hardware import DEVICES

        if args.device not in DEVICES:
            raise UsageError(f"--device {args.device!r}: the simulator knows {', '.join(sorted(DEVICES))}")
    if args.backend == "vllm" and not (vllm_command and shutil.which(vllm_command[0])):
        # checked now: every trial would otherwise fail the same way and burn the night's budget
        raise UsageError(f"--vllm-command {args.vllm_command!r}: "
                         f"{(vllm_command or [''])[0]!r} is not an executable file or a command on PATH")
    release, detected, notes = choose_release(args, space, vllm_command)
    for note in notes if console is not None else ():
        console.print(note, soft_wrap=True)
    backend = Backend(
        kind=args.backend, model=args.model, served_model_name=args.served_model_name,
        sim_release=release, sim_device=args.device, sim_model=shape,
        time_scale=args.time_scale if args.backend == "sim" else 1.0,
        startup_time_scale=args.startup_time_scale if args.backend == "sim" else None, sim_noise=args.sim_noise,
        vllm_command=vllm_command, extra_args=extra_args,
    )
    if args.dtype == "fp8" and args.backend == "sim":
        backend.extra_args += ["--quantization", "fp8"]
    device_model = None if (no_prediction or release is None) else DeviceModel(
        device=args.device, model=shape, dtype=args.dtype, hf_overrides=overrides, server_args=fixed)
    return TrialContext(
        backend=backend,
        workload=_workload(args),
        release=release,
        device_model=device_model,
        load=LoadOptions(max_concurrency=args.max_concurrency, request_rate=args.request_rate,
                         burstiness=args.burstiness, warmup_requests=warm_pass(args),
                         goodput_slos=parse_key_values(args.goodput, "--goodput", sep=":") or None,
                         percentiles=parse_percentiles(args.metric_percentiles),
                         percentile_metrics=percentile_metrics(args)),
        limits=Limits(boot_timeout_s=args.boot_timeout, warmup_timeout_s=args.warmup_timeout,
                      warmup_budget_s=args.warmup_budget),
        load_sweep=load_sweep_from_args(args),
        release_detection=detected,
    )


def refuse_server_args_over_tuned(space, fixed: dict) -> None:
    """--server-args come last on the server's command line and win: one that sets an option the space tunes
    would run every trial with its value, and the study would learn nothing of that parameter."""
    from ..serve.backends import server_flags

    tuned = sorted({p.key for p in space.parameters if p.target == "server"} & set(fixed))
    if tuned:
        flags = " ".join(server_flags({k: fixed[k] for k in tuned}))
        raise UsageError(f"--server-args sets {flags}, which the space {space.name} tunes ({', '.join(tuned)}): "
                         "the server takes the last value given, so every trial would run with this one; drop it "
                         "from --server-args (or make it a fixed `server:` setting of the space)")


def server_argv(server_args: list[str]) -> list[str]:
    """--server-args as the server reads them: each flag in one spelling (aliases, prefixes, dotted keys:
    vocabulary/serveargs.py), and a `--config FILE.yaml` there
    opened in place (its flags first: the command line's win, as in vLLM); a config file that cannot be read
    is the user's error, said before any boot."""
    from ..serve.configfile import ConfigFileError, config_flags
    from ..vocabulary.serveargs import ServeArgsError, canonical_argv

    try:
        args = canonical_argv(server_args)
        if "--config" not in args:
            return args
        i = args.index("--config")
        if i + 1 >= len(args):
            raise ConfigFileError("--config needs a file name")
        return canonical_argv(config_flags(args[i + 1], set())) + args[:i] + args[i + 2:]
    except (ConfigFileError, ServeArgsError) as exc:
        raise UsageError(f"--server-args: {exc}") from None


def server_hf_overrides(server_args: list[str]) -> str | None:
    """The --hf-overrides of --server-args (one spelling of them, server_argv), which the model is read with; a
    value that is not a JSON object is the user's error, said before any boot."""
    from ..models.overrides import canonical
    from ..serve.backends import flag_value

    try:
        return canonical(flag_value(server_argv(server_args), "--hf-overrides"))
    except ValueError as exc:
        raise UsageError(f"--server-args: {exc}") from None


def warm_pass(args) -> int:
    """--num-warmups, by default one wave of the load (--max-concurrency, 16 when unlimited): the first-run
    window, the first requests after ready (tuner/load/firstrun.py), measured apart from the load test."""
    if args.num_warmups is not None:
        return args.num_warmups
    return args.max_concurrency or 16


def _workload(args):
    """The flags' workload; token ids from the model's tokenizer when it is on disk (never downloaded),
    else below --vocab-size (default 32000: a trial whose server rejects ids reports its message)."""
    from ..load.datasets import build_workload
    from ..load.tokenizer import discover_vocab

    if args.dataset_name == "random-rerank":  # bench's, for a pooling model's rerank API
        raise UsageError("--dataset-name random-rerank: a study measures a generating model's streamed load; load a "
                         "pooling model's rerank API with bucket-tuner bench --backend vllm-rerank")
    vocab = discover_vocab(args.tokenizer, args.model) if args.vocab_size is None else None
    if args.dataset_name == "random-mm":  # a study's load client sends images as vLLM's openai-chat does
        from argparse import Namespace

        args = Namespace(**{**vars(args), "backend": "openai-chat"})
    try:
        return build_workload(args, vocab)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _log_samples(paths: list[Path], ctx, space, console) -> list[dict]:
    """One calibration sample per --calibrate-from log, each checked against this study's release."""
    from rich.markup import escape

    from ..study.logcalibration import LogCalibrationError, log_sample

    samples = []
    for path in paths:
        lines = read_text(path, "--calibrate-from").lines()
        try:
            got = log_sample(lines, ctx, space.server, source=str(path))
        except LogCalibrationError as exc:
            raise UsageError(str(exc)) from None
        for note in got.notes:
            console.print(f"[yellow]calibrate-from {path}:[/] " + escape(note))
        for line in [*got.described, got.corrections_text()]:
            console.print(f"calibrate-from {path}: " + escape(line))
        samples.append(got.sample)
    return samples


def read_baseline(path: Path, space, release: str, release_given: bool = False):
    """The baseline of `plan` / `tune`: its settings in the space (tuner/plan/baseline.py);
    `release_given`: --release was on the command line, and a log is read as that release."""
    from ..plan.baseline import BaselineError, baseline_settings, read_deployment
    from ..plan.build import Baseline

    try:
        dep = read_deployment(path, release, space.server, release_given=release_given)
    except BaselineError as exc:
        raise UsageError(str(exc)) from None
    settings, notes = baseline_settings(dep, space)
    return Baseline(str(path), dep.kind, settings, notes)


def _baseline(args, space, ctx, console) -> dict | None:
    """--baseline: its exact settings in the space (tuner/plan/baseline.py), and what was read of it."""
    if args.baseline is None:
        return None
    b = read_baseline(args.baseline, space, ctx.release, release_given=getattr(args, "release", None) is not None)
    for note in b.notes:
        console.print(f"[yellow]baseline:[/] {note}")
    return {"source": str(args.baseline), "kind": b.kind, "server": b.settings.server, "env": b.settings.env,
            "params": b.settings.params, "notes": b.notes}


def _from_plan(args, space, ctx, console) -> tuple[list[dict], dict | None]:
    """--from-plan: the plan's picks (checked against this space) and the study's record of the plan."""
    if args.from_plan is None:
        return [], None
    from ..plan.baseline import space_value
    from ..plan.document import PlanFileError, read_picks, study_record

    try:
        doc, picks = read_picks(args.from_plan)
    except PlanFileError as exc:
        raise UsageError(str(exc)) from None
    planned = doc.get("space") or {}
    if planned.get("name") != space.name or planned.get("release") != ctx.release:
        console.print(f"[yellow]--from-plan:[/] the plan was made for space {planned.get('name')!r} on "
                      f"{planned.get('release')}; this study tunes {space.name!r} on {ctx.release}")
    params = {p.name: p for p in space.parameters}
    for rank, pick in enumerate(picks, start=1):
        for name, value in pick.items():
            if name not in params or space_value(params[name], value) is None:
                raise UsageError(f"--from-plan {args.from_plan}: pick {rank} sets {name}={value!r}, which "
                                 f"{'is not a parameter of' if name not in params else 'is outside'} "
                                 f"{space.source}")
    return picks, study_record(doc, str(args.from_plan))


def cmd_tune(args) -> int:
    run = tune_study(args)
    return run.exit_status if run.interrupted else 0


def tune_study(args, console=None, storage=None, runner=None):
    """The whole of `tune` on parsed flags (the Python API, tuner.tune, calls this too); the StudyRun.
    `storage`: an Optuna storage object in place of --storage; `runner`: run_study's trial runner."""
    from rich.console import Console

    from .. import report
    from ..space.schema import SearchSpace
    from ..study.options import Constraints, Objectives, StudyOptions
    from ..study.run import run_study
    from ..study.storage import redact_url, write_failure
    from ..vocabulary.errors.disk import DiskError

    console = console or Console(stderr=True)
    check_folder(args.results, "--results")
    from ..space.library import find_space

    args.space = find_space(args.space)
    space = SearchSpace.load(args.space)
    ctx = build_context(args, space, console)
    if ctx.release:
        for note in space.check_release(ctx.release, allow_unknown=args.allow_unknown):
            console.print(f"[yellow]space:[/] {note}")
    if args.n_trials < 1:
        raise UsageError(f"--n-trials must be at least 1, got {args.n_trials}")
    seed_db = args.results / (args.seed_from or "") / "study.db"
    if args.seed_from and not args.storage and not seed_db.is_file():  # checked even when resuming
        raise UsageError(f"--seed-from {args.seed_from}: no study at {seed_db}")
    _check_latency_stat(args.latency_stat, ctx.load.percentiles)
    if args.remeasure < 1:
        raise UsageError(f"--remeasure must be at least 1, got {args.remeasure}")
    calibration_seeds = _log_samples(args.calibrate_from or [], ctx, space, console)
    baseline = _baseline(args, space, ctx, console)
    plan_seeds, plan_record = _from_plan(args, space, ctx, console)
    from .tunecache import warmup_options

    ctx.warmup = warmup_options(args, ctx, console)
    ctx.cost = tune_cost(args)
    objectives = Objectives(latency_metric=args.latency_metric, latency_stat=args.latency_stat,
                            cost=args.cost_objective)
    from . import parse_slos

    constraints = Constraints(slos_ms=parse_slos(args, ctx.load.percentiles, ctx.load.warmup_requests),
                              warmup_budget_s=args.warmup_budget,
                              allow_recompiles=args.allow_recompiles,
                              allow_failed_requests=args.allow_failed_requests)
    storage_url = _storage_url(args, console)
    opts = StudyOptions(name=args.study or space.name, results_root=args.results, storage=storage_url,
                        sampler=args.sampler, seed=args.sampler_seed, n_trials=args.n_trials,
                        timeout_s=args.timeout, slots=_slots(args), seed_from=args.seed_from,
                        enqueue_defaults=not args.no_seed_defaults,
                        heartbeat_grace_s=args.heartbeat_grace, storage_outage_s=args.storage_outage,
                        remeasure=args.remeasure, screening=not args.no_screening,
                        calibration_seeds=calibration_seeds, storage_object=storage, baseline=baseline,
                        plan_seeds=plan_seeds, plan=plan_record, confirm=confirm_options(args))
    from .tuneprogress import NightProgress, SlotBars, interrupted_line, trial_line

    started = time.monotonic()
    bars = SlotBars(console, opts.slots)
    ctx.progress = lambda text: bars.print(f"  [dim]{text}[/]")
    ctx.on_progress = bars.update

    from ..study.tell import already_done

    done_before, best_before = already_done(opts)
    night = NightProgress(planned=opts.n_trials, slots=len(opts.slots), done_before=done_before,
                          backend=ctx.backend.describe(), best=best_before)

    def on_trial(number, result):
        bars.print(trial_line(number, result, objectives, constraints, time.monotonic() - started))
        night.record(number, result, feasible=not constraints.misses(result))
        bars.print(f"  [dim]{night.line()}[/]")

    console.print(f"study [bold]{opts.name}[/] on {ctx.backend.kind} ({ctx.release or 'generic vLLM'}), "
                  f"storage {redact_url(opts.storage_url) if storage is None else type(storage).__name__}; "
                  f"{_budget_text(opts, night.done_before)}")
    from .tunerelease import record_release, release_check

    try:
        with release_check(args, ctx, opts.study_dir, console, bars.print) as check, bars:
            run = run_study(opts, space, ctx, objectives, constraints, on_trial=on_trial, runner=runner)
    except Exception as exc:  # a write to the study's database that failed (full disk, read-only, locked)
        explained = write_failure(exc, opts.storage_url)
        if explained is None:
            raise
        raise explained from None
    record_release(run.study, ctx, check, console)
    if run.interrupted:
        console.print(f"[yellow]{interrupted_line(run)}[/]", soft_wrap=True)
    elif ctx.warmup is not None:
        from .tunecache import after_study

        after_study(run.study, space, ctx, opts.study_dir, console)
    report.print_pareto(run.study)
    report.print_costs(run.study)  # tune --cost-per-hour: the front's cost per million tokens, the payback
    if not args.no_report:
        from .tunenext import write_results

        try:
            write_results(run, opts, ctx, console)
        except DiskError as exc:
            if not run.interrupted:
                raise
            console.print(f"[yellow]{exc}[/]", soft_wrap=True)  # the signal's exit status stands
    run.study_dir = opts.study_dir
    return run



def _budget_text(opts, done: int) -> str:
    """'until it holds 20 measured trials (8 already: 12 to boot)': what --n-trials means for this run."""
    already = f" ({done} already: {max(0, opts.n_trials - done)} to boot)" if done else ""
    plural = "s" if opts.n_trials != 1 else ""
    return (f"until it holds {opts.n_trials} measured trial{plural}{already}; reused and screened proposals do "
            "not count")
