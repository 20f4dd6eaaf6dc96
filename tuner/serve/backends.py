"""What to start for a trial: the command line of a server, and nothing else.

The tuner's only knowledge of the server it talks to is the argv built here. `vllm` starts a genuine
`vllm serve` (Gaudi, CUDA or CPU builds alike); `sim` starts the built-in simulated vLLM-on-Gaudi
server, which takes the same flags and prints the same log lines. Everything after the launch (log
watching, readiness, HTTP load, teardown) is the same code for both.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any

from ..vocabulary.numbers import length_or_auto, token_count
from ..vocabulary.serveargs import canonical_argv

BACKENDS = ("sim", "vllm")

# server option -> `vllm serve` flag; bools are presence flags (prefix caching has a --no- form in v1).
_FLAG_NAMES = {
    "max_num_seqs": "--max-num-seqs",
    "max_model_len": "--max-model-len",
    "block_size": "--block-size",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "enforce_eager": "--enforce-eager",
    "enable_prefix_caching": "--enable-prefix-caching",
    "tensor_parallel_size": "--tensor-parallel-size",
    "max_num_prefill_seqs": "--max-num-prefill-seqs",
    "num_gpu_blocks_override": "--num-gpu-blocks-override",
    "dtype": "--dtype",
    "kv_cache_dtype": "--kv-cache-dtype",
    "quantization": "--quantization",
    "limit_mm_per_prompt": "--limit-mm-per-prompt",
    "speculative_config": "--speculative-config",
    "spec_method": "--spec-method",  # vLLM 0.32's shortcuts into --speculative-config
    "spec_model": "--spec-model",
    "spec_tokens": "--spec-tokens",
    "mamba_cache_dtype": "--mamba-cache-dtype",  # a hybrid's state dtypes
    "mamba_ssm_cache_dtype": "--mamba-ssm-cache-dtype",
}


def server_flag_names() -> tuple[str, ...]:
    """The `vllm serve` flags of the server options (a baseline script's flags are read against them)."""
    return tuple(_FLAG_NAMES.values())


class BackendError(ValueError):
    """The backend cannot be started as configured (missing executable, bad option)."""


def server_flags(server: dict[str, Any]) -> list[str]:
    """`vllm serve` flags for a trial's server options, in a stable order."""
    flags: list[str] = []
    for name in _FLAG_NAMES:
        if name not in server or server[name] is None:
            continue
        value, flag = server[name], _FLAG_NAMES[name]
        if isinstance(value, bool):
            if value:
                flags.append(flag)
            elif name == "enable_prefix_caching":
                flags.append("--no-enable-prefix-caching")
        elif isinstance(value, dict):  # --limit-mm-per-prompt, --speculative-config: JSON, as vLLM takes them
            flags += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            flags += [flag, str(value)]
    unknown = set(server) - set(_FLAG_NAMES)
    if unknown:
        raise BackendError(f"unknown server option(s): {', '.join(sorted(unknown))}")
    return flags


def server_options(flags: list[str]) -> dict[str, Any]:
    """The inverse of server_flags: the server options of `vllm serve` flags (others are skipped).
    Numbers become int or float; a presence flag True (--no-enable-prefix-caching: False). Flags are read as
    vLLM's parser reads them (vocabulary/serveargs.py: --max_num_seqs, --max-num-seq=64, -tp 2, dotted keys);
    ServeArgsError for a command line it refuses."""
    flags = [part for word in canonical_argv(flags)
             for part in (word.split("=", 1) if word.startswith("--") and "=" in word else [word])]
    by_flag = {flag: name for name, flag in _FLAG_NAMES.items()}
    out: dict[str, Any] = {}
    i = 0
    while i < len(flags):
        flag = flags[i]
        name = by_flag.get(flag)
        if flag == "--no-enable-prefix-caching":
            out["enable_prefix_caching"] = False
        elif name in ("enforce_eager", "enable_prefix_caching"):
            out[name] = True
        elif name is not None and i + 1 < len(flags):
            raw = flags[i + 1]
            i += 1
            try:
                out[name] = (length_or_auto(raw) if name == "max_model_len" else token_count(raw)
                             if name == "max_num_batched_tokens" else int(raw))  # vLLM's 32k, 8K, auto
            except ValueError:
                try:
                    out[name] = float(raw)
                except ValueError:
                    out[name] = raw
        i += 1
    return out


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value `argv` gives `flag` (`--flag VALUE` or `--flag=VALUE`; the last one, as argparse takes it)."""
    found = None
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif word.startswith(flag + "="):
            found = word[len(flag) + 1:]
    return found


@dataclass
class Backend:
    """How to start one server. `time_scale` is what the command tells a simulator to compress time by:
    the tuner started it that way, so it scales what it measures back (1.0 for a real server)."""

    kind: str
    model: str
    served_model_name: str | None = None
    # sim only
    sim_release: str | None = None
    sim_device: str = "gaudi2"
    sim_model: str = "llama-3.1-8b"
    time_scale: float = 1.0
    # startup (weights, warmup) may be compressed further than serving: warmup is minutes of
    # compile time, while serving latencies must stay well above the client's own overhead
    startup_time_scale: float | None = None
    sim_seed: int = 0
    sim_noise: float = 0.0
    sim_fault: str | None = None
    # vllm only: the command that runs vLLM's CLI, e.g. ["vllm"] or ["/opt/venv/bin/vllm"]
    vllm_command: list[str] = field(default_factory=lambda: ["vllm"])
    extra_args: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.kind not in BACKENDS:
            raise BackendError(f"unknown backend {self.kind!r}; choose one of {', '.join(BACKENDS)}")
        if self.kind == "sim":
            for name, value in (("--time-scale", self.time_scale), ("--startup-time-scale", self.startup_scale)):
                if not (0 < value <= 1):
                    raise BackendError(f"{name} must be in (0, 1], got {value}")
        if self.kind == "vllm":
            self.time_scale, self.startup_time_scale = 1.0, None

    @property
    def startup_scale(self) -> float:
        return self.startup_time_scale if self.startup_time_scale is not None else self.time_scale

    @property
    def api_model_name(self) -> str:
        return self.served_model_name or self.model

    def argv(self, server: dict[str, Any], host: str, port: int) -> list[str]:
        head, tail = self.command(server, ["--host", host, "--port", str(port)])
        return head + tail

    def command(self, server: dict[str, Any], where: list[str] | None = None,
                resolve: bool = True) -> tuple[list[str], list[str]]:
        """(the program and its subcommand, what follows: the model, `where`, the flags). `resolve`
        looks the vLLM command up on PATH as the launcher does; an exported script keeps it as given."""
        common = [self.model, *(where or []), *server_flags(server)]
        if self.served_model_name:
            common += ["--served-model-name", self.served_model_name]
        if self.kind == "vllm":
            exe = (shutil.which(self.vllm_command[0]) if resolve else None) or self.vllm_command[0]
            return [exe, *self.vllm_command[1:], "serve"], [*common, *self.extra_args]
        head, argv = [sys.executable, "-m", "tuner.sim"], list(common)
        if self.sim_release:
            argv += ["--release", self.sim_release]
        argv += ["--sim-device", self.sim_device, "--sim-model", self.sim_model,
                 "--sim-time-scale", str(self.time_scale), "--sim-seed", str(self.sim_seed)]
        if self.startup_time_scale is not None:
            argv += ["--sim-startup-time-scale", str(self.startup_time_scale)]
        if self.sim_noise:
            argv += ["--sim-noise", str(self.sim_noise)]
        if self.sim_fault:
            argv += ["--sim-fault", self.sim_fault]
        return head, argv + self.extra_args

    def describe(self) -> dict[str, Any]:
        d = {"kind": self.kind, "model": self.model}
        if self.kind == "sim":
            d.update(release=self.sim_release, device=self.sim_device, sim_model=self.sim_model,
                     time_scale=self.time_scale, startup_time_scale=self.startup_scale,
                     seed=self.sim_seed, noise=self.sim_noise)
        else:
            d.update(command=self.vllm_command)
        return d
