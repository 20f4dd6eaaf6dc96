"""Startup predictions of many configurations of one target, fast (a plan of a whole space).

The same prediction as target.predict (perfmodel/predict.py's predict_startup, nothing re-implemented),
with two savings that matter at tens of thousands of configurations: the release's bucket build is
memoised by everything it reads (its server config, KV blocks included, and environment), and the
warmup steps are tuples (prediction.StepRow) instead of dataclasses. Tests hold it to target.predict.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..buckets import BucketPlan, ServerConfig, get_profile
from .capture import compile_share
from .corrections import Corrections
from .costs import CACHE_HIT
from .predict import predict_startup
from .prediction import StartupPrediction, StepRow
from .shapes import SharedBuckets
from .target import Target, model_inputs

_CONFIG_FIELDS = tuple(f.name for f in fields(ServerConfig) if f.name != "env")
# memoised bucket plans, most recently used kept: repeats come close together (the same configuration with
# other corrections, twins of a discrete space), and a plan of the padding-aware strategy holds ~1,500 buckets
MAX_BUILDS = 512
SHARE_LISTS = True
MAX_LISTS = 2048  # distinct bucket lists kept shared (a list's arrays are a few KiB to ~100 KiB)


@dataclass
class BulkModel:
    """target.predict for many configurations: memoised bucket builds, light warmup steps."""

    target: Target
    builds: int = 0  # bucket builds actually run (the rest came from the memo)
    # one list object per distinct bucket list, its arrays worked out once (SHARE_LISTS False: every
    # build keeps its own lists, as target.predict; the tests compare both)
    share_lists: bool = field(default_factory=lambda: SHARE_LISTS)
    _plans: dict = field(default_factory=dict)
    _lists: dict = field(default_factory=dict)  # list content -> its SharedBuckets

    def startup(self, settings, corrections: Corrections | None = None) -> StartupPrediction | None:
        """The startup prediction of `settings` (a space.TrialSettings) with `corrections` (default: the prior)."""
        t = self.target
        if t.release is None or t.device_model is None:
            return None
        sim, inputs = model_inputs(t.device_model, settings)
        return predict_startup(t.release, sim, inputs, settings.env, corrections=corrections or Corrections(),
                               build=self._build, step=StepRow, keep_steps=False)

    def _build(self, cfg: ServerConfig) -> BucketPlan:
        key = (tuple(getattr(cfg, name) for name in _CONFIG_FIELDS), tuple(sorted(cfg.env.items())))
        plan = self._plans.pop(key, None)
        if plan is None:
            self.builds += 1
            plan = get_profile(self.target.release).build(cfg)
            if self.share_lists:
                plan.prompt, plan.decode = self._shared(plan.prompt), self._shared(plan.decode)
            if len(self._plans) >= MAX_BUILDS:
                self._plans.pop(next(iter(self._plans)))
        self._plans[key] = plan  # the most recent last
        return plan

    def _shared(self, buckets: list) -> list:
        """The one SharedBuckets of every build whose list is this one (shapes.py keeps its arrays)."""
        content = tuple(buckets)
        found = self._lists.pop(content, None)
        if found is None:
            found = SharedBuckets(content)
            if len(self._lists) >= MAX_LISTS:
                self._lists.pop(next(iter(self._lists)))
        self._lists[content] = found  # the most recent last
        return found


def cached_warmup(pred: StartupPrediction) -> float | None:
    """The warmup with every shape's recipe already in a recipe cache (what recipecache.warmupmode's
    cached_prediction predicts, without a second prediction): each compile costs the cache-hit share."""
    if pred.failure is not None or pred.plan is None:
        return None
    cost = pred.cost
    hit = CACHE_HIT[cost.sim.dtype] * cost.corr.cache_hit
    return pred.warmup_seconds - (1.0 - hit) * compile_share(pred, cost)


def facts(pred: StartupPrediction) -> dict[str, Any]:
    """What a plan shows of a configuration's start: buckets, KV blocks, graphs and their memory."""
    from .hardware import GiB

    out: dict[str, Any] = {}
    if pred.plan is not None:
        out.update(prompt_buckets=len(pred.plan.prompt), decode_buckets=len(pred.plan.decode))
    if pred.memory is not None:
        out["kv_blocks"] = pred.num_blocks
    if pred.failure is None:
        out.update(prompt_graphs=len(pred.graphed_prompt), decode_graphs=len(pred.graphed_decode),
                   graph_mem_gib=round((pred.prompt_graph_mem + pred.decode_graph_mem) / GiB, 3))
    return out
