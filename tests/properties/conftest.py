"""Hypothesis settings for the parser properties: short, reproducible runs without a per-example
deadline (CI machines are shared). BUCKET_TUNER_HYPOTHESIS_EXAMPLES=5000 explores further, randomly."""

import os

from hypothesis import HealthCheck, settings

_EXAMPLES = os.environ.get("BUCKET_TUNER_HYPOTHESIS_EXAMPLES")
settings.register_profile("bucket-tuner", max_examples=int(_EXAMPLES or 150), deadline=None,
                          derandomize=not _EXAMPLES, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("bucket-tuner")
