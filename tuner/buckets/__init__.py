"""The bucket engine: exactly which buckets each vLLM-on-Gaudi release builds, and how it pads."""

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
