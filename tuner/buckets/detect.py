"""Which release profile a node runs, read off its installed packages (`tune --release auto`).

The interpreter that runs `vllm serve` is asked for the package metadata of vllm, vllm-gaudi and
vllm-hpu-extension (importlib.metadata; pip's direct_url.json adds the commit of a git install). The
plugin's version names its profile; the fork names its release in vLLM's version (setuptools-scm makes
"0.9.0.1+gaudi.1.22.0" of the tag v0.9.0.1+Gaudi-1.22.0) or pins an extension commit that only its
release uses. A version no profile models picks the nearest one and says so in one line; the server's
log is the second witness (`log_witness`: the version it prints against the metadata's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from .base import BucketConfigError

PACKAGES = ("vllm", "vllm_gaudi", "vllm_hpu_extension")  # distribution names as importlib.metadata takes them

# The metadata query, run by the node's interpreter (standard library only; prints one JSON object).
_QUERY = f"PACKAGES = {PACKAGES!r}\n" + r"""
import importlib.metadata as md, json, sys
out = {"python": sys.executable}
for name in PACKAGES:
    dist = None
    for spelling in (name, name.replace("_", "-")):
        try:
            dist = md.distribution(spelling)
            break
        except md.PackageNotFoundError:
            pass
    if dist is None:
        continue
    entry = {"version": dist.version}
    try:
        text = dist.read_text("direct_url.json")
    except Exception:
        text = None
    if text:
        try:
            entry["direct_url"] = json.loads(text)
        except ValueError:
            pass
    out[name] = entry
print(json.dumps(out))
"""

# vllm-gaudi: (profile, the version setuptools-scm gives that commit, commit). gaudi-0.27.0 is the alias
# of gaudi-0.26.0 for v0.27.0rc0; main is 51 commits past v0.27.0rc0.
GAUDI_RELEASES = (
    ("gaudi-0.10.1", "0.10.1", "ab65f9ba2abbaf4c30f8cdb24a62c731f8bbdf4c"),
    ("gaudi-0.15.1", "0.15.1", "5d6a2db38ea74249a2359a3f75db391a47b70495"),
    ("gaudi-0.26.0", "0.26.0", "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"),
    ("gaudi-0.27.0", "0.27.0rc0", "d01a3caecd8d818c29c06af56591e40eb4e3dcca"),
    ("gaudi-main", "0.27.0rc1.dev51", "091bbadda10bee4fd3f6d0efc1844d2610dd2707"),
)
# The fork: (profile, Gaudi release its tag names, vLLM base version, the extension commit it pins).
# 1.17/1.18 have no extension (their bucketing is in the runner); habana_main and 1.23 both pin f1d9275.
FORK_RELEASES = (
    ("fork-1.17", (1, 17), "0.5.3.post1", None),
    ("fork-1.18", (1, 18), "0.5.3.post1", None),
    ("fork-1.19", (1, 19), "0.6.4.post2", "4ff86cf"),
    ("fork-1.20", (1, 20), "0.6.6.post1", "d4b0d38"),
    ("fork-1.21.0", (1, 21, 0), "0.7.2", "2b4ba56"),
    ("fork-1.21.2", (1, 21, 2), "0.7.2", "29bc7a4"),
    ("fork-1.22", (1, 22), "0.9.0.1", "8211e0b"),
    ("fork-main", None, None, "7717587"),
    ("fork-1.23", (1, 23), "0.9.0.1", "f1d9275"),
)
_EXTENSION_PINS = {"f1d9275": ("fork-main", "fork-1.23")}  # one pin, two releases
# The release in a fork version's local label: "gaudi.1.22.0", "Gaudi-1.21.2" (not the build's driver
# suffix "gaudi122", which names the driver the wheel was built on).
_FORK_LABEL = re.compile(r"gaudi[.\-_](\d+)[.\-_](\d+)(?:[.\-_](\d+))?", re.IGNORECASE)


class DetectError(BucketConfigError):
    """The node's release cannot be read: the interpreter is unknown or cannot be asked."""


@dataclass(frozen=True)
class Installed:
    """What the interpreter that runs `vllm serve` has installed."""

    python: str
    versions: dict[str, str] = field(default_factory=dict)  # distribution -> version
    commits: dict[str, str] = field(default_factory=dict)  # distribution -> git commit (pip's direct_url.json)

    def shown(self) -> str:
        parts = [f"{name.replace('_', '-')} {v}" + (f" (git {self.commits[name][:9]})" if name in self.commits
                                                     else "") for name, v in self.versions.items()]
        return ", ".join(parts) or "none of vllm, vllm-gaudi, vllm-hpu-extension"


@dataclass(frozen=True)
class Detection:
    """The profile picked for the node, and why, in words a user can check."""

    profile: str | None  # None: no Gaudi release installed (a generic vLLM)
    why: str  # one line: the package and version that decided it
    installed: Installed
    nearest: str | None = None  # one line when no profile models the installed version exactly

    def describe(self) -> dict[str, Any]:
        """What the study records (user attr "release_detection") and the report shows."""
        return {"profile": self.profile, "why": self.why, "nearest": self.nearest, "python": self.installed.python,
                "packages": dict(self.installed.versions), "commits": dict(self.installed.commits)}


# ----------------------------------------------------------------------------- reading the node

def serve_python(vllm_command: list[str]) -> str | None:
    """The interpreter behind --vllm-command: the command itself when it is a python, else the
    interpreter its script names on the #! line (`#!/usr/bin/env python3` resolved on PATH). None when
    the command is not a script (a binary, a container wrapper)."""
    if not vllm_command:
        return None
    exe = shutil.which(vllm_command[0]) or vllm_command[0]
    if re.fullmatch(r"python[\d.]*", Path(exe).name):
        return exe
    try:
        with open(exe, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        return shutil.which(words[0]) if words else None
    return words[0]


def installed_packages(python: str | None = None, timeout_s: float = 60.0) -> Installed:
    """The metadata of vllm / vllm-gaudi / vllm-hpu-extension as `python` sees them (None: this
    interpreter, in process)."""
    if python is None or _same_interpreter(python):
        ns: dict[str, Any] = {}
        out = _capture(lambda: exec(_QUERY, ns))  # noqa: S102 - our own constant query
    else:
        try:
            done = subprocess.run([python, "-c", _QUERY], capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise DetectError(f"--release auto: the interpreter {python} behind --vllm-command does not exist; "
                              "give --release NAME (`bucket-tuner profiles` lists them)") from None
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DetectError(f"--release auto: cannot ask {python} for its packages ({exc}); give --release "
                              "NAME") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise DetectError(f"--release auto: {python} failed to report its packages ({last}); give --release "
                              "NAME")
        out = done.stdout
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise DetectError(f"--release auto: {python} answered {out[:120]!r}, not package metadata") from None
    versions, commits = {}, {}
    for name in PACKAGES:
        entry = data.get(name)
        if not entry:
            continue
        versions[name] = str(entry.get("version", ""))
        vcs = (entry.get("direct_url") or {}).get("vcs_info") or {}
        commit = vcs.get("commit_id") or vcs.get("requested_revision")
        if commit:
            commits[name] = str(commit)
    return Installed(python=str(data.get("python") or python or sys.executable), versions=versions, commits=commits)


def _same_interpreter(python: str) -> bool:
    # By path, not by file: every venv's python links to the same binary, yet sees other packages.
    return os.path.abspath(python) == os.path.abspath(sys.executable)


def _capture(fn) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn()
    return buf.getvalue()


def detect(vllm_command: list[str], timeout_s: float = 60.0) -> Detection:
    """The profile of the release behind `vllm_command` (raises DetectError when it cannot be read)."""
    python = serve_python(vllm_command)
    if python is None:
        raise DetectError(f"--release auto: cannot tell which Python runs {' '.join(vllm_command)!r} (not a "
                          "Python script); give --release NAME (`bucket-tuner profiles` lists them)")
    return pick_profile(installed_packages(python, timeout_s))


# ----------------------------------------------------------------------------- choosing the profile

def pick_profile(inst: Installed) -> Detection:
    if "vllm_gaudi" in inst.versions:
        return _pick_gaudi(inst)
    if "vllm_hpu_extension" in inst.versions or _fork_label(inst.versions.get("vllm", "")):
        return _pick_fork(inst)
    if "vllm" in inst.versions:
        return Detection(None, f"vllm {inst.versions['vllm']} without vllm-gaudi or vllm-hpu-extension for "
                               f"{inst.python}: not a Gaudi build, no release profile (generic vLLM)", inst)
    raise DetectError(f"--release auto: {inst.python} has none of vllm, vllm-gaudi, vllm-hpu-extension installed; "
                      "is --vllm-command the node's vLLM?")


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _pick_gaudi(inst: Installed) -> Detection:
    raw = inst.versions["vllm_gaudi"]
    said = f"vllm-gaudi {raw}"
    commit = inst.commits.get("vllm_gaudi") or _scm_commit(raw)
    if commit:
        for profile, _, full in GAUDI_RELEASES:
            if len(commit) >= 7 and full.startswith(commit.lower()):
                return Detection(profile, f"{said} is commit {full[:9]}, the code {profile} models", inst)
    v = _version(raw)
    if v is None:
        newest = GAUDI_RELEASES[-1][0]
        return Detection(newest, f"{said}: not a version this tool can order", inst,
                         nearest=f"{said} is no version a profile models; using {newest}, the newest")
    public = Version(v.public)
    keyed = [(Version(key), profile) for profile, key, _ in GAUDI_RELEASES]
    for key, profile in keyed:
        if key == public:
            return Detection(profile, f"{said} is the release {profile} models", inst)
    older = [(k, p) for k, p in keyed if k < public]
    if not older:
        profile = keyed[0][1]
        return Detection(profile, f"{said} is older than every vllm-gaudi profile", inst,
                         nearest=f"{said} is older than every profile; using {profile}, the oldest")
    key, profile = older[-1]
    if len(older) == len(keyed):
        return Detection(profile, f"{said} is newer than every vllm-gaudi profile", inst,
                         nearest=f"{said} is newer than every profile; using {profile} ({key}), the nearest")
    after = keyed[len(older)][1]
    return Detection(profile, f"{said} lies between {profile} and {after}", inst,
                     nearest=f"no profile models {said}; using {profile} ({key}), the nearest older release")


def _scm_commit(version: str) -> str | None:
    """The commit setuptools-scm writes into a dev version's local label ("0.27.0rc1.dev51+g091bbadd")."""
    m = re.search(r"\+g([0-9a-f]{7,40})\b", version)
    return m.group(1) if m else None


def _fork_label(version: str) -> tuple[int, ...] | None:
    m = _FORK_LABEL.search(version)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def _pick_fork(inst: Installed) -> Detection:
    vllm = inst.versions.get("vllm", "")
    label = _fork_label(vllm)
    if label:
        found = _fork_by_label(label)
        if found:
            return Detection(found, f"vllm {vllm} names Gaudi {'.'.join(map(str, label))}, the fork release "
                                    f"{found} models", inst)
        newest = max((r for r in FORK_RELEASES if r[1]), key=lambda r: r[1])
        if label > newest[1]:
            return Detection(newest[0], f"vllm {vllm} names Gaudi {'.'.join(map(str, label))}", inst,
                             nearest=f"vllm {vllm} (Gaudi {'.'.join(map(str, label))}) is newer than every fork "
                                     f"profile; using {newest[0]}, the nearest")
    commit = inst.commits.get("vllm_hpu_extension", "")
    base = _public(vllm) if vllm else ""
    if commit:
        for profile, _, _, pin in FORK_RELEASES:
            if pin and commit.lower().startswith(pin):
                if pin in _EXTENSION_PINS:  # habana_main and 1.23 pin the same commit: the vLLM base tells
                    profile = "fork-1.23" if base == "0.9.0.1" else "fork-main"
                    return Detection(profile, f"vllm-hpu-extension at {pin} (habana_main and 1.23 pin it) with vllm "
                                              f"{vllm or 'unknown'}: {profile}", inst)
                return Detection(profile, f"vllm-hpu-extension at {pin}, the commit {profile} pins", inst)
    by_base = [r[0] for r in FORK_RELEASES if r[2] and r[2] == base]
    if len(by_base) == 1:
        return Detection(by_base[0], f"vllm {vllm}: the base version of {by_base[0]}", inst)
    if by_base:
        return Detection(by_base[-1], f"vllm {vllm}: the base version of {', '.join(by_base)}", inst,
                         nearest=f"vllm {vllm} is the base of {' and '.join(by_base)}; using {by_base[-1]}, the newer "
                                 "(give --release to choose)")
    newest = FORK_RELEASES[-1][0]
    return Detection(newest, f"vllm-hpu-extension {inst.versions.get('vllm_hpu_extension', '?')} with vllm "
                             f"{vllm or 'unknown'}", inst,
                     nearest=f"no fork profile matches vllm {vllm or 'unknown'} and its extension; using {newest}, "
                             "the newest fork profile")


def _fork_by_label(label: tuple[int, ...]) -> str | None:
    """The fork profile of a Gaudi release number (None: no profile, or 1.21 without its patch level)."""
    if label[:2] == (1, 21):  # 1.21.0/1.21.1: the 1.21.0 code; 1.21.2/1.21.3: the 1.21.2 code (its alias)
        return None if len(label) < 3 else "fork-1.21.0" if label[2] < 2 else "fork-1.21.2"
    for profile, release, _, _ in FORK_RELEASES:
        if release and label[:2] == release[:2]:
            return profile
    return None


# ----------------------------------------------------------------------------- the log as second witness

def log_witness(detection: Detection, logged_version: str | None) -> str | None:
    """One line when the server's log contradicts the metadata (another vLLM version, or a fork release
    other than the one picked); None when it agrees or says nothing."""
    if not logged_version:
        return None
    installed = detection.installed.versions.get("vllm")
    if installed and _public(logged_version) != _public(installed):
        return (f"the server's log reports vLLM {logged_version}, the package metadata of "
                f"{detection.installed.python} vllm {installed}: --vllm-command may run another environment")
    label = _fork_label(logged_version)
    if label and detection.profile and detection.profile.startswith("fork-"):
        found = _fork_by_label(label)
        if found and found != detection.profile:
            return (f"the server's log reports vLLM {logged_version} (Gaudi {'.'.join(map(str, label))}, {found}), "
                    f"but {detection.profile} was picked from the metadata")
    return None


def _public(text: str) -> str:
    """A version without its local label ("0.9.0.1+gaudi.1.22.0" -> "0.9.0.1"); the text if unparsable."""
    v = _version(text)
    return v.public if v else text


# The readers of a log's version strings (tuner/explain/releasesigns.py) use the same tables.
fork_label = _fork_label
fork_by_label = _fork_by_label
