"""What the user runs today, read from the file they deploy with: the baseline of `plan` and `tune`.

Three kinds of file, told apart by their content:

* an env file: `NAME=VALUE` lines (`export` allowed, quotes as a shell reads them, `#` comments), and the
  `# vllm serve flags: ...` line `export` writes, so that an exported best.env reads back exactly;
* a serve script, as deployment scripts are written: `export VAR=...` lines, then the server's command
  line (`vllm serve MODEL --flag v` or `python -m vllm.entrypoints.openai.api_server --model M ...`),
  possibly with `VAR=... ` assignments in front, `\\` continuation lines, inside `docker run -e VAR=...
  IMAGE ...` (or a `bash -c "..."` in it); `$VAR` / `${VAR}` / `${VAR:-default}` are expanded from what
  the script set. Shell semantics are followed: a variable assigned without `export` is not the server's;
* a server log: read as `explain` reads it (the bucket configs, the memory split's settings), the
  study's fixed server options filling in what a log does not show.

The settings are the baseline's exactly: its environment as given (secret-looking variables left out,
never stored), its `vllm serve` options; options it does not set take the space's fixed `server:`
values (said in the notes). Its parameter values are those of the space's parameters it sets to a
value the space can take; a value outside the space is still what the baseline runs (`tune --baseline`
boots exactly these settings).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..space.schema import SearchSpace, TrialSettings
from ..vocabulary.textfile import decode
from .points import finite_values

ENV_FILE, SCRIPT, LOG = "env file", "serve script", "server log"
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ENV_LINE = re.compile(r"^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*=")
_SERVE = re.compile(r"(^|\s|/)vllm\s+serve\b|vllm\.entrypoints\.openai\.api_server"
                    r"|(docker|podman)\s+run\s.*--model[=\s]")
_LOGGED = re.compile(r"\b(INFO|WARNING|ERROR|DEBUG)\b")  # a logger's level: a log, not a script
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


class BaselineError(ValueError):
    """A baseline that cannot be read; the message names the file and what is wrong."""


@dataclass
class Deployment:
    """The settings a deployment file shows: its environment and `vllm serve` options."""

    kind: str
    env: dict[str, str] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    notes: list[str] = field(default_factory=list)


def read_deployment(path: Path, release: str | None = None, server_defaults: dict[str, Any] | None = None,
                    *, release_given: bool = False) -> Deployment:
    """The settings of an env file, a serve script or a server log (see the module docstring).
    `release_given`: the release was named on the command line (--release), so a log is read as that
    release even where its own signs read another (they are then noted); else such a log is refused."""
    try:
        text = decode(Path(path).read_bytes(), str(path)).text
    except FileNotFoundError:
        raise BaselineError(f"--baseline {path}: file not found") from None
    except IsADirectoryError:
        raise BaselineError(f"--baseline {path}: is a folder, not a file") from None
    logical = _logical_lines(text)
    script_error = None
    if any(_SERVE.search(line) for line in logical if not line.lstrip().startswith("#")):
        try:
            return _script(path, logical)
        except BaselineError as exc:  # a log quoting a command line is still a log
            script_error = exc
    body = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if body and all(_ENV_LINE.match(line) for line in body):
        return _env_file(path, text)
    try:
        return _log(path, text, release, server_defaults or {}, release_given)
    except BaselineError:
        lines = text.splitlines()
        looks_logged = sum(bool(_LOGGED.search(line)) for line in lines) > len(lines) / 5
        if script_error is not None and not looks_logged:
            raise script_error from None
        raise


def baseline_settings(dep: Deployment, space: SearchSpace) -> tuple[TrialSettings, list[str]]:
    """The baseline's TrialSettings in `space`: its env exactly, its server options over the space's fixed
    ones, and the values of the space's parameters it sets (those the space can take)."""
    from ..serve.redact import is_secret_name

    notes = list(dep.notes)
    secret = sorted(k for k in dep.env if is_secret_name(k))
    if secret:
        notes.append(f"{', '.join(secret)}: secret-looking, left out (never stored); the server gets "
                     "what the tuner's own environment holds")
    env = {k: v for k, v in dep.env.items() if k not in secret}
    server = dict(space.server)
    defaulted = [k for k in space.server if k not in dep.server]
    server.update(dep.server)
    if defaulted:
        notes.append("not set by the baseline, so the space's: " + ", ".join(f"{k}={space.server[k]}"
                                                                           for k in defaulted))
    params, outside = {}, []
    for p in space.parameters:
        if p.target == "fitted":
            continue
        raw = env.get(p.key) if p.target == "env" else server.get(p.key)
        if raw is None:
            continue
        value = space_value(p, raw)
        if value is None:
            outside.append(f"{p.name}={raw}")
        else:
            params[p.name] = value
    if outside:
        notes.append("outside the space (booted as given, not a point the sampler learns from): "
                     + ", ".join(outside))
    return TrialSettings(server=server, env=env, params=params), notes


def space_value(p, raw: Any) -> Any:
    """The parameter value the space would propose for `raw` (the same setting), or None if it cannot.
    (Also what `tune --from-plan` checks a plan's picks with.)"""
    finite = finite_values(p)
    if finite is not None:
        for v in finite:
            if _same(v, raw):
                return v
        return None
    try:
        x = float(raw)
    except (TypeError, ValueError):
        return None
    return x if p.low <= x <= p.high else None


def _same(value: Any, raw: Any) -> bool:
    if isinstance(value, bool) or isinstance(raw, bool):
        return str(value).lower() == str(raw).strip().lower()
    if isinstance(value, (int, float)):
        try:
            return float(raw) == float(value)
        except (TypeError, ValueError):
            return False
    return str(value) == str(raw).strip()


# ------------------------------------------------------------------------------------------ env files

def _env_file(path: Path, text: str) -> Deployment:
    from ..results.export import FLAGS_HEADER
    from ..serve.backends import server_options

    dep = Deployment(ENV_FILE)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith(FLAGS_HEADER):
            dep.server.update(server_options(_split_flags(shlex.split(line[len(FLAGS_HEADER):]))))
            continue
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise BaselineError(f"--baseline {path}, line {number}: {exc} in {line[:80]!r}") from None
        for word in words[1:] if words and words[0] == "export" else words:
            name, sep, value = word.partition("=")
            if not sep:
                raise BaselineError(f"--baseline {path}, line {number}: expected NAME=VALUE, got {word[:80]!r}")
            dep.env[name] = value
    return dep


# --------------------------------------------------------------------------------------- serve scripts

def _logical_lines(text: str) -> list[str]:
    """Lines with their `\\` continuations joined."""
    out, current = [], ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\") and not raw.rstrip().endswith("\\\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        out.append(current + raw)
        current = ""
    if current:
        out.append(current)
    return out


_OPENERS = {"if": "fi", "case": "esac", "for": "done", "while": "done", "until": "done", "select": "done"}
_STOPS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "&>", "2>", "2>>", "1>"}


def _script(path: Path, lines: list[str]) -> Deployment:  # noqa: C901
    dep = Deployment(SCRIPT)
    shell: dict[str, str] = {}  # every variable the script set, exported or not (for $VAR)
    exported: dict[str, str] = {}
    conditional: set[str] = set()
    depth, found = 0, False
    for number, line in enumerate(lines, start=1):
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            if _SERVE.search(line):
                raise BaselineError(f"--baseline {path}: {exc} in {line.strip()[:80]!r}") from None
            continue  # not a line this reading needs (a here-document, a stray quote in an echo)
        if not words:
            continue
        # Shell control flow is not run: what a branch, loop or function sets is not the baseline's.
        opened = sum(1 for w in words if w in _OPENERS or w.endswith("()") or w == "function")
        opened += sum(1 for w in words if w == "{") if words[0].endswith("()") or words[0] == "function" else 0
        closed = sum(1 for w in words if w in ("fi", "esac", "done", "}"))
        if depth or opened:
            depth = max(0, depth + opened - closed)
            conditional.update(w.split("=", 1)[0] for w in words if _ASSIGNMENT.match(w))
            continue
        words = [_expand(w, shell) for w in words]
        if words[0] == "export":
            for w in words[1:]:
                name, sep, value = w.partition("=")
                if sep:
                    shell[name] = value
                if name in shell:
                    exported[name] = shell[name]
            continue
        prefix: dict[str, str] = {}
        while words and _ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            prefix[name] = value
        if not words:  # a plain shell variable: not the server's environment
            shell.update(prefix)
            continue
        command = _serve_command(words, dep.notes)
        if command is None:
            continue
        if found:
            dep.notes.append(f"line {number}: another server command; the first one is the baseline")
            continue
        found = True
        outer, serve = command
        dep.env = {**exported, **prefix, **outer}
        _serve_args(serve, dep)
    if not found:
        raise BaselineError(f"--baseline {path}: no `vllm serve` command found in it (outside if/for blocks)")
    unresolved = sorted(k for k, v in dep.env.items() if "$" in v)
    if unresolved:
        dep.notes.append("not known from the script alone (arguments, command output, the host's "
                         f"environment), left out: {', '.join(unresolved)}")
        dep.env = {k: v for k, v in dep.env.items() if k not in unresolved}
    skipped = sorted(k for k in conditional if k.startswith(("VLLM_", "PT_", "HABANA_")) and k not in dep.env)
    if skipped:
        dep.notes.append(f"set only inside if/for/case blocks or functions, not read: {', '.join(skipped)}")
    return dep


def _expand(word: str, shell: dict[str, str]) -> str:
    """$NAME, ${NAME} and ${NAME:-default} from what the script set; anything else stays as written
    (a `$` left in a value marks it unknown)."""
    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in shell:
            return shell[name]
        if m.group(2) is not None:
            return _expand(m.group(2), shell)
        return m.group(0)

    return _VARIABLE.sub(value, word)


def _serve_command(words: list[str], notes: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """(environment a container adds, the server's arguments after its entry point), or None when the
    line does not start a server. Looks through `docker run` options and a `bash -c "..."` in it; a
    `docker run` of an image whose entry point is the server starts its arguments at `--model`."""
    for i, w in enumerate(words):
        if w == "-c" and i + 1 < len(words) and _SERVE.search(words[i + 1]):
            found = _serve_command(shlex.split(words[i + 1], comments=True), notes)
            if found is not None:
                return {**_docker_env(words[:i], notes), **found[0]}, found[1]
        if (w == "vllm" or w.endswith("/vllm")) and i + 1 < len(words) and words[i + 1] == "serve":
            return _docker_env(words[:i], notes), _until_stop(words[i + 2:])
        if w == "vllm.entrypoints.openai.api_server" or w.endswith("vllm/entrypoints/openai/api_server.py"):
            return _docker_env(words[:i], notes), _until_stop(words[i + 1:])
    if words[0] in ("docker", "podman", "sudo") and "run" in words:
        for i, w in enumerate(words):
            if w == "--model" or w.startswith("--model="):
                return _docker_env(words[:i], notes), _until_stop(words[i:])
    return None


def _until_stop(words: list[str]) -> list[str]:
    """The command's own words: up to a pipe, a redirection or the next command."""
    out = []
    for w in words:
        if w in _STOPS or w.startswith((">", "2>", "1>", "&>")):
            break
        out.append(w)
    return out
def _docker_env(words: list[str], notes: list[str]) -> dict[str, str]:
    """`-e VAR=value` / `--env VAR=value` / `--env=VAR=value` of a `docker run` in front of the server."""
    if "docker" not in words and "podman" not in words:
        return {}
    env: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        item = None
        if w in ("-e", "--env") and i + 1 < len(words):
            item, i = words[i + 1], i + 1
        elif w.startswith("--env="):
            item = w[len("--env="):]
        elif w.startswith("-e") and len(w) > 2 and "=" in w:
            item = w[2:]
        elif w == "--env-file" and i + 1 < len(words):
            notes.append(f"docker --env-file {words[i + 1]}: not read; give that file as the baseline too")
            i += 1
        if item is not None:
            name, sep, value = item.partition("=")
            if sep:
                env[name] = value
            else:
                notes.append(f"docker -e {name}: taken from the host's environment, unknown here")
        i += 1
    return env


def _split_flags(args: list[str]) -> list[str]:
    """`--flag=value` as two words (a flag vLLM does not know is then noted as itself); each flag's spelling is
    vLLM's parser's (vocabulary/serveargs.py canonical_argv, through server_options)."""
    out = []
    for a in args:
        out.extend(a.split("=", 1) if a.startswith("--") and "=" in a else [a])
    return out


def _serve_args(args: list[str], dep: Deployment) -> None:
    from ..serve.backends import server_options
    from ..vocabulary.serveargs import ServeArgsError, canonical_argv, without_refused

    args = _split_flags(args)
    try:  # each flag in one spelling, as vLLM's parser reads it (-tp 4, --max-model 4096)
        args = canonical_argv(args)
    except ServeArgsError as exc:  # said; the rest read without the flags vLLM would refuse
        dep.notes.append(f"vllm serve would refuse this line: {exc}")
        args = canonical_argv(without_refused(args))
    if args and not args[0].startswith("-"):
        dep.model, args = args[0], args[1:]
    if "--model" in args[:-1]:
        dep.model = args[args.index("--model") + 1]
    if dep.model and "$" in dep.model:
        dep.model = None  # a script argument
    server = server_options(args)
    unknown = sorted(k for k, v in server.items() if isinstance(v, str) and "$" in v)
    if unknown:
        dep.notes.append("server options not known from the script alone (arguments, the host's environment), "
                         f"left out: {', '.join(unknown)}")
    dep.server = {k: v for k, v in server.items() if k not in unknown}
    known = {"--" + k.replace("_", "-") for k in server} | {"--no-enable-prefix-caching", "--model"}
    other = [a for a in args if a.startswith("--") and a not in known]
    if other:
        dep.notes.append("server flags the tuner does not vary, not part of the baseline's settings: "
                         + " ".join(other))


# ------------------------------------------------------------------------------------------ server logs

def _log(path: Path, text: str, release: str | None, server_defaults: dict[str, Any],
         release_given: bool = False) -> Deployment:
    from ..explain import explain
    from ..study.logcalibration import settings_from_log

    x = explain(text.splitlines(), source=str(path))
    corrected = None
    if release and release_given and x.release.profiles and release not in x.release.profiles:
        corrected = f"read as {release} (--release); the log's own signs read {', '.join(x.release.profiles)}"
        x = explain(text.splitlines(), source=str(path), release=release)
    if not x.phases and x.memory.kv_blocks is None and not x.release.profiles:
        raise BaselineError(f"--baseline {path}: not an env file (NAME=VALUE lines), a `vllm serve` script, nor "
                            "a vLLM-on-Gaudi server log with bucket or memory lines")
    profile = release or (x.release.profiles[0] if x.release.profiles else None)
    if profile is None:
        raise BaselineError(f"--baseline {path}: the log does not say its release; give --release")
    if x.release.profiles and release and release not in x.release.profiles:
        raise BaselineError(f"--baseline {path}: the log was written by {x.release.family} "
                            f"({', '.join(x.release.profiles)}; decided by: {'; '.join(x.release.decided_by)}), "
                            f"the space is for {release}; give --release {release} to read the log as {release}")
    settings, notes = settings_from_log(x, server_defaults, profile)
    dep = Deployment(LOG, env=dict(settings.env), server={k: v for k, v in settings.server.items()
                                                           if k not in server_defaults or
                                                           settings.server[k] != server_defaults[k]})
    dep.notes = ["read from the log: the bucket settings and memory split it shows; the rest as the space "
                 "fixes it"] + ([corrected] if corrected else []) + notes
    return dep
