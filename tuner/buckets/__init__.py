"""The bucket engine: exactly which buckets each vLLM-on-Gaudi release builds, and how it pads.

Beside the profiles: runtime.py (the non-bucket variables each release reads, with defaults), declared.py
(data: every VLLM_*/PT_HPU_* variable each release's code declares, its parser, default and file),
envcheck.py (a value as its release parses it), names.py (the one resolver for variable names and values),
vision.py (image buckets: the vision-encoder warm-up each release runs for a multimodal model).
"""

from .base import (
    DEFAULT,
    EXPONENTIAL,
    FORCED,
    IGNORED,
    LINEAR,
    PADDING_AWARE,
    USER,
    Bucket,
    BucketConfigError,
    BucketPlan,
    PadResult,
    ReleaseProfile,
    ServerConfig,
    Setting,
)
from .registry import get_profile, profiles

__all__ = [
    "DEFAULT", "EXPONENTIAL", "FORCED", "IGNORED", "LINEAR", "PADDING_AWARE", "USER",
    "Bucket", "BucketConfigError", "BucketPlan", "PadResult", "ReleaseProfile", "ServerConfig", "Setting",
    "get_profile", "profiles",
]
