"""`tune --warmup cold|cached` and `--shared-recipe-cache DIR`: the options, their fallbacks, and what
runs after the study (the cold re-boot of the Pareto trials). See tuner/recipecache/warmupmode.py and
tuner/study/sharedcache.py."""

from __future__ import annotations

from . import UsageError, check_folder

NOT_GAUDI = ("the study has no Gaudi release profile (a generic vLLM: PT_HPU_RECIPE_CACHE_CONFIG is ignored, "
             "there is no recipe cache)")


def warmup_options(args, ctx, console):
    """The study's WarmupOptions, or None for the plain cold study (the default)."""
    from ..recipecache.warmupmode import CACHED, COLD, WarmupOptions
    from ..study.sharedcache import SharedCache

    mode = getattr(args, "warmup", COLD) or COLD
    shared_dir = getattr(args, "shared_recipe_cache", None)
    if mode == COLD and shared_dir is None and (ctx.release is None or ctx.device_model is None):
        return None  # nothing to add: no model to predict the cached warmup with
    if mode == CACHED and (ctx.release is None or ctx.device_model is None):
        why = NOT_GAUDI if ctx.release is None else "no performance model (--no-prediction)"
        console.print(f"[yellow]--warmup cached:[/] {why}; falling back to the cold warmup")
        mode = COLD
    opts = WarmupOptions(mode=mode)
    if mode == CACHED:
        # The boot itself is cold: the budget is for the cached warmup, checked against its prediction
        # and the constraint, never used to abort the cold boot.
        opts.budget_s, ctx.limits.warmup_budget_s = ctx.limits.warmup_budget_s, None
    if shared_dir is not None:
        check_folder(shared_dir, "--shared-recipe-cache")
        if str(shared_dir).startswith(("/net/", "/nfs/")):
            raise UsageError(f"--shared-recipe-cache {shared_dir}: keep recipe caches on local disk (no NFS)")
        dm = ctx.device_model
        opts.shared = SharedCache(root=shared_dir, release=ctx.release, device=dm.device if dm else "unknown",
                                  model=ctx.backend.model, dtype=dm.dtype if dm else "bf16")
        if ctx.release is None:
            console.print(f"[yellow]--shared-recipe-cache:[/] {NOT_GAUDI}; the first boot tells whether the "
                          "server uses it")
    return opts  # cold without a shared cache: trials still get the predicted cached warmup


# The picks a study exports (best.env) and its report sets beside them: their cold warmups are measured.
EXPORTED_PICKS = ("balanced", "throughput")


def exported_picks(study) -> set[int]:
    from ..results.export import ExportError, Filters, pick_trial

    out = set()
    for pick in EXPORTED_PICKS:
        try:
            out.add(pick_trial(study, pick, Filters()).number)
        except ExportError:
            pass
    return out


def after_study(study, space, ctx, study_dir, console) -> None:
    from ..study.pareto import measured_front
    from ..study.sharedcache import REBOOT_ATTR, reboot_front_cold
    from ..vocabulary.record import TrialRecord

    opts = ctx.warmup
    study.set_user_attr("warmup_mode", opts.mode)
    if opts.shared is None or not opts.shared.enabled:
        return
    study.set_user_attr("shared_recipe_cache", str(opts.shared.root))
    done = reboot_front_cold(study, space, ctx, study_dir, say=lambda text: console.print(f"  {text}"),
                             picks=exported_picks(study))
    reboots = study.user_attrs.get(REBOOT_ATTR) or {}
    predicted = [t.number for t in measured_front(study) if str(t.number) not in reboots
                 and TrialRecord.from_frozen(t).observed.get("warmup_cold_s") is None]
    if done:
        console.print(f"cold re-boot of {len(done)} trial(s): the exported picks and the uncertain predictions")
    if predicted:
        console.print(f"{len(predicted)} Pareto trial(s) keep a predicted cold warmup (trusted within the band; "
                      f"marked pred. in the report): {', '.join(map(str, predicted))}")
