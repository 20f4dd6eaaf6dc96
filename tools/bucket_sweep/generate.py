"""Differential bucket sweep: random configurations run through each release's own bucketing code.

Maintainer tool (needs the upstream sources; not part of the test run). Usage, from the repo root:

    # 1. extract the upstream trees named in profiles.TREES from local git clones (or mirrors)
    python -m tools.bucket_sweep.generate extract --out /tmp/up \
        --git HabanaAI/vllm-fork=/path/to/vllm-fork.git --git HabanaAI/vllm-hpu-extension=... \
        --git vllm-project/vllm-gaudi=...
    # 2. an interpreter for the upstream code (numpy, packaging):
    python3 -m venv /tmp/sweepenv && /tmp/sweepenv/bin/pip install numpy packaging
    # 3. run the sweep (writes tests/data/sweep/<profile>.json) and compare the engine with it
    python -m tools.bucket_sweep.generate run --trees /tmp/up --python /tmp/sweepenv/bin/python --per-strategy 150
    python -m tools.bucket_sweep.generate check

The stored rows are what tests/buckets/test_sweep.py replays against the engine.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import subprocess
import sys
import tarfile
from pathlib import Path

from tuner.buckets.owncode import UpstreamWorker as Worker

from .configs import STRATEGY_ENVS, edge_row, named_rows, random_row
from .profiles import PROFILES, TREES

REPO_ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = REPO_ROOT / "tests" / "data" / "sweep"
FULL_LIST_MAX = 40  # lists up to this many buckets are stored whole
MAX_BUCKETS = 400_000  # rows whose upstream lists are larger are skipped (slow to replay)

_CLASS_STRATEGY = {
    "HPUExponentialBucketingContext": "exponential", "HPUBucketingContext": "linear",
    "ExponentialBucketingStrategy": "exponential", "LinearBucketingStrategy": "linear",
    "PaddingAwareBucketingStrategy": "padding_aware",
}


def compact_sha(buckets) -> str:
    return hashlib.sha256(json.dumps([list(b) for b in buckets], separators=(",", ":")).encode()).hexdigest()


def summarise(buckets: list) -> dict:
    out = {"count": len(buckets), "sha256": compact_sha(buckets)}
    if len(buckets) <= FULL_LIST_MAX:
        out["buckets"] = buckets
    return out


def answer_row(answer: dict, inputs: dict, generated_for: str) -> dict | None:
    """The stored row for one upstream answer; None when it is not kept (hang, crash, too large)."""
    if answer.get("error") == "worker died" or "skip" in answer:
        return None
    row = {"generated_for": generated_for, "inputs": inputs}
    if "error" in answer:
        row["error"] = answer["error"]
        return row
    if len(answer["prompt"]) + len(answer["decode"]) > MAX_BUCKETS:
        return None
    up = answer.get("upstream_strategy", "")
    if up == "off":  # no strategy was consulted
        row["bucketing"] = "off"
    elif up.startswith("unified:"):  # unified attention: no strategy was consulted
        row["unified"] = summarise(json.loads(up[len("unified:"):]))
    else:
        row["strategy"] = _CLASS_STRATEGY.get(up, "linear")  # fork <= 1.20: linear only
    row["prompt"] = summarise(answer["prompt"])
    row["decode"] = summarise(answer["decode"])
    return row


def run_profile(profile: str, trees: Path, worker: Worker, per_strategy: int, seed: int,
                per_edge: int = 0) -> dict:
    """`per_strategy` random rows per strategy, then `per_edge` edge rows (negative, zero and odd steps,
    pooling) from a random stream of their own (adding them leaves the random rows unchanged), then the
    named rows (configs.named_rows: the cases issues name, looked up by name in the tests)."""
    family, tree, release, engine, groups = PROFILES[profile]
    if not (trees / tree).is_dir():  # else every row would store the harness's FileNotFoundError
        raise SystemExit(f"{profile}: upstream tree {trees / tree} does not exist (run the extract command)")
    rows, skipped = [], 0
    for kind, make, count, rng in (("random", random_row, per_strategy, random.Random(f"{seed}:{profile}")),
                                   ("edge", edge_row, per_edge, random.Random(f"{seed}:{profile}:edge"))):
        for strategy in STRATEGY_ENVS[profile]:
            made = 0
            while made < count:
                inputs = make(rng, profile, strategy)
                req = {"family": family, "tree": str(trees / tree), "release": release, "inputs": inputs}
                row = answer_row(worker.ask(req), inputs, strategy)
                if row is None:
                    skipped += 1
                    continue
                if kind == "edge":
                    row["edge"] = True
                rows.append(row)
                made += 1
                if made % 50 == 0:
                    print(f"  {profile}/{strategy} ({kind}): {made} rows ({skipped} skipped)", file=sys.stderr,
                          flush=True)
    for name, strategy, inputs in named_rows(profile):
        req = {"family": family, "tree": str(trees / tree), "release": release, "inputs": inputs}
        row = answer_row(worker.ask(req), inputs, strategy)
        if row is None:
            raise SystemExit(f"{profile}: named row {name} got no answer from upstream")
        rows.append({"name": name, **row})
    repo, ref, commit, path = TREES[tree]
    return {"profile": profile, "upstream": {"repo": repo, "ref": ref, "commit": commit, "path": path},
            "engine": engine, "seed": seed, "skipped_too_large": skipped, "rows": rows}


def cmd_run(args):
    worker = Worker(args.python)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        for profile in args.profiles or PROFILES:
            data = run_profile(profile, Path(args.trees), worker, args.per_strategy, args.seed, args.per_edge)
            (out_dir / f"{profile}.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
            errors = sum("error" in r for r in data["rows"])
            print(f"{profile}: {len(data['rows'])} rows ({errors} upstream errors)", flush=True)
    finally:
        worker.close()


def cmd_extract(args):
    gits = dict(g.split("=", 1) for g in args.git)
    out = Path(args.out)
    for name, (repo, _ref, commit, path) in TREES.items():
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        blob = subprocess.run(["git", "-C", gits[repo], "archive", commit, path], check=True,
                              capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            if path.endswith(".py"):  # fork 1.17/1.18: the runner file alone
                member = tar.getmember(path)
                (target / Path(path).name).write_bytes(tar.extractfile(member).read())
            else:
                tar.extractall(target, filter="data")
        print(f"{name}: {repo}@{commit[:12]} -> {target}")


def cmd_check(args):
    sys.path.insert(0, str(REPO_ROOT))
    from tests.buckets.sweep_replay import replay_row  # the test's own comparison

    total_bad = 0
    for profile in args.profiles or PROFILES:
        data = json.loads((Path(args.data) / f"{profile}.json").read_text())
        bad = []
        for i, row in enumerate(data["rows"]):
            problem = replay_row(profile, row)
            if problem:
                bad.append((i, problem))
        total_bad += len(bad)
        print(f"{profile}: {len(data['rows']) - len(bad)}/{len(data['rows'])} agree")
        for i, problem in bad[: args.show]:
            print(f"   row {i}: {problem}\n      inputs={json.dumps(data['rows'][i]['inputs'])}")
    return 1 if total_bad else 0


_ROW_PROFILE = {"fork-1.17": "fork-1.17", "fork-1.18": "fork-1.18", "ext-4ff86cf": "fork-1.19",
                "ext-d4b0d38": "fork-1.20", "ext-2b4ba56": "fork-1.21.0", "ext-29bc7a4": "fork-1.21.2",
                "ext-8211e0b": "fork-1.22", "ext-7717587": "fork-main", "gaudi-v0.10.1": "gaudi-0.10.1",
                "gaudi-v0.15.1": "gaudi-0.15.1", "gaudi-v0.26.0": "gaudi-0.26.0", "gaudi-main": "gaudi-main"}


def cmd_vectors(args):
    """Check the harness itself: it must reproduce every row of tests/data/vectors/."""
    worker, bad, n = Worker(args.python, hang_seconds=900), 0, 0
    try:
        for path in sorted((REPO_ROOT / "tests" / "data" / "vectors").glob("*.json")):
            data = json.loads(path.read_text())
            base = data["inputs"]
            for name, row in data["results"].items():
                profile = _ROW_PROFILE[name.split("/")[0]]
                family, tree, release, engine, _ = PROFILES[profile]
                env = {**base.get("env", {}), **row["upstream"].get("strategy_env", {})}
                inputs = {k: base[k] for k in ("block_size", "max_num_seqs", "max_model_len",
                                               "max_num_batched_tokens", "num_hpu_blocks")}
                inputs.update(env=env, prefix_caching=base[f"prefix_caching_{engine}_engine"],
                              max_num_prefill_seqs=None, lora=False)
                answer = worker.ask({"family": family, "tree": str(Path(args.trees) / tree), "release": release,
                                     "inputs": inputs})
                n += 1
                if "prompt" not in answer and "error" not in answer:
                    ok = False  # no answer (hang or crash of the worker)
                elif "error" in row or "error" in answer:
                    ok = ("error" in row) == ("error" in answer)
                else:
                    ok = all(len(answer[ph]) == row[ph]["count"] and (
                        answer[ph] == row[ph]["buckets"] if "buckets" in row[ph]
                        else compact_sha(answer[ph]) == row[ph]["sha256_of_compact_json"])
                        for ph in ("prompt", "decode"))
                if not ok:
                    bad += 1
                    print(f"MISMATCH {path.name}:{name}: {str(answer)[:200]}")
    finally:
        worker.close()
    print(f"harness reproduces {n - bad}/{n} vector rows")
    return 1 if bad else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="extract the upstream trees from git clones")
    e.add_argument("--out", required=True)
    e.add_argument("--git", action="append", required=True, help="owner/name=/path/to/git/dir")
    r = sub.add_parser("run", help="run the sweep against the upstream trees")
    r.add_argument("--trees", required=True)
    r.add_argument("--python", required=True, help="interpreter with numpy and packaging")
    r.add_argument("--per-strategy", type=int, default=150)
    r.add_argument("--per-edge", type=int, default=50, help="edge rows per strategy (negative, zero, odd steps; "
                   "pooling)")
    r.add_argument("--seed", type=int, default=19)
    r.add_argument("--out", default=str(OUT_DIR), help="where to write <profile>.json (default: the test data)")
    r.add_argument("profiles", nargs="*")
    c = sub.add_parser("check", help="compare the engine with the stored sweep")
    c.add_argument("--show", type=int, default=5)
    c.add_argument("--data", default=str(OUT_DIR), help="folder of <profile>.json (default: the test data)")
    c.add_argument("profiles", nargs="*")
    v = sub.add_parser("vectors", help="check that the harness reproduces tests/data/vectors/")
    v.add_argument("--trees", required=True)
    v.add_argument("--python", required=True)
    args = p.parse_args(argv)
    return {"run": cmd_run, "extract": cmd_extract, "check": cmd_check, "vectors": cmd_vectors}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
