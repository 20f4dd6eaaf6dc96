"""--sim-fault: failures on demand, so the tuner's reliability paths can be tested against them.

`--sim-fault NAME[:key=value,...]`, repeatable. What each one does, and what a client sees:

* crash-warmup[:at=0.5]  the process prints a graph-compile traceback part-way through warmup and exits 1;
                         /health never answers (connection refused).
* hang-warmup[:at=0.5]   warmup stops making progress (no more lines) and SIGINT is ignored, as a process
                         stuck in native code; only SIGTERM/SIGKILL end it. /health never answers.
* oom-warmup[:at=0.5]    the HPU out-of-memory error of a graph capture, exit 1.
* crash-load[:after=20]  after that many engine steps with work, the process dies abruptly (exit 1):
                         open streams are cut without `data: [DONE]`. With request=N instead, it dies at
                         the first engine step once the Nth completion request has arrived (a count that
                         does not depend on how requests were batched, so tests can place the crash).
* http-500[:every=3]     every Nth completion request gets HTTP 500 with vLLM's error JSON.
* malformed-sse[:every=3] every Nth streamed completion has one chunk that is not valid JSON.
* stall-stream[:every=3,after=2] every Nth stream stops after `after` tokens and never finishes.
* slow-start[:factor=20] model loading takes `factor` times longer (in simulated time).
* refuse-bind            startup fails as if the port were taken ("Address already in use").

The environment variable BUCKET_TUNER_SIM_FAULT adds faults the same way (several separated by ";";
"none" or empty: none), so a search space can switch them like any other server setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULTS: dict[str, dict[str, float]] = {
    "crash-warmup": {"at": 0.5},
    "hang-warmup": {"at": 0.5},
    "oom-warmup": {"at": 0.5},
    "crash-load": {"after": 20, "request": 0},
    "http-500": {"every": 3},
    "malformed-sse": {"every": 3},
    "stall-stream": {"every": 3, "after": 2},
    "slow-start": {"factor": 20},
    "refuse-bind": {},
}
WARMUP_FAULTS = ("crash-warmup", "hang-warmup", "oom-warmup")
REQUEST_FAULTS = ("http-500", "malformed-sse", "stall-stream")

COMPILE_ERROR = "RuntimeError: Graph compile failed. synStatus=synStatus 26 [Generic failure]."


ENV_VAR = "BUCKET_TUNER_SIM_FAULT"


def from_env(value: str | None) -> list[str]:
    """The fault specs in BUCKET_TUNER_SIM_FAULT."""
    return [v.strip() for v in (value or "").split(";") if v.strip() and v.strip().lower() != "none"]


class FaultError(ValueError):
    pass


@dataclass
class Faults:
    params: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def parse(cls, values: list[str] | None) -> Faults:
        out = cls()
        for value in values or []:
            name, _, rest = value.partition(":")
            name = name.strip()
            if name not in DEFAULTS:
                raise FaultError(f"unknown --sim-fault {name!r}; choose from {', '.join(DEFAULTS)}")
            params = dict(DEFAULTS[name])
            for item in filter(None, (p.strip() for p in rest.split(","))):
                key, eq, raw = item.partition("=")
                if not eq or key not in params:
                    raise FaultError(f"--sim-fault {name}: unknown parameter {item!r}; it takes {list(params)}")
                try:
                    params[key] = float(raw)
                except ValueError:
                    raise FaultError(f"--sim-fault {name}: {key} must be a number, got {raw!r}") from None
            out.params[name] = params
        if sum(n in out.params for n in WARMUP_FAULTS) > 1:
            raise FaultError("choose at most one warmup fault")
        return out

    def __contains__(self, name: str) -> bool:
        return name in self.params

    def get(self, name: str, key: str) -> float:
        return self.params[name][key]

    def warmup_fault(self) -> tuple[str, float] | None:
        for name in WARMUP_FAULTS:
            if name in self.params:
                return name, min(max(self.params[name]["at"], 0.0), 1.0)
        return None

    def request_fault(self, number: int) -> str | None:
        """The fault the `number`-th (1-based) completion request meets, if any."""
        for name in REQUEST_FAULTS:
            if name in self.params:
                every = max(1, int(self.params[name]["every"]))
                if number % every == 0:
                    return name
        return None

    def load_factor(self) -> float:
        return self.params["slow-start"]["factor"] if "slow-start" in self.params else 1.0
