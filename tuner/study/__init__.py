"""The Optuna study: many trials, their storage, and what the study learns between boots.

    run             options, sampler, seeding, resume, budgets, parallel slots, stopping
    interrupt       SIGINT, SIGTERM, SIGHUP: the trial in flight recorded, a second signal hurries
    storage         opening Optuna storages for writing and strictly read-only
    nodes           several tuners on one study (PostgreSQL): heartbeats, outages, stale trials
    screen          before a boot: reuse of measured (or running) configurations, calibration, screening
    proposals       the calibrated model's proposals, enqueued for the sampler
    logcalibration  `tune --calibrate-from LOG`: a past boot's log as a calibration sample
    sharedcache     `tune --shared-recipe-cache DIR`: the trials of a study share one recipe cache
    pareto          Pareto fronts, hypervolume and the pick rules, on plain objective vectors
"""
