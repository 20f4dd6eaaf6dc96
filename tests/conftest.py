from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Facts the tests rely on (upstream bucket vectors, real log samples), copied into the repository with
# their provenance (tests/data/*/SOURCES.md); nothing outside the checkout is read.
DATA = ROOT / "tests" / "data"
VECTOR_DIR = DATA / "vectors"
LOG_SAMPLES = DATA / "log-samples"



@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`--dist loadgroup`, pyproject.toml), the genuine-vLLM tier runs on one worker
    in file order, first: its servers take a machine-wide lock anyway, and one worker holding them all
    keeps the other workers free for the rest of the suite."""
    for item in items:
        if item.get_closest_marker("realvllm") is not None:
            item.add_marker(pytest.mark.xdist_group("realvllm"))
    # The tier is the longest chain of the suite: it starts first, the other workers share the rest.
    items.sort(key=lambda item: item.get_closest_marker("realvllm") is None)
