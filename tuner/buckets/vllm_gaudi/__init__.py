"""vllm-project/vllm-gaudi: the plugin's bucketing (v1 engine, 3-D buckets).

Prompt buckets are (bs, query_len, ctx_blocks), decode buckets (bs, 1, num_blocks). Four releases:

* v0.10.1 (ab65f9ba): each strategy builds its own lists. Linear reads VLLM_{PROMPT,DECODE}_{BS,SEQ,
  BLOCK}_BUCKET_*; exponential keeps the extension's "fill" generator and long-context split. The
  runner always passes max_num_prefill_seqs = 1.
* v0.15.1 (5d6a2db3): strategies only return (bs, query, ctx) configs and a common `generate_buckets`
  combines the three ranges. Prompt length is the QUERY dimension (SEQ kept as a deprecated
  fallback), prompt context blocks are a dimension of their own; max_num_prefill_seqs =
  VLLM_PROMPT_BS_BUCKET_MAX or 1.
* v0.26.0 (b059f9c9): VLLM_BUCKETING_STRATEGY=exp|lin|pad with the padding-aware strategy
  (padding_aware.py); VLLM_EXPONENTIAL_BUCKETING still overrides it; new prompt filter,
  omitted-bucket debug log and fallback caps.
* main (091bbadd): as v0.26.0, except that exponential decode blocks are clamped to 3x the KV blocks
  without contiguous PA.

Sources (sections A, B, C.2, C.3, D.5, E of docs/bucketing.md, and upstream):
`vllm_gaudi/extension/bucketing/{common,linear,exponential,padding_aware}.py`,
`vllm_gaudi/extension/{features,environment,config,runtime}.py`, `vllm_gaudi/v1/worker/hpu_model_runner.py`.
The vectors in tests/data/vectors/ are the ground truth; where the spec and they disagree they win.

Upstream behaviour worth knowing (all modelled):
* From v0.15.1, exponential warns that VLLM_PROMPT_BS_BUCKET_MAX "will be overwritten", yet the runner
  has already made it max_num_prefill_seqs, the exponential prompt bs max.
* The bucketing's prefix caching (hence contiguous PA) follows VLLM_CONTIGUOUS_PA from v0.15.1 on, not
  the engine's --enable-prefix-caching.
* v0.10.1 / v0.15.1 validate VLLM_BUCKETING_STRATEGY against their own unused feature choices: the
  v0.20+ values exp|lin|pad make them fail at startup.
* v0.10.1 exponential crashes ("math domain error") when max_model_len is not a block multiple; its
  prompt lists keep duplicate buckets.
* The v0.26+ "Omitted N ... buckets" line is DEBUG output (the vectors were recorded at DEBUG).
Also modelled (docs/bucketing-inputs.md lists every input with its source): merged prefill, bucket
files (bucket_file.py), v0.15.1 unified attention (unified.py), bucketing off, the sliding-window SDPA
prompt filter, and the model-dependent runner inputs of ServerConfig (speculative decoding, mamba
chunking, pooling, the attention kernel's block size, main's decode clamp skip). Refused only: more
than MAX_PROMPT_CANDIDATES prompt candidates (upstream would spend minutes and gigabytes on them).

Modules: releases (the per-release flags and strategy selection), settings (one run's env reading,
defaults and settings bookkeeping), ranges and padding_aware (1-D range generators), strategies
(each strategy's v0.15.1+ ranges), generate (combining them into buckets, filters, omitted lists,
spec decode), bucket_file and unified (the two other bucket sources),
generate_v0101 (v0.10.1's own path), logs (log line text), padding (bucket lookup and fallbacks),
profiles (the ReleaseProfile classes and PROFILES).
"""

from .padding import _calc_fallback
from .padding_aware import padding_aware_range
from .profiles import PROFILES, VllmGaudiProfile

__all__ = ["PROFILES", "VllmGaudiProfile", "_calc_fallback", "padding_aware_range"]
