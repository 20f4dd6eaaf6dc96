"""What the server says it did other than it was asked, or of its setup, in plain words: vllm-gaudi's dtype
fallback, contiguous PA, hybrid-model KV cache cuts, multimodal warm-up warnings, FP8 (INC) loading, sleep
mode, capped buckets while serving, and the Habana bridge's banner (lazy mode, the recipe cache, the host).

One notice per fact: every tensor-parallel rank prints the same line, and a fact printed again (a capped
request each step) is one notice with its count. Pure: reads the events the log reading kept."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..logparse import ServerNotice
from ..logparse.units import parse_bytes
from .reading import LogReading


@dataclass(frozen=True)
class Notice:
    kind: str
    line_no: int          # its first line
    words: str
    values: dict[str, str]
    count: int = 1        # lines that said it (other ranks' copies aside)
    serving: bool = False  # said while serving (a request's bucket capped), not at start-up


_SERVING = ("decode_ctx_capped", "prompt_ctx_capped", "blocks_capped", "sleep_mode")


def _gib(text: str) -> str:
    try:
        return f"{parse_bytes(text.lstrip('-')) / 2**30:.2f} GiB"
    except ValueError:
        return text


def _recipe_cache(value: str) -> str:
    """PT_HPU_RECIPE_CACHE_CONFIG=<path>,<delete at start>,<size MB>[,...]: whether a start can reuse the graphs
    an earlier start compiled."""
    if not value:
        return ("no recipe cache (PT_HPU_RECIPE_CACHE_CONFIG is empty): every start compiles every graph anew, "
                "so this warm-up is a cold one")
    parts = value.split(",")
    path = parts[0]
    delete = len(parts) > 1 and parts[1].strip().lower() == "true"
    size = f", up to {parts[2]} MB" if len(parts) > 2 and parts[2].strip().isdigit() else ""
    if delete:
        return f"recipe cache {path}, cleared at each start{size}: every warm-up compiles anew (a cold one)"
    return (f"recipe cache {path}, kept between starts{size}: a start that finds its graphs there compiles "
            "less, so a warm-up after another with the same buckets is faster than a first one")


# kind -> its words, filled with the line's figures (and `gib`, `on`, `change`, `ram_gib` derived from them)
_WORDS = {
    "dtype_fallback": "the HPU backend does not support {asked}: the server runs {used} instead",
    "contiguous_pa": "contiguous PA is on, so prefix caching is off",
    "hybrid_kv_reduced": "hybrid (GDN) model: the KV cache gets {pct}% less memory than the memory split shows "
                         "(factor {factor}, one allocation per layer type)",
    "hybrid_kv_adjusted": "hybrid ({kind}) model: the usable KV cache is cut from {before} to {after}",
    "gdn_layers": "{n} GDN (linear-attention) layers: {flags}",
    "hybrid_block_size": "hybrid model: the attention layers' KV blocks hold {tokens} tokens each, so that one page "
                         "holds a layer's recurrent state",
    "mamba_page_padded": "hybrid model: each recurrent state page is padded by {pct}% to the attention page",
    "hybrid_block_reset": "--block-size {asked} is reset to {used} for a Qwen3.5 hybrid on Gaudi",
    "multimodal_buckets": "multimodal buckets {list}: the vision encoder's warm-up batch sizes",
    "multimodal_runtime_compiles": "the vision tower takes native resolutions and none is set for warm-up: each new "
                                   "image resolution compiles while serving",
    "multimodal_graphs": "the multimodal warm-up compiles {n} {what} graphs (one per item count per resolution)",
    "query_min_1": "VLLM_PROMPT_QUERY_BUCKET_MIN=1 is meant only for the decode instance of a prefill/decode split",
    "graph_reserved_invalid": "VLLM_GRAPH_RESERVED_MEM is not a valid fraction: the default {value} is used",
    "sliding_window": "sliding-window attention {on} (slice {slice}, threshold {threshold})",
    "profiling": "profiling is on (traces to {path}): the server runs slower than in production, so its figures "
                 "are not the ones to tune on",
    "inc": "INC (FP8) quantisation: the weights load to the host first, then are quantised onto the device (the "
           "device weights are the INC figure)",
    "drafter_weights": "the speculative-decoding draft model's weights take {gib}",
    "decode_ctx_capped": "a decode batch needed {ctx} blocks, past the largest prepared decode bucket ({max}): capped",
    "prompt_ctx_capped": "a prompt's context needed {ctx} blocks, past the most the model can use ({max}): capped",
    "blocks_capped": "a decode bucket of {ctx} blocks is larger than the KV cache ({max} blocks): capped",
    "sleep_mode": "sleep mode: {what_lower} {change} {gib} of device memory",
    "host_cores": "the host has {n} CPU cores",
    "host_ram": "the host has {ram_gib} GiB of RAM",
}


def _words(kind: str, v: dict[str, str]) -> str:
    if kind == "recipe_cache":
        return _recipe_cache(v.get("value", ""))
    if kind == "lazy_mode":
        value = v.get("value", "")
        return ("PT_HPU_LAZY_MODE=1: lazy mode, with HPU graphs" if value == "1" else
                f"PT_HPU_LAZY_MODE={value or '(empty)'}: torch.compile, no HPU graphs")
    what = v.get("what", "")
    derived = {"gib": _gib(v.get("mem", "")), "on": "on" if v.get("on") == "True" else "off",
               "change": "freed" if v.get("mem", "").startswith("-") else "took",
               "what_lower": what[:1].lower() + what[1:],
               "ram_gib": f"{int(v['kb']) / 2**20:.0f}" if v.get("kb", "").isdigit() else "?"}
    template = _WORDS.get(kind)
    return template.format_map({**v, **derived}) if template else kind.replace("_", " ")


def notices(reading: LogReading) -> list[Notice]:
    """The notices of the lines the reading describes (its primary run), in line order, one per fact."""
    found: dict[tuple, Notice] = {}
    for t in reading.run_events():
        e = t.event
        if not isinstance(e, ServerNotice):
            continue
        key = (e.kind, e.values)
        if key in found:
            found[key] = replace(found[key], count=found[key].count + 1)
            continue
        values = dict(e.values)
        found[key] = Notice(e.kind, t.line_no, _words(e.kind, values), values, serving=e.kind in _SERVING)
    return sorted(found.values(), key=lambda n: n.line_no)
