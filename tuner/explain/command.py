r"""The launch command a user pasted above the log (`vllm serve MODEL --tensor-parallel-size 8 \`, one flag
per line, `python -m vllm.entrypoints.openai.api_server ...`, a `docker run ... vllm serve ...`): the server's
settings as the command gives them, for the server facts a log without its engine config line lacks.

Issue pastes often carry the command and then a failure long before the engine prints its settings; the
command is then the only place the tensor-parallel size, the model or max_num_seqs are said. The engine's
own lines win where both speak (serverfacts.py reads the command last).
"""

from __future__ import annotations

import re
import shlex

from ..serve.backends import flag_value, server_options
from ..vocabulary.numbers import AUTO
from ..vocabulary.serveargs import ServeArgsError, canonical_argv, without_refused

# the start of a command: vLLM's CLI, its API server module, or a line that is only flags (the paste began
# inside the command)
_START = re.compile(r"(?:^|[\s$#>])(?:vllm\s+serve\b|python3?\s+-m\s+vllm\.entrypoints\.\S+)")
_FLAG_LINE = re.compile(r"^\s*--[a-z][\w-]*(?:[ =]\S+)?\s*\\?\s*$")
# a chat client's or word processor's dash for a flag's two hyphens ("—max-num-seqs 64", "–tp 8")
_DASHES = re.compile(r"(?<!\S)[\u2013\u2014](?=[a-z])")
_PROMPT = re.compile(r"^\s*(?:[$#>]\s+|```\w*\s*$)")  # a shell prompt or a code fence before the text
MAX_LINES = 80
_RECORD = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d")
# the rest of a command line a terminal wrapped at its width: flags again, the first maybe cut ("-num-seqs 128")
_WRAPPED = re.compile(r"^-?[\w-]*\s+\S+(?:\s+--[a-z][\w-]*(?:[ =]\S+)?)+\s*$|^--?[a-z][\w-]*\s+\S+\s*$")
WRAP_WIDTH = 60  # a line shorter than this was not wrapped by a terminal

# the server options a command gives that the engine's config line names (serverfacts reads `name=value`)
SETTINGS = ("tensor_parallel_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "dtype",
            "enforce_eager", "gpu_memory_utilization")
# where vLLM's own arguments begin: after `vllm serve` or the API server's module (a `docker run`'s are before)
_SERVER_START = re.compile(r"^(?:serve|vllm\.entrypoints\.\S+)$")


class CommandCollector:
    """Fed the log's lines one by one; keeps the first pasted launch command (its continuation lines joined)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.open = False      # the last kept line ended with a backslash: the command goes on
        self.done = False

    def feed(self, line: str, record: bool = False) -> None:
        """`record`: the line is a log record (its logger prefix read off already)."""
        if self.done:
            return
        text = _DASHES.sub("--", _PROMPT.sub("", line)).rstrip()
        if record or _RECORD.search(text):  # a log record that names `vllm serve` (a hint, a warning) is no command
            self.done = self.done or bool(self.parts)
            return
        starts = _START.search(text) is not None or (not self.parts and _FLAG_LINE.match(text) is not None)
        if self.parts and not self.open and _WRAPPED.match(text) and len(self.parts[-1]) >= WRAP_WIDTH:
            self.parts[-1] += text  # a terminal wrapped the long command line, inside a word ("--max" "-num-seqs")
            return
        if self.open or starts or (self.parts and _FLAG_LINE.match(text)):
            self.parts.append(text[:-1] if text.endswith("\\") else text)
            self.open = text.endswith("\\")
            self.done = len(self.parts) >= MAX_LINES
        elif self.parts:
            self.done = True

    def settings(self) -> str | None:
        return command_settings(" ".join(self.parts)) if self.parts else None


def command_settings(command: str) -> str | None:
    """`name=value` for each setting the command gives (the engine config line's names), or None. Its flags are
    read as vLLM's parser reads them: -tp 8, --max-model 32k, --max_num_seqs=64."""
    command = _DASHES.sub("--", command)
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote in a cut paste
        words = command.split()
    start = next((i + 1 for i, w in enumerate(words) if _SERVER_START.match(w)
                  and (w != "serve" or (i > 0 and words[i - 1].endswith("vllm")))), 0)
    args = words[start:]
    try:
        args = canonical_argv(args)
    except ServeArgsError:  # a line the server would refuse: what can still be read of it
        args = canonical_argv(without_refused(args))
    found: dict[str, object] = {}
    if start and words[start - 1] == "serve" and start < len(words) and not words[start].startswith("-"):
        found["model"] = words[start]
    elif (model := flag_value(args, "--model")) is not None:
        found["model"] = model
    found.update((k, v) for k, v in server_options(args).items() if k in SETTINGS)
    if found.get("max_model_len") == AUTO:  # a length left to the engine (auto, -1): said as the command says it
        found["max_model_len"] = flag_value(args, "--max-model-len")
    if not found:
        return None
    return "pasted command: " + " ".join(f"{k}='{v}'" if k == "model" else f"{k}={v}" for k, v in found.items())
