from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Facts the tests rely on (upstream bucket vectors, real log samples), copied into the repository with
# their provenance (tests/data/*/SOURCES.md); nothing outside the checkout is read.
DATA = ROOT / "tests" / "data"
VECTOR_DIR = DATA / "vectors"
LOG_SAMPLES = DATA / "log-samples"
