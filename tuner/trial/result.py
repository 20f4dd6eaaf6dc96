"""What one trial ended with (TrialResult): its classified status, the settings it ran, what was
predicted and observed, the load test's figures. The study tells Optuna from it and stores it as is."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..vocabulary.status import TrialStatus


@dataclass
class TrialResult:
    status: TrialStatus
    reason: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # redacted
    argv: list[str] = field(default_factory=list)  # redacted
    predicted: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # vllm bench serve aggregate fields
    artifacts: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # wall seconds of the trial's phases
    booted: bool = False
    # this boot against the prior model: one sample per correction (perfmodel.calibration)
    calibration_sample: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == TrialStatus.OK

    @property
    def warmup_s(self) -> float | None:
        # the warmup the study scores when it is not this boot's own (tune --warmup cached, a cache hit);
        # kept in "observed" so that a reused record is scored the same way
        if self.observed.get("warmup_scored_s") is not None:
            return self.observed["warmup_scored_s"]
        return self.observed.get("warmup_s", self.predicted.get("warmup_s") if not self.booted else None)

    @property
    def warmup_measured(self) -> bool:
        """The warm-up scored is this boot's (or the one it stands for), not a prediction for a never-booted trial."""
        return any(self.observed.get(k) is not None for k in ("warmup_s", "warmup_scored_s"))

    @property
    def settled(self) -> str:
        """How this result was reached: "measured", "reused from trial k", "predicted, not booted",
        "rejected before boot" or "failed" (the words of TrialRecord.settled, for the live line)."""
        if self.observed.get("reused_from") is not None:
            return f"reused from trial {self.observed['reused_from']}"
        if not self.booted:
            return "predicted, not booted" if self.ok else "rejected before boot"
        return "measured" if self.ok else "failed"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
