"""`tune --release auto` and the release's own code as a check: what a study does about the node's release
before its first trial and after its last (tuner/buckets/detect.py, tuner/buckets/owncode.py).

On `--backend vllm` the release is read off the node unless --release names one: the profile, and why,
in one line; a version no profile models in one more line; both recorded in the study (user attr
"release_detection") for the report. Where the release's bucketing module is importable by the
interpreter that runs `vllm serve`, its lists are compared with the engine's for each configuration
the study predicts (user attr "release_check"; differences in release_check.jsonl).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from . import UsageError

AUTO = "auto"


def choose_release(args, space, vllm_command: list[str]) -> tuple[str | None, dict | None, list[str]]:
    """(release profile or None, the detection to record or None, lines to print)."""
    from ..buckets import BucketConfigError, get_profile
    from ..buckets.detect import DetectError, detect

    given = args.release
    if given and given != AUTO:
        return given, None, []
    if args.backend == "sim":
        if given == AUTO:
            raise UsageError("--release auto reads the node's installed vLLM packages; the simulator needs a profile "
                             "name, e.g. --release gaudi-main (`bucket-tuner profiles` lists them)")
        return space.release, None, []
    try:
        found = detect(vllm_command)
    except DetectError as exc:
        if given == AUTO:
            raise UsageError(str(exc)) from None
        fallback = space.release or "none (generic vLLM)"
        return space.release, None, [f"[yellow]release:[/] {exc}; using the space's release: {fallback}"]
    if found.profile is None and space.release:
        # No Gaudi package metadata (a source tree on PYTHONPATH has none): the space's word stands.
        return space.release, found.describe(), [f"[yellow]release:[/] {found.why}; using the space's release "
                                                  f"{space.release}"]
    said = found.profile or "no profile (generic vLLM)"
    lines = [f"release: {said} (--release auto: {found.why}; {found.installed.shown()})"]
    if found.nearest:
        lines.append(f"[yellow]release:[/] {found.nearest}")
    if space.release and found.profile:
        try:
            differs = get_profile(space.release).name != get_profile(found.profile).name
        except BucketConfigError:
            differs = True
        if differs:
            lines.append(f"[yellow]release:[/] the space was written for {space.release}; the node runs "
                         f"{found.profile}, which the study uses (--release {space.release} to keep the space's)")
    return found.profile, found.describe(), lines


@contextlib.contextmanager
def release_check(args, ctx, study_dir: Path, console, printer):
    """Within the block, the study's predictions take each configuration's lists from the release's own
    code where the node has it (start_check); differences are printed with `printer` (the study's live
    console). Yields the OwnCodeCheck or None."""
    from rich.markup import escape

    from ..buckets.owncode import active

    check = start_check(args, ctx, study_dir, console)
    if check is not None:
        check.say = lambda line: printer(escape(line))
    try:
        with active(check):
            yield check
    finally:
        if check is not None:
            check.close()


def start_check(args, ctx, study_dir: Path, console):
    """The release's own code as a check (an OwnCodeCheck), or None where it cannot run; says which."""
    from ..buckets.detect import serve_python
    from ..buckets.owncode import OwnCodeCheck

    if args.backend != "vllm" or ctx.release is None or getattr(args, "no_release_check", False):
        return None
    python = serve_python(ctx.backend.vllm_command)
    if python is None:
        console.print("release code check: off (--vllm-command is not a Python script; its interpreter is unknown)")
        return None
    study_dir.mkdir(parents=True, exist_ok=True)
    check = OwnCodeCheck(ctx.release, python, out_file=study_dir / "release_check.jsonl",
                         say=lambda line: console.print(line, markup=False, soft_wrap=True))
    why_not = check.available()
    if why_not:
        console.print(f"release code check: off ({why_not})")
        check.close()
        return None
    console.print(f"release code check: on ({check.module} in {python}); each configuration's buckets are "
                  "compared with the release's own before use")
    return check


def record_release(study, ctx, check, console) -> None:
    """Record the detection (with the server log's witness) and the check's outcome in the study."""
    from ..buckets.detect import Detection, Installed, log_witness
    from ..vocabulary.record import records

    detected = ctx.release_detection
    if detected:
        logged = next((v for rec in records(study.get_trials(deepcopy=False))
                       if (v := rec.observed.get("engine_version"))), None)
        det = Detection(detected["profile"], detected["why"],
                        Installed(detected["python"], detected["packages"], detected["commits"]), detected["nearest"])
        witness = log_witness(det, logged)
        detected = {**detected, "logged_version": logged, "log_witness": witness}
        if witness:
            console.print(f"[yellow]release:[/] {witness}")
        study.set_user_attr("release_detection", detected)
    if check is not None:
        summary = check.summary()
        study.set_user_attr("release_check", summary)
        console.print(f"release code check: {summary['checked']} configuration(s) run through {summary['module']}, "
                      f"{summary['n_differences']} differ from the engine"
                      + (f" (both lists in {summary['file']})" if summary["n_differences"] else ""), soft_wrap=True)
