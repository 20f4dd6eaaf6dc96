"""tuner/models/fork_architectures.json: the model architectures each HabanaAI/vllm-fork release's model registry
holds (the keys of its *_MODELS tables: vllm/model_executor/models/__init__.py up to vLLM 0.5, registry.py from
0.6). A release whose registry lacks a model's architecture refuses to serve it ("Model architectures [...] are not
supported for now"), whatever its buckets; the prediction says so before a boot.

Maintainer tool, run on a git mirror of the fork (no work tree needed):

    python tools/fork_architectures.py --fork-repo GIT_DIR [--check]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tuner" / "models" / "fork_architectures.json"
# the fork releases' commits, as tuner/buckets/declared.py names them
RELEASES = {
    "fork-1.17": "1e0e492", "fork-1.18": "8492294", "fork-1.19": "v0.6.4.post2+Gaudi-1.19.0",
    "fork-1.20": "v0.6.6.post1+Gaudi-1.20.0", "fork-1.21.0": "v0.7.2+Gaudi-1.21.0",
    "fork-1.21.2": "v0.7.2+Gaudi-1.21.2", "fork-1.22": "2e9b2b3d4ddeab7dc42a0dcc1237fc4b109b8001",
    "fork-main": "95af70093fc0dbb1a8b16d4a2913c674a02434ac", "fork-1.23": "6ecf39ca9354a4fb83789cc31aa7bb5ec35541df",
}
FILES = ("vllm/model_executor/models/registry.py", "vllm/model_executor/models/__init__.py")


def registry_keys(source: str) -> set[str]:
    """The string keys of the module's `_..._MODELS = {...}` tables."""
    keys: set[str] = set()
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id.endswith("MODELS") and isinstance(node.value, ast.Dict):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return keys


def read(repo: str) -> dict[str, list[str]]:
    out = {}
    for release, commit in RELEASES.items():
        keys: set[str] = set()
        for path in FILES:
            shown = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True)
            if shown.returncode == 0:
                keys |= registry_keys(shown.stdout)
        if not keys:
            raise SystemExit(f"{release} ({commit}): no model registry found")
        out[release] = sorted(keys)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fork-repo", required=True, help="a git directory of HabanaAI/vllm-fork")
    p.add_argument("--check", action="store_true", help="compare with the shipped table instead of writing it")
    args = p.parse_args()
    table = {"source": "HabanaAI/vllm-fork model registries (tools/fork_architectures.py)",
             "commits": RELEASES, "architectures": read(args.fork_repo)}
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = OUT.read_text() == text
        print("the shipped table is current" if same else "the shipped table differs from the registries")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}: " + ", ".join(f"{r} {len(a)}" for r, a in table["architectures"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
