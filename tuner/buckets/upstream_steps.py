"""Runs a release's own bucketing code, with its runner's steps (JSON lines in, JSON lines out).

A standalone script (standard library only, no import of this project): it runs inside the interpreter
that has the upstream modules, either
* the maintainers' differential sweep (tools/bucket_sweep): an interpreter with numpy and packaging, and
  each request names an extracted upstream tree (`tree`), or
* a node's own interpreter (tuner/buckets/owncode.py, the release's code as a check before a study):
  requests without a tree import the installed packages.
Each request names a release family and tag and the inputs. The upstream modules are imported afresh
for every request (their singletons and cached configs would otherwise leak between configurations);
the runner-side steps of each release are performed explicitly (see RUNNER STEPS below); the answer is
the strategy, both bucket lists in upstream's order, or the exception upstream raised. No upstream code
lives here: it is imported or, for fork 1.17/1.18 whose bucketing sits inside the model runner next to
torch/habana imports, the few bucketing functions are lifted out of the file with the ast module and
executed unchanged. Hardware probes are answered from PROBE_ENV and a fused-SDPA stub, so nothing here
touches a device (none of them changes a bucket list).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import itertools
import json
import logging
import math
import operator
import os
import signal
import sys
import types
import typing
from types import SimpleNamespace

# Values of hardware/software probes the config frameworks would run (none is read by bucketing).
PROBE_ENV = {
    "VLLM_HW": "gaudi2", "VLLM_BUILD": "1.22.0.0", "VLLM_BRIDGE_MODE": "lazy", "VLLM_MODEL_TYPE": "llama",
    "VLLM_FUSED_BLOCK_SOFTMAX_ADJUSTMENT": "false", "VLLM_PROMPT_USE_FUSEDSDPA": "true",
}
_PKGS = ("vllm_hpu_extension", "vllm_gaudi", "vllm", "habana_frameworks")
# The caller's environment without its own VLLM_* / PT_HPU_* settings: only the request's env may steer
# the release (a variable exported in the shell would otherwise change the answer behind the inputs).
_BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PT_HPU_"))}
_TREES_ADDED: set[str] = set()


def _env(inp: dict) -> dict[str, str]:
    """The row's env; a bucket file stored with the row is written out and its path substituted."""
    env = dict(inp["env"])
    if "bucket_file" in inp:
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sweep-buckets-{os.getpid()}.txt")
        with open(path, "w") as f:
            f.write(inp["bucket_file"])
        env["VLLM_BUCKETING_FROM_FILE"] = path
    return env


def _installed(package: str) -> str | None:
    """Where an installed package lives, found without running its __init__ (None: not installed)."""
    spec = importlib.util.find_spec(package)
    return list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None


def _package_dir(tree: str | None, package: str) -> str | None:
    if tree is None:
        return _installed(package)
    path = os.path.join(tree, package)
    return path if os.path.isdir(path) else None


def _fresh(tree: str | None, env: dict[str, str], engine: str):
    """Forget every previously imported upstream module, point sys.path at `tree` (None: the installed
    packages), set the env."""
    for name in list(sys.modules):
        if name.split(".")[0] in _PKGS:
            del sys.modules[name]
    if tree is not None:
        if not os.path.isdir(tree):
            raise FileNotFoundError(f"upstream tree {tree} does not exist (run the extract command)")
        # Only this request's tree may be importable: a tree left from an earlier request would otherwise
        # answer for a package the current one lacks.
        sys.path[:] = [p for p in sys.path if p not in _TREES_ADDED]
        _TREES_ADDED.add(tree)
        sys.path.insert(0, tree)
    importlib.invalidate_caches()
    os.environ.clear()
    os.environ.update(_BASE_ENV)
    os.environ.update(PROBE_ENV)
    os.environ["VLLM_ENGINE_VERSION"] = engine
    os.environ.update(env)
    # vllm_gaudi/__init__.py registers the plugin with vLLM; only its extension package is needed.
    # The fused-SDPA kernel probe (feature `fsdpa_impl` / `enable_fsdpa_slicing`): present, as on a
    # Gaudi with the kernel; neither changes a bucket list.
    for name in ("habana_frameworks", "habana_frameworks.torch", "habana_frameworks.torch.hpex",
                 "habana_frameworks.torch.hpex.kernels"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["habana_frameworks.torch.hpex.kernels"].FusedSDPA = object
    gaudi_dir = _package_dir(tree, "vllm_gaudi")
    if gaudi_dir:
        pkg = types.ModuleType("vllm_gaudi")
        pkg.__path__ = [gaudi_dir]
        sys.modules["vllm_gaudi"] = pkg


def _vllm_cfg(prefix: bool):
    """The slice of VllmConfig that environment.set_vllm_config reads."""
    return SimpleNamespace(model_config=SimpleNamespace(hf_config=SimpleNamespace(model_type="llama")),
                           cache_config=SimpleNamespace(enable_prefix_caching=prefix))


def _lists(prompt, decode):
    return [list(map(int, b)) for b in prompt], [list(map(int, b)) for b in decode]


# ------------------------------------------------------------------ fork 1.17 / 1.18 (inside the runner)

_LIFTED = {"read_bucket_settings", "warmup_range", "warmup_buckets", "generate_prompt_buckets",
           "generate_decode_buckets", "round_up", "next_pow2"}
_METHODS = {"_setup_buckets", "_is_valid_bucket"}


def _lift(path: str) -> dict:
    tree = ast.parse(open(path).read())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in _LIFTED]
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        keep += [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in _METHODS]
    ns = {"os": os, "itertools": itertools, "operator": operator, "math": math,
          "logger": logging.getLogger("upstream"), **{k: getattr(typing, k) for k in typing.__all__}}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)
    return ns


def run_fork_runner(req):
    """RUNNER STEPS: 1.17 builds both lists in _setup_buckets; 1.18 builds the configs there and the
    lists in warmup_model (token-budget filter, then with LoRA the runner's _is_valid_bucket filter;
    decode blocks bounded by the KV cache size)."""
    inp = req["inputs"]
    _fresh(req.get("tree"), inp["env"], "v0")
    vllm_dir = None if req.get("tree") else _installed("vllm")
    runner = (os.path.join(req["tree"], "habana_model_runner.py") if req.get("tree") else
              os.path.join(vllm_dir or "", "worker", "habana_model_runner.py"))
    ns = _lift(runner)
    self = SimpleNamespace(max_num_seqs=inp["max_num_seqs"], block_size=inp["block_size"],
                           max_num_batched_tokens=inp["max_num_batched_tokens"],
                           lora_config=SimpleNamespace() if inp.get("lora") else None)
    self._is_valid_bucket = (lambda b: ns["_is_valid_bucket"](self, b)) if "_is_valid_bucket" in ns else None
    ns["_setup_buckets"](self)
    if "generate_prompt_buckets" not in ns:  # 1.17
        return _lists(self.prompt_buckets, self.decode_buckets)
    prompt, _ = ns["generate_prompt_buckets"](self.prompt_bs_bucket_cfg, self.prompt_seq_bucket_cfg,
                                              self.max_num_batched_tokens)
    if self.lora_config:
        prompt = [b for b in prompt if self._is_valid_bucket(b)]
    decode = ns["generate_decode_buckets"](self.decode_bs_bucket_cfg, self.decode_block_bucket_cfg,
                                           inp["num_hpu_blocks"])
    if self.lora_config:
        decode = [b for b in decode if self._is_valid_bucket(b)]
    return _lists(prompt, decode)


def _refuse_spec_with_contiguous_pa(spec: int, contiguous: bool):
    """RUNNER STEP (fork 1.20+): speculative decoding with contiguous PA fails at start-up."""
    if spec and contiguous:
        raise ValueError("Speculative decoding is not supported with contiguous PA, "
                         "please set VLLM_CONTIGUOUS_PA=false")


# ----------------------------------------------------------------------- vllm-hpu-extension, 2-D API

def run_ext_context(req):
    """RUNNER STEPS (fork 1.19-1.21 v0 runner): max_num_prefill_seqs = --max-num-prefill-seqs or
    max_num_seqs; 1.21.x reads VLLM_MERGED_PREFILL itself and passes it in, constructs the context
    (prompt buckets), then with prefix caching sets VLLM_CONTIGUOUS_PA=False unless already set and
    asserts it is not "true", and finally generates decode buckets from the KV block count."""
    inp = req["inputs"]
    _fresh(req.get("tree"), inp["env"], "v0")
    S, B, T, L, N = (inp[k] for k in ("max_num_seqs", "block_size", "max_num_batched_tokens",
                                      "max_model_len", "num_hpu_blocks"))
    P = inp.get("max_num_prefill_seqs") or S
    spec = inp.get("num_speculative_tokens", 0)
    if os.path.isdir(os.path.join(_package_dir(req.get("tree"), "vllm_hpu_extension") or "", "bucketing")):
        from vllm_hpu_extension.bucketing.common import get_bucketing_context

        merged = os.environ.get("VLLM_MERGED_PREFILL", "false").lower() == "true"
        ctx = get_bucketing_context()(S, P, B, T, merged, L)
        if inp["prefix_caching"]:
            os.environ.setdefault("VLLM_CONTIGUOUS_PA", "False")
            assert os.environ.get("VLLM_CONTIGUOUS_PA", "").lower() != "true", "Contiguous PA doesn't support APC"
        _refuse_spec_with_contiguous_pa(spec, os.environ.get("VLLM_CONTIGUOUS_PA", "true").lower() == "true")
        if inp.get("pooling"):  # RUNNER STEP: pooling models have no decode phase, no decode buckets
            return _lists(ctx.prompt_buckets, []) + (type(ctx).__name__,)
        ctx.generate_decode_buckets(N)
    else:
        from vllm_hpu_extension.bucketing import HPUBucketingContext

        ctx = HPUBucketingContext(S, P, B, T)
        if req["release"] == "1.20":  # 1.19 has no such check
            _refuse_spec_with_contiguous_pa(spec, os.environ.get("VLLM_CONTIGUOUS_PA", "true").lower() == "true")
        ctx.generate_prompt_buckets()
        ctx.generate_decode_buckets(N)
    strategy = type(ctx).__name__
    return _lists(ctx.prompt_buckets, ctx.decode_buckets) + (strategy,)


# ---------------------------------------------------------------- HPUBucketingManager (3-D, both repos)

def run_manager(req):
    """RUNNER STEPS: the platform hands the engine's prefix caching (and model type) to the config
    framework (set_vllm_config); the fork v0 runner passes max_num_prefill_seqs (flag or max_num_seqs);
    vllm-gaudi's v1 runner passes 1 (v0.10.1) or VLLM_PROMPT_BS_BUCKET_MAX else 1, and max_num_seqs under
    merged prefill (v0.15.1+); bucketing off (VLLM_ENABLE_BUCKETING) skips generation; v0.15.1 with
    unified attention generates unified buckets only; main's runner clears skip_decode_block_clamp for
    dense models. The KV block count is set after profiling, before any generation."""
    inp = req["inputs"]
    gaudi = req["family"] == "gaudi"
    _fresh(req.get("tree"), _env(inp), "v1" if gaudi else "v0")
    pkg = "vllm_gaudi.extension" if gaudi else "vllm_hpu_extension"
    environment = __import__(f"{pkg}.environment", fromlist=["x"])
    runtime = __import__(f"{pkg}.runtime", fromlist=["x"])
    common = __import__(f"{pkg}.bucketing.common", fromlist=["x"])
    environment.set_vllm_config(_vllm_cfg(inp["prefix_caching"]))
    cfg = runtime.get_config()
    if hasattr(runtime, "finalize_config"):
        runtime.finalize_config()
    S, B, T, L, N = (inp[k] for k in ("max_num_seqs", "block_size", "max_num_batched_tokens",
                                      "max_model_len", "num_hpu_blocks"))
    if gaudi:
        rel = req["release"]
        if rel == "v0.10.1":
            P = 1
        else:
            P = cfg.VLLM_PROMPT_BS_BUCKET_MAX if cfg.VLLM_PROMPT_BS_BUCKET_MAX is not None else 1
            if cfg.merged_prefill:
                P = S
        unified = rel == "v0.15.1" and cfg.unified_attn
        if unified:
            assert cfg.use_contiguous_pa, 'Unified attn requires contiguous_pa!'
            assert cfg.merged_prefill, 'Unified attn requires merged_prefill!'
        if not cfg.use_bucketing:
            return [], [], "off"
    else:
        P = inp.get("max_num_prefill_seqs") or S
        unified = False
        _refuse_spec_with_contiguous_pa(inp.get("num_speculative_tokens", 0), cfg.use_contiguous_pa)
    m = common.HPUBucketingManager()
    extra = {}
    if gaudi and req["release"] != "v0.10.1":
        # Model-dependent runner arguments (speculative decoding, mamba chunking).
        extra = {"num_speculative_tokens": inp.get("num_speculative_tokens", 0),
                 "mamba_chunk_size": inp.get("mamba_chunk_size", 0)}
        if req["release"] != "v0.15.1":
            extra["mamba_chunk_size_is_explicit"] = inp.get("mamba_chunk_size_explicit", True)
    m.initialize(max_num_seqs=S, max_num_prefill_seqs=P, block_size=B, max_num_batched_tokens=T, max_model_len=L,
                 **extra)
    m.num_hpu_blocks = N
    if unified:
        m.generate_unified_buckets()
        return [], [], "unified:" + json.dumps([list(map(int, b)) for b in m.unified_buckets])
    pooling = inp.get("pooling") and (not gaudi or req["release"] != "v0.10.1")
    if pooling and not gaudi and req["release"] in ("1.22", "main"):
        # RUNNER STEP (fork 1.22 / habana_main): the v0 engine skips initialize_cache for pooling models
        # (llm_engine.py: `if runner_type != "pooling": self._initialize_kv_caches()`), the only place the
        # worker generates buckets; warmup_model (called from load_model) sees the empty lists. 1.23
        # generates the prompt buckets in warmup_model instead (vllm-fork #2098).
        return [], [], _strategy_name(m)
    m.generate_prompt_buckets()
    # RUNNER STEP: no decode buckets for pooling models (fork 1.22+ worker, vllm-gaudi v0.15.1+).
    if hasattr(m, "skip_decode_block_clamp"):
        m.skip_decode_block_clamp = bool(inp.get("skip_decode_block_clamp"))
    if pooling:
        m.decode_buckets = []
    else:
        saved = m.block_size
        if gaudi and req["release"] not in ("v0.10.1", "v0.15.1") and inp.get("decode_block_size"):
            m.block_size = inp["decode_block_size"]  # hybrid models: the attention kernel's block size
        try:
            m.generate_decode_buckets()
        finally:
            m.block_size = saved
    return _lists(m.prompt_buckets, m.decode_buckets) + (_strategy_name(m),)


def _strategy_name(m) -> str:
    """The class of the strategy the manager picks from the env ("" where it has no such method)."""
    if not hasattr(m, "get_bucketing_strategy"):
        return ""
    with contextlib.redirect_stderr(io.StringIO()):
        return type(m.get_bucketing_strategy()).__name__


FAMILIES = {"fork_runner": run_fork_runner, "ext_context": run_ext_context, "manager": run_manager,
            "gaudi": run_manager}


HANG_SECONDS = int(os.environ.get("UPSTREAM_STEPS_HANG_SECONDS", "30"))


class _Hung(BaseException):
    pass


def _hung(signum, frame):
    raise _Hung()


def main():
    # This file sits next to the engine's own `vllm_gaudi` package (tuner/buckets/vllm_gaudi): its folder,
    # which Python puts first on sys.path for a script, must not answer for the release's packages.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    out = sys.stdout
    sys.stdout = sys.stderr  # upstream prints must not corrupt the answers
    logging.disable(logging.CRITICAL)
    signal.signal(signal.SIGALRM, _hung)
    for line in sys.stdin:
        req = json.loads(line)
        signal.alarm(HANG_SECONDS)
        try:
            res = FAMILIES[req["family"]](req)
            prompt, decode = res[0], res[1]
            answer = {"prompt": prompt, "decode": decode}
            if len(res) > 2:
                answer["upstream_strategy"] = res[2]
        except _Hung:
            answer = {"skip": f"no answer within {HANG_SECONDS} s (e.g. a ramp-up loop that never ends)"}
        except Exception as exc:  # upstream raising is a result, recorded with its type and text
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            signal.alarm(0)
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
