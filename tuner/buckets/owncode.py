"""The release's own bucketing code as a check on the engine, where the node has it.

vllm-gaudi and vllm-hpu-extension are plain Python, so the interpreter that runs `vllm serve` can run
the release's bucketing modules on any configuration (upstream_steps.py, with the runner's steps; no
device is touched). `OwnCodeCheck` does so once per distinct configuration, before the engine's lists
for it are used, and compares: a difference is reported with both lists, and `build_checked` (what the
performance model's prediction builds buckets with) then returns the release's own lists for that
configuration; the model's cost rules stay ours. Fork 1.17/1.18 keep their bucketing inside the model
runner: it is lifted out of the installed runner file the same way as in the maintainers' sweep.

`UpstreamWorker` is the JSON-lines client of upstream_steps.py; tools/bucket_sweep uses it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .base import BucketConfigError, BucketPlan, ServerConfig
from .registry import get_profile

WORKER = Path(__file__).with_name("upstream_steps.py")
# The study database's credentials stay with the tuner (as for its servers: trial.server_environment).
_TUNER_ONLY_ENV = ("PGPASSWORD", "PGPASSFILE", "BUCKET_TUNER_STORAGE")

# profile -> (the worker's family, the release tag that selects that release's runner steps)
RUNNER_STEPS = {
    "fork-1.17": ("fork_runner", ""), "fork-1.18": ("fork_runner", ""),
    "fork-1.19": ("ext_context", "1.19"), "fork-1.20": ("ext_context", "1.20"),
    "fork-1.21.0": ("ext_context", "1.21"), "fork-1.21.2": ("ext_context", "1.21"),
    "fork-1.22": ("manager", "1.22"), "fork-main": ("manager", "main"), "fork-1.23": ("manager", "1.23"),
    "gaudi-0.10.1": ("gaudi", "v0.10.1"), "gaudi-0.15.1": ("gaudi", "v0.15.1"), "gaudi-0.26.0": ("gaudi", "v0.26.0"),
    "gaudi-main": ("gaudi", "main"),
}
# The module each family imports (what must be importable on the node for the check to run).
FAMILY_MODULES = {"fork_runner": "vllm", "ext_context": "vllm_hpu_extension", "manager": "vllm_hpu_extension",
                  "gaudi": "vllm_gaudi"}
_STRATEGY_CLASSES = {
    "HPUExponentialBucketingContext": "exponential", "HPUBucketingContext": "linear",
    "ExponentialBucketingStrategy": "exponential", "LinearBucketingStrategy": "linear",
    "PaddingAwareBucketingStrategy": "padding_aware",
}
# Answers that say the harness failed, not the release: the check stops instead of refusing configurations.
_HARNESS_ERRORS = ("ModuleNotFoundError", "ImportError", "SyntaxError")
SHOWN = 40  # lists up to this long are printed whole in a difference; the file always holds both whole


class UpstreamWorker:
    """One upstream_steps.py process answering requests line by line (restarted after it dies)."""

    def __init__(self, python: str, hang_seconds: int = 30):
        self.python = python
        self.hang_seconds = hang_seconds
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()  # parallel slots predict from several threads

    def _start(self):
        env = {k: v for k, v in os.environ.items() if k not in _TUNER_ONLY_ENV}
        env["UPSTREAM_STEPS_HANG_SECONDS"] = str(self.hang_seconds)
        self.proc = subprocess.Popen([self.python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True, env=env)

    def ask(self, request: dict) -> dict:
        with self._lock:
            if self.proc is None:
                self._start()
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except (BrokenPipeError, OSError):
                line = ""
            if not line:
                self._stop()
                return {"error": "worker died"}
            return json.loads(line)

    def close(self):
        with self._lock:
            self._stop()

    def _stop(self):
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def request_inputs(cfg: ServerConfig, engine: str = "v0") -> dict[str, Any]:
    """A ServerConfig as upstream_steps.py takes it (the sweep rows' `inputs`). Prefix caching left to
    the engine's default (None) is what that engine does: off on v0 (the fork), on on v1 (vllm-gaudi)."""
    prefix = cfg.prefix_caching if cfg.prefix_caching is not None else engine == "v1"
    out: dict[str, Any] = {
        "block_size": cfg.block_size, "max_num_seqs": cfg.max_num_seqs, "max_model_len": cfg.max_model_len,
        "max_num_batched_tokens": cfg.max_num_batched_tokens, "num_hpu_blocks": cfg.num_hpu_blocks,
        "prefix_caching": prefix, "max_num_prefill_seqs": cfg.max_num_prefill_seqs,
        "lora": cfg.lora, "env": dict(cfg.env),
    }
    for name, unset in (("num_speculative_tokens", 0), ("mamba_chunk_size", 0), ("pooling", False),
                        ("decode_block_size", None), ("skip_decode_block_clamp", False)):
        if getattr(cfg, name) != unset:
            out[name] = getattr(cfg, name)
    if not cfg.mamba_chunk_size_explicit:
        out["mamba_chunk_size_explicit"] = False
    return out


def _key(profile: str, cfg: ServerConfig) -> str:
    return json.dumps([profile, request_inputs(cfg, get_profile(profile).engine)], sort_keys=True, default=str)


@dataclass
class ReleaseLists:
    """What the release's own code made of one configuration."""

    prompt: list[tuple[int, ...]] = field(default_factory=list)
    decode: list[tuple[int, ...]] = field(default_factory=list)
    strategy: str | None = None
    error: str | None = None  # the exception upstream raised ("Type: text")


@dataclass
class Difference:
    """The engine and the release's code disagree on one configuration."""

    profile: str
    inputs: dict[str, Any]
    what: str  # one line: which phase, counts, or which side raised
    engine: dict[str, Any]  # {"prompt": [...], "decode": [...]} or {"error": text}
    release: dict[str, Any]

    def lines(self) -> list[str]:
        """The report: one line, then both lists (whole up to SHOWN buckets, else what only one side has)."""
        sizes = {k: self.inputs[k] for k in ("block_size", "max_num_seqs", "max_model_len",
                                               "max_num_batched_tokens", "num_hpu_blocks")}
        env = {k: v for k, v in self.inputs["env"].items() if "BUCKET" in k or k.startswith("VLLM_")}
        out = [f"release code check ({self.profile}): {self.what}; the study uses the release's lists for "
               f"{json.dumps(sizes)} env {json.dumps(env)}"]
        for phase in ("prompt", "decode"):
            a, b = self.engine.get(phase), self.release.get(phase)
            if a is None or b is None or a == b:
                continue
            if len(a) <= SHOWN and len(b) <= SHOWN:
                out += [f"  {phase} engine  ({len(a)}): {a}", f"  {phase} release ({len(b)}): {b}"]
            else:
                sa, sb = set(map(tuple, a)), set(map(tuple, b))
                out += [f"  {phase} engine ({len(a)}) only: {sorted(sa - sb)[:SHOWN]}",
                        f"  {phase} release ({len(b)}) only: {sorted(sb - sa)[:SHOWN]}"]
        for side, got in (("engine", self.engine), ("release", self.release)):
            if "error" in got:
                out.append(f"  {side} raised: {got['error']}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "inputs": self.inputs, "what": self.what, "engine": self.engine,
                "release": self.release}


class OwnCodeCheck:
    """The release's own lists for each distinct configuration, compared with the engine's."""

    def __init__(self, profile: str, python: str, out_file: Path | None = None,
                 worker: UpstreamWorker | None = None, say=None):
        self.profile = get_profile(profile).name
        if self.profile not in RUNNER_STEPS:
            raise BucketConfigError(f"no runner steps known for {self.profile}", "profile")
        self.family, self.release_tag = RUNNER_STEPS[self.profile]
        self.python = python
        self.worker = worker or UpstreamWorker(python)
        self.out_file = out_file
        self.say = say or (lambda line: None)
        self.checked = 0
        self.broken: str | None = None  # why the check stopped (the engine's lists stand from then on)
        self.differences: list[Difference] = []
        self._cache: dict[str, ReleaseLists] = {}
        self._lock = threading.Lock()

    @property
    def module(self) -> str:
        return FAMILY_MODULES[self.family]

    def available(self) -> str | None:
        """None when the release's module is importable by the node's interpreter, else why not."""
        probe = ("import importlib.util, sys; "
                 f"sys.exit(0 if importlib.util.find_spec({self.module!r}) else 3)")
        try:
            done = subprocess.run([self.python, "-c", probe], capture_output=True, text=True, timeout=60,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"cannot run {self.python}: {exc}"
        if done.returncode == 3:
            return f"{self.module} is not importable by {self.python}"
        if done.returncode != 0:
            return f"{self.python} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
        return None

    def release_lists(self, cfg: ServerConfig) -> ReleaseLists | None:
        """The release's code on `cfg` (run once per distinct configuration, then remembered); None when
        the check itself broke (the worker died, the module does not import): the engine's lists stand."""
        if self.broken:
            return None
        key = _key(self.profile, cfg)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        answer = self.worker.ask({"family": self.family, "tree": None, "release": self.release_tag,
                                  "inputs": request_inputs(cfg, get_profile(self.profile).engine)})
        error = answer.get("error", "")
        if error == "worker died" or error.startswith(_HARNESS_ERRORS):
            self.broken = error
            self.say(f"release code check: off from here on ({error}); the engine's lists stand")
            return None
        if "skip" in answer:  # upstream did not finish: the release would hang at start-up
            got = ReleaseLists(error=f"no answer within {self.worker.hang_seconds} s (the release hangs)")
        elif "error" in answer:
            got = ReleaseLists(error=answer["error"])
        else:
            strategy = answer.get("upstream_strategy", "")
            got = ReleaseLists(prompt=[tuple(b) for b in answer["prompt"]], decode=[tuple(b) for b in answer["decode"]],
                               strategy=_STRATEGY_CLASSES.get(strategy))
        with self._lock:
            self._cache[key] = got
        return got

    def compare(self, cfg: ServerConfig, plan: BucketPlan | None, refused: str | None) -> ReleaseLists | None:
        """Run the release's code on `cfg` (first time only), record and report a difference from the
        engine's `plan` (or its refusal), and return the release's lists."""
        key = _key(self.profile, cfg)
        with self._lock:
            seen = key in self._cache
        got = self.release_lists(cfg)
        if seen or got is None:
            return got
        with self._lock:
            self.checked += 1
        diff = _difference(self.profile, cfg, plan, refused, got)
        if diff is not None:
            with self._lock:
                self.differences.append(diff)
            for line in diff.lines():
                self.say(line)
            if self.out_file is not None:
                with open(self.out_file, "a") as f:
                    f.write(json.dumps(diff.to_json()) + "\n")
        return got

    def summary(self) -> dict[str, Any]:
        """What the study records (user attr "release_check")."""
        return {"profile": self.profile, "python": self.python, "module": self.module, "checked": self.checked,
                "broken": self.broken,
                "differences": [{"what": d.what, "inputs": d.inputs} for d in self.differences[:20]],
                "n_differences": len(self.differences),
                "file": str(self.out_file) if self.out_file else None}

    def close(self):
        self.worker.close()


def _difference(profile: str, cfg: ServerConfig, plan: BucketPlan | None, refused: str | None,
                got: ReleaseLists) -> Difference | None:
    inputs = request_inputs(cfg, get_profile(profile).engine)
    engine = {"error": refused} if plan is None else {"prompt": [list(b) for b in plan.prompt],
                                                      "decode": [list(b) for b in plan.decode]}
    release = {"error": got.error} if got.error else {"prompt": [list(b) for b in got.prompt],
                                                      "decode": [list(b) for b in got.decode]}
    if plan is None and got.error:
        return None  # both refuse (the texts may differ; the sweep compares them)
    if plan is None:
        return Difference(profile, inputs, f"the engine refused ({refused}) where the release builds "
                                           f"{len(got.prompt)} prompt / {len(got.decode)} decode buckets",
                          engine, release)
    if got.error:
        return Difference(profile, inputs, f"the release raises {got.error} where the engine builds "
                                           f"{len(plan.prompt)} prompt / {len(plan.decode)} decode buckets",
                          engine, release)
    phases = [p for p in ("prompt", "decode") if engine[p] != release[p]]
    if not phases:
        return None
    what = "; ".join(f"{p}: engine {len(engine[p])} buckets, release {len(release[p])}" for p in phases)
    return Difference(profile, inputs, what + (" (same buckets, another order)" if all(
        sorted(map(tuple, engine[p])) == sorted(map(tuple, release[p])) for p in phases) else ""), engine, release)


# ------------------------------------------------------------------------------------ use in a study

_ACTIVE: OwnCodeCheck | None = None


@contextlib.contextmanager
def active(check: OwnCodeCheck | None) -> Iterator[None]:
    """Within this block, build_checked consults `check` for its profile (None: the engine alone)."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, check
    try:
        yield
    finally:
        _ACTIVE = previous


def bucket_source() -> str:
    """Where build_checked takes its lists from now; part of a prediction's cache key."""
    return f"release:{_ACTIVE.profile}:{_ACTIVE.python}" if _ACTIVE is not None else "engine"


def build_checked(profile: str, cfg: ServerConfig) -> BucketPlan:
    """The engine's plan for `cfg`, with the release's own lists in place of the engine's where a check
    is active for this profile and they differ (a release that raises makes this raise its error)."""
    check = _ACTIVE
    if check is None or get_profile(profile).name != check.profile:
        return get_profile(profile).build(cfg)
    try:
        plan, refusal = get_profile(profile).build(cfg), None
    except BucketConfigError as exc:
        plan, refusal = None, exc
    refused = str(refusal) if refusal else None
    got = check.compare(cfg, plan, refused)
    if got is None or (got.error and refusal is not None):  # the engine alone (the check broke, or both refuse)
        if refusal is not None:
            raise refusal
        return plan
    if got.error:
        raise BucketConfigError(f"{got.error} (the release's own code; the engine would build buckets)")
    if plan is None:
        plan = BucketPlan(profile=check.profile, strategy=got.strategy or "linear", prompt=[], decode=[],
                          dims=get_profile(profile).dims)
        plan.warnings.append(f"the engine refused this configuration ({refused}); the release's own code builds it")
    if (plan.prompt, plan.decode) != (got.prompt, got.decode):
        plan = replace(plan, prompt=list(got.prompt), decode=list(got.decode),
                       warnings=[*plan.warnings, "bucket lists from the release's own code (they differ from the "
                                                 "engine's)"])
    return plan
