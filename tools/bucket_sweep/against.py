"""The differential sweep against a local checkout of new upstream code: what changed since a profile.

Every stored row of a profile (tests/data/sweep/<profile>.json: random, edge and named rows) is run
through the checkout's bucketing code with that profile's runner steps (or another profile's, with
--steps), and compared with the outcome stored for the profile's own commit. Prints how many rows are
unchanged, and for the changed ones what changed and whether the engine's profile already gives the
new outcome. Exit status 0 when nothing changed, 1 otherwise (docs/new-release.md walks through it).

    python -m tools.bucket_sweep.against /path/to/vllm-gaudi --profile gaudi-0.26.0 --python /tmp/sweepenv/bin/python
    python -m tools.bucket_sweep.against /path/to/vllm-hpu-extension --profile fork-main --steps fork-1.23
    python -m tools.bucket_sweep.against CHECKOUT --profile gaudi-0.26.0 --write /tmp/gaudi-0.27.0.json

The checkout is a source tree whose top holds `vllm_gaudi/` or `vllm_hpu_extension/` (a git clone or
`git archive` output); for fork 1.17/1.18 a vllm-fork tree with vllm/worker/habana_model_runner.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tuner.buckets.owncode import FAMILY_MODULES, UpstreamWorker

from .generate import OUT_DIR, REPO_ROOT, answer_row
from .profiles import PROFILES

_OUTCOME = ("error", "bucketing", "unified", "strategy", "prompt", "decode")


def _tree(checkout: Path, family: str, scratch: Path) -> Path:
    """The folder the worker imports from: the checkout itself, or (fork 1.17/1.18) one holding the runner."""
    if family == "fork_runner":
        runner = checkout / "vllm" / "worker" / "habana_model_runner.py"
        if not runner.is_file():
            raise SystemExit(f"{checkout}: no vllm/worker/habana_model_runner.py (fork 1.17/1.18 keep their "
                             "bucketing there)")
        shutil.copy(runner, scratch / runner.name)
        return scratch
    package = FAMILY_MODULES[family]
    if not (checkout / package).is_dir():
        raise SystemExit(f"{checkout}: no {package}/ at its top; give the root of a {package} source tree")
    return checkout


def _git(checkout: Path) -> dict[str, str]:
    def run(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {"commit": run("rev-parse", "HEAD"), "ref": run("describe", "--tags", "--always"),
            "repo": run("remote", "get-url", "origin") or str(checkout)}


def _outcome(row: dict) -> dict:
    return {k: row[k] for k in _OUTCOME if k in row}


def _said(row: dict) -> str:
    if "error" in row:
        return f"raises {row['error'][:100]}"
    return f"{row['prompt']['count']} prompt / {row['decode']['count']} decode buckets"


def _what_changed(old: dict, new: dict) -> str:
    if ("error" in old) != ("error" in new) or old.get("error") != new.get("error"):
        return f"{_said(old)} -> {_said(new)}"
    parts = []
    for key in ("strategy", "bucketing"):
        if old.get(key) != new.get(key):
            parts.append(f"{key} {old.get(key)} -> {new.get(key)}")
    for phase in ("prompt", "decode", "unified"):
        a, b = old.get(phase), new.get(phase)
        if a != b:
            counts = f"{a['count'] if a else 0} -> {b['count'] if b else 0} buckets"
            parts.append(f"{phase} {counts}" + (" (same count, other buckets)" if a and b and
                                                  a["count"] == b["count"] else ""))
    return "; ".join(parts)


def compare(checkout: Path, profile: str, steps: str, python: str, data_dir: Path, show: int,
            write: Path | None) -> int:
    sys.path.insert(0, str(REPO_ROOT))
    from tests.buckets.sweep_replay import replay_row  # the test's own comparison

    family, _, release, engine, _ = PROFILES[steps]
    if family != PROFILES[profile][0]:
        raise SystemExit(f"--steps {steps} drives another family ({family}) than {profile} "
                         f"({PROFILES[profile][0]})")
    stored = json.loads((data_dir / f"{profile}.json").read_text())
    git = _git(checkout)
    print(f"{checkout} ({git['ref'] or 'not a git checkout'}{', ' + git['commit'][:12] if git['commit'] else ''}) "
          f"against {profile} ({stored['upstream']['ref']}, {stored['upstream']['commit'][:12]}), runner steps of "
          f"{steps}: {len(stored['rows'])} rows")
    worker = UpstreamWorker(python)
    changed, new_rows, lost = [], [], 0
    try:
        with tempfile.TemporaryDirectory() as scratch:
            tree = _tree(checkout, family, Path(scratch))
            for i, row in enumerate(stored["rows"]):
                req = {"family": family, "tree": str(tree), "release": release, "inputs": row["inputs"]}
                new = answer_row(worker.ask(req), row["inputs"], row["generated_for"])
                if new is None:  # no answer within the time limit, or the worker died
                    lost += 1
                    continue
                new.update({k: row[k] for k in ("edge", "name") if k in row})
                new_rows.append(new)
                if _outcome(new) != _outcome(row):
                    changed.append((i, row, new))
    finally:
        worker.close()
    engine_ok = [i for i, _, new in changed if replay_row(profile, new) is None]
    print(f"  unchanged: {len(stored['rows']) - len(changed) - lost}")
    print(f"  changed:   {len(changed)} (the engine's {profile} already gives the new outcome on "
          f"{len(engine_ok)})" + (f"; {lost} without an answer" if lost else ""))
    for i, old, new in changed[:show]:
        tag = f" [{old['name']}]" if "name" in old else " [edge]" if old.get("edge") else ""
        engine_says = "engine agrees" if i in engine_ok else "engine differs"
        print(f"  row {i}{tag}: {_what_changed(old, new)} ({engine_says})\n    inputs={json.dumps(old['inputs'])}")
    if write is not None:
        out = {**{k: v for k, v in stored.items() if k != "rows"},
               "profile": write.stem, "upstream": {**git, "path": FAMILY_MODULES[family]}, "engine": engine,
               "skipped_too_large": stored.get("skipped_too_large", 0) + lost, "rows": new_rows}
        write.write_text(json.dumps(out, separators=(",", ":")) + "\n")
        print(f"  rows written to {write} (profile {write.stem})")
    return 1 if changed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkout", type=Path, help="root of the upstream source tree to run")
    p.add_argument("--profile", required=True, choices=sorted(PROFILES), help="the stored rows to compare with")
    p.add_argument("--steps", choices=sorted(PROFILES),
                   help="run another profile's runner steps (default: --profile's)")
    p.add_argument("--python", default=sys.executable, help="interpreter with numpy and packaging (upstream's imports)")
    p.add_argument("--data", type=Path, default=OUT_DIR, help="folder of <profile>.json (default: the test data)")
    p.add_argument("--show", type=int, default=10, help="changed rows to print")
    p.add_argument("--write", type=Path, help="write the checkout's rows as a sweep file (its stem names the profile)")
    args = p.parse_args(argv)
    if not args.checkout.is_dir():
        raise SystemExit(f"{args.checkout}: not a folder")
    return compare(args.checkout.resolve(), args.profile, args.steps or args.profile, args.python, args.data,
                   args.show, args.write)


if __name__ == "__main__":
    sys.exit(main())
