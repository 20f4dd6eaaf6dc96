"""`bucket-tuner bench`: a drop-in for `vllm bench serve` (0.32.0) against any OpenAI-compatible server.

vLLM's flags keep vLLM's meanings, the result file gets vLLM's name and fields, stdout vLLM's
layout, and the exit status vLLM's (0 even when requests fail; --fail-on-errors is the stricter gate a
study applies). Deliberate differences (also in --help and README): completions prompts are token-id
lists of exact lengths (vLLM sends text that re-tokenizes a few tokens off; chat prompts are text
sized as vLLM sizes them, tuner/load/chatprompt.py), ignore_eos is on for every token-id dataset
(vLLM: random only; --no-ignore-eos turns it off), and a server that refuses us for want of an API
key is named before any request is sent (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path

from ..load.options import BACKENDS, api_flavour, is_pooling
from ..load.pooling import IMAGE_KINDS
from ..load.trace import TRACE_LABELS
from ..serve.pauses import MIN_PAUSE_S, pause_clock
from . import (
    DURATION_HELP,
    UsageError,
    check_reachable,
    duration,
    parse_key_values,
    prepare_output,
    server_root,
)

DIFFERENCES = ("Differences from vllm bench serve, on purpose: completions prompts are token-id lists of exact "
               "lengths (the vocabulary comes from --tokenizer/--model read offline, else from the server); "
               "ignore_eos is on for token-id datasets (--no-ignore-eos); a missing API key (HTTP 401/403) "
               "stops the run before it starts. As vLLM's, the exit status is 0 even when requests fail; "
               "--fail-on-errors makes it 1.")


def _backend(name: str) -> str:
    try:
        return api_flavour(name)
    except ValueError as e:  # argparse shows an ArgumentTypeError's own words
        raise argparse.ArgumentTypeError(str(e)) from None


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="load-test an OpenAI-compatible server (a drop-in for vllm bench serve)",
        description="Stream completions (chat completions, responses) and report vLLM's serving metrics, with "
        "vllm bench serve's flags, stdout and result file. " + DIFFERENCES,
    )
    add_workload_flags(p)
    add_load_flags(p)
    s = p.add_argument_group("server (vllm bench serve names)")
    s.add_argument("--backend", type=_backend, default="openai", metavar="{" + ",".join(BACKENDS) + "}",
                   help="openai/vllm: /v1/completions; openai-chat: /v1/chat/completions (max_completion_tokens); "
                   "openai-responses: /v1/responses (max_output_tokens); pooling models: openai-embeddings, "
                   "openai-embeddings-chat and infinity-embeddings (/v1/embeddings), vllm-pooling (/pooling), "
                   "vllm-rerank (/rerank, with --dataset-name random-rerank)")
    s.add_argument("--base-url", help="server URL (default http://HOST:PORT)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--endpoint", help="API path (default: the backend's: /v1/completions, /v1/chat/completions for "
                   "openai-chat, /v1/responses, /v1/embeddings, /pooling, /rerank)")
    s.add_argument("--header", nargs="*", metavar="KEY=VALUE", help="extra request headers")
    s.add_argument("--model", help="model id (default: the server's first model from /v1/models)")
    s.add_argument("--served-model-name", help="the name sent in requests (default: --model)")
    s.add_argument("--lora-modules", nargs="+", metavar="NAME",
                   help="LoRA adapters the server was started with: each request names one as its model")
    s.add_argument("--lora-assignment", choices=("random", "round-robin"), default="random",
                   help="how requests are given adapters (default random, seeded by --seed)")
    s.add_argument("--logprobs", type=int, help="log-probabilities per token, asked of the completions API")
    s.add_argument("--insecure", action="store_true", help="do not verify the server's TLS certificate")
    s.add_argument("--ready-check-timeout-sec", type=lambda t: int(duration(t)), default=0,
                   help=f"retry the first request until it succeeds, up to this long (0: no check; {DURATION_HELP})")
    s.add_argument("--request-id-prefix", help="x-request-id prefix (default: bench-<8 random hex>-)")
    s.add_argument("--ignore-eos", action="store_true", help="send ignore_eos (always on for token-id datasets)")
    s.add_argument("--no-ignore-eos", action="store_true", help="ours: do not send ignore_eos")
    s.add_argument("--request-timeout", type=duration, default=1800.0, metavar="S",
                   help=f"ours: per request ({DURATION_HELP}; default 30m)")
    s.add_argument("--skip-chat-template", action="store_true",
                   help="custom: send each prompt as written (vLLM's client, and ours, otherwise send it rendered "
                        "in the model's chat template; ours has the server render it, through /tokenize)")
    s.add_argument("--chat-template-kwargs", type=_json_object, metavar="JSON",
                   help="custom: keyword arguments of that rendering, e.g. '{\"enable_thinking\": false}' (the "
                        "server's own template of chat requests takes them in --extra-body's chat_template_kwargs)")
    s.add_argument("--trust-remote-code", action="store_true",
                   help="accepted for vLLM's command lines; no code is ever loaded (tokenizer.json only)")
    s.add_argument("--tokenizer-mode", default="auto", help="accepted for vLLM's command lines; tokenizer.json is read")
    g = p.add_argument_group("sampling parameters (sent only when given)")
    for flag, kind in (("--temperature", float), ("--top-p", float), ("--top-k", int), ("--min-p", float),
                       ("--frequency-penalty", float), ("--presence-penalty", float),
                       ("--repetition-penalty", float)):
        g.add_argument(flag, type=kind)
    g.add_argument("--extra-body", type=_json_object, help="JSON object merged into every request body")
    r = p.add_argument_group("results (vllm bench serve names)")
    r.add_argument("--percentile-metrics", help="of ttft,tpot,itl,e2el (default ttft,tpot,itl)")
    r.add_argument("--save-result", action="store_true", help="write the result JSON (vLLM's file name)")
    r.add_argument("--save-detailed", action="store_true", help="include the per-request arrays")
    r.add_argument("--append-result", action="store_true", help="append to the result file")
    r.add_argument("--result-dir", help="folder of the result file (default: current)")
    r.add_argument("--result-filename",
                   help="file name (default {label}-{rate}qps[-concurrency{N}]-{model}-{date}.json)")
    r.add_argument("--label", help="result name prefix (default: --backend)")
    r.add_argument("--metadata", nargs="*", metavar="KEY=VALUE", help="top-level fields of the result JSON")
    r.add_argument("--disable-tqdm", action="store_true", help="no progress bar")
    r.add_argument("--ramp-up-strategy", choices=("linear", "exponential"))
    r.add_argument("--ramp-up-start-rps", type=int)
    r.add_argument("--ramp-up-end-rps", type=int)
    v = p.add_argument_group("more of vllm bench serve")
    v.add_argument("--probe-request-rate", type=float, default=0.0, metavar="RPS",
                   help="send one-token 'Hi' probes at this rate beside the run, outside --max-concurrency, and "
                        "report their end-to-end latency apart (how the load stalls an unrelated request)")
    v.add_argument("--profile", action="store_true",
                   help="POST /start_profile before the run and /stop_profile after it (the server needs "
                        "--profiler-config)")
    v.add_argument("--plot-timeline", action="store_true",
                   help="write <result name>.timeline.html: each request's TTFT and inter-token gaps")
    v.add_argument("--timeline-itl-thresholds", default="25,50", metavar="MS,MS",
                   help="the timeline's gap colours: below, between and above these ms (default 25,50)")
    v.add_argument("--plot-dataset-stats", action="store_true",
                   help="write <result name>.dataset_stats.html: prompt/output token counts (vLLM: a .png "
                        "drawn with matplotlib)")
    for flag in ("--use-beam-search", "--no-stream", "--enable-multimodal-chat"):
        v.add_argument(flag, action="store_true", help=_ACCEPTED[flag])
    v.add_argument("--random-batch-size", type=int, default=1, metavar="N",
                   help="random and random-rerank: inputs per request of the embeddings or pooling API (a "
                        "reranker's documents per query; default 1)")
    v.add_argument("--no-reranker", action="store_true",
                   help="random-rerank: the model scores pairs as an embedding model does (no query/document "
                        "separator; the query is one input of each request)")
    v.add_argument("--skip-tokenizer-init", action="store_true",
                   help="refused: vLLM's client then sends one-token requests for its datasets")
    for flag, takes in _OTHER_DATASETS_FLAGS.items():  # of datasets vLLM has and we refuse (the refusal says why)
        v.add_argument(flag, **({"action": "store_true"} if takes is None else {"metavar": takes}),
                       help=argparse.SUPPRESS)
    o = p.add_argument_group("ours")
    o.add_argument("--result-file", type=Path, help="also write the detailed result JSON to this exact path")
    o.add_argument("--time-scale", type=float, default=1.0,
                   help="the server runs time-compressed by this factor (a simulator started with "
                        "--sim-time-scale): rates, trace times and SLOs are its own time, and so is the report")
    o.add_argument("--fail-on-errors", action="store_true",
                   help="exit 1 when more than --max-failed-ratio of the requests failed (vLLM's client, and "
                        "ours by default, exit 0); the gate a tuning study applies to its load tests")
    o.add_argument("--max-failed-ratio", type=float, default=None,
                   help="with --fail-on-errors (implied when given): the fraction of failed requests allowed "
                        "(default 0: any failure)")
    o.add_argument("--quiet", action="store_true", help="no progress bar (same as --disable-tqdm)")
    p.set_defaults(func=cmd_bench)


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload (vllm bench serve names)")
    g.add_argument("--dataset-name", default="random", metavar="NAME",
                   help="random, random-mm, random-rerank, prefix_repetition, fixed, trace, timed_trace, sharegpt, "
                        "custom, spec_bench or burstgpt; fixed and trace are ours (trace: CSV/JSONL of input_len, "
                        "output_len[, timestamp][, images]); timed_trace is vLLM's JSONL (hash_ids too); random-mm "
                        "adds images (openai-chat); prefix_repetition repeats a few prefixes (prefix caching); "
                        "spec_bench reads Spec-Bench's question.jsonl, burstgpt the BurstGPT CSV (its GPT-4 "
                        "lengths), custom_image your prompts with your images (openai-chat); vLLM's sonnet, hf, "
                        "... are refused with the reason and an equivalent")
    g.add_argument("--dataset-path", type=Path, help="the dataset file (local)")
    g.add_argument("--num-prompts", type=int, help="requests (default 1000; a trace: all of it)")
    g.add_argument("--input-len", type=int, help="alias of --random-input-len")
    g.add_argument("--output-len", type=int, help="output length for every dataset")
    g.add_argument("--random-input-len", type=int, default=1024)
    g.add_argument("--random-output-len", type=int, default=128)
    g.add_argument("--random-range-ratio", default="0.0",
                   help="vLLM convention: lengths uniform in [len*(1-r), len*(1+r)], r in [0, 1)")
    g.add_argument("--random-prefix-len", type=int, default=0)
    r = p.add_argument_group("prefix_repetition (vllm bench serve names and defaults)")
    r.add_argument("--prefix-repetition-prefix-len", type=int, default=256, metavar="N",
                   help="tokens of each repeated prefix")
    r.add_argument("--prefix-repetition-suffix-len", type=int, default=256, metavar="N",
                   help="tokens of each prompt's own suffix")
    r.add_argument("--prefix-repetition-num-prefixes", type=int, default=10, metavar="N",
                   help="prefixes; each has --num-prompts // N prompts")
    r.add_argument("--prefix-repetition-output-len", type=int, default=128, metavar="N")
    add_random_mm_flags(p.add_argument_group(
        "random-mm images (vllm bench serve names and defaults; --backend openai-chat)"))
    g.add_argument("--sharegpt-output-len", type=int)
    g.add_argument("--custom-output-len", type=int, default=256)
    g.add_argument("--custom-ensure-client-side-data", action="store_true",
                   help="custom_image: send local image files inline (PNG data URLs) instead of as file:// URLs "
                        "the server reads under its --allowed-local-media-path")
    g.add_argument("--spec-bench-output-len", type=int, default=256, metavar="N",
                   help="spec_bench: tokens each request asks (vLLM's default 256)")
    g.add_argument("--spec-bench-category", default=None, metavar="NAME",
                   help="spec_bench: only the questions of this category (e.g. summarization, translation)")
    g.add_argument("--timed-trace-chunk-hash-size", type=int, default=16)
    g.add_argument("--timed-trace-sec-multiplier", type=float, default=1.0)
    for field, default in TRACE_LABELS.items():
        g.add_argument(f"--timed-trace-label-{field.replace('_', '-')}", default=default, metavar="NAME",
                       help=f"the trace's field holding {field} (default {default})")
    g.add_argument("--self-timed", action=argparse.BooleanOptionalAction, default=None,
                   help="send at the trace's timestamps (vLLM: default on for timed_trace; ours: for trace too); "
                        "--no-self-timed sends at --request-rate instead")
    g.add_argument("--disable-shuffle", action="store_true", help="sharegpt/custom/spec_bench: keep the file's order")
    g.add_argument("--no-oversample", action="store_true",
                   help="sharegpt/custom/spec_bench: fewer usable entries than --num-prompts send fewer requests")
    g.add_argument("--tokenizer", help="tokenizer folder or Hugging Face id, read offline (default: --model)")
    g.add_argument("--vocab-size", type=int,
                   help="ours: token ids stay below this (default: from the tokenizer, else asked of the server)")
    g.add_argument("--seed", type=int, default=0)


def add_random_mm_flags(m) -> None:
    """vLLM's random-mm image flags (bench, tune and fit take them alike)."""
    m.add_argument("--random-mm-base-items-per-request", type=int, default=None, metavar="N",
                   help="images per request around which the count is drawn (default 1)")
    m.add_argument("--random-mm-num-mm-items-range-ratio", type=float, default=None, metavar="R",
                   help="the count is uniform in [floor(N*(1-R)), ceil(N*(1+R))], R in [0, 1] (default 0)")
    m.add_argument("--random-mm-limit-mm-per-prompt", type=_mm_flag("parse_limit_mm_per_prompt"), default=None,
                   metavar="JSON", help='cap per modality, JSON, e.g. \'{"image": 3, "video": 0}\' '
                   '(default {"image": 255, "video": 1})')
    m.add_argument("--random-mm-bucket-config", type=_mm_flag("parse_bucket_config"), default=None,
                   metavar="DICT", help="(height, width, frames): probability, a Python literal, e.g. "
                   "'{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}' (the default); frames > 1 (video) is refused")


def add_load_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("load (vllm bench serve names)")
    g.add_argument("--max-concurrency", type=int, default=None)
    g.add_argument("--request-rate", type=float, default=math.inf, help="requests/s (inf: all at once)")
    g.add_argument("--burstiness", type=float, default=1.0, help="gamma shape; 1 = Poisson")
    g.add_argument("--num-warmups", type=int, default=None,
                   help="warm-pass requests, sent at once before the measured run and kept out of its figures (bench: "
                        "default 0, as vllm bench serve; tune: default one wave, --max-concurrency, and its "
                        "figures are the first-run window, docs/load-metrics.md section 4)")
    g.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs, e.g. ttft:500 tpot:50")
    g.add_argument("--metric-percentiles", default="99", help="comma-separated (default 99, as vLLM)")


# vLLM's sampling parameters, sent to generating backends when given (its args' names)
SAMPLING = ("top_p", "top_k", "min_p", "temperature", "frequency_penalty", "presence_penalty", "repetition_penalty")
# vLLM flags that change nothing here, and why (said in --help)
_ACCEPTED = {
    "--use-beam-search": "accepted: vllm bench serve parses it and sends nothing for it",
    "--no-stream": "accepted: vLLM's way of loading a Hugging Face dataset; local files are read whole",
    "--enable-multimodal-chat": "accepted: it shapes vLLM's hf dataset (not offered here) and custom_image for "
                                "backends other than openai-chat, which custom_image needs",
}
# the flags of vLLM 0.32's datasets this client refuses (--dataset-name says why): taken, so that a
# vLLM command line reaches that sentence instead of "unrecognized arguments"; None: a switch
_OTHER_DATASETS_FLAGS = {
    **{f"--hf-{x}": x.upper() for x in ("name", "split", "subset", "output-len")},
    "--speed-bench-output-len": "N",
    "--speed-bench-category": "NAME", "--speed-bench-dataset-subset": "NAME", "--blazedit-min-distance": "X",
    "--blazedit-max-distance": "X", "--asr-max-audio-len-sec": "SEC", "--asr-min-audio-len-sec": "SEC",
    "--bfcl-categories": "NAMES",
}


def _other_dataset_flags(args) -> list[str]:
    """Flags of vLLM's other datasets given with one of ours: ignored, and said so."""
    return [f for f in _OTHER_DATASETS_FLAGS if getattr(args, f[2:].replace("-", "_"), None) not in (None, False)]


def _mm_flag(parser_name: str):
    """An argparse type running tuner.load.multimodal's parser (vLLM's semantics; the error names the value)."""
    def parse(text: str):
        from ..load import multimodal

        try:
            return getattr(multimodal, parser_name)(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = parser_name
    return parse


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def check_load_flags(args) -> None:
    """Nonsense load numbers are refused before anything starts (not after a server booted)."""
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise UsageError(f"--max-concurrency must be at least 1, got {args.max_concurrency}")
    if not args.request_rate > 0:  # inf is fine (all at once); nan fails this too
        raise UsageError(f"--request-rate must be > 0 requests/s (or inf), got {args.request_rate}")
    if not args.burstiness > 0:
        raise UsageError(f"--burstiness must be > 0 (1 = Poisson), got {args.burstiness}")
    if args.num_warmups is not None and args.num_warmups < 0:
        raise UsageError(f"--num-warmups must be 0 or more, got {args.num_warmups}")


def parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--metric-percentiles expects numbers like 50,90,99, got {text!r}") from None
    bad = [v for v in values if not 0 < v <= 100]
    if bad or not values:
        raise UsageError(f"--metric-percentiles must be in (0, 100], got {text!r}")
    return values


def parse_pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _check(args) -> None:
    from ..load.metrics import PERCENTILE_METRICS, QUEUE_METRICS
    from ..load.plots import parse_thresholds

    if args.skip_tokenizer_init:
        raise UsageError("--skip-tokenizer-init: not supported: vLLM's client then has no tokenizer and sends every "
                         "request of its datasets as a one-token prompt for one token, which measures no bucket; "
                         "leave it out (this client's completions prompts are token ids already, so a server "
                         "started with --skip-tokenizer-init is served as it is)")
    if not args.probe_request_rate >= 0:
        raise UsageError(f"--probe-request-rate must be 0 (off) or more requests/s, got {args.probe_request_rate}")
    try:
        args.itl_thresholds_ms = parse_thresholds(args.timeline_itl_thresholds)
    except ValueError as e:
        raise UsageError(str(e)) from None
    for flag in _other_dataset_flags(args):
        print(f"{flag}: only vLLM's dataset of that name reads it; ignored with --dataset-name {args.dataset_name}",
              file=sys.stderr)

    if not 0 < args.time_scale <= 1:
        raise UsageError(f"--time-scale must be in (0, 1], got {args.time_scale}")
    if args.max_failed_ratio is not None:
        if not 0 <= args.max_failed_ratio <= 1:
            raise UsageError(f"--max-failed-ratio must be in [0, 1], got {args.max_failed_ratio}")
        args.fail_on_errors = True
    elif args.fail_on_errors:
        args.max_failed_ratio = 0.0
    if args.max_concurrency is not None and args.max_concurrency <= 0:
        raise UsageError("--max-concurrency must be greater than 0")
    if args.ramp_up_strategy is not None:
        if not math.isinf(args.request_rate):
            raise UsageError("with --ramp-up-strategy, do not give --request-rate")
        if args.ramp_up_start_rps is None or args.ramp_up_end_rps is None:
            raise UsageError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
    pooling = is_pooling(args.backend)
    metrics = (args.percentile_metrics or ("e2el" if pooling else "ttft,tpot,itl")).split(",")  # vLLM's defaults
    bad = [m for m in metrics if m not in PERCENTILE_METRICS + QUEUE_METRICS]
    if bad:
        raise UsageError(f"--percentile-metrics: {bad[0]!r} is not one of "
                         f"{','.join(PERCENTILE_METRICS + QUEUE_METRICS)}")
    args.percentile_metrics_list = tuple(metrics)
    if pooling:
        _check_pooling(args, metrics)
    else:
        _check_generating(args)


def _check_generating(args) -> None:
    """The pooling datasets' flags with a generating backend."""
    if args.no_reranker:
        print(f"--no-reranker: only vLLM's dataset random-rerank reads it; ignored with --dataset-name "
              f"{args.dataset_name}", file=sys.stderr)
    if args.dataset_name == "random-rerank":
        raise UsageError("--dataset-name random-rerank: its requests are a query and documents, which only "
                         "--backend vllm-rerank sends")
    if args.random_batch_size > 1 and args.dataset_name == "random":
        raise UsageError(f"--random-batch-size {args.random_batch_size}: a batch of prompts is one request of a "
                         f"pooling model's API (--backend openai-embeddings, vllm-pooling, ...); --backend "
                         f"{args.backend} sends one prompt a request")


def _check_pooling(args, metrics: list[str]) -> None:
    """A pooling backend's flags: what its answers can be measured by, and the datasets it sends."""
    stream = [m for m in metrics if m in ("ttft", "tpot", "itl")]
    if stream:
        raise UsageError(f"--percentile-metrics {stream[0]}: --backend {args.backend} answers in one piece, with no "
                         "token stream; its latency is e2el (and the client queue figures)")
    if args.goodput:
        raise UsageError(f"--goodput: vllm bench serve reports no goodput for pooling backends ({args.backend})")
    if args.plot_timeline:
        raise UsageError(f"--plot-timeline draws token streams; --backend {args.backend} has none")
    if args.random_batch_size < 1:
        raise UsageError(f"--random-batch-size must be at least 1, got {args.random_batch_size}")
    rerank = args.backend == "vllm-rerank"
    if rerank != (args.dataset_name == "random-rerank"):
        raise UsageError("--backend vllm-rerank sends a query and documents: use it with --dataset-name random-rerank"
                         if rerank else f"--dataset-name random-rerank: its requests are a query and documents, which "
                         f"only --backend vllm-rerank sends (not {args.backend})")
    if args.random_batch_size > 1 and args.backend in ("openai-embeddings-chat", "openai-embeddings-clip",
                                                       "openai-embeddings-vlm2vec"):
        raise UsageError(f"--random-batch-size: --backend {args.backend} sends one conversation a request")
    if args.random_batch_size > 1 and args.dataset_name not in ("random", "random-rerank"):
        print(f"--random-batch-size: only the random datasets batch their prompts (vLLM's); --dataset-name "
              f"{args.dataset_name} sends one a request", file=sys.stderr)
    given = [f for f in SAMPLING if getattr(args, f) is not None]
    if given:
        print(f"--{given[0].replace('_', '-')}: sampling parameters are not sent to a pooling model's API "
              "(vLLM's client collects none for it)", file=sys.stderr)


async def _served_models(base_url: str, headers: dict, needed: bool, verify_tls: bool = True) -> list[dict]:
    """The server's /v1/models entries. A refusal for want of a key is named whether or not we needed
    them; any other failure only when we did (no --model given)."""
    import aiohttp

    from ..load.client import auth_refusal

    refusal = None
    connector = aiohttp.TCPConnector(**({} if verify_tls else {"ssl": False}))
    async with aiohttp.ClientSession(trust_env=False, connector=connector) as s:
        try:
            async with s.get(base_url + "/v1/models", headers=headers) as resp:
                refusal = auth_refusal(resp.status)
                if refusal is None and resp.status != 200:
                    raise ValueError(f"HTTP {resp.status}")
                data = None if refusal else await resp.json(content_type=None)
            models = [] if refusal else [m for m in data["data"] if isinstance(m, dict) and m.get("id")]
            if needed and not models and not refusal:
                raise ValueError("it lists no model")
        except (aiohttp.ClientError, ValueError, KeyError, TypeError) as e:
            if needed:
                raise UsageError(f"no --model given and {base_url}/v1/models did not name one ({e})") from None
            return []
    if refusal is not None:
        raise UsageError(f"{base_url}/v1/models: {refusal}")
    return models


def resolve_model(args, models: list[dict]) -> None:
    """vLLM's: without --model, the first served model's id is the name sent and its root (the model
    behind an alias, e.g. the path --served-model-name renamed) the model id, whose tokenizer is used."""
    if args.model is not None:
        served = [m["id"] for m in models]
        sent = args.served_model_name or args.model
        if served and sent not in served:  # vLLM's client fails its initial test request on this (LoRA
            # adapters it sends as they are: a missing one fails its requests, as vLLM's do)
            flag = "--served-model-name" if args.served_model_name else "--model"
            raise UsageError(f"{flag} {sent}: the server does not serve it; its /v1/models lists {', '.join(served)}")
        return
    first = models[0]
    root = first.get("root") or first["id"]
    args.served_model_name = args.served_model_name or first["id"]
    args.model = root
    print(f"First model name: {first['id']}, first model id: {root}")


async def _resolve_vocab(args, gen, needs_ids: bool):
    """The vocabulary: --vocab-size, else the tokenizer read offline, else the server's answers."""
    from ..load.tokenizer import NO_VOCAB_HINT, ServerRefused, VocabNotFound, discover_vocab, probe_vocab_size

    vocab = discover_vocab(args.tokenizer, args.model)
    if vocab is not None or args.vocab_size is not None or not needs_ids:
        return vocab
    if args.tokenizer:
        raise UsageError(f"--tokenizer {args.tokenizer}: no tokenizer.json there or in the local Hugging Face "
                         "cache (nothing is downloaded); give a folder or --vocab-size N")
    async with gen.session() as session:
        try:
            vocab = await probe_vocab_size(lambda ids: gen.probe(session, ids))
        except ServerRefused as e:
            raise UsageError(f"{e} (check --backend, --endpoint and --model against the server)") from None
        except VocabNotFound as e:
            raise UsageError(f"{e}; {NO_VOCAB_HINT}") from None
    print(f"vocabulary: no tokenizer for {args.model!r} found offline; the server rejects ids from "
          f"{vocab.size} on, so prompts use ids below it ({NO_VOCAB_HINT} to choose)", file=sys.stderr)
    return vocab


async def _bench(args) -> tuple[dict, object]:
    from ..load.chatprompt import UNCONTROLLED, ChatText, choose_sizer
    from ..load.client import LoadGenerator, ReadyCheckFailed
    from ..load.datasets import build_workload
    from ..load.metrics import rescale_time
    from ..load.servertok import server_only

    base_url = (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")
    headers = parse_pairs(args.header, "--header")
    parse_pairs(args.metadata, "--metadata")
    goodput = parse_key_values(args.goodput, "--goodput", sep=":") or None
    try:
        build_workload(args, None)  # every workload flag checked before the server is contacted
    except ValueError as e:
        raise UsageError(str(e)) from None
    resolve_model(args, await _served_models(base_url, {**_auth(), **headers}, needed=args.model is None,
                                             verify_tls=not args.insecure))
    pooling = is_pooling(args.backend)  # vLLM's client sends a pooling model no sampling parameters
    sampling = {} if pooling else {k: getattr(args, k) for k in SAMPLING if getattr(args, k) is not None}
    text_dataset = args.dataset_name in ("sharegpt", "custom", "spec_bench", "custom_image")
    sized_by_workload = args.dataset_name == "random-mm"  # its text is drawn with the dataset (vLLM's seed order)
    # ignore_eos: on for token-id datasets of generating backends, else only when asked
    ignore_eos = (args.ignore_eos or not (text_dataset or pooling)) and not args.no_ignore_eos
    # --backend is vllm bench serve's name for the API flavour (the client's api), not tune's server launcher
    gen = LoadGenerator(base_url, args.served_model_name or args.model, max_concurrency=args.max_concurrency,
                        request_timeout_s=args.request_timeout * args.time_scale,
                        extra_body={**sampling, **(args.extra_body or {})},
                        progress=not (args.quiet or args.disable_tqdm), request_id_prefix=args.request_id_prefix,
                        api=args.backend, endpoint=args.endpoint, ignore_eos=ignore_eos, headers=headers,
                        keep_text=bool(args.save_detailed or args.result_file), logprobs=args.logprobs,
                        lora_modules=args.lora_modules or (), lora_assignment=args.lora_assignment,
                        verify_tls=not args.insecure)
    needs_ids = not text_dataset and not gen.text_prompts
    vocab = await _resolve_vocab(args, gen, needs_ids)
    chat = sizer = None
    if gen.text_prompts and not text_dataset:
        if vocab is None or vocab.folder is None:
            sizer = None if sized_by_workload else await asyncio.to_thread(
                server_only, base_url, gen.model, args.tokenizer or args.model, gen.headers, not args.insecure)
            if sizer is None:
                print(UNCONTROLLED.format(name=args.tokenizer or args.model), file=sys.stderr)
            else:
                print(sizer.note, file=sys.stderr)
                chat = ChatText(None, sizer.tokenizer, sizer.num_special, sizer.ids)
                gen.prompt_text = chat.text
        else:  # the server's /tokenize says whether tokenizer.json counts as the server (and vLLM's client) does
            sizer = await asyncio.to_thread(choose_sizer, vocab, base_url, gen.model, gen.headers,
                                            args.random_input_len, args.seed, not args.insecure)
            if sizer.note:
                print(sizer.note, file=sys.stderr)
            if not sized_by_workload:
                chat = ChatText(vocab, sizer.tokenizer, sizer.num_special)
                gen.prompt_text = chat.text
    template, rendering = await _custom_template(args, base_url, gen)
    try:
        workload = await asyncio.to_thread(build_workload, args, vocab, sizer, template)  # random-mm may ask the server
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not gen.chat and workload.image_count() and gen.kind not in IMAGE_KINDS:
        raise UsageError(f"--dataset-name {args.dataset_name}: its requests carry images, which only "
                         "--backend openai-chat (and the image-embedding backends openai-embeddings-clip, "
                         "openai-embeddings-vlm2vec, infinity-embeddings-clip) send")
    ramp = ((args.ramp_up_strategy, args.ramp_up_start_rps, args.ramp_up_end_rps)
            if args.ramp_up_strategy else None)
    info = {"label": args.label, "model_id": args.model, "tokenizer_id": args.tokenizer or args.model,
            "num_prompts": args.num_prompts if args.num_prompts is not None else workload.num_prompts,
            "metadata": parse_pairs(args.metadata, "--metadata")}
    if args.probe_request_rate > 0:
        print(f"Probe request rate: {args.probe_request_rate} req/s")  # vLLM's line
    try:
        async with _profiling(args, base_url, {**_auth(), **headers}):
            result = await gen.run(workload, request_rate=args.request_rate, burstiness=args.burstiness,
                                   warmup_requests=args.num_warmups or 0,
                                   goodput_slos=goodput,
                                   percentiles=parse_percentiles(args.metric_percentiles), seed=args.seed,
                                   time_scale=args.time_scale, percentile_metrics=args.percentile_metrics_list,
                                   ramp_up=ramp, ready_check_timeout_s=args.ready_check_timeout_sec, run_info=info,
                                   probe_rate=args.probe_request_rate)
    except ReadyCheckFailed as e:
        raise UsageError(f"{e} (is the server up, and are the model and endpoint right?)") from None
    data = rescale_time(result.to_json(detailed=True), args.time_scale)
    if vocab is not None:
        data["tuner_vocab"] = vocab.describe()
    if sized_by_workload:
        sized = getattr(workload, "sized_by", None)
        data["tuner_chat_prompts"] = (
            {"sized_by": sized, "text_tokens": "input length - the tokenizer's special tokens, drawn as vLLM's "
             "random-mm draws them; the server's chat template and image tokens add their own",
             "mismatch_tokens": workload.mismatch, "special_tokens": sizer.num_special,
             "tokenizer_check": sizer.checked}
            if sized and sizer is not None else {"sized_by": None, "text_tokens": "not controlled (synthetic words)"})
    elif gen.text_prompts and not text_dataset:
        data["tuner_chat_prompts"] = (
            {"sized_by": chat.tok.source, "text_tokens": "input length - the tokenizer's special tokens "
             f"({chat.num_special}); the server's chat template adds its own", "mismatch_tokens": chat.mismatch,
             "special_tokens": chat.num_special, "tokenizer_check": sizer.checked}
            if chat is not None else {"sized_by": None, "text_tokens": "not controlled (synthetic words)"})
    if rendering is not None:
        data["tuner_custom_prompts"] = {"chat_template": rendering}
    return data, result


_PROFILER_SAYS = {"start": ("Starting profiler...", "Profiler started"),
                  "stop": ("Stopping profiler...", "Profiler stopped")}


@contextlib.asynccontextmanager
async def _profiling(args, base_url: str, headers: dict):
    """vLLM's --profile around the run: POST /start_profile before and /stop_profile after it (after a run
    that failed too: a profiler left running would fill the server's disk)."""
    if args.profile:
        await _profiler(base_url, "start", headers, not args.insecure)
    try:
        yield
    finally:
        if args.profile:
            await _profiler(base_url, "stop", headers, not args.insecure)


async def _profiler(base_url: str, verb: str, headers: dict, verify_tls: bool) -> None:
    """POST /start_profile or /stop_profile, saying so on stdout as vLLM does; a refusal is said on stderr
    (vLLM prints nothing then) and the run goes on."""
    import aiohttp

    before, after = _PROFILER_SAYS[verb]
    print(before)
    connector = aiohttp.TCPConnector(**({} if verify_tls else {"ssl": False}))
    try:
        async with aiohttp.ClientSession(trust_env=False, connector=connector) as s, \
                s.post(f"{base_url}/{verb}_profile", headers=headers) as resp:
            if resp.status == 200:
                print(after)
                return
            why = f"HTTP {resp.status} {resp.reason or ''}".strip()
    except aiohttp.ClientError as e:
        why = f"{type(e).__name__}: {e}"
    print(f"--profile: {base_url}/{verb}_profile answered {why} (vllm serve needs --profiler-config for it)",
          file=sys.stderr)


async def _custom_template(args, base_url: str, gen):
    """The chat template custom prompts are rendered in (vLLM's client renders them unless --skip-chat-template),
    and what the result file says of it; (None, None) for other datasets."""
    from ..load.servertok import chat_template

    if args.dataset_name not in ("custom", "spec_bench"):
        if args.chat_template_kwargs:
            print("--chat-template-kwargs: only custom prompts are rendered by the client; for the server's template "
                  "of chat requests pass --extra-body '{\"chat_template_kwargs\": ...}'", file=sys.stderr)
        return None, None
    spec = args.dataset_name == "spec_bench"  # vLLM's client renders spec_bench whatever the two flags say
    if args.skip_chat_template and not spec:
        return None, "not applied (--skip-chat-template): prompts sent as written"
    template, why = await asyncio.to_thread(chat_template, base_url, gen.model, gen.headers, not args.insecure,
                                            None if spec else args.chat_template_kwargs)
    if template is None:
        print(f"custom prompts: sent as written, not in the model's chat template as vLLM's client sends them: "
              f"the server cannot render it ({why}); --skip-chat-template sends them as written on purpose",
              file=sys.stderr)
        return None, f"not applied: the server's /tokenize cannot render it ({why})"
    said = ("rendered by the server (/tokenize with the message, /detokenize), as vLLM's client renders it"
            + ("; spec_bench: whatever --skip-chat-template and --chat-template-kwargs say, as vLLM's client"
               if spec and (args.skip_chat_template or args.chat_template_kwargs) else ""))
    return template, said


def _auth() -> dict:
    from ..load.client import auth_headers

    return {k: v for k, v in auth_headers().items() if k == "Authorization"}


def cmd_bench(args) -> int:
    from ..load.datasets import build_workload
    from ..load.metrics import validate_goodput_slos

    _check(args)
    check_load_flags(args)
    parse_percentiles(args.metric_percentiles)
    validate_goodput_slos(parse_key_values(args.goodput, "--goodput", sep=":"))  # the user's to fix first
    try:
        build_workload(args, None)  # a bad dataset is named before the server is contacted
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.base_url:
        args.base_url = server_root(args.base_url)  # an OpenAI client's .../v1 would ask /v1/v1/...
    check_reachable((args.base_url or f"http://{args.host}:{args.port}").rstrip("/"))  # one clear line
    if args.result_file:
        args.result_file = prepare_output(args.result_file, "--result-file")
    clock = pause_clock()
    started = time.monotonic()
    data, result = asyncio.run(_bench(args))
    paused = clock.paused_s(started, time.monotonic())
    if paused >= MIN_PAUSE_S:  # Ctrl-Z then fg: the requests in flight waited for the client to come back
        data["tuner_paused_s"] = round(paused, 1)
        print(f"bucket-tuner bench: the client was stopped for {paused:.0f} s during the run (Ctrl-Z, kill -STOP or "
              "a scheduler's suspend): its latencies and throughput include the pause; run it again", file=sys.stderr)
    print_failures(data)
    print_summary(data, args.percentile_metrics_list, parse_percentiles(args.metric_percentiles))
    save_results(args, data)
    write_plots(args, data)
    return exit_status(data, args.max_failed_ratio if args.fail_on_errors else None)


def exit_status(data: dict, max_failed_ratio: float | None) -> int:
    """vLLM's 0 whatever failed when ``max_failed_ratio`` is None (no --fail-on-errors); else 1 when
    no request completed or more than ``max_failed_ratio`` of them failed. Failures are said either way."""
    total = data.get("completed", 0) + data.get("failed", 0)
    failed = data.get("failed", 0)
    if not (total and failed):
        return 0
    top = (data.get("tuner_failures", {}).get("by_message") or [{"message": "?"}])[0]["message"]
    if max_failed_ratio is None:
        print(f"bucket-tuner bench: {failed} of {total} requests failed; most common error: {top} "
              "(exit status 0, as vllm bench serve's; --fail-on-errors makes it 1)", file=sys.stderr)
        return 0
    over = data.get("completed", 0) == 0 or failed / total > max_failed_ratio
    print(f"bucket-tuner bench: {'error: ' if over else ''}{failed} of {total} requests failed "
          f"(allowed: {max_failed_ratio:.0%}); most common error: {top}", file=sys.stderr)
    return 1 if over else 0


def write_plots(args, data: dict) -> None:
    """--plot-timeline and --plot-dataset-stats, beside the result file's name (tuner/load/plots.py)."""
    if not (getattr(args, "plot_timeline", False) or getattr(args, "plot_dataset_stats", False)):
        return
    from ..load import plots

    base = Path(result_filename(args, data, for_plots=True))
    todo = []
    if args.plot_timeline:
        todo.append(("--plot-timeline", base.with_suffix(".timeline.html"),
                     lambda path: plots.write_timeline(data, path, args.itl_thresholds_ms)))
    if args.plot_dataset_stats:
        todo.append(("--plot-dataset-stats", base.with_suffix(".dataset_stats.html"),
                     lambda path: plots.write_dataset_stats(data, path)))
    for flag, path, write in todo:
        try:
            write(path)
        except OSError as e:  # the run and its result file stand; the plot is said to be missing
            print(f"{flag}: could not write {path}: {e.strerror or e}", file=sys.stderr)
        else:
            print(f"plot written to {path}")


def result_filename(args, data: dict, for_plots: bool = False) -> str | None:
    """vLLM 0.32.0's ``compute_result_filename``: where --save-result / --append-result write, and the name
    the plots are written beside (``for_plots``: vLLM computes it for --plot-timeline too)."""
    if not (args.save_result or args.append_result or for_plots):
        return None
    base_model_id = args.model.split("/")[-1]
    conc = f"-concurrency{args.max_concurrency}" if args.max_concurrency is not None else ""
    label = args.label or args.backend
    if args.ramp_up_strategy is not None:
        name = (f"{label}-ramp-up-{args.ramp_up_strategy}-{args.ramp_up_start_rps}qps-"
                f"{args.ramp_up_end_rps}qps{conc}-{base_model_id}-{data['date']}.json")
    else:
        name = f"{label}-{args.request_rate}qps{conc}-{base_model_id}-{data['date']}.json"
    if args.result_filename:
        name = args.result_filename
    if args.result_dir:
        os.makedirs(args.result_dir, exist_ok=True)
        name = os.path.join(args.result_dir, name)
    return name


_DETAILED = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")


def save_results(args, data: dict) -> None:
    name = result_filename(args, data)
    if name is not None:
        slim = data if args.save_detailed else {k: v for k, v in data.items() if k not in _DETAILED}
        with open(name, "a+" if args.append_result else "w", encoding="utf-8") as f:
            if args.append_result and f.tell() != 0:
                f.write("\n")
            json.dump(slim, f)
        print(f"result written to {name}")
    if args.result_file:
        args.result_file.write_text(json.dumps(data))
        print(f"result written to {args.result_file}")


def print_failures(d: dict) -> None:
    """Failed requests grouped by their error text (the server's own message when it sent one)."""
    groups = d.get("tuner_failures", {}).get("by_message") or []
    if not groups:
        return
    print(f"Failed requests: {d.get('failed')}, by error ({len(groups)} distinct):")
    for g in groups[:10]:
        print(f"  {g['count']:>6} x {g['message']}")
    if len(groups) > 10:
        print(f"  ... and {len(groups) - 10} more distinct errors (tuner_failures in the result JSON)")


def print_summary(d: dict, metrics=("ttft", "tpot", "itl", "e2el"), percentiles=(99,)) -> None:
    """vllm bench serve 0.32.0's result table, line for line (scripts grep these labels)."""
    from ..load.metrics import percentile_key

    def row(label, value, fmt="{:<10}"):
        print(("{:<40} " + fmt).format(label, value))

    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    row("Successful requests:", d.get("completed"))
    row("Failed requests:", d.get("failed"))
    if d.get("max_concurrency") is not None:
        row("Maximum request concurrency:", d["max_concurrency"])
    if d.get("request_rate") not in ("inf", None):
        row("Request rate configured (RPS):", d["request_rate"], "{:<10.2f}")
    row("Benchmark duration (s):", d.get("duration", 0.0), "{:<10.2f}")
    row("Total input tokens:", d.get("total_input_tokens"))
    pooling = "total_input_sequences" in d  # a pooling backend's result: vLLM prints its own rows
    if not pooling:
        row("Total generated tokens:", d.get("total_output_tokens"))
    row("Request throughput (req/s):", d.get("request_throughput", 0.0), "{:<10.2f}")
    if pooling:
        row("Input throughput (inputs/s):", d.get("input_sequence_throughput", 0.0), "{:<10.2f}")
    else:
        if d.get("request_goodput") is not None:
            row("Request goodput (req/s):", d["request_goodput"], "{:<10.2f}")
        row("Output token throughput (tok/s):", d.get("output_throughput", 0.0), "{:<10.2f}")
        row("Peak output token throughput (tok/s):", d.get("max_output_tokens_per_s", 0.0), "{:<10.2f}")
        row("Peak concurrent requests:", d.get("max_concurrent_requests", 0), "{:<10.2f}")
    row("Total token throughput (tok/s):", d.get("total_token_throughput", 0.0), "{:<10.2f}")
    if "probe_completed" in d:  # --probe-request-rate, where vLLM prints it
        print("{s:{c}^{n}}".format(s="Probe Requests", n=50, c="-"))
        row("Probe requests completed:", d["probe_completed"])
        row("Probe requests failed:", d["probe_failed"])
        row("Median probe E2EL (ms):", d["probe_median_e2el_ms"], "{:<10.2f}")
        row("P99 probe E2EL (ms):", d["probe_p99_e2el_ms"], "{:<10.2f}")
        row("Max probe E2EL (ms):", d["probe_max_e2el_ms"], "{:<10.2f}")
    heads = {"ttft": ("TTFT", "Time to First Token"), "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
             "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency"),
             "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
             "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency")}
    for m in ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue"):
        if m not in metrics:
            continue
        name, header = heads[m]
        if f"mean_{m}_ms" not in d:
            continue
        print("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        row(f"Mean {name} (ms):", d[f"mean_{m}_ms"], "{:<10.2f}")
        row(f"Median {name} (ms):", d[f"median_{m}_ms"], "{:<10.2f}")
        for p in percentiles:
            key = f"p{percentile_key(p)}_{m}_ms"
            if key in d:
                row(f"P{percentile_key(p)} {name} (ms):", d[key], "{:<10.2f}")
    print("=" * 50)
