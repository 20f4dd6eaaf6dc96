"""A small fake of a release's bucketing package, built in a temp dir, for the release-code check.

It has the interface tuner/buckets/upstream_steps.py drives (the upstream modules' names and calls):
`<pkg>.environment.set_vllm_config`, `<pkg>.runtime.get_config` / `finalize_config`, and
`<pkg>.bucketing.common.HPUBucketingManager` with `initialize`, `generate_prompt_buckets`,
`generate_decode_buckets`, `get_bucketing_strategy`. Its lists are the engine's for the profile it
stands for, except a planted difference: for `plant_seqs` sequences the decode list lacks its largest
bucket, and for `error_seqs` it raises. `<pkg>` is vllm_gaudi.extension (whose package __init__ fails:
the check must not run it, as the real one imports vLLM) or vllm_hpu_extension.

Also the node around it: a .dist-info as pip leaves it (`fake_dist`), a throwaway venv that sees this
project (`make_node_venv`), and a `vllm` script whose #! line names that venv (`fake_vllm_script`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_ENVIRONMENT = '''
PREFIX = [None]


def set_vllm_config(cfg):
    PREFIX[0] = cfg.cache_config.enable_prefix_caching
'''

_RUNTIME = '''
import os
from types import SimpleNamespace


def _on(name, default):
    return os.environ.get(name, default).lower() in ("1", "true")


def get_config():
    bs_max = os.environ.get("VLLM_PROMPT_BS_BUCKET_MAX")
    return SimpleNamespace(VLLM_PROMPT_BS_BUCKET_MAX=int(bs_max) if bs_max else None,
                           merged_prefill=_on("VLLM_MERGED_PREFILL", "false"),
                           use_bucketing=_on("VLLM_ENABLE_BUCKETING", "true"), unified_attn=False,
                           use_contiguous_pa=_on("VLLM_CONTIGUOUS_PA", "{contiguous_default}"))


def finalize_config():
    pass
'''

_COMMON = '''
import os

from tuner.buckets import ServerConfig, get_profile

from {pkg}.environment import PREFIX

PROFILE = {profile!r}
PLANT_SEQS = {plant_seqs!r}
ERROR_SEQS = {error_seqs!r}
_SWITCHES = ("VLLM_BUCKETING_STRATEGY", "VLLM_EXPONENTIAL_BUCKETING", "VLLM_CONTIGUOUS_PA", "VLLM_MERGED_PREFILL",
             "VLLM_PREFIX_CACHING", "VLLM_ENABLE_BUCKETING", "VLLM_BUCKETING_FROM_FILE")


class ExponentialBucketingStrategy:
    pass


class LinearBucketingStrategy:
    pass


class PaddingAwareBucketingStrategy:
    pass


_CLASSES = {{"exponential": ExponentialBucketingStrategy, "linear": LinearBucketingStrategy,
            "padding_aware": PaddingAwareBucketingStrategy}}


class HPUBucketingManager:
    def initialize(self, max_num_seqs, max_num_prefill_seqs, block_size, max_num_batched_tokens, max_model_len,
                   num_speculative_tokens=0, mamba_chunk_size=0, mamba_chunk_size_is_explicit=True):
        self.max_num_seqs, self.block_size = max_num_seqs, block_size
        self.max_num_batched_tokens, self.max_model_len = max_num_batched_tokens, max_model_len
        self.num_speculative_tokens, self.num_hpu_blocks = num_speculative_tokens, None

    def _plan(self):
        env = {{k: v for k, v in os.environ.items() if "_BUCKET_" in k or k in _SWITCHES}}
        cfg = ServerConfig(block_size=self.block_size, max_num_seqs=self.max_num_seqs,
                           max_model_len=self.max_model_len, max_num_batched_tokens=self.max_num_batched_tokens,
                           num_hpu_blocks=self.num_hpu_blocks or 1, env=env, prefix_caching=PREFIX[0],
                           num_speculative_tokens=self.num_speculative_tokens)
        return get_profile(PROFILE).build(cfg)

    def generate_prompt_buckets(self):
        self.prompt_buckets = [tuple(b) for b in self._plan().prompt]

    def generate_decode_buckets(self):
        if self.max_num_seqs == ERROR_SEQS:
            raise ValueError(f"planted: the release refuses {{ERROR_SEQS}} sequences")
        decode = [tuple(b) for b in self._plan().decode]
        if self.max_num_seqs == PLANT_SEQS:
            decode = decode[:-1]  # the planted difference
        self.decode_buckets = decode

    def get_bucketing_strategy(self):
        return _CLASSES[self._plan().strategy]()
'''


def build_fake_release(site: Path, profile: str, plant_seqs: int | None, error_seqs: int | None = None) -> Path:
    """Write the fake package for `profile` into `site` (a folder on the node interpreter's path)."""
    gaudi = profile.startswith("gaudi-")
    pkg = "vllm_gaudi.extension" if gaudi else "vllm_hpu_extension"
    root = site / "vllm_gaudi" / "extension" if gaudi else site / "vllm_hpu_extension"
    (root / "bucketing").mkdir(parents=True)
    if gaudi:
        (site / "vllm_gaudi" / "__init__.py").write_text(
            "raise ImportError('vllm_gaudi/__init__.py imports vLLM: the release check must not run it')\n")
    for path, text in ((root / "__init__.py", ""), (root / "bucketing" / "__init__.py", ""),
                       (root / "environment.py", _ENVIRONMENT),
                       (root / "runtime.py", _RUNTIME.format(contiguous_default="false" if gaudi else "true")),
                       (root / "bucketing" / "common.py", _COMMON.format(pkg=pkg, profile=profile,
                                                                          plant_seqs=plant_seqs,
                                                                          error_seqs=error_seqs))):
        path.write_text(text)
    return root


def fake_dist(site: Path, name: str, version: str, commit: str | None = None) -> None:
    """A .dist-info folder as pip leaves it (direct_url.json only for a git install)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if commit:
        (info / "direct_url.json").write_text(json.dumps({
            "url": f"https://github.com/example/{name}.git",
            "vcs_info": {"vcs": "git", "commit_id": commit, "requested_revision": commit[:7]}}))


def make_node_venv(root: Path) -> tuple[Path, Path]:
    """A throwaway venv (no pip) that also sees this project's packages; returns (python, site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "project.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{REPO}\n")
    return python, site


def fake_vllm_script(path: Path, python: Path, env_shebang: bool = False,
                     body: str = "import sys\nsys.exit('a fake vllm')\n") -> Path:
    shebang = f"#!/usr/bin/env {python.name}" if env_shebang else f"#!{python}"
    path.write_text(f"{shebang}\n{body}")
    path.chmod(0o755)
    return path
