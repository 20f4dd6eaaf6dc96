"""How a trial ended: one enum for the trial record, the study and the report (README, Conventions).

The values are the strings stored in trial records and study attributes. A server's own outcome
(server.OutcomeKind) carries the same value for the endings both know, so `from_outcome` needs no table.
"""

from __future__ import annotations

import enum


class TrialStatus(str, enum.Enum):
    OK = "ok"
    # The configuration's fault: the sampler is told the trial was infeasible.
    INVALID_CONFIG = "invalid_config"
    WARMUP_OVER_BUDGET = "warmup_over_budget"
    WARMUP_OOM = "warmup_oom"
    RUNTIME_OOM = "runtime_oom"
    LOAD_ERRORS = "load_errors"
    # The environment's fault: the trial is failed (and retried where that can help).
    BOOT_FAILURE = "boot_failure"
    PORT_IN_USE = "port_in_use"
    BOOT_TIMEOUT = "boot_timeout"
    WARMUP_TIMEOUT = "warmup_timeout"
    CRASH = "crash"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:
        return self.value

    @property
    def config_failure(self) -> bool:
        """The configuration caused it (told to the sampler as infeasible, not retried)."""
        return self in CONFIG_FAILURES

    @property
    def retried(self) -> bool:
        """Nothing about the configuration is known: its parameters are enqueued again."""
        return self in (TrialStatus.INTERRUPTED, TrialStatus.PORT_IN_USE)

    @classmethod
    def from_outcome(cls, kind) -> TrialStatus:
        """The trial status of a server outcome that is not READY (server.OutcomeKind)."""
        return cls(getattr(kind, "value", kind))


CONFIG_FAILURES = frozenset({TrialStatus.INVALID_CONFIG, TrialStatus.WARMUP_OVER_BUDGET, TrialStatus.WARMUP_OOM,
                             TrialStatus.RUNTIME_OOM, TrialStatus.LOAD_ERRORS})
