"""bucket-tuner: measured tuning of vLLM-on-Gaudi bucket settings."""

__version__ = "0.1.0"
