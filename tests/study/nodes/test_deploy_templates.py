"""deploy/: every template's tuner command line parses with our own CLI, the Kubernetes YAML is
well-formed and asks for what one Gaudi node needs, and no password is ever on a command line."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuner.cli import build_parser
from tuner.space.schema import SearchSpace

from ...conftest import ROOT

K8S = ROOT / "deploy" / "kubernetes"
SBATCH = ROOT / "deploy" / "slurm" / "tune.sbatch"
SECRETISH = re.compile(r"://[^/@\s]+:[^/@\s]+@|PASSWORD=|password", re.IGNORECASE)


def docs(path: Path) -> list[dict]:
    out = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for d in out:
        assert {"apiVersion", "kind", "metadata"} <= set(d), (path.name, d.keys())
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", d["metadata"]["name"]), d["metadata"]["name"]
    return out


def all_docs() -> list[dict]:
    return [d for path in sorted(K8S.glob("*.yaml")) for d in docs(path)]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args ($$ escapes; unknown names stay as written)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def test_every_kubernetes_template_is_valid_yaml_of_known_kinds():
    kinds = {d["kind"] for d in all_docs()}
    assert {"Job", "ConfigMap", "PersistentVolumeClaim", "Service", "StatefulSet"} <= kinds
    for d in all_docs():
        if d["kind"] in ("Job", "StatefulSet"):
            selector = d["spec"].get("selector", {}).get("matchLabels", {})
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items()
            for c in d["spec"]["template"]["spec"]["containers"]:
                assert c["name"] and c["image"]
                for e in c.get("env", []):
                    assert set(e) in ({"name", "value"}, {"name", "valueFrom"}), e
                    if "value" in e:
                        assert isinstance(e["value"], str), e  # Kubernetes wants strings
                        assert not SECRETISH.search(f"{e['name']}={e['value']}"), e


def test_the_job_runs_one_tuner_per_gaudi_node_with_a_command_line_our_cli_accepts(tmp_path):
    by_kind = {}
    for d in all_docs():
        by_kind.setdefault(d["kind"], []).append(d)
    (job,) = by_kind["Job"]
    config = {c["metadata"]["name"]: c["data"] for c in by_kind["ConfigMap"]}
    spec = job["spec"]
    assert spec["parallelism"] == spec["completions"] >= 2
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (c,) = pod["containers"]
    cards = c["resources"]["limits"]["habana.ai/gaudi"]
    assert c["resources"]["requests"]["habana.ai/gaudi"] == cards  # extended resources: equal

    env, secret_vars = {}, set()
    for e in c["env"]:
        ref = e.get("valueFrom", {})
        if "configMapKeyRef" in ref:
            env[e["name"]] = config[ref["configMapKeyRef"]["name"]][ref["configMapKeyRef"]["key"]]
        elif "secretKeyRef" in ref:
            secret_vars.add(e["name"])
        else:
            env[e["name"]] = e["value"]
    assert {"BUCKET_TUNER_STORAGE", "PGPASSWORD"} <= secret_vars  # the study's URL and password
    raw = c.get("command", []) + c.get("args", [])
    assert not any(f"$({name})" in arg for arg in raw for name in secret_vars), "a secret would be in argv"
    argv = [expand(str(a), env) for a in raw]
    assert not any("$(" in a for a in argv), argv
    assert argv[:2] == ["bucket-tuner", "tune"]
    args = build_parser().parse_args(argv[1:])
    assert args.storage is None  # from BUCKET_TUNER_STORAGE, never argv
    assert args.backend == "vllm" and args.study == config["bucket-tuner-study"]["STUDY"]
    assert args.heartbeat_grace >= 60 and args.timeout and args.n_trials >= 1
    slots = [g.split(",") for g in args.devices.split(";")]
    assert sum(len(g) for g in slots) == cards and len({d for g in slots for d in g}) == cards
    assert f"--tensor-parallel-size {len(slots[0])}" in args.server_args
    # The space comes from the ConfigMap, mounted where --space points, and is a valid space.
    space = Path(args.space)  # --space is kept as written (a path or a name)
    mount = next(m for m in c["volumeMounts"] if space.as_posix().startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    key = volume["configMap"]["items"][0]["key"]
    assert space.name == volume["configMap"]["items"][0]["path"]
    space_file = tmp_path / "space.yaml"
    space_file.write_text(config[volume["configMap"]["name"]][key])
    space = SearchSpace.load(space_file)
    assert space.name == args.study and space.release
    assert not SECRETISH.search(" ".join(argv))


def test_postgres_template_takes_its_password_from_the_tuners_secret():
    (sts,) = [d for d in all_docs() if d["kind"] == "StatefulSet"]
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    pw = next(e for e in c["env"] if e["name"] == "POSTGRES_PASSWORD")
    assert pw["valueFrom"]["secretKeyRef"] == {"name": "bucket-tuner-db", "key": "PGPASSWORD"}
    (svc,) = [d for d in all_docs() if d["kind"] == "Service"]
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()


def run_sbatch(tmp_path: Path) -> dict:
    """Run the batch script itself with a stand-in `srun` that records what it was asked to run."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    srun = bindir / "srun"
    out = str(tmp_path / "srun.json")
    srun.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"json.dump({{'argv': sys.argv[1:], 'env': sorted(os.environ)}}, open({out!r}, 'w'))\n")
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "SLURM_JOB_ID": "42"}
    run = subprocess.run(["bash", str(SBATCH)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads((tmp_path / "srun.json").read_text())


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs bash")
def test_the_slurm_script_runs_one_tuner_per_node_with_a_command_line_our_cli_accepts(tmp_path):
    seen = run_sbatch(tmp_path)
    argv = seen["argv"]
    srun_opts = argv[:argv.index("bucket-tuner")]
    assert "--kill-on-bad-exit=0" in srun_opts and "--ntasks-per-node=1" in srun_opts
    args = build_parser().parse_args(argv[argv.index("bucket-tuner") + 1:])
    assert args.command == "tune" and args.storage is None and args.backend == "vllm"
    assert (ROOT / args.space).exists() and args.heartbeat_grace >= 60
    assert args.server_args == "--tensor-parallel-size 2"
    assert len(args.devices.split(";")) == 4
    assert {"BUCKET_TUNER_STORAGE", "PGPASSFILE"} <= set(seen["env"]) and "PGPASSWORD" not in seen["env"]
    assert not SECRETISH.search(" ".join(argv))
    # The #SBATCH header: one task per node, the whole node.
    header = [line for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --ntasks-per-node=1" in header and "#SBATCH --exclusive" in header


# ------------------------------------------------------------------------------------- stopping
GRACE_S = 30  # Slurm's default KillWait and the kubelet's default grace: SIGTERM, then SIGKILL this much later


def slurm_signal(script: Path) -> tuple[str | None, signal.Signals, int]:
    """(target "B"/"R"/None, signal, seconds before the time limit) of the script's #SBATCH --signal,
    read the way sbatch reads `--signal=[{R|B}:]<sig_num>[@sig_time]` (a name or number; 60 s by default)."""
    for line in script.read_text().splitlines():
        m = re.match(r"#SBATCH\s+--signal=(?:([BR]):)?(\w+)(?:@(\d+))?\s*$", line)
        if m:
            name = m.group(2)
            sig = signal.Signals(int(name)) if name.isdigit() else signal.Signals["SIG" + name.removeprefix("SIG")]
            return m.group(1), sig, int(m.group(3) or 60)
    raise AssertionError(f"{script} has no #SBATCH --signal line: the time limit would SIGKILL trials in flight")


@pytest.mark.parametrize("line,expected", [
    ("#SBATCH --signal=TERM@120", (None, signal.SIGTERM, 120)),
    ("#SBATCH --signal=B:TERM@120", ("B", signal.SIGTERM, 120)),
    ("#SBATCH --signal=SIGHUP", (None, signal.SIGHUP, 60)),
    ("#SBATCH --signal=R:15@90", ("R", signal.SIGTERM, 90)),
])
def test_a_signal_line_is_read_as_slurm_reads_it(tmp_path, line, expected):
    script = tmp_path / "s.sbatch"
    script.write_text(f"#!/bin/bash\n{line}\n")
    assert slurm_signal(script) == expected


def slurm_seconds(value: str) -> int:
    """sbatch --time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    days, dash, rest = value.partition("-") if "-" in value else ("0", "", value)
    parts = [int(p) for p in rest.split(":")]
    if dash:
        h, m, s = (parts + [0, 0])[:3]
    else:
        h, m, s = {1: (0, parts[0], 0), 2: (0, *parts), 3: tuple(parts)}[len(parts)]
    return ((int(days) * 24 + h) * 60 + m) * 60 + s


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs bash")
def test_the_slurm_script_has_the_tuners_stop_cleanly_before_the_time_limit(tmp_path):
    from tuner.study.interrupt import SIGNALS

    target, sig, lead_s = slurm_signal(SBATCH)
    # The tuners run as the tasks of an srun step: "B:" would signal only the batch shell, which
    # passes nothing on to the step, and at the limit the tuners would be SIGKILLed mid-trial.
    assert target is None, "--signal=B:... reaches only the batch shell, not the tuners"
    assert sig in SIGNALS, f"the tuner does not stop cleanly on {sig.name}"  # tests/study/test_signals.py
    assert lead_s >= 2 * GRACE_S, f"{lead_s} s before the limit: too little for a clean stop"
    header = "\n".join(line for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH"))
    limit_s = slurm_seconds(re.search(r"--time=(\S+)", header).group(1))
    argv = run_sbatch(tmp_path)["argv"]
    args = build_parser().parse_args(argv[argv.index("bucket-tuner") + 1:])
    # The study's own --timeout ends it before the signal; the signal stops a trial still running then.
    assert args.timeout + lead_s < limit_s, (args.timeout, lead_s, limit_s)


def test_the_job_gives_the_tuner_its_grace_period():
    (job,) = [d for d in all_docs() if d["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    # The container's command is the tuner itself: PID 1, which handles SIGTERM (test_signals.py covers it).
    assert pod["containers"][0]["command"][:2] == ["bucket-tuner", "tune"]
    assert pod["terminationGracePeriodSeconds"] >= GRACE_S
