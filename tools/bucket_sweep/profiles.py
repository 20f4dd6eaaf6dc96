"""Which upstream tree and runner steps stand behind each release profile, and which inputs it reads.

`inputs` lists the input groups the random generator varies for that release (see configs.py); they
follow docs/bucketing-inputs.md.
"""

from __future__ import annotations

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
    "gaudi-main": (GAUDI, "main", "091bbadda10bee4fd3f6d0efc1844d2610dd2707", "vllm_gaudi"),
}

# profile -> (worker family, tree, release tag for the worker, engine, input groups)
PROFILES = {
    "fork-1.17": ("fork_runner", "fork-1e0e492", "", "v0", ("fork117",)),
    "fork-1.18": ("fork_runner", "fork-8492294", "", "v0", ("fork118", "lora")),
    "fork-1.19": ("ext_context", "ext-4ff86cf", "1.19", "v0", ("ext2d", "prefill_seqs", "spec")),
    "fork-1.20": ("ext_context", "ext-d4b0d38", "1.20", "v0", ("ext2d", "prefill_seqs", "contiguous", "spec")),
    "fork-1.21.0": ("ext_context", "ext-2b4ba56", "1.21", "v0",
                    ("ext2d", "prefill_seqs", "merged", "contiguous", "spec", "pooling")),
    "fork-1.21.2": ("ext_context", "ext-29bc7a4", "1.21", "v0",
                    ("ext2d", "prefill_seqs", "merged", "contiguous", "spec", "pooling")),
    "fork-1.22": ("manager", "ext-8211e0b", "", "v0",
                  ("ext2d", "prefill_seqs", "merged", "contiguous", "sliding", "prefix_env", "spec", "pooling")),
    "fork-main": ("manager", "ext-7717587", "", "v0",
                  ("ext2d", "prefill_seqs", "merged", "contiguous", "sliding", "prefix_env", "spec", "pooling")),
    "gaudi-0.10.1": ("gaudi", "gaudi-v0.10.1", "v0.10.1", "v1",
                     ("ext2d", "merged", "contiguous", "prefix_env", "enable")),
    "gaudi-0.15.1": ("gaudi", "gaudi-v0.15.1", "v0.15.1", "v1",
                     ("gaudi3d", "merged", "contiguous", "sliding", "prefix_env", "enable", "unified", "file",
                      "model")),
    "gaudi-0.26.0": ("gaudi", "gaudi-v0.26.0", "v0.26.0", "v1",
                     ("gaudi3d", "pad", "merged", "contiguous", "sliding", "prefix_env", "enable", "exp_flag",
                      "file", "model")),
    "gaudi-main": ("gaudi", "gaudi-main", "main", "v1",
                   ("gaudi3d", "pad", "merged", "contiguous", "sliding", "prefix_env", "enable", "exp_flag",
                    "file", "model")),
}
