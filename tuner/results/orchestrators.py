"""Beside an exported env file, the pick as the orchestrators start it, with start-up limits sized from
its warm-up band (tuner/results/startlimits.py): a Kubernetes Deployment (startupProbe, progressDeadline)
and a Slurm serving job (time limit, a bounded wait for readiness). Every limit carries its evidence.

The Deployment starts the same command line as serve.sh (tuner/results/deploy.py server_command); the
variables come from a ConfigMap made of the env file (`kubectl create configmap --from-env-file` skips its
comment lines). The Slurm job runs serve.sh from the folder it was submitted in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import optuna
import yaml

from ..trial.cost import CostRate, cards, cost_lines
from ..vocabulary.errors.disk import write_text
from ..vocabulary.record import TrialRecord, measured_trial
from .startlimits import CACHED, COLD, MARGIN, PERIOD_S, SCHEDULING_S, StartLimit, primary, trial_limits

PORT = 8000
SERVE_WINDOW_S = 24 * 3600.0  # a serving job's time beyond its start-up (export --serve-window)
IMAGE = "REPLACE-WITH-YOUR-VLLM-GAUDI-IMAGE"


@dataclass(frozen=True)
class DeployOptions:
    """export's --probe-margin, --probe-period, --serve-window and --cost-per-hour (None: the study's price)."""

    margin: float = MARGIN
    period_s: int = PERIOD_S
    serve_window_s: float = SERVE_WINDOW_S
    cost: CostRate | None = None

    def rate(self, study: optuna.Study) -> CostRate | None:
        return self.cost or CostRate.from_json(study.user_attrs.get("cost"))


def deploy_comments(study: optuna.Study, trial: optuna.trial.FrozenTrial, opts: DeployOptions) -> list[str]:
    """The env file's lines on deploying the trial: its start-up limits and timeouts, and its cost."""
    out = limit_lines(trial_limits(study, trial, opts.margin, opts.period_s))
    rate = opts.rate(study)
    if rate is not None:
        out += cost_lines(rate, TrialRecord.from_frozen(measured_trial(study, trial)))
    return out


def k8s_beside(env_path: Path) -> Path:
    """best.env -> best.k8s.yaml"""
    return env_path.with_name(f"{env_path.stem}.k8s.yaml")


def sbatch_beside(env_path: Path) -> Path:
    """best.env -> best.sbatch"""
    return env_path.with_name(f"{env_path.stem}.sbatch")


def dns_name(text: str) -> str:
    """A Kubernetes object name (RFC 1123 label) from a study name."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:53].strip("-")
    return f"vllm-{name or 'pick'}"


def slurm_time(seconds: float) -> str:
    """Slurm's --time: D-HH:MM:SS, whole minutes rounded up."""
    minutes = -(-int(seconds) // 60)
    days, rest = divmod(minutes, 24 * 60)
    return (f"{days}-" if days else "") + f"{rest // 60:02d}:{rest % 60:02d}:00"


def limit_lines(limits: dict[str, StartLimit]) -> list[str]:
    """The env file's comment lines: the start-up limit of each start, and the orchestrators' timeouts."""
    lim = primary(limits)
    if lim is None:
        return ["start-up limits: no warm-up figure for this trial (measured or predicted): size probes by hand"]
    out = [f"start-up limit, {x.evidence()}" for x in (limits.get(COLD), limits.get(CACHED)) if x is not None]
    out.append(f"Kubernetes startupProbe: failureThreshold {lim.failure_threshold} x periodSeconds {lim.period_s} = "
               f"{lim.probe_s:,} s ({lim.mode} start); progressDeadlineSeconds and kubectl rollout status / helm "
               f"--wait --timeout={lim.rollout_timeout_s}s (+{SCHEDULING_S} s to schedule and start the container, "
               "image already pulled)")
    if lim.mode == COLD and CACHED in limits:
        c = limits[CACHED]
        out.append(f"with a prepared recipe cache the start needs {c.limit_s:,} s (failureThreshold "
                   f"{c.failure_threshold}); the probe stays sized for the cold start, which a cache that misses "
                   "or is lost with the pod gives")
    out.append(f"Slurm: wait for readiness {lim.limit_s:,} s; --time = the serving window + {lim.limit_s:,} s")
    return out


def k8s_text(title: str, name: str, command: list[str], n_cards: int, env_name: str,
             limits: dict[str, StartLimit]) -> str:
    lim = primary(limits)
    lines = [f"# {title}", f"# kubectl create configmap {name}-env --from-env-file={env_name}",
             f"# kubectl apply -f THIS_FILE && kubectl rollout status deployment/{name} --timeout="
             f"{lim.rollout_timeout_s if lim else 900}s", "# Replace the image; the command is the trial's own."]
    lines += [f"# {x}" for x in limit_lines(limits)]
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": lim.period_s if lim else 10,
             "timeoutSeconds": 5, "failureThreshold": lim.failure_threshold if lim else 90}
    container = {
        "name": "vllm", "image": IMAGE, "command": [*command, "--host", "0.0.0.0", "--port", str(PORT)],
        "envFrom": [{"configMapRef": {"name": f"{name}-env"}}],
        "ports": [{"name": "http", "containerPort": PORT}],
        "startupProbe": probe,
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 30, "failureThreshold": 3},
        "resources": {"limits": {"habana.ai/gaudi": n_cards}, "requests": {"habana.ai/gaudi": n_cards}},
    }
    doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
           "spec": {"replicas": 1, "progressDeadlineSeconds": lim.rollout_timeout_s if lim else 900,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}}}
    return "\n".join(lines) + "\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def sbatch_text(title: str, name: str, script_name: str, limits: dict[str, StartLimit],
                serve_window_s: float = SERVE_WINDOW_S) -> str:
    lim = primary(limits)
    wait_s = lim.limit_s if lim else 3600
    lines = ["#!/bin/bash", f"# {title}", f"# sbatch THIS_FILE from the folder of {script_name}; add your site's "
             "partition and --gres for the server's cards", *[f"# {x}" for x in limit_lines(limits)],
             f"# --time: {serve_window_s / 3600:g} h of serving + the start-up limit of {wait_s:,} s",
             f"#SBATCH --job-name={name}", "#SBATCH --nodes=1", "#SBATCH --exclusive",
             f"#SBATCH --time={slurm_time(serve_window_s + wait_s)}", "#SBATCH --signal=TERM@120",
             "set -euo pipefail", f'PORT="${{PORT:-{PORT}}}"',
             f'"${{SLURM_SUBMIT_DIR:-.}}/{script_name}" --host 0.0.0.0 --port "$PORT" &', "server=$!",
             f"deadline=$((SECONDS + {wait_s}))  # the start-up limit above",
             'until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; do',
             '    if ! kill -0 "$server" 2>/dev/null; then echo "the server exited before it was ready" >&2; '
             'wait "$server"; exit 1; fi',
             '    if [ "$SECONDS" -ge "$deadline" ]; then',
             f'        echo "not ready after {wait_s} s, past the predicted band: see the server log" >&2',
             '        kill -TERM "$server"; wait "$server" || true; exit 1', "    fi", "    sleep 10", "done",
             'echo "ready after $SECONDS s on port $PORT"', 'wait "$server"']
    return "\n".join(lines) + "\n"


def write_orchestrators(env_path: Path, study: optuna.Study, trial: optuna.trial.FrozenTrial, pick: str,
                        opts: DeployOptions) -> list[Path]:
    """Write <stem>.k8s.yaml and <stem>.sbatch beside the env file (serve.sh beside it too); their paths."""
    from .deploy import script_beside, server_command

    limits = trial_limits(study, trial, opts.margin, opts.period_s)

    head, tail, _ = server_command(study, trial)
    rec = TrialRecord.from_frozen(measured_trial(study, trial))
    title = f"bucket-tuner export: study {study.study_name}, trial {trial.number}, pick {pick}"
    name = dns_name(study.study_name)
    k8s, job = k8s_beside(env_path), sbatch_beside(env_path)
    write_text(k8s, k8s_text(title, name, head + tail, cards(rec.argv, rec.server), env_path.name, limits))
    write_text(job, sbatch_text(title, name, script_beside(env_path).name, limits, opts.serve_window_s))
    return [k8s, job]
