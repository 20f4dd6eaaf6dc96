from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Facts the tests rely on (upstream bucket vectors, real log samples), copied into the repository with
# their provenance (tests/data/*/SOURCES.md); nothing outside the checkout is read.
DATA = ROOT / "tests" / "data"
VECTOR_DIR = DATA / "vectors"
LOG_SAMPLES = DATA / "log-samples"



@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`--dist loadgroup`, pyproject.toml), the genuine-vLLM tier (its modules carry
    xdist_group("realvllm")) runs on one worker in file order, and first: it is the longest chain of the
    suite, its servers take a machine-wide lock anyway, and the other workers share the rest."""
    items.sort(key=lambda item: item.get_closest_marker("realvllm") is None)
