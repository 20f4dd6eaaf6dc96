"""The subcommands of `bucket-tuner`, one module each; `tuner.cli` assembles them."""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import sys
import urllib.parse
from pathlib import Path

from ..vocabulary.errors import RuntimeFailure, UserError

MODEL_HELP = ("the served model, known from its config.json: a catalogue name (bucket-tuner models), a "
              "Hugging Face id in the local cache, a model folder or a config.json path")


class UsageError(UserError):
    """A bad command-line value; printed as `error: ...` with exit status 2."""


def parse_env_pairs(pairs: list[str] | None) -> dict[str, str]:
    env = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|min|ms|m|s)")
_UNIT_S = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "ms": 0.001}
DURATION_HELP = "seconds, or a duration such as 90s, 4m, 1h30m"


def parse_duration(text: str) -> float:
    """Seconds from `240`, `90s`, `4m`, `1h30m`, `1.5h`, `500ms`: the one parser of every duration flag.
    A plain number is seconds (a negative one passes, for the flag's own range check to name)."""
    raw = str(text).strip().lower()
    try:
        value = float(raw)
    except ValueError:
        pos, total = 0, 0.0
        for match in _DURATION_PART.finditer(raw):
            if match.start() != pos:
                break
            total += float(match.group(1)) * _UNIT_S[match.group(2)]
            pos = match.end()
        if pos != len(raw) or not raw:
            raise ValueError(f"{text!r} is not a duration; give seconds or e.g. 90s, 4m, 1h30m") from None
        return total
    if math.isnan(value):
        raise ValueError(f"{text!r} is not a duration; give seconds or e.g. 90s, 4m, 1h30m")
    return value


def duration(text: str) -> float:
    """argparse type for a duration flag (parse_duration)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_allow_unknown(p) -> None:
    from ..buckets.names import ALLOW_UNKNOWN_HELP

    p.add_argument("--allow-unknown", action="store_true", help=ALLOW_UNKNOWN_HELP)


def check_env_names(names, releases, where: str, args) -> list[str]:
    """The one resolver (tuner/buckets/names.py) on the variables a command was given: an unknown name is
    a usage error with a suggestion (unless --allow-unknown), and so is (given NAME -> value) a value the
    release cannot parse; the warnings are returned for the caller to show."""
    from ..buckets.names import BadValueError, UnknownVariableError, check_names

    try:
        return check_names(names, releases, where=where, allow_unknown=bool(getattr(args, "allow_unknown", False)))
    except (UnknownVariableError, BadValueError) as exc:
        raise UsageError(str(exc)) from None


_MS_UNITS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "min": 60_000.0}


def _limit(name: str, value: str) -> float:
    """A limit's number; one in milliseconds (a name ending in _ms) may carry its unit: 2s, 800ms, 1.5m."""
    m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m)", value.strip()) if name.endswith("_ms") else None
    return float(m.group(1)) * _MS_UNITS[m.group(2)] if m else float(value)


def parse_key_values(pairs: list[str] | None, flag: str, sep: str = "=") -> dict[str, float]:
    """`NAME=NUMBER` (or `NAME:NUMBER`) pairs, e.g. --slo p99_ttft_ms=500 (or =0.5s), --goodput ttft:200."""
    out: dict[str, float] = {}
    for pair in pairs or []:
        for item in pair.split():
            name, found, value = item.partition(sep)
            try:
                if not found or not name:
                    raise ValueError
                number = _limit(name, value)
            except ValueError:
                unit = " (milliseconds, or with a unit: 2s, 800ms)" if name.endswith("_ms") else ""
                raise UsageError(f"{flag} expects NAME{sep}NUMBER{unit}, got {item!r}") from None
            if not (math.isfinite(number) and number >= 0):
                raise UsageError(f"{flag} {item!r}: the limit must be a finite number >= 0")
            out[name] = number
    return out


def parse_slos(args, percentiles, warm_requests: int | None = None) -> dict[str, float]:
    """--slo, each key checked (a latency the load test or its first-run window reports) before any boot."""
    from ..study.options import slo_key_problem

    slos = parse_key_values(getattr(args, "slo", None), "--slo")
    for key in slos:
        problem = slo_key_problem(key, percentiles, warm_requests)
        if problem:
            raise UsageError(problem)
    return slos


def check_folder(path, flag: str) -> None:
    """A folder the command will create or fill: refuse a path that is (or runs through) a file."""
    path = Path(path)
    for folder in [*reversed(path.parents), path]:
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"{flag} {path}: {folder} is a file, not a folder")


# Output files: missing parent folders are created and said so on stderr; a path whose "folder" is
# a file, or that is itself a folder, is refused. (The policy is in `bucket-tuner --help`.)
def prepare_output(path, flag: str) -> Path:
    """Make `path` writable as a file for `flag`: refuse a folder or a file-as-folder; create folders."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    for folder in reversed(path.parents):
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"{flag} {path}: {folder} is a file, not a folder")
    if not path.parent.exists():
        try:
            path.parent.mkdir(parents=True)
        except OSError as exc:
            raise RuntimeFailure(f"{flag} {path}: cannot create folder {path.parent}: {exc.strerror}") from None
        print(f"created folder {path.parent} for {flag}", file=sys.stderr)
    return path


def server_root(base_url: str, flag: str = "--base-url") -> str:
    """The server's root URL. An OpenAI client's base URL ends in /v1 (`http://host:8000/v1`) and a pasted route
    in /v1/completions; vLLM's benchmark client appends its /v1/... endpoint to the root, so both would ask
    /v1/v1/... and get a 404. The API path is dropped, and said."""
    parts = urllib.parse.urlsplit(base_url)
    m = re.fullmatch(r"(.*?)/v1(?:/.*)?", parts.path.rstrip("/"))
    if m is None:
        return base_url.rstrip("/")
    from ..study.storage import redact_url

    root = urllib.parse.urlunsplit(parts._replace(path=m.group(1))).rstrip("/")
    print(f"{flag} {redact_url(base_url)}: that is the API's path; the server's root URL is {redact_url(root)} "
          "(the endpoint adds /v1/...), used instead", file=sys.stderr)
    return root


def check_reachable(base_url: str, flag: str = "--base-url", timeout_s: float = 5.0) -> None:
    """Fail early, naming the URL, when nothing listens there (instead of a table of failed requests)."""
    from ..study.storage import redact_url

    shown = redact_url(base_url)
    parts = urllib.parse.urlsplit(base_url)
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"{flag} {shown}: the port is not a number in 0..65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{flag} expects http://HOST:PORT, got {shown!r}")
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        raise RuntimeFailure(f"cannot connect to {shown}: connection refused on port {port} "
                             "(is the server running and listening there?)") from None
    except socket.gaierror:
        raise RuntimeFailure(f"cannot connect to {shown}: unknown host {parts.hostname!r}") from None
    except TimeoutError:
        raise RuntimeFailure(f"cannot connect to {shown}: no answer from port {port} "
                             f"within {timeout_s:.0f} s") from None
    except OSError as exc:
        raise RuntimeFailure(f"cannot connect to {shown}: {exc.strerror or exc}") from None


def refuse_images_without_vision(space, shape_name: str, flag: str, hf_overrides: str | None = None) -> None:
    """A space that tunes image settings needs a model with a vision tower: with a text model (the default
    --model is one) its image buckets would be tuned against nothing, silently."""
    from ..models import UnknownModelError
    from ..perfmodel.hardware import model_for

    keys = {*space.server, *space.env, *(p.key for p in space.parameters)}
    image = sorted(k for k in keys if k == "limit_mm_per_prompt" or k.startswith("VLLM_MULTIMODAL_"))
    if not image:
        return
    try:
        shape = model_for(shape_name, hf_overrides)
    except (UnknownModelError, ValueError):
        return  # an unknown model is refused (or run without prediction) where it is resolved
    if shape.vision_tower is None:
        raise UsageError(f"{space.name}: the space sets {', '.join(image)} (image settings), but {flag} "
                         f"{shape_name} is a text model (no vision tower in its config): give a vision-language "
                         "model, e.g. --model Qwen/Qwen3-VL-8B-Instruct")


def refuse_a_length_past_the_model(space, shape_name: str, flag: str, hf_overrides: str | None = None,
                                   server_args_length: int | None = None) -> None:
    """A space whose fixed max_model_len is longer than the model serves would have every trial refused by the
    server at its config check: said once, before the night starts, with the ways out (a shorter length, the
    overrides that extend the model's, or vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN)."""
    from ..models import UnknownModelError
    from ..perfmodel.hardware import model_for
    from ..perfmodel.rules import env_true

    length = server_args_length or space.server.get("max_model_len")  # --server-args' own wins, as on the server
    allowed = space.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", ""))
    if not isinstance(length, int) or env_true(str(allowed)):
        return
    try:
        shape = model_for(shape_name, hf_overrides)
    except (UnknownModelError, ValueError):
        return  # an unknown model is refused (or run without prediction) where it is resolved
    limit = shape.max_len_limit or shape.max_position
    if length > limit:
        how = "as its --hf-overrides leave it" if hf_overrides else f"its config's {shape.max_len_key}"
        given = "--server-args: --max-model-len" if server_args_length else f"{space.name}: max_model_len"
        raise UsageError(f"{given} {length} is longer than {flag} {shape_name} serves: "
                         f"{limit:,} tokens ({how}); the server would refuse every trial. Lower max_model_len, "
                         "pass the server the --hf-overrides that extend the context (in --server-args, e.g. "
                         "YaRN's rope_scaling with a longer max_position_embeddings), or set "
                         "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the space's env")


def refuse_a_model_the_release_lacks(release: str | None, shape_name: str, flag: str,
                                     hf_overrides: str | None = None) -> None:
    """A fork release whose model registry has no architecture for the model refuses it at every start: said once,
    before the night starts, with the releases that serve it."""
    from ..buckets import BucketConfigError, get_profile
    from ..models import UnknownModelError
    from ..models.releasearch import release_lacks, releases_serving
    from ..perfmodel.hardware import model_for

    if release is None:
        return
    try:
        profile = get_profile(release).name
        architecture = model_for(shape_name, hf_overrides).architecture
    except (BucketConfigError, UnknownModelError, ValueError):
        return  # refused, with its own message, where it is resolved
    if not release_lacks(profile, architecture):
        return
    serving = releases_serving(architecture)
    raise UsageError(f"{profile} cannot serve {flag} {shape_name}: the model registry of its vLLM has no "
                     f"{architecture}, so the server would refuse every trial (\"Model architectures "
                     f"['{architecture}'] are not supported for now\"). "
                     + (f"The fork releases that serve it: {', '.join(serving)}." if serving else
                        "No vllm-fork release serves it; the vllm-gaudi plugin releases (gaudi-*) follow upstream "
                        "vLLM's registry."))


def tokens_arg(text: str) -> int:
    """An argparse type for a token count as vLLM's CLI writes it (32k = 32,000, 8K = 8,192)."""
    from ..vocabulary.numbers import token_count

    try:
        return token_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
