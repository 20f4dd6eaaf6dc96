import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The shared facts (specs, vectors, log samples) live beside the checkout.
SHARED = Path(os.environ.get("BUCKET_TUNER_SHARED", ROOT.parent / "shared")).resolve()


def pytest_report_header(config):
    return f"shared facts: {SHARED} ({'present' if SHARED.is_dir() else 'MISSING'})"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"../shared not found at {SHARED}; set BUCKET_TUNER_SHARED")
    return SHARED
