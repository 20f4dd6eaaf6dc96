"""Secrets never leave the process: redact secret-looking values before anything is logged or stored.

Used for server command lines and environments (logs, records, study storage, reports, env files).
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
