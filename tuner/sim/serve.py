"""`sim-serve MODEL [flags]`: the simulated vLLM-on-Gaudi server, a drop-in for `vllm serve`.

Takes the `vllm serve` flags that tuning touches (an unknown flag is an error, exit 2, as in vLLM), reads
the same VLLM_* / PT_HPU_* variables as the chosen release, prints that release's startup log in
simulated time, and serves the OpenAI API once warmup is over. Simulator-only flags start with --sim-.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import re
import signal
import socket
import sys
import time

from aiohttp import web

from ..buckets import get_profile
from ..buckets.release_flag import add_release
from ..models.overrides import canonical, parse_hf_overrides
from ..models.releasearch import release_lacks, unsupported_message
from ..perfmodel import Corrections, ServerInputs, SimSettings, StartupPrediction, predict_startup
from ..perfmodel.engine import Engine
from ..perfmodel.hardware import DEVICES, model_for, normalize_dtype, normalize_kv_dtype
from ..perfmodel.prediction import Failure
from ..perfmodel.prefixcache import PrefixCache
from ..perfmodel.rules import env_value, rules_for
from ..serve.configfile import ConfigFileError, expand_config
from ..serve.redact import is_secret_name
from ..vocabulary.numbers import AUTO, length_or_auto, token_count
from ..vocabulary.serveargs import preprocess
from ..vocabulary.speculative import merged_config, speculative_object
from .clocks import LiveDriver
from .faults import COMPILE_ERROR, FaultError, Faults
from .faults import ENV_VAR as FAULT_ENV
from .faults import from_env as fault_specs_from_env
from .http import SimHTTP
from .logfmt import SimLog
from .pooling import PoolingFront, is_pooling
from .recipe_cache import RecipeCache
from .startup import LOG_STYLES, VERSIONS, SimTime, emit, startup_events, store_recipe
from .vllmflags import UNMODELLED_PREFIX, accept_unmodelled, given

DEFAULT_RELEASE = "fork-main"  # the newest fork release
# The first run of a warmed shape after ready costs this many step times more (docs/load-metrics.md section 4):
# with the tune defaults it puts the first window's p99 TTFT and throughput a modest step behind the rest,
# well inside the first-run figures users report (vllm-gaudi #1188: P95 TTFT x4; #1602: -13% tok/s).
FIRST_REPLAY = 1.0


def hardware_corrections(items: list[str]) -> Corrections:
    """`--sim-hardware prompt_warmup=2 kv_block=1.1`: factors on the documented constants (additive
    for free_mem_offset_gib), the way the benchmark's scenarios make the truth differ from the model."""
    names = set(Corrections().to_dict())
    values: dict[str, float] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or name not in names:
            raise ValueError(f"--sim-hardware {item!r}: expected NAME=NUMBER with NAME one of "
                             f"{', '.join(sorted(names))}")
        try:
            values[name] = float(raw)
        except ValueError:
            raise ValueError(f"--sim-hardware {item!r}: {raw!r} is not a number") from None
        if not values[name] > 0 and name != "free_mem_offset_gib":
            raise ValueError(f"--sim-hardware {item!r}: a factor must be > 0")
    return Corrections.from_dict(values)


MAMBA_DTYPES = ("auto", "float32", "float16", "bfloat16")  # vLLM 0.32's MambaDType


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bucket-tuner sim-serve",
                                description="Simulated vLLM-on-Gaudi server (drop-in for `vllm serve`).")
    p.add_argument("model", metavar="MODEL", help="served model name or path (also picks the shape)")
    p.add_argument("--config", metavar="FILE.yaml", help="flags from a YAML file, as vllm serve --config reads it "
                   "(keys are flag names; `model:` gives the model; command-line flags win)")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", type=int, default=None,
                   help="default: the release's (256; vllm-gaudi cuts it to the token budget)")
    p.add_argument("--max-model-len", default=None,
                   help="tokens (32k = 32,000, 32K = 32,768), or -1 / auto: the longest the KV cache holds "
                        "(vllm-gaudi; the fork's releases take a whole number)")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--max-num-batched-tokens", default=None,
                   help="default: the release's (bucket-tuner buckets --help, docs/usage.md)")
    p.add_argument("--max-num-prefill-seqs", type=int, default=None)
    p.add_argument("--num-gpu-blocks-override", type=int, default=None,
                   help="the KV-cache blocks, whatever the memory profile says (the engine logs both)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--quantization", "-q", default=None)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--limit-mm-per-prompt", default=None, metavar="JSON",
                   help="items per prompt per modality, as vLLM takes it ('{\"image\": 2}' or "
                   "'{\"image\": {\"count\": 2, \"width\": 1280, \"height\": 720}}'): the release warms the "
                   "image encoder only for a modality named here")
    p.add_argument("--speculative-config", "-sc", default=None, metavar="JSON",
                   help="speculative decoding, as vLLM takes it "
                   "('{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'): the decode buckets and a hybrid's "
                   "states make room for the draft tokens")
    p.add_argument("--mamba-cache-dtype", choices=MAMBA_DTYPES, default="auto",
                   help="a hybrid's conv state (auto: the model's dtype)")
    p.add_argument("--mamba-ssm-cache-dtype", choices=MAMBA_DTYPES, default="auto",
                   help="a hybrid's recurrent state (auto: the model's rule, e.g. Qwen3.5's mamba_ssm_dtype)")
    p.add_argument("--spec-method", default=None, help="vLLM 0.32's shortcut for --speculative-config's method")
    p.add_argument("--spec-model", default=None, help="... and for its draft model")
    p.add_argument("--spec-tokens", type=int, default=None, help="... and for its num_speculative_tokens")
    p.add_argument("--num-speculative-tokens", type=int, default=None,
                   help="the fork releases' spelling of the draft tokens a step proposes")
    p.add_argument("--runner", choices=("auto", "generate", "pooling", "draft"), default="auto",
                   help="pooling: serve a pooling model (embeddings, scores) instead of generating")
    p.add_argument("--convert", choices=("auto", "none", "embed", "classify", "reward"), default="auto",
                   help="embed/classify/reward: serve the model converted to a pooling model")
    p.add_argument("--task", default=None, help="older vLLM's name of the same (embed, classify, score, ...)")
    p.add_argument("--allowed-local-media-path", default=None, metavar="DIR",
                   help="vLLM's: file:// images of chat requests are read under this folder only")
    p.add_argument("--hf-overrides", default=None, metavar="JSON",
                   help="keys set over the model's config.json, as vLLM's (read: embedding_size, is_matryoshka, "
                        "matryoshka_dimensions and num_labels of a pooling model)")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--api-key", nargs="+", default=None,
                   help="require one of these keys on /v1 routes (else $VLLM_API_KEY), as vLLM does")
    p.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters (their cost is not simulated)")
    p.add_argument("--lora-modules", nargs="+", default=None, metavar="NAME=PATH",
                   help="adapters served as models, vLLM's forms: name=path or a JSON object with name and path")
    p.add_argument("--max-loras", type=int, default=1)
    p.add_argument("--max-lora-rank", type=int, default=16)
    p.add_argument("--max-cpu-loras", type=int, default=None)
    # Harmless flags launch scripts commonly pass; accepted and ignored.
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--disable-log-requests", action="store_true")
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--load-format", default="auto")
    sim = p.add_argument_group("simulator")
    add_release(sim, f"release profile (bucket-tuner profiles; default {DEFAULT_RELEASE})", aliases=("--sim-release",),
                default=DEFAULT_RELEASE, dest="sim_release")
    sim.add_argument("--sim-device", default="gaudi2", choices=sorted(DEVICES))
    sim.add_argument("--sim-model", default=None,
                     help="the model it plays: a catalogue name, a model folder or config.json (default: MODEL)")
    sim.add_argument("--sim-time-scale", type=float, default=1.0,
                     help="wall seconds per simulated second (0.02: a 49 s warmup takes ~1 s)")
    sim.add_argument("--sim-startup-time-scale", type=float, default=None,
                     help="time scale of the startup only (default: --sim-time-scale)")
    sim.add_argument("--sim-log-style", choices=LOG_STYLES, default="lines",
                     help="how a vllm-gaudi release shows its warm-up: `lines` ([Warmup] lines, as with "
                          "VLLM_DEVELOPER_MODE=1) or `tqdm` (the plugin's default: progress bars redrawn with \\r)")
    sim.add_argument("--sim-seed", type=int, default=0)
    sim.add_argument("--sim-noise", type=float, default=0.0, help="run-to-run step-time noise (lognormal sigma)")
    sim.add_argument("--sim-first-replay", type=float, default=FIRST_REPLAY, metavar="FACTOR",
                     help="the first run of each warmed shape after ready takes FACTOR times its step time more "
                          "(recipes compiled but never executed in warm-up, vllm-gaudi #1188; "
                          f"default {FIRST_REPLAY:g}, 0: none)")
    sim.add_argument("--sim-hardware", nargs="+", default=[], metavar="FACTOR=X",
                     help="the simulated node differs from the documented constants (the tuner is not told): "
                          "e.g. prompt_warmup=2 decode_warmup=2 kv_block=1.1 graph_mem=1.25 decode_step=1.25 "
                          "(names: tuner/perfmodel/corrections.py)")
    sim.add_argument("--sim-fault", action="append", default=[],
                     help="see tuner/sim/faults.py (also: env BUCKET_TUNER_SIM_FAULT)")
    p.unmodelled = accept_unmodelled(p)  # vLLM's other flags: taken, not modelled (vllmflags.py)
    return p


def token_flags(args) -> tuple[int | None, int | None]:
    """(--max-model-len, --max-num-batched-tokens) as the release's vLLM parses them: vllm-gaudi's take 32k, 8K
    and (the length) auto / -1; the fork's, on vLLM 0.5-0.9, a whole number. ValueError naming the flag."""
    plain = rules_for(get_profile(args.sim_release).name).engine == "v0"
    out = []
    for flag, text, parse in (("--max-model-len", args.max_model_len, length_or_auto),
                              ("--max-num-batched-tokens", args.max_num_batched_tokens, token_count)):
        if text is None or isinstance(text, int):
            out.append(text)
            continue
        try:
            value = int(text) if plain else parse(text)
        except ValueError as e:
            raise ValueError(f"argument {flag}: " + (f"invalid int value: {text!r}" if plain else str(e))) from None
        if value <= 0 and not (value == AUTO and flag == "--max-model-len" and not plain):
            raise ValueError(f"argument {flag}: {text!r}: must be a positive number of tokens"
                             + ("" if plain or flag != "--max-model-len" else " (or -1 / auto)"))
        out.append(value)
    return out[0], out[1]


# what the simulator's own flags hold, not vLLM's: never in the server's view of its arguments
_NOT_VLLMS = ("sim_", "release", "adapters", "config")


def non_default_args(args) -> dict:
    """The `non-default args` vLLM's API server logs at start (the flags given, parsed as vLLM parses them):
    `{'model_tag': MODEL, 'model': MODEL, 'port': 8001, 'max_model_len': 16000, 'hf_overrides': {...}}`."""
    defaults = vars(build_parser().parse_args([args.model]))
    out = {"model_tag": args.model, "model": args.model}
    lengths = dict(zip(("max_model_len", "max_num_batched_tokens"), token_flags(args)))
    for key, value in vars(args).items():
        if key.startswith(_NOT_VLLMS) or key not in defaults or value == defaults[key]:
            continue
        key = key.removeprefix(UNMODELLED_PREFIX)
        if is_secret_name(key):  # --api-key, --hf-token: vLLM prints them; a log the tuner keeps must not
            continue
        out[key] = lengths.get(key, value)
        if key == "hf_overrides":
            out[key] = parse_hf_overrides(value)
        elif key == "speculative_config":  # vLLM's parser reads it as JSON: printed as the dict
            out[key] = speculative_object(value)
    return out


def settings_from_args(args) -> tuple[SimSettings, ServerInputs]:
    dtype = normalize_dtype(args.dtype, args.quantization)
    overrides = canonical(args.hf_overrides)  # ValueError naming a malformed value
    shape = args.sim_model or model_for(args.model, overrides).name
    sim = SimSettings(model=shape, device=args.sim_device, dtype=dtype,
                      kv_dtype=normalize_kv_dtype(args.kv_cache_dtype, dtype), tp=args.tensor_parallel_size,
                      gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=args.enforce_eager,
                      hf_overrides=overrides)
    max_model_len, max_num_batched_tokens = token_flags(args)
    inputs = ServerInputs(block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                          max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
                          prefix_caching=args.enable_prefix_caching, max_num_prefill_seqs=args.max_num_prefill_seqs,
                          num_gpu_blocks_override=args.num_gpu_blocks_override,
                          limit_mm_per_prompt=args.limit_mm_per_prompt,
                          speculative_config=_speculative(args), mamba_cache_dtype=args.mamba_cache_dtype,
                          mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype,
                          pooling=is_pooling(args.runner, args.convert, args.task))
    return sim, inputs


def _speculative(args) -> str | None:
    """--speculative-config with vLLM 0.32's --spec-* shortcuts merged in, or the fork's --num-speculative-tokens
    as one (ValueError as vLLM's, for a shortcut that repeats a key of the object)."""
    tokens = args.spec_tokens if args.spec_tokens is not None else args.num_speculative_tokens
    return merged_config(args.speculative_config, args.spec_method, args.spec_model, tokens)


def lora_modules(values: list[str] | None, enabled: bool) -> dict[str, str]:
    """vLLM's --lora-modules: adapter name -> path, from `name=path` or `{"name": ..., "path": ...}`."""
    out: dict[str, str] = {}
    for value in values or ():
        if value.lstrip().startswith("{"):
            try:
                item = json.loads(value)
                name, path = item["name"], item["path"]
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"--lora-modules {value!r}: a JSON module needs 'name' and 'path'") from None
        elif "=" in value:
            name, path = value.split("=", 1)
        else:
            raise ValueError(f"--lora-modules {value!r}: expected name=path or a JSON object")
        out[name] = path
    if out and not enabled:
        raise ValueError("--lora-modules needs --enable-lora")
    return out


def pooling_task(convert: str | None, task: str | None, architecture: str) -> str:
    """The pooling task vLLM gives the model: --convert's, older --task's (score: a cross-encoder, a classifier),
    else its architecture's (a *ForSequenceClassification classifies), else embedding."""
    if convert in ("embed", "classify", "reward"):
        return convert
    if task in ("classify", "score"):
        return "classify"
    if task == "reward":
        return "reward"
    return "classify" if architecture.endswith("ForSequenceClassification") else "embed"


def pooling_front(front: SimHTTP, model, task: str = "embed") -> PoolingFront:
    """The pooling routes of the model's task, with the vector width and Matryoshka widths of its config (read
    with the server's --hf-overrides) and a classifier's labels."""
    dims = list(model.matryoshka_dimensions)
    width = int(model.embedding_size or model.hidden)
    return PoolingFront(front, width, [int(d) for d in dims] if dims else bool(model.matryoshka), task,
                        model.labels)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        # its flags, spelt as vLLM's parser takes them (--max_model_len is --max-model-len, a config file's keys too)
        argv = preprocess(expand_config(preprocess(argv), set(re.findall(r"--[\w-]+", parser.format_usage()))))
    except ConfigFileError as e:
        parser.error(str(e))  # exits 2
    args = parser.parse_args(argv)
    args.unmodelled = parser.unmodelled
    try:
        faults = Faults.parse(args.sim_fault + fault_specs_from_env(os.environ.get(FAULT_ENV)))
        sim, inputs = settings_from_args(args)
        if args.sim_time_scale <= 0 or (args.sim_startup_time_scale or 1) <= 0:
            raise ValueError("time scales must be > 0")
        if not args.sim_first_replay >= 0:
            raise ValueError(f"--sim-first-replay must be 0 or more, got {args.sim_first_replay}")
        release = get_profile(args.sim_release).name
        hardware = hardware_corrections(args.sim_hardware)
        args.adapters = lora_modules(args.lora_modules, args.enable_lora)
    except (FaultError, ValueError) as e:
        parser.error(str(e))  # exits 2
    env = dict(os.environ)
    cache = RecipeCache.from_env(env_value(env, release, "PT_HPU_RECIPE_CACHE_CONFIG"))
    cached = cache.open() if cache else frozenset()
    pred = predict_startup(release, sim, inputs, env, cached, corrections=hardware)
    if release_lacks(release, sim.shape.architecture):  # the release's registry has no such model: it stops there
        pred.failure = Failure("config", unsupported_message(release, sim.shape.architecture))
    clock = SimTime()
    log = SimLog(pred.rules.style, clock, time.time())
    host = args.host or "0.0.0.0"
    try:
        sock = _bind(host, args.port, "refuse-bind" in faults)
    except OSError as e:
        for line in ("Traceback (most recent call last):",
                     '  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/openai/api_server.py", '
                     "line 573, in run_server", f"OSError: [Errno {e.errno}] {e.strerror}"):
            log.raw(line, stderr=True)
        log.raw(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address ({host!r}, {args.port}): "
                f"{e.strerror.lower()}")
        return 1
    try:
        return asyncio.run(_serve(args, pred, faults, cache, log, clock, sock))
    finally:
        sock.close()


def _bind(host: str, port: int, refuse: bool) -> socket.socket:
    """Take the port before loading, as vLLM does; it only listens once warmup is over."""
    if refuse:
        raise OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


async def _serve(args, pred: StartupPrediction, faults: Faults, cache: RecipeCache | None, log: SimLog,
                 clock: SimTime, sock: socket.socket) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    scale = args.sim_time_scale
    startup_scale = args.sim_startup_time_scale or scale
    wall0 = loop.time()
    outcome = None
    for ev in startup_events(pred, faults, args.sim_log_style):
        kind = ev[0]
        if kind == "advance":
            clock.t += ev[1]
            delay = wall0 + clock.t * startup_scale - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
            if stop.is_set():
                log.raw("INFO:     Shutting down")
                return 0
        elif kind in ("log", "raw", "bar"):
            emit(log, ev)
            if kind == "log" and ev[2] == "api" and pred.rules.engine == "v1":  # after the version, as vLLM v1
                log.log("INFO", "args", f"non-default args: {non_default_args(args)}")
            if kind == "log" and ev[2] == "api" and (unmodelled := given(args, args.unmodelled)):
                log.log("WARNING", "args", "the simulator takes these vLLM flags and does not model them: "
                        + ", ".join(args.unmodelled[UNMODELLED_PREFIX + k] for k in unmodelled))
        elif kind == "compiled":
            store_recipe(cache, pred, ev[1], ev[2])
        elif kind in ("fail", "hang", "ready"):
            outcome = ev
            break
    if outcome[0] == "fail":
        return outcome[1]
    if outcome[0] == "hang":
        # Stuck in native code: SIGINT does nothing, SIGTERM/SIGKILL end the process.
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        await asyncio.Event().wait()
    return await _run_http(args, pred, faults, cache, log, clock, sock, stop, scale)


async def _run_http(args, pred, faults, cache, log, clock, sock, stop, scale) -> int:
    names = args.served_model_name or [args.model]
    on_compile = None
    if cache:
        def on_compile(phase, bucket, key):
            cache.store(key, f"{phase} {bucket}")
    engine = Engine(pred, noise=args.sim_noise, seed=args.sim_seed, on_compile=on_compile,
                    cached_recipes=frozenset(cache.present) if cache else frozenset(),
                    first_replay=args.sim_first_replay)
    if pred.rules.engine == "v1" and pred.plan.prefix_caching:  # vLLM v1's automatic prefix caching
        engine.prefix_cache = PrefixCache(pred.config.block_size, pred.num_blocks)
    stats = _StatsLogger(pred, log, engine)
    crash_after = int(faults.get("crash-load", "after")) if "crash-load" in faults else None
    crash_request = int(faults.get("crash-load", "request")) if "crash-load" in faults else 0
    busy_steps = [0]

    def crash_due() -> bool:
        if crash_request > 0:
            return front.requests_seen >= crash_request
        return crash_after is not None and busy_steps[0] >= crash_after

    def on_step(res, start, end):
        stats.step(res, end)
        busy_steps[0] += 1
        if crash_due():
            log.error("api", "Engine background task failed")
            log.raw(COMPILE_ERROR, stderr=True)
            os._exit(1)  # abrupt: every open connection is cut

    def on_logs(records):
        for level, key, msg in records:
            log.log(level, key, msg)

    driver = LiveDriver(engine, scale, sim_start=clock.t, on_step=on_step, on_logs=on_logs)
    log.clock = driver.now  # from here on the log follows the serving clock
    front = SimHTTP(driver, names, pred.config.max_model_len, pred.sim.shape.vocab, faults,
                    pred.rules.engine == "v1", VERSIONS[pred.profile],
                    access_log=None if args.disable_log_requests else log.raw,
                    api_keys=args.api_key or ([os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else []),
                    tower=pred.vision.tower if pred.vision is not None else None, adapters=args.adapters,
                    local_media=args.allowed_local_media_path)
    app = front.app(generate=not pred.config.pooling)
    if pred.config.pooling:
        model = pred.sim.shape
        task = pooling_task(args.convert if args.convert != "auto" else None, args.task, model.architecture)
        pooling_front(front, model, task).add_routes(app.router)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    driver.start()
    sock.listen(1024)
    await web.SockSite(runner, sock).start()
    port, pid = sock.getsockname()[1], os.getpid()
    if pred.rules.engine == "v1":
        log.info("api", f"Starting vLLM API server 0 on http://{args.host or '0.0.0.0'}:{port}", "api_server.py")
    for line in (f"INFO:     Started server process [{pid}]", "INFO:     Waiting for application startup.",
                 "INFO:     Application startup complete.",
                 f"INFO:     Uvicorn running on http://{args.host or '0.0.0.0'}:{port} (Press CTRL+C to quit)"):
        log.raw(line)
    await stop.wait()
    log.raw("INFO:     Shutting down")
    front.stopped.set()
    await driver.stop()  # open streams end without [DONE]; nothing is left waiting on the engine
    log.raw("INFO:     Waiting for application shutdown.")
    await runner.cleanup()
    log.raw("INFO:     Application shutdown complete.")
    log.raw(f"INFO:     Finished server process [{pid}]")
    return 0


class _StatsLogger:
    """vLLM's periodic throughput line: every 5 s (v0) or 10 s (v1) of simulated time while busy."""

    def __init__(self, pred: StartupPrediction, log: SimLog, engine: Engine):
        self.v1 = pred.rules.engine == "v1"
        self.interval = 10.0 if self.v1 else 5.0
        self.log, self.engine = log, engine
        self.last_t, self.last_prompt, self.last_gen = None, 0, 0

    def step(self, res, now: float) -> None:
        st, eng = self.engine.stats, self.engine
        if self.last_t is None:
            self.last_t = now
            return
        dt = now - self.last_t
        if dt < self.interval:
            return
        p, g = (st.prompt_tokens - self.last_prompt) / dt, (st.generation_tokens - self.last_gen) / dt
        usage = 100 * eng.kv_usage
        if self.v1:
            # vLLM's rate is over its last 1,000 requests' lookups: all of them, in a simulated run of fewer
            cache = eng.prefix_cache
            hit_rate = 100 * cache.hits / cache.queries if cache is not None and cache.queries else 0.0
            msg = (f"Engine 000: Avg prompt throughput: {p:.1f} tokens/s, Avg generation throughput: {g:.1f} "
                   f"tokens/s, Running: {len(eng.running)} reqs, Waiting: {len(eng.waiting)} reqs, "
                   f"GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: {hit_rate:.1f}%")
        else:
            msg = (f"Avg prompt throughput: {p:.1f} tokens/s, Avg generation throughput: {g:.1f} tokens/s, "
                   f"Running: {len(eng.running)} reqs, Swapped: 0 reqs, Pending: {len(eng.waiting)} reqs, "
                   f"GPU KV cache usage: {usage:.1f}%, CPU KV cache usage: 0.0%.")
        self.log.info("metrics", msg, "loggers.py" if self.v1 else None)
        self.last_t, self.last_prompt, self.last_gen = now, st.prompt_tokens, st.generation_tokens


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
