import functools
import os
import signal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Facts the tests rely on (upstream bucket vectors, real log samples), copied into the repository with
# their provenance (tests/data/*/SOURCES.md); nothing outside the checkout is read.
DATA = ROOT / "tests" / "data"
VECTOR_DIR = DATA / "vectors"
LOG_SAMPLES = DATA / "log-samples"

# The genuine-vLLM tier runs on one xdist worker, in file order, from the start (it is the suite's long
# pole: one server at a time, ~8 minutes alone), while the other workers share everything else. Its
# modules carry `xdist_group("realvllm")`, but pytest 9.2 keeps a node's id where xdist 3.8's loadgroup
# no longer renames it, so the group is read off the path here, through xdist's scheduler hook.
REALVLLM_TIER = "tests/realvllm/"
# Modules that share an expensive fixture run on one worker too, or each worker builds it again. xdist_group
# marks no longer reach the scheduler (above), so the units are read off the path: the modules using the
# `studies` of tests/report/conftest.py (two simulator studies), and every module with a fixture of its
# own scoped to the module or a class.
REPORT_STUDIES = tuple(f"tests/report/{m}.py" for m in (
    "test_report", "test_deploy_cost", "test_genuine_labels", "test_report_browser", "test_dashboard_browser"))


@functools.cache
def _shared_fixture_unit(path: str) -> str | None:
    """The scheduling unit of a test module whose tests share a fixture, or None."""
    if path in REPORT_STUDIES:
        return "report-studies"
    try:
        text = (ROOT / path).read_text(errors="replace")
    except OSError:
        return None
    return path if 'scope="module"' in text or 'scope="class"' in text else None


class _TierScheduling:
    """An xdist plugin: loadgroup scheduling with the vLLM tier as one work unit (the largest, so xdist
    hands it out first)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadGroupScheduling

        class TierOnOneWorker(LoadGroupScheduling):
            def _split_scope(self, nodeid: str) -> str:
                if nodeid.startswith(REALVLLM_TIER):
                    return "realvllm"
                return _shared_fixture_unit(nodeid.split("::", 1)[0]) or super()._split_scope(nodeid)

        return TierOnOneWorker(config, log)


def pytest_configure(config):
    # A shell starts a background job (`bash .ci/run &`, `nohup ... &`) with SIGINT ignored, and an ignored
    # signal stays ignored across exec: every server a test starts would shrug off the SIGINT a stop
    # sends first. Handled, it is reset to the default in each child, as under the tuner, which installs
    # its own handler before it starts a server (study/interrupt.py).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_TierScheduling(), "bucket-tuner-tier-scheduling")


# On two cores the tier's servers are CPU-bound and every other worker competes with them: a worker
# lowers its own priority (and its children's: tuners, simulators, PostgreSQL) once it runs anything
# else, so the long pole runs at nearly full speed and the rest fills the time left. Not lower than 5:
# at nice 10 (a tenth of a nice-0 task's CPU share) a simulator beside two busy vLLM processes took over
# 5 s to exit on SIGINT, and stop tests that expect a polite exit saw SIGTERM.
OTHER_WORKERS_NICE = 5
_lowered: list[bool] = []


def pytest_runtest_setup(item):
    if (not _lowered and os.environ.get("PYTEST_XDIST_WORKER") and not item.nodeid.startswith(REALVLLM_TIER)
            and hasattr(os, "nice")):
        os.nice(OTHER_WORKERS_NICE)
        _lowered.append(True)
