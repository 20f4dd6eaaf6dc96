"""The lower bounds in pyproject.toml are honest.

Two checks. (1) Every requirement has a lower bound and the installed version satisfies it, so a
resolver that picks the oldest allowed release is at least as new as what we declared. (2) Every
Optuna name the code uses (attribute paths, `trial.X(`, `study.X(`, storage calls, keyword
arguments) exists in the installed Optuna, and the Optuna lower bound is no older than the release
that introduced the late additions we rely on (checked against optuna's wheels: 4.9.0 has no
Trial.set_constraint, 4.8.0 has no heartbeat_stale_trial_callback); likewise aiohttp's web.AppKey (3.9).
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import sys

import optuna
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

from ..conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
# Extras the README test command installs; others (gp) are checked only when present.
INSTALLED_EXTRAS = ("test",)

# Optuna names the code relies on that arrived late, with the first release that has them.
OPTUNA_SINCE = {
    "Trial.set_constraint": "5.0.0",
    "RDBStorage(heartbeat_stale_trial_callback=)": "4.9.0",
    "GPSampler": "3.6.0",
    "Study.set_metric_names": "3.2.0",
}


def _requirements(extra: str | None) -> list[Requirement]:
    texts = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    reqs = [Requirement(t) for t in texts]
    env = default_environment() | {"extra": extra or ""}
    return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]


def _lower_bound(req: Requirement) -> Version | None:
    lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(lows) if lows else None


ALL_GROUPS = [None, *PROJECT["optional-dependencies"]]


@pytest.mark.parametrize("extra", ALL_GROUPS, ids=lambda e: e or "core")
def test_every_requirement_has_a_lower_bound(extra):
    missing = [str(r) for r in _requirements(extra) if _lower_bound(r) is None]
    assert not missing, f"requirements without a lower bound: {missing}"


@pytest.mark.parametrize("extra", [None, *INSTALLED_EXTRAS], ids=lambda e: e or "core")
def test_installed_versions_satisfy_the_bounds(extra):
    bad = []
    for req in _requirements(extra):
        try:
            installed = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            bad.append(f"{req} is not installed")
            continue
        if not req.specifier.contains(installed, prereleases=True):
            bad.append(f"{req.name} {installed} does not satisfy {req}")
    assert not bad, "; ".join(bad)


def test_optional_extras_when_installed_satisfy_the_bounds():
    for extra in set(PROJECT["optional-dependencies"]) - set(INSTALLED_EXTRAS):
        for req in _requirements(extra):
            try:
                installed = importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                continue  # e.g. torch for --sampler gp: not part of the test install
            assert req.specifier.contains(installed, prereleases=True), f"{req.name} {installed} vs {req}"


# ------------------------------------------------------------------------------------------ Optuna

def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _optuna_uses() -> dict[str, set]:
    """What tuner/ asks of Optuna, read from its syntax trees."""
    uses = {"paths": set(), "trial": set(), "study": set(), "storage": set(), "kwargs": set()}
    for path in sorted((ROOT / "tuner").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        # a module's own classes' methods (tuner/trial/run.py's phases on its `trial`) are not Optuna's
        own = {f.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body
               if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in ast.walk(tree):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if isinstance(node, ast.ImportFrom) and node.level == 0 and module.split(".")[0] == "optuna":
                uses["paths"].update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Attribute):
                name = _dotted(node)
                if name and name.startswith("optuna."):
                    uses["paths"].add(name)
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner, method = _dotted(node.func.value), node.func.attr
            if owner in ("trial", "study") and method in own:
                continue
            if owner == "trial":
                uses["trial"].add(method)
            elif owner == "study":
                uses["study"].add(method)
            elif owner in ("study._storage", "self._storage", "storage", "storage_of(study)"):
                uses["storage"].add(method)
            target = _dotted(node.func)
            if target and target.startswith("optuna."):
                uses["kwargs"].update((target, k.arg) for k in node.keywords if k.arg)
    return uses


USES = _optuna_uses()


def _resolve(dotted: str):
    obj = optuna
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def test_the_code_scan_finds_the_optuna_calls_we_know_of():
    # Guards the scanner itself: if it found nothing, the checks below would pass vacuously.
    assert {"set_constraint", "set_user_attr"} <= USES["trial"]
    assert {"tell", "ask", "enqueue_trial"} <= USES["study"]
    assert "optuna.storages.RDBStorage" in USES["paths"]
    assert ("optuna.storages.RDBStorage", "heartbeat_interval") in USES["kwargs"]


@pytest.mark.parametrize("dotted", sorted(USES["paths"]))
def test_optuna_attribute_exists(dotted):
    try:
        _resolve(dotted)
    except AttributeError:
        pytest.fail(f"{dotted} is used in tuner/ but missing from optuna {optuna.__version__}")


@pytest.mark.parametrize("method", sorted(USES["trial"]))
def test_trial_method_exists(method):
    assert hasattr(optuna.trial.Trial, method), f"optuna.trial.Trial.{method} missing in {optuna.__version__}"


@pytest.mark.parametrize("method", sorted(USES["study"]))
def test_study_method_exists(method):
    assert hasattr(optuna.Study, method), f"optuna.Study.{method} missing in {optuna.__version__}"


@pytest.mark.parametrize("method", sorted(USES["storage"]))
def test_storage_method_exists(method):
    # Private path (study._storage): our storage is always an RDBStorage.
    assert hasattr(optuna.storages.RDBStorage, method), f"RDBStorage.{method} missing in {optuna.__version__}"


@pytest.mark.parametrize("target,keyword", sorted(USES["kwargs"]))
def test_optuna_keyword_is_accepted(target, keyword):
    params = inspect.signature(_resolve(target)).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    assert keyword in params or takes_any, f"{target}({keyword}=) not accepted by optuna {optuna.__version__}"


def test_optuna_bound_covers_the_late_apis_we_use():
    (req,) = [r for r in _requirements(None) if r.name == "optuna"]
    bound = _lower_bound(req)
    used = {
        "Trial.set_constraint": "set_constraint" in USES["trial"],
        "RDBStorage(heartbeat_stale_trial_callback=)":
            ("optuna.storages.RDBStorage", "heartbeat_stale_trial_callback") in USES["kwargs"],
        "GPSampler": "optuna.samplers.GPSampler" in USES["paths"],
        "Study.set_metric_names": "set_metric_names" in USES["study"],
    }
    too_new = {api: since for api, since in OPTUNA_SINCE.items() if used[api] and Version(since) > bound}
    assert not too_new, f"optuna>={bound} is too low for {too_new}"


def test_aiohttp_bound_covers_app_keys():
    # web.AppKey (typed application storage) is new in aiohttp 3.9.0 (its release notes).
    uses_app_key = any("web.AppKey" in p.read_text() for p in (ROOT / "tuner").rglob("*.py"))
    (req,) = [r for r in _requirements(None) if r.name == "aiohttp"]
    assert not uses_app_key or _lower_bound(req) >= Version("3.9.0"), f"{req} is too low for web.AppKey"
