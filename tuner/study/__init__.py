"""The Optuna study: many trials, their storage, and what the study learns between boots.

    run             run_study, phase by phase: open, recover a dead tuner's trials, seed, screen, calibrate, run
    question        what its measurements answer (workload, load, limits, release, model, server), checked on re-runs
    options         what a study is asked for (StudyOptions, Objectives, Constraints); storage, sampler, open_study
    seeding         what a new study tries first: the baseline, the plan's picks, --seed-from, defaults, the model
    loop            the slots' loop: ask, claim or wait, screen, run, tell; budget, timeout and signals end it
    tell            a result told to Optuna (values, constraints, penalties, re-enqueued failures); the budget count
    interrupt       SIGINT, SIGTERM, SIGHUP: the trial in flight recorded, a second signal hurries
    storage         opening Optuna storages for writing and strictly read-only
    nodes           several tuners on one study (PostgreSQL): heartbeats, outages, stale trials
    screen          before a boot: reuse of measured (or running) configurations, calibration, screening
    proposals       the calibrated model's proposals, enqueued for the sampler
    logcalibration  `tune --calibrate-from LOG`: a past boot's log as a calibration sample
    sharedcache     `tune --shared-recipe-cache DIR`: the trials of a study share one recipe cache
    pareto          Pareto fronts, hypervolume and the pick rules, on plain objective vectors
    measurements    a configuration's estimate from its repeated measurements (the mean): one place for it
    estimates       how sure a figure is: n, mean and 95% t-interval per configuration, indistinguishable points
    confirm         tune --confirm's decision: do the picks stand within the noise, what to re-measure next
    confirmrun      tune --confirm's phase after the search: re-measurements as trials, budget, the summary
"""
