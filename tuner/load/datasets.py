"""The dataset a command line names (`build_workload`, shared by bench and tune), and the text datasets
read from local files as `vllm bench serve` reads them: ShareGPT JSON and custom JSONL.

Unlike our token-id workloads these send the dataset's own text; the server tokenizes it, so the
prompt lengths reported are the server's (``usage.prompt_tokens``). Selection follows vLLM 0.32.0:
shuffle with ``random.seed(seed)``, keep the first ``num_prompts`` valid entries, oversample by
``random.choice`` when too few. ShareGPT keeps vLLM's filters (prompt and output >= 4 tokens,
prompt <= 1024, prompt + output <= 2048; the output check is skipped when the output length is
given). Lengths need the tokenizer; without one, ShareGPT needs ``--sharegpt-output-len``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..vocabulary.textfile import read_text
from .jsonlines import jsonl_objects
from .pooling import BatchedWorkload, RerankWorkload
from .prefixrep import PrefixRepetitionWorkload
from .trace import TRACE_LABELS, TraceWorkload
from .workload import (
    DEFAULT_RESERVED_IDS,
    DEFAULT_VOCAB_SIZE,
    FixedWorkload,
    RandomWorkload,
    RequestSpec,
    TextPrompt,
    Workload,
)


@dataclass
class TextWorkload(Workload):
    prompts: list[str]
    output_lens: list[int]
    prompt_lens: list[int]  # by the client's tokenizer, or words when it has none
    source: str = ""
    dataset: str = "custom"
    seed: int = 0
    token_space: Any = field(default=None, repr=False, compare=False)

    kind = "text"

    def lengths(self) -> tuple[list[int], list[int]]:
        return list(self.prompt_lens), list(self.output_lens)

    def requests(self) -> list[RequestSpec]:
        return [RequestSpec(index=i, prompt_len=n, output_len=o, recipe=TextPrompt(p))
                for i, (p, n, o) in enumerate(zip(self.prompts, self.prompt_lens, self.output_lens))]

    def warmup_requests(self, n: int) -> list[RequestSpec]:
        base = self.requests()
        return [RequestSpec(index=i, prompt_len=base[i % len(base)].prompt_len,
                            output_len=base[i % len(base)].output_len,
                            recipe=TextPrompt(f"{i} " + base[i % len(base)].recipe.text)) for i in range(n)]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "dataset": self.dataset, "source": self.source, "seed": self.seed,
                "num_prompts": len(self.prompts), "prompt_format": "text",
                "prompt_len_stats_client": _stats(self.prompt_lens), "output_len_stats": _stats(self.output_lens)}

    def params(self) -> dict[str, Any]:
        return {"source": self.source, "dataset": self.dataset, "seed": self.seed}


def _stats(v: list[int]) -> dict[str, Any]:
    return {"min": min(v), "max": max(v), "mean": float(np.mean(v))} if v else {}


def _valid(prompt_len: int, output_len: int, skip_output_check: bool) -> bool:
    return not (prompt_len < 4 or (not skip_output_check and output_len < 4) or prompt_len > 1024
                or prompt_len + output_len > 2048)


def _take(rows: list[tuple[str, int, int]], num: int, seed: int, oversample: bool = True) -> list[tuple[str, int, int]]:
    """vLLM's maybe_oversample_requests: too few usable entries are topped up with random repeats of them,
    unless --no-oversample keeps the run shorter."""
    if not rows:
        raise ValueError("no usable entries in the dataset")
    if len(rows) < num and oversample:
        random.seed(seed)
        rows = rows + [random.choice(rows) for _ in range(num - len(rows))]
    return rows


def sharegpt(path: Path, num: int, seed: int, count: Callable[[str], int] | None,
             output_len: int | None, shuffle: bool = True, oversample: bool = True) -> TextWorkload:
    try:
        data = json.loads(read_text(path, "--dataset-path", errors="strict").text)
    except (OSError, ValueError) as e:
        raise ValueError(f"--dataset-path {path}: cannot read ShareGPT JSON ({e})") from None
    if count is None and output_len is None:
        raise ValueError("--dataset-name sharegpt without a tokenizer needs --sharegpt-output-len "
                         "(or --tokenizer to count the dataset's answers)")
    data = [e for e in data if isinstance(e, dict) and len(e.get("conversations") or []) >= 2]
    random.seed(seed)
    if shuffle:
        random.shuffle(data)
    words = lambda t: max(1, len(t.split()))  # noqa: E731 - only when no tokenizer
    rows = []
    for e in data:
        if len(rows) >= num:
            break
        prompt, answer = e["conversations"][0]["value"], e["conversations"][1]["value"]
        n_in = (count or words)(prompt)
        n_out = output_len if output_len is not None else count(answer)
        if count is not None and not _valid(n_in, n_out, output_len is not None):
            continue
        rows.append((prompt, n_in, n_out))
    rows = _take(rows, num, seed, oversample)
    return TextWorkload([r[0] for r in rows], [r[2] for r in rows], [r[1] for r in rows], str(path),
                        "sharegpt", seed)


def custom(path: Path, num: int, seed: int, count: Callable[[str], int] | None,
           output_len: int | None, shuffle: bool = True, oversample: bool = True, template=None) -> TextWorkload:
    """vLLM's custom JSONL ({"prompt": ..., "output_tokens": ...} per line). ``template`` (a
    tuner.load.servertok.ChatTemplate): each prompt is sent rendered in the model's chat template, as
    vLLM's client sends it unless --skip-chat-template; counted by the local tokenizer, else the server's."""
    items = [item for _, item in jsonl_objects(path, "a 'prompt' string",
                                                 lambda item: isinstance(item.get("prompt"), str))]
    return _prompts(path, "custom", items, num, seed, count, output_len, shuffle, oversample, template)


def spec_bench(path: Path, num: int, seed: int, count: Callable[[str], int] | None, output_len: int | None,
               category: str | None = None, shuffle: bool = True, oversample: bool = True,
               template=None) -> TextWorkload:
    """vLLM's spec_bench: Spec-Bench's question.jsonl (data/spec_bench/question.jsonl of hemingkx/Spec-Bench,
    which vLLM's client reads from a local file too): each line's first turn is a prompt, only those of
    ``--spec-bench-category`` when given, then as custom (shuffle, chat template, oversampling)."""
    items = [item for _, item in jsonl_objects(
        path, "a 'turns' list whose first item is a string (Spec-Bench's question.jsonl)",
        lambda item: isinstance(item.get("turns"), list) and bool(item["turns"]) and isinstance(item["turns"][0], str))]
    if category:
        found = sorted({str(item.get("category")) for item in items})
        items = [item for item in items if item.get("category") == category]
        if not items:
            raise ValueError(f"--spec-bench-category {category!r}: no question of it in {path} "
                             f"(its categories: {', '.join(found)})")
    items = [{"prompt": item["turns"][0]} for item in items]
    return _prompts(path, "spec_bench", items, num, seed, count, output_len, shuffle, oversample, template)


def _prompts(path: Path, dataset: str, items: list[dict], num: int, seed: int, count: Callable[[str], int] | None,
             output_len: int | None, shuffle: bool, oversample: bool, template) -> TextWorkload:
    """vLLM's CustomDataset.sample over loaded items: shuffled with random.seed(seed), the first ``num``,
    rendered in the chat template, output lengths from the flag or each item's 'output_tokens'."""
    rows = []
    random.seed(seed)
    if shuffle:
        random.shuffle(items)
    items = items[:num]
    # (prompt, its tokens when the server counted them)
    prompts = (template.render_all([item["prompt"] for item in items], counted=count is None)
               if template is not None else [(item["prompt"], None) for item in items])
    count = count or (lambda t: max(1, len(t.split())))
    for item, (prompt, n_in) in zip(items, prompts):
        if output_len is None or output_len == -1:
            if "output_tokens" not in item:
                raise ValueError(f"{path}: an entry lacks 'output_tokens' and --custom-output-len is -1")
            n_out = int(item["output_tokens"])
        else:
            n_out = output_len
        rows.append((prompt, n_in or count(prompt), n_out))
    rows = _take(rows, num, seed, oversample)
    return TextWorkload([r[0] for r in rows], [r[2] for r in rows], [r[1] for r in rows], str(path),
                        dataset, seed)


# ---- From command-line arguments (bench and tune share the flags)

DEFAULT_NUM_PROMPTS = 1000  # vLLM's default
DATASETS = ("random", "random-mm", "random-rerank", "prefix_repetition", "fixed", "trace", "timed_trace", "sharegpt",
            "custom", "spec_bench", "burstgpt", "custom_image")
FILE_DATASETS = ("trace", "timed_trace", "sharegpt", "custom", "spec_bench", "burstgpt", "custom_image")
# vLLM 0.32's other --dataset-name values, and why they are not offered: bucket tuning needs the request
# lengths the server will see, and each of these needs what this client does not have (a chat template,
# text generation, the Hugging Face hub) to produce them.
_LENGTHS = "for the lengths alone, use --dataset-name random (or a trace of your traffic)"
UNSUPPORTED_DATASETS = {
    "sonnet": "vLLM builds its prompts from sonnet.txt lines through the model's chat template, which this client "
              "does not apply; the same lengths: --dataset-name random --random-input-len 550 --random-output-len "
              "150 --random-prefix-len 200 (sonnet's defaults)",
    "hf": f"it downloads datasets from the Hugging Face hub, which this tool never does; {_LENGTHS}",
    "speed_bench": f"it downloads its questions from the Hugging Face hub, which this tool never does; {_LENGTHS}",
    "custom_audio": "audio requests (openai-audio) are not sent by this client",
}


def check_dataset_name(name: str) -> None:
    """Refuse a --dataset-name this client does not offer, saying why (vLLM's) or what was meant (a typo)."""
    if name in DATASETS:
        return
    if name in UNSUPPORTED_DATASETS:
        raise ValueError(f"--dataset-name {name}: not supported: {UNSUPPORTED_DATASETS[name]}")
    import difflib

    close = difflib.get_close_matches(name, [*DATASETS, *UNSUPPORTED_DATASETS], n=1)
    raise ValueError(f"--dataset-name {name!r} is unknown" + (f"; did you mean {close[0]}?" if close else "")
                     + f" (choose from {', '.join(DATASETS)})")


def build_workload(args, vocab=None, sizer=None, template=None) -> Workload:
    """The workload the flags describe; ``vocab`` (a tuner.load.tokenizer.Vocab) when one was discovered;
    ``sizer`` (a tuner.load.servertok.Choice) for chat text: its specials come off the sampled input
    lengths, and random-mm sizes its text with its tokenizer.

    ``template`` (tuner.load.servertok.ChatTemplate): custom prompts are rendered in it (bench, as vLLM's client).

    ``--vocab-size`` wins over a discovered vocabulary; with neither, our default size is used
    (the caller decides whether to discover or probe first). Raises ValueError naming the bad flag.
    """
    num = getattr(args, "num_prompts", None)
    if num is not None and num < 1:
        raise ValueError(f"--num-prompts must be at least 1, got {num}")
    if getattr(args, "input_len", None) is not None:  # vLLM's general aliases
        args.random_input_len = args.input_len
    if getattr(args, "output_len", None) is not None:
        args.random_output_len = args.output_len
    if args.vocab_size is not None:
        ids = {"vocab_size": args.vocab_size, "excluded_ids": frozenset(vocab.special_ids) if vocab else frozenset()}
    elif vocab is not None:
        # a tokenizer names its special ids; a server probe does not, so low ids stay reserved then
        ids = {"vocab_size": vocab.size, "excluded_ids": frozenset(vocab.special_ids),
               "reserved_ids": 0 if vocab.special_ids else min(DEFAULT_RESERVED_IDS, vocab.size // 2)}
    else:
        ids = {"vocab_size": DEFAULT_VOCAB_SIZE}
    name = args.dataset_name
    check_dataset_name(name)
    timed = getattr(args, "self_timed", None)
    if timed is not None and name not in ("trace", "timed_trace"):
        raise ValueError(f"--{'' if timed else 'no-'}self-timed is only for --dataset-name timed_trace or trace "
                         f"(their timestamps), not {name}")
    if name in FILE_DATASETS:
        return _from_file(args, name, num, vocab, ids, template)
    if args.dataset_path is not None and name in ("random", "random-mm", "fixed"):
        raise ValueError(f"--dataset-name {name} takes no --dataset-path (use {', '.join(FILE_DATASETS)} "
                         "for a file)")
    num = DEFAULT_NUM_PROMPTS if num is None else num
    batch = getattr(args, "random_batch_size", None) or 1  # vLLM's: random and random-rerank read it
    if name == "random-rerank":
        return RerankWorkload(args.random_input_len, num, batch, _ratio(args.random_range_ratio),
                              reranker=not getattr(args, "no_reranker", False), seed=args.seed, ids=ids)
    if name == "random-mm":
        return random_mm(args, vocab, num, sizer)
    if name == "prefix_repetition":
        out_len = getattr(args, "output_len", None)
        return PrefixRepetitionWorkload(
            args.prefix_repetition_prefix_len, args.prefix_repetition_suffix_len, args.prefix_repetition_num_prefixes,
            args.prefix_repetition_output_len if out_len is None else out_len, num_prompts=num, seed=args.seed,
            shuffle=not getattr(args, "disable_shuffle", False), **ids)
    if name == "fixed":
        return FixedWorkload(args.random_input_len, args.random_output_len, num_prompts=num, seed=args.seed, **ids)
    workload = RandomWorkload(args.random_input_len, args.random_output_len,
                              range_ratio=_ratio(args.random_range_ratio), num_prompts=num, seed=args.seed,
                              prefix_len=args.random_prefix_len,
                              special_tokens=sizer.num_special if sizer is not None else 0, **ids)
    return BatchedWorkload(workload, batch) if batch > 1 else workload


def _ratio(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ValueError(f"--random-range-ratio must be a number in [0, 1), got {text!r}") from None


def _from_file(args, name: str, num: int | None, vocab, ids: dict, template=None) -> Workload:
    """The workload of a dataset file: a trace of lengths, or texts (ShareGPT, custom JSONL)."""
    if args.dataset_path is None:
        raise ValueError(f"--dataset-name {name} needs --dataset-path FILE")
    if name in ("trace", "timed_trace"):
        labels = {f: getattr(args, f"timed_trace_label_{f}", None) or n for f, n in TRACE_LABELS.items()}
        return TraceWorkload.from_file(args.dataset_path, seed=args.seed, num_prompts=num,
                                       block_len=getattr(args, "timed_trace_chunk_hash_size", 16),
                                       time_multiplier=getattr(args, "timed_trace_sec_multiplier", 1.0),
                                       labels=labels, timed=getattr(args, "self_timed", None) is not False,
                                       **ids)
    if name == "burstgpt":
        from .burstgpt import BurstGPTWorkload

        return BurstGPTWorkload(args.dataset_path, DEFAULT_NUM_PROMPTS if num is None else num, args.seed,
                                output_len=getattr(args, "output_len", None), **ids)
    from .tokenizer import text_tools

    _, count = text_tools(vocab)
    n = DEFAULT_NUM_PROMPTS if num is None else num
    order = {"shuffle": not getattr(args, "disable_shuffle", False),
             "oversample": not getattr(args, "no_oversample", False)}
    if name == "sharegpt":
        return sharegpt(args.dataset_path, n, args.seed, count,
                        getattr(args, "output_len", None) or getattr(args, "sharegpt_output_len", None), **order)
    if name == "custom_image":
        from .customimage import CustomImageWorkload
        from .multimodal import MULTIMODAL_BACKENDS

        backend = getattr(args, "backend", None)
        if backend not in MULTIMODAL_BACKENDS:
            raise ValueError(f"--dataset-name custom_image: images are not supported on backend {backend!r}; use "
                             f"one of {sorted(MULTIMODAL_BACKENDS)} (vllm bench serve's --backend)")
        out = getattr(args, "output_len", None) or getattr(args, "custom_output_len", 256)
        return CustomImageWorkload(args.dataset_path, n, args.seed, output_len=out, count=count,
                                   client_side=bool(getattr(args, "custom_ensure_client_side_data", False)), **order)
    if name == "spec_bench":
        # vLLM's client builds SpecBench without --seed: it shuffles (and oversamples) with its default seed, 0
        out = getattr(args, "output_len", None) or getattr(args, "spec_bench_output_len", 256)
        return spec_bench(args.dataset_path, n, 0, count, out, getattr(args, "spec_bench_category", None),
                          template=template, **order)
    out = getattr(args, "output_len", None) or getattr(args, "custom_output_len", 256)
    return custom(args.dataset_path, n, args.seed, count, out, template=template, **order)


def random_mm(args, vocab, num: int, sizer=None):
    """vLLM's random-mm from its flags: chat text sized by the tokenizer (when on disk) plus images."""
    from .multimodal import (
        DEFAULT_BASE_ITEMS_PER_REQUEST,
        DEFAULT_BUCKET_CONFIG,
        DEFAULT_LIMIT_MM_PER_PROMPT,
        DEFAULT_NUM_MM_ITEMS_RANGE_RATIO,
        MULTIMODAL_BACKENDS,
        RandomMultiModalWorkload,
        parse_bucket_config,
        parse_limit_mm_per_prompt,
    )

    backend = getattr(args, "backend", None)
    if backend not in MULTIMODAL_BACKENDS:
        raise ValueError(f"--dataset-name random-mm: multi-modal content (images) is not supported on backend "
                         f"{backend!r}; use one of {sorted(MULTIMODAL_BACKENDS)} (vllm bench serve's --backend)")
    buckets = getattr(args, "random_mm_bucket_config", None)
    buckets = DEFAULT_BUCKET_CONFIG if buckets is None else parse_bucket_config(buckets)
    limits = getattr(args, "random_mm_limit_mm_per_prompt", None)
    limits = DEFAULT_LIMIT_MM_PER_PROMPT if limits is None else parse_limit_mm_per_prompt(limits)
    ratio = args.random_range_ratio
    try:
        ratio = float(ratio)
    except (TypeError, ValueError):
        raise ValueError(f"--random-range-ratio must be a number in [0, 1), got {ratio!r}") from None
    items_ratio = getattr(args, "random_mm_num_mm_items_range_ratio", None)
    base = getattr(args, "random_mm_base_items_per_request", None)
    text = None
    extra: dict = {"vocab_size": args.vocab_size or DEFAULT_VOCAB_SIZE}
    if vocab is not None and vocab.folder is not None:
        from .chatprompt import VllmText

        text = VllmText(vocab, *((sizer.tokenizer, sizer.num_special) if sizer is not None else ()))
        extra = {"vocab_size": text.vocab_size, "allowed_ids": text.allowed_ids, "num_special": text.num_special,
                 "text": text, "sized_by": text.source}
    elif vocab is not None:
        extra = {"vocab_size": vocab.size}
    return RandomMultiModalWorkload(
        args.random_input_len, args.random_output_len, range_ratio=ratio, num_prompts=num, seed=args.seed,
        prefix_len=args.random_prefix_len,
        base_items=DEFAULT_BASE_ITEMS_PER_REQUEST if base is None else base,
        items_range_ratio=DEFAULT_NUM_MM_ITEMS_RANGE_RATIO if items_ratio is None else float(items_ratio),
        limits=dict(limits), buckets=dict(buckets), **extra)
