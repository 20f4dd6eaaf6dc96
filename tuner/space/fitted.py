"""Search over fitted bucket sets: the sampler picks the bucket counts, the fit places the buckets.

A space's `type: fitted` parameters (tuner/space/schema.py) give a bucket count per phase. The placement is
the exact least-padding set for the study's workload (tuner/space/fit: the same workload the trials' load
test sends), at the trial's block size, for the decode batch sizes the load can reach (powers of two up
to min(max_num_seqs, max concurrency), and that bound itself). The set is written once per distinct
content to `<study>/buckets/` and named by its digest, so the prediction, the screening and the reuse
key of two proposals with the same counts (and workload, block size, batch sizes) see the same file;
a trial that boots gets its own copy, `trials/NNNN/buckets.txt`, and VLLM_BUCKETING_FROM_FILE names it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..buckets.serverdefaults import MAX_NUM_SEQS
from ..load.workload import Workload
from ..vocabulary.errors import StudyError
from .fit import FitError, fit_workload
from .fit.bucketfile import format_bucket_file, parse_bucket_file
from .fit.shapes import decode_batch_sizes
from .schema import BUCKET_FILE_VARIABLE, SearchSpace, SpaceError, TrialSettings

TRIAL_FILE = "buckets.txt"
PROMPT_BS = (1,)  # vllm-gaudi runs prompts one at a time unless VLLM_PROMPT_BS_BUCKET_MAX says otherwise


class FittedBuckets:
    """Bucket files of fitted sets for one workload and load; one fit per (block size, batch sizes)."""

    def __init__(self, workload: Workload, store: Path, max_concurrency: int | None, max_buckets: int,
                 seed: int = 0):
        self.workload, self.store = workload, Path(store).absolute()
        self.max_concurrency, self.max_buckets, self.seed = max_concurrency, max_buckets, seed
        self._fits: dict[tuple, Any] = {}
        self._lock = threading.Lock()  # slots resolve in parallel threads

    def decode_sizes(self, server: dict[str, Any]) -> list[int]:
        seqs = int(server.get("max_num_seqs", MAX_NUM_SEQS))
        top = min(seqs, self.max_concurrency) if self.max_concurrency else seqs
        return decode_batch_sizes(max(1, top))

    def text(self, counts: dict[str, int], server: dict[str, Any]) -> str:
        """The bucket file of the fitted set with these counts (deterministic: same inputs, same text)."""
        missing = [ph for ph in ("prompt", "decode") if ph not in counts]
        if missing:
            raise SpaceError(f"a fitted bucket set needs a {missing[0]} count; its parameter's condition left "
                             "it out of this proposal")
        block = int(server.get("block_size", 128))
        sizes = self.decode_sizes(server)
        key = (block, tuple(sizes))
        with self._lock:
            if key not in self._fits:
                try:
                    self._fits[key] = fit_workload(self.workload, block_size=block, decode_bs=sizes,
                                                   max_buckets=self.max_buckets, seed=self.seed)
                except FitError as exc:
                    raise StudyError(f"fitted bucket sets: {exc}") from None
            fit = self._fits[key]
        prompt = fit.prompt(counts["prompt"])
        decode = [(bs, fit.decode(bs, counts["decode"]).boundaries) for bs in sizes]
        header = [f"bucket-tuner fitted set: {counts['prompt']} prompt / {counts['decode']} decode buckets per "
                  f"batch size, block size {block}",
                  f"{self.workload.kind} workload {json.dumps(self.workload.params(), sort_keys=True, default=str)}",
                  f"expected prompt padding {prompt.waste:.1f} tokens per prompt"]
        return format_bucket_file(PROMPT_BS, prompt.boundaries, decode, header)

    def path(self, counts: dict[str, int], server: dict[str, Any]) -> str:
        """The absolute path of that set's file in the study's store (a server resolves a relative path
        against its own working directory)."""
        text = self.text(counts, server)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        path = self.store / f"fitted-p{counts['prompt']}-d{counts['decode']}-{digest}.txt"
        if not path.is_file():
            self.store.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
            tmp.write_text(text)
            tmp.replace(path)  # atomic: a parallel slot never reads half a file
        return str(path)


def bind_fitted(space: SearchSpace, ctx, study_dir: Path) -> FittedBuckets | None:
    """Give a space with fitted parameters its resolver (the study's workload and load); None otherwise."""
    params = space.fitted_parameters
    if not params:
        return None
    if ctx.release is None:
        raise StudyError(f"{space.source}: parameter {params[0].name!r}: fitted bucket sets need a Gaudi release "
                         "profile that reads bucket files (--release gaudi-main)")
    fitted = FittedBuckets(ctx.workload, Path(study_dir) / "buckets", ctx.load.max_concurrency,
                           max_buckets=int(max(max(p.choices) if p.choices else p.high for p in params)),
                           seed=int(getattr(ctx.workload, "seed", 0) or 0))  # as `bucket-tuner fit --seed`
    space.fitted_resolver = lambda counts, server: fitted.path(counts, server)
    return fitted


def pin_to_trial(settings: TrialSettings, trial_dir: Path) -> TrialSettings:
    """A booting trial's own copy of its fitted set; the returned settings name that copy."""
    source = settings.env.get(BUCKET_FILE_VARIABLE) if settings.fitted else None
    if not source:
        return settings
    trial_dir.mkdir(parents=True, exist_ok=True)
    target = (trial_dir / TRIAL_FILE).absolute()
    shutil.copyfile(source, target)
    return replace(settings, env={**settings.env, BUCKET_FILE_VARIABLE: str(target)})


def bucket_set_digest(path: str) -> str:
    """What a bucket file means, independent of where it lies and of its comments: the digest of the
    buckets it lists (the reuse key compares this, not the path). An unreadable file keeps its path."""
    try:
        prompt, decode = parse_bucket_file(Path(path).read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError, ValueError):
        return path
    text = json.dumps([prompt, decode])
    return "buckets-sha256:" + hashlib.sha256(text.encode()).hexdigest()[:20]
