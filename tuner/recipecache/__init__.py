"""The HPU graph recipe cache (PT_HPU_RECIPE_CACHE_CONFIG) and what it changes about warm-up.

    manifest    the cache variable, its manifest, and when a prepared cache fits another deployment
    warmupmode  `tune --warmup cold|cached`: which warm-up a trial is scored by; both figures per trial
    prepare     `export --with-cache DIR`: prepare an exported configuration's cache and verify it
(The study-wide shared cache, `tune --shared-recipe-cache`, is tuner/study/sharedcache.py.)
"""
