"""A study as optuna-dashboard shows it, written while the night runs.

    trial_figures  a trial's key figures as plain numbers (Optuna user attributes): the dashboard sorts its
                   trial table and plots its history, slice and Pareto views by numeric attributes only,
                   and shows nested ones as JSON text cut at 1,024 characters
    trial_story    the one line a trial's result reads as (the tune line and the dashboard note share it)
    TrialDashboard the trial's note (optuna_dashboard.save_note) and artifacts (Optuna's artifact store in
                   <study>/artifacts: the env file, the `vllm serve --config` file, the server log)

optuna-dashboard is an optional extra (pip install 'bucket-tuner[dashboard]'): without it, trials still
carry their figures, but no note or artifact is written, and the study says so once. Watch the night with
`optuna-dashboard sqlite:///results/<study>/study.db --artifact-dir results/<study>/artifacts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from ..serve.redact import redact_argv
from ..serve.vllmconfig import config_text, without_secrets
from ..vocabulary.errors.disk import DiskError, write_text

if TYPE_CHECKING:
    from ..serve.backends import Backend
    from ..space.schema import TrialSettings
    from ..trial.run import TrialResult
    from .options import Constraints, Objectives

ARTIFACT_DIR = "artifacts"  # inside the study's folder: optuna-dashboard --artifact-dir
# The load test's figures a trial carries as numbers (vllm bench serve's names), when it measured them.
THROUGHPUTS = ("output_throughput", "request_throughput")
LATENCIES = tuple(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("median", "p99"))
COST_PREFIX = "cost_"  # hook: a numeric result.metrics["cost_..."] (the cost figures) is carried as well
MISSING = ("optuna-dashboard is not installed: trials carry their figures as numbers, but no note or artifact "
           "(pip install 'bucket-tuner[dashboard]' before the next run to have them)")


def _number(value) -> float | int | None:
    """A finite plain number (bool is not one: the dashboard would not sort it), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def trial_figures(result: TrialResult, objectives: Objectives) -> dict[str, float | int]:
    """The trial's key figures, each a plain number; a figure the trial did not produce is left out (one
    trial with a non-number would make the dashboard stop sorting that column for every trial)."""
    obs, pred, metrics = result.observed, result.predicted, result.metrics if result.ok else {}
    figures: dict = {k: metrics.get(k) for k in (*THROUGHPUTS, *LATENCIES, objectives.latency_key)}
    figures["failed_requests"] = result.metrics.get("failed")
    figures["warmup_s"] = result.warmup_s if result.warmup_measured else None
    figures["predicted_warmup_s"] = pred.get("warmup_s")
    figures["kv_blocks"] = obs.get("kv_blocks")
    for phase in ("prompt", "decode"):  # the release builds them from the settings: predicted until booted
        figures[f"{phase}_buckets"] = obs.get(f"{phase}_buckets", pred.get(f"{phase}_buckets"))
    if result.booted:
        figures["recompiles"] = sum(obs.get(k) or 0 for k in ("not_warmed_up", "buckets_not_prepared",
                                                                  "compile_steps_under_load"))
        figures["preemptions"] = obs.get("preemptions")
    figures.update({k: v for k, v in result.metrics.items() if k.startswith(COST_PREFIX)})
    return {k: n for k, v in figures.items() if (n := _number(v)) is not None}


@dataclass(frozen=True)
class Story:
    """A trial's result in one line: `tone` (ok, miss or failed) colours `head` in the terminal."""

    tone: str
    head: str
    rest: str

    @property
    def text(self) -> str:
        return self.head + self.rest


def trial_story(result: TrialResult, objectives: Objectives, constraints: Constraints) -> Story:
    """A measured trial outside a limit reads as a miss, with the figures; a failure with its reason."""
    summary = (f"thr {result.metrics.get('output_throughput', 0):.0f} tok/s, "
               f"{objectives.latency_key} {result.metrics.get(objectives.latency_key, float('nan')):.1f}, "
               if result.ok else "")
    if result.ok and result.observed.get("load_sweep_selected"):  # which point of the sweep these are
        summary = f"at {result.observed['load_sweep_selected']}: {summary}"
    warm = result.warmup_s
    warm_text = ("no warmup" if warm is None else f"warmup {warm:.0f} s" if result.warmup_measured
                 else f"predicted warmup {warm:.0f} s")
    misses = constraints.misses(result)
    if misses:
        return Story("miss", "; ".join(misses), f" ({summary}{warm_text})")
    if result.ok:
        return Story("ok", "ok", f" {summary}{warm_text}")
    return Story("failed", str(result.status), f" {warm_text} - {result.reason[:160]}")


class TrialDashboard:
    """Notes and artifacts of a study's trials, when optuna-dashboard is installed (`missing` says when not)."""

    def __init__(self, study_dir: Path, backend: Backend):
        self.backend = backend
        self.store_dir = study_dir / ARTIFACT_DIR
        try:
            from optuna_dashboard import save_note
        except ImportError:
            self.save_note, self.missing = None, MISSING
        else:
            self.save_note, self.missing = save_note, None
        self._store = None
        self.failed: str | None = None  # an artifact the disk refused: said once, the study goes on

    @property
    def store(self):
        if self._store is None:
            from optuna.artifacts import FileSystemArtifactStore

            self.store_dir.mkdir(parents=True, exist_ok=True)
            self._store = FileSystemArtifactStore(str(self.store_dir))
        return self._store

    def attach(self, trial: optuna.Trial, trial_dir: Path, result: TrialResult, settings: TrialSettings) -> list[str]:
        """Upload the trial's env file, serve config and server log (before it is told: Optuna refuses a
        finished trial's attributes); the names uploaded. A reused trial's server log is its source's."""
        if self.save_note is None or self.failed:
            return []
        uploaded = []
        try:
            files = [trial_dir / "trial.env", self._serve_config(trial_dir, settings)]
            log = result.artifacts.get("server_log")
            if log and result.booted:
                files.append(Path(log))
            for path in files:
                if path is not None and path.is_file():
                    optuna.artifacts.upload_artifact(artifact_store=self.store, file_path=str(path),
                                                     study_or_trial=trial, mimetype="text/plain")
                    uploaded.append(path.name)
        except (OSError, DiskError) as exc:  # a full disk: the trial is still told; no more artifacts this run
            self.failed = f"optuna-dashboard artifacts stopped at trial {trial.number}: {exc}"
        return uploaded

    def _serve_config(self, trial_dir: Path, settings: TrialSettings) -> Path | None:
        """trial.vllm.yaml: the trial's server flags as `vllm serve --config` reads them; None when a flag
        carries a secret inside its value (a URL password) that the file could only show redacted."""
        head, tail = self.backend.command(settings.server, resolve=False)
        try:
            kept, dropped = without_secrets(redact_argv(tail))
            text = config_text(f"trial {trial_dir.name}: the server's flags", head, kept, dropped, "trial.env")
        except ValueError:
            return None
        path = trial_dir / "trial.vllm.yaml"
        write_text(path, text)
        return path

    def note(self, trial: optuna.Trial, result: TrialResult, objectives: Objectives,
             constraints: Constraints) -> None:
        """The trial's one-line story as its note (a study system attribute: written after the tell too)."""
        if self.save_note is None:
            return
        story = trial_story(result, objectives, constraints)
        self.save_note(trial, f"**{story.head}** ({result.settled}){story.rest}")
