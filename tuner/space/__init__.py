"""Search spaces: YAML files -> Optuna suggestions -> the settings of one trial.

    schema     the search-space file, its validation, and TrialSettings (env + server flags)
    library    `--space NAME` or PATH: names from the space folders, paths only as paths
    fitted     `type: fitted` parameters: the sampler picks bucket counts, the fit places the buckets
    fit/       bucket sets fitted to a workload trace (`bucket-tuner fit`) and bucket files
"""
