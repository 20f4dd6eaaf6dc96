"""Secrets never leave the process: redact secret-looking values before anything is logged or stored.

Used for server command lines and environments (logs, records, study storage, reports, env files),
and for what the server itself prints: vLLM logs its non-default arguments, `--api-key` among them,
so the values given to it are scrubbed from its log lines as well (`secret_values`, `scrub`).
"""

from __future__ import annotations

import re

REDACTED = "***"
_SECRET_WORDS = {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "PAT", "APIKEY",
                 "CREDENTIAL", "CREDENTIALS", "AUTH"}
_URL_CREDENTIALS = re.compile(r"(://[^:/@\s]+):[^@/\s]+@")  # scheme://user:password@host


def is_secret_name(name: str) -> bool:
    """True for HF_TOKEN, VLLM_API_KEY, --api-key, DB_PASSWORD... Matched per word, so
    --max-num-batched-tokens (a count) and --tokenizer stay visible."""
    words = [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]
    return any(w in _SECRET_WORDS or w.endswith(("TOKEN", "KEY", "SECRET", "PASSWORD"))
               for w in words)


def _scrub(value: str) -> str:
    return _URL_CREDENTIALS.sub(r"\1:" + REDACTED + "@", value)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Copy of env that is safe to log or store."""
    return {k: REDACTED if is_secret_name(k) else _scrub(str(v)) for k, v in env.items()}


def redact_argv(argv: list[str]) -> list[str]:
    """Copy of argv that is safe to log or store: `--api-key X`, `--api-key=X`, `HF_TOKEN=X`."""
    out: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = arg.partition("=")
        is_name = name.startswith("-") or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)
        if eq and is_name and is_secret_name(name):
            out.append(f"{name}={REDACTED}")
        elif arg.startswith("-") and not eq and is_secret_name(arg):
            out.append(arg)
            hide_next = True
        else:
            out.append(_scrub(arg))
    return out


_MIN_SECRET_LEN = 4  # shorter values ("1", "yes") would scrub ordinary text; no real key is that short


def secret_values(argv: list[str], env: dict[str, str]) -> list[str]:
    """The secret values a server is given: after secret-looking flags and names in argv, in
    secret-looking environment variables, and URL passwords; longest first, for `scrub`."""
    found: set[str] = set()
    for given, safe in zip(map(str, argv), redact_argv(argv)):
        if given != safe:
            found.update(_hidden(given, safe))
    for name, value in env.items():
        if is_secret_name(str(name)):
            found.add(str(value))
        else:
            found.update(_hidden(str(value), _scrub(str(value))))
    return sorted((v for v in found if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def _hidden(given: str, safe: str) -> list[str]:
    """What redaction took out of `given` (a whole value, `name=value`, or URL passwords)."""
    if safe == REDACTED:
        return [given]
    if safe.endswith("=" + REDACTED) and "=" in given:
        return [given.partition("=")[2]]
    return [m.group(0)[len(m.group(1)) + 1:-1] for m in _URL_CREDENTIALS.finditer(given)]


def scrub(text: str, secrets: list[str]) -> str:
    """`text` with every one of `secrets` (secret_values) replaced by the redaction mark."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text
