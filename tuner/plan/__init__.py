"""`bucket-tuner plan`: a whole search space through the performance model before the first boot.

    points     every point of a discrete space, a scrambled-Halton sample of a continuous one
    evaluate   one configuration: its start, warm-up (cold and cached), serving, bands and verdict
    picks      the predicted front, what could be on it, the picks by expected hypervolume gain
    build      the plan: points -> predictions -> front, contenders and picks, with timings
    baseline   what the user runs today, read from an env file, a `vllm serve` script or a server log
    document   the plan file (`plan --json` / `--out`; `tune --from-plan` reads its picks)
    render     the plan in plain words at 80 columns

The model's bulk entry points are in tuner/perfmodel/ (bulk.py: startups, fastserving.py: load tests).
This package sits beside tuner/study/ and uses its pure parts (logcalibration); the study never imports it.
"""
