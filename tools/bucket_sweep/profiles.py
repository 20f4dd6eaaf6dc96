"""Which upstream tree and runner steps stand behind each release profile, and which inputs it reads.

`inputs` lists the input groups the random generator varies for that release (see configs.py); they
follow docs/bucketing-inputs.md.
"""

from __future__ import annotations

from tuner.buckets import get_profile
from tuner.buckets.owncode import RUNNER_STEPS

# Upstream commits (the same the vectors in tests/data/vectors/ name).
FORK = "HabanaAI/vllm-fork"
EXT = "HabanaAI/vllm-hpu-extension"
GAUDI = "vllm-project/vllm-gaudi"

TREES = {
    # tree name: (repo, ref, commit, paths to extract)
    "fork-1e0e492": (FORK, "v0.5.3.post1-Gaudi-1.17.0", "1e0e492e1400114f9156d61ffdd73585181ed119",
                     "vllm/worker/habana_model_runner.py"),
    "fork-8492294": (FORK, "v0.5.3.post1+Gaudi-1.18.0", "84922944da5b65fa43bbdc465650911cbef9de72",
                     "vllm/worker/habana_model_runner.py"),
    "ext-4ff86cf": (EXT, "4ff86cf", "4ff86cfc5fa85b0e7d2fc915e6046d793c0b8b27", "vllm_hpu_extension"),
    "ext-d4b0d38": (EXT, "d4b0d38", "d4b0d387842601c29cc2e4712935356a9dae9505", "vllm_hpu_extension"),
    "ext-2b4ba56": (EXT, "2b4ba56", "2b4ba562c43c538c2a502d19461f32cb43affbaa", "vllm_hpu_extension"),
    "ext-29bc7a4": (EXT, "29bc7a4", "29bc7a44a6b79bd78b7c262ac3acbea87258d322", "vllm_hpu_extension"),
    "ext-8211e0b": (EXT, "8211e0b", "8211e0ba420e976cca07be323328e41fa8a1a9da", "vllm_hpu_extension"),
    "ext-7717587": (EXT, "7717587", "7717587d178061aaab7498c077b41501944bb288", "vllm_hpu_extension"),
    "gaudi-v0.10.1": (GAUDI, "v0.10.1", "ab65f9ba2abbaf4c30f8cdb24a62c731f8bbdf4c", "vllm_gaudi"),
    "gaudi-v0.15.1": (GAUDI, "v0.15.1", "5d6a2db38ea74249a2359a3f75db391a47b70495", "vllm_gaudi"),
    "gaudi-v0.26.0": (GAUDI, "v0.26.0", "b059f9c95d6a07f19eb00aa06d1ec8b87b296437", "vllm_gaudi"),
    "gaudi-v0.27.0rc0": (GAUDI, "v0.27.0rc0", "d01a3caecd8d818c29c06af56591e40eb4e3dcca", "vllm_gaudi"),
    "gaudi-main": (GAUDI, "main", "091bbadda10bee4fd3f6d0efc1844d2610dd2707", "vllm_gaudi"),
}

# profile -> (tree, engine, input groups). The worker family and the release tag that selects the
# runner steps come from the package (tuner/buckets/owncode.py RUNNER_STEPS, shared with the node-side
# check). The fork's 3-D releases share one extension tree (1.23 pins f1d9275 like habana_main; absent
# from the snapshots, its bucketing taken as 7717587's): their tag selects the runner steps that differ
# (pooling). An alias profile (gaudi-0.27.0) gets its own rows from its own tree, replayed against the
# profile it aliases.
_EXT3D = ("ext2d", "prefill_seqs", "merged", "contiguous", "sliding", "prefix_env", "spec", "pooling")
_GAUDI26 = ("gaudi3d", "pad", "merged", "contiguous", "sliding", "prefix_env", "enable", "exp_flag", "file", "model")
_TREES_OF = {
    "fork-1.17": ("fork-1e0e492", "v0", ("fork117",)),
    "fork-1.18": ("fork-8492294", "v0", ("fork118", "lora")),
    "fork-1.19": ("ext-4ff86cf", "v0", ("ext2d", "prefill_seqs", "spec")),
    "fork-1.20": ("ext-d4b0d38", "v0", ("ext2d", "prefill_seqs", "contiguous", "spec")),
    "fork-1.21.0": ("ext-2b4ba56", "v0", ("ext2d", "prefill_seqs", "merged", "contiguous", "spec", "pooling")),
    "fork-1.21.2": ("ext-29bc7a4", "v0", ("ext2d", "prefill_seqs", "merged", "contiguous", "spec", "pooling")),
    "fork-1.22": ("ext-8211e0b", "v0", _EXT3D),
    "fork-main": ("ext-7717587", "v0", _EXT3D),
    "fork-1.23": ("ext-7717587", "v0", _EXT3D),
    "gaudi-0.10.1": ("gaudi-v0.10.1", "v1", ("ext2d", "merged", "contiguous", "prefix_env", "enable")),
    "gaudi-0.15.1": ("gaudi-v0.15.1", "v1", ("gaudi3d", "merged", "contiguous", "sliding", "prefix_env", "enable",
                                            "unified", "file", "model")),
    "gaudi-0.26.0": ("gaudi-v0.26.0", "v1", _GAUDI26),
    "gaudi-0.27.0": ("gaudi-v0.27.0rc0", "v1", _GAUDI26),
    "gaudi-main": ("gaudi-main", "v1", _GAUDI26),
}


def _entry(profile: str) -> tuple:
    family, release = RUNNER_STEPS[get_profile(profile).name]
    tree, engine, groups = _TREES_OF[profile]
    return family, tree, release, engine, groups


# profile -> (worker family, tree, release tag for the worker, engine, input groups)
PROFILES = {name: _entry(name) for name in _TREES_OF}


# Pooling rows only where the release runs pooling models: fork 1.17-1.20 have no HPU pooling runner,
# vllm-gaudi v0.10.1's asserts "Pooling is not supported in HPU yet".
POOLING_GROUPS = ("pooling", "model")


def supports_pooling(profile: str) -> bool:
    return any(g in POOLING_GROUPS for g in PROFILES[profile][4])
