"""Search-space files (YAML) -> Optuna suggestions -> the settings of one trial.

Schema (every key but `parameters` is optional):

    name: fork-1.21-linear
    description: what this space is for
    release: fork-1.21.2            # the release profile it is written for (checked against it)
    server:                         # fixed `vllm serve` options (snake_case names)
      max_model_len: 4096
      block_size: 128
    env:                            # fixed environment
      VLLM_EXPONENTIAL_BUCKETING: "false"
    parameters:                     # what Optuna searches, in order
      max_num_seqs: {type: int, low: 16, high: 128, step: 16}          # a server option
      VLLM_GRAPH_RESERVED_MEM: {type: float, low: 0.02, high: 0.4}     # an env variable
      VLLM_DECODE_BS_BUCKET_STEP: {type: categorical, choices: [8, 16, 32],
                                   when: {VLLM_EXPONENTIAL_BUCKETING: "false"}}
      enforce_eager: {type: bool}
      prompt_step: {env: VLLM_PROMPT_SEQ_BUCKET_STEP, type: int, low: 128, high: 512, log: true}
    derived:                        # computed after sampling, in order; arithmetic on earlier names
      VLLM_DECODE_BLOCK_BUCKET_MAX: "max_num_seqs * ceil(max_model_len / block_size)"

A parameter of `type: fitted` (`phase: prompt` or `phase: decode`; int low/high with optional step/log, or
`choices:` a list of counts)
is the number of buckets of that phase in a bucket set fitted to the study's workload
(tuner/space/fitted.py): the sampler picks the counts, the fit places the buckets, and the trial boots
with VLLM_BUCKETING_FROM_FILE naming that set. A space with one needs both phases, and a release that
reads bucket files.

Image buckets (`VLLM_MULTIMODAL_BUCKETS`, `VLLM_MULTIMODAL_RESOLUTIONS`) are categorical parameters (or
fixed env entries) whose choices may be YAML lists: [256, 1156] or [1280x720, [864, 480, "1-4"]]; each is
checked as the release reads it and becomes the variable's text (tuner/space/imagebuckets.py).

A parameter targets an env variable (`env: NAME`, implied for names starting with VLLM_ or PT_HPU_)
or a server option (`server: name`, implied for the known option names). `when` makes it conditional
on other parameters' (or fixed env/server) values: a value or a list of values.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..buckets import BucketConfigError, get_profile
from ..vocabulary.numbers import AUTO, length_or_auto, token_count
from .imagebuckets import IMAGE_VARIABLES, image_value_text

# `vllm serve` options a space may set; bools are presence flags.
SERVER_OPTIONS = {
    "max_num_seqs": int,
    "max_model_len": int,
    "block_size": int,
    "max_num_batched_tokens": int,
    "gpu_memory_utilization": float,
    "enforce_eager": bool,
    "enable_prefix_caching": bool,
    "tensor_parallel_size": int,
    "max_num_prefill_seqs": int,
    "num_gpu_blocks_override": int,
    "dtype": str,
    "kv_cache_dtype": str,
    "quantization": str,
    "limit_mm_per_prompt": dict,  # {modality: count or {count, width, height}}, as vLLM's JSON flag
    "speculative_config": dict,  # {"method": "mtp", "num_speculative_tokens": 1}, as vLLM's JSON flag
    "spec_method": str,  # vLLM 0.32's shortcuts into it (a space may tune spec_tokens)
    "spec_model": str,
    "spec_tokens": int,
    "mamba_cache_dtype": str,  # auto, float32, float16, bfloat16: a hybrid's conv state
    "mamba_ssm_cache_dtype": str,  # and its recurrent state
}
# token counts a space may write as vLLM's CLI takes them: 32k, 8K, and for the length auto (-1)
TOKEN_COUNTS = {"max_model_len": length_or_auto, "max_num_batched_tokens": token_count}
TYPES = ("int", "float", "categorical", "bool", "fitted")
FITTED_PHASES = ("prompt", "decode")
BUCKET_FILE_VARIABLE = "VLLM_BUCKETING_FROM_FILE"
_ENV_PREFIXES = ("VLLM_", "PT_HPU_", "PT_", "HABANA_")


class SpaceError(ValueError):
    """A search-space file problem; the message names the file, the parameter and the problem."""


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str  # a fitted count is an "int" whose target is "fitted"
    target: str  # "env", "server" or "fitted"
    key: str  # env variable name, server option name, or the fitted phase (prompt, decode)
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple = ()
    when: dict = field(default_factory=dict)

    def grid_values(self, levels: int = 4) -> list:
        """A discretisation for grid search (auto_tune style)."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "bool":
            return [False, True]
        if self.step:
            n = int(round((self.high - self.low) / self.step))
            vals = [self.low + i * self.step for i in range(n + 1)]
        elif self.log:
            vals = [self.low * (self.high / self.low) ** (i / (levels - 1)) for i in range(levels)]
        else:
            vals = [self.low + (self.high - self.low) * i / (levels - 1) for i in range(levels)]
        if self.type == "int":
            return sorted({int(round(v)) for v in vals})
        return [round(v, 6) for v in vals]


@dataclass
class TrialSettings:
    """What one trial runs with: server options, environment, and the searched values."""

    server: dict[str, Any]
    env: dict[str, str]
    params: dict[str, Any]
    fitted: dict[str, int] = field(default_factory=dict)  # phase -> bucket count of a fitted set


@dataclass
class SearchSpace:
    name: str
    description: str
    release: str | None
    server: dict[str, Any]
    env: dict[str, str]
    parameters: list[Parameter]
    derived: dict[str, str]
    source: str = "<inline>"
    notes: list[str] = field(default_factory=list)  # what the release check found
    # (counts per phase, server options) -> the bucket file of that fitted set; bound by the study
    # (tuner/space/fitted.py), since the placement depends on its workload
    fitted_resolver: Any = None

    # -- loading ------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> SearchSpace:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise SpaceError(f"{path}: search-space file not found") from None
        except IsADirectoryError:
            raise SpaceError(f"{path}: is a folder, not a search-space file") from None
        except UnicodeDecodeError as exc:
            raise SpaceError(f"{path}: not UTF-8 text (byte {exc.start}); a search space is a YAML file") from None
        except yaml.YAMLError as exc:
            raise SpaceError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
        except RecursionError:
            raise SpaceError(f"{path}: YAML nested too deeply") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<inline>") -> SearchSpace:
        if not isinstance(data, dict):
            raise SpaceError(f"{source}: the top level must be a mapping")
        unknown = set(map(str, data)) - {"name", "description", "release", "server", "env", "parameters", "derived"}
        if unknown:
            raise SpaceError(f"{source}: unknown top-level key(s): {', '.join(sorted(unknown))}")
        server = {key: _check_server_value(source, f"server.{key}", key, value)
                  for key, value in _mapping(source, "server", data.get("server")).items()}
        env = {k: _fixed_env_text(source, k, v) for k, v in _mapping(source, "env", data.get("env")).items()}
        params_raw = data.get("parameters")
        if not isinstance(params_raw, dict) or not params_raw:
            raise SpaceError(f"{source}: 'parameters' must be a non-empty mapping of name -> definition")
        params = [_parse_parameter(source, str(name), spec) for name, spec in params_raw.items()]
        derived = {k: str(v) for k, v in _mapping(source, "derived", data.get("derived")).items()}
        reading = sorted(k for k, v in derived.items() if re.search(r"\bmax_model_len\b", v))
        if server.get("max_model_len") == AUTO and reading:
            raise SpaceError(f"{source}: derived {', '.join(reading)} read(s) max_model_len, which auto leaves to the "
                             "server's KV cache: give the length (e.g. max_model_len: 32k)")
        release = data.get("release")
        if release is not None and not isinstance(release, str):
            raise SpaceError(f"{source}: release must be a profile name such as fork-1.21.2, got {release!r}")
        space = cls(
            name=str(data.get("name") or Path(source).stem),
            description=str(data.get("description") or ""),
            release=release,
            server=server,
            env=env,
            parameters=params,
            derived=derived,
            source=source,
        )
        space._check_references()
        if space.release:
            try:  # an unknown release is an error here, not at trial time
                get_profile(space.release)
            except BucketConfigError as exc:
                raise SpaceError(f"{source}: release: {exc}") from None
        return space

    @property
    def fitted_parameters(self) -> list[Parameter]:
        return [p for p in self.parameters if p.target == "fitted"]

    def _check_references(self):
        known = set(self.server) | set(self.env)
        fitted = {p.key for p in self.parameters if p.target == "fitted"}
        if fitted:
            missing = [ph for ph in FITTED_PHASES if ph not in fitted]
            if missing:
                raise SpaceError(f"{self.source}: a fitted bucket set needs a count for both phases; no fitted "
                                 f"parameter has phase: {missing[0]} (low == high fixes it)")
            if BUCKET_FILE_VARIABLE in self.env or BUCKET_FILE_VARIABLE in self.derived:
                raise SpaceError(f"{self.source}: {BUCKET_FILE_VARIABLE} is set by the fitted parameters; "
                                 "do not also fix or derive it")
        for p in self.parameters:
            if p.target == "env" and p.key in self.env:
                raise SpaceError(f"{self.source}: parameter {p.name!r}: {p.key} is also fixed under env:")
            if p.target == "server" and p.key in self.server:
                raise SpaceError(f"{self.source}: parameter {p.name!r}: {p.key} is also fixed under server:")
            for cond in p.when:
                if cond not in known:
                    raise SpaceError(
                        f"{self.source}: parameter {p.name!r}: 'when' refers to {cond!r}, "
                        "which is not an earlier parameter nor a fixed setting"
                    )
            known |= {p.name} if p.target == "fitted" else {p.name, p.key}  # a phase is not a setting
        for name, expr in self.derived.items():
            for ref in _expression_names(self.source, name, expr):
                if ref not in known:
                    raise SpaceError(f"{self.source}: derived {name!r}: unknown name {ref!r} in {expr!r}")
            known.add(name)

    # -- release check ---------------------------------------------------------------------------------
    def check_release(self, release: str, allow_unknown: bool = False) -> list[str]:
        """Refuse variables no release reads (a typo; tuner/buckets/names.py); drop those this release
        ignores, say so once.

        A variable another release reads stays a warning: that is how one space serves several
        releases. Only the release's own families (VLLM_*, PT_HPU_*) are judged; other names belong to
        other components and pass through. `allow_unknown` (tune --allow-unknown) keeps an unknown
        fixed env: entry, with a note; searched and derived variables must be known.
        """
        from ..buckets import names
        from ..buckets.runtime import reads_variable

        profile = get_profile(release)
        for p in self.fitted_parameters:
            if not reads_variable(profile, BUCKET_FILE_VARIABLE):
                raise SpaceError(f"{self.source}: parameter {p.name!r}: release {profile.name} cannot read a "
                                 f"bucket file ({BUCKET_FILE_VARIABLE}), so it cannot boot a fitted bucket set")
        known = names.known_variables()
        kept, notes, ignored = [], [], set()
        for p in self.parameters:
            if p.target != "env" or not names.judged(p.key) or p.key in names.OUTSIDE_BUCKETING:
                kept.append(p)
                continue
            if p.key not in known:
                raise SpaceError(f"{self.source}: parameter {p.name!r}: no release reads {p.key}"
                                 f"{names.did_you_mean(p.key)}")
            try:
                strategies = self._possible_strategies(profile, p)
            except BucketConfigError as exc:  # a strategy switch value the release refuses
                raise SpaceError(f"{self.source}: parameter {p.name!r}: {exc}") from None
            if any(reads_variable(profile, p.key, s) for s in strategies) or (
                    p.key in names.release_variables(profile.name)
                    and not any(p.key in profile.bucket_variables(s) for s in profile.strategies)):
                kept.append(p)
            elif p.key not in ignored:
                ignored.add(p.key)
                others = names.readers(p.key)
                notes.append(
                    f"{p.name}: {profile.name} does not read {p.key} under {'/'.join(sorted(strategies))} "
                    f"bucketing ({names.span(others) if others else 'other releases'} read it); not searched"
                )
        for name in self.derived:
            if names.judged(name) and name not in known:
                raise SpaceError(f"{self.source}: derived {name!r}: no release reads {name}"
                                 f"{names.did_you_mean(name)}")
        try:
            notes += names.check_names(self.env, profile.name, where="env:", allow_unknown=allow_unknown)
            for p in kept:  # a choice the release cannot parse would stop every trial that draws it
                if p.target == "env" and p.type in ("categorical", "bool"):
                    for v in (p.choices if p.type == "categorical" else (False, True)):
                        notes += names.check_values({p.key: _env_text(v)}, profile.name,
                                                    where=f"parameter {p.name!r}:")
        except (names.UnknownVariableError, names.BadValueError) as exc:
            raise SpaceError(f"{self.source}: {exc}") from None
        self.parameters = kept
        self.notes = notes
        return notes

    def _possible_strategies(self, profile, param: Parameter) -> set[str]:
        switch_params = [q for q in self.parameters if q.target == "env" and _is_strategy_switch(profile, q.key)]
        envs = [dict(self.env)]
        for q in switch_params:
            allowed = param.when.get(q.name, param.when.get(q.key))
            values = q.grid_values() if allowed is None else (allowed if isinstance(allowed, list) else [allowed])
            envs = [{**e, q.key: _env_text(v)} for e in envs for v in values]
        return {profile.select_strategy(e)[0] for e in envs}

    # -- sampling ----------------------------------------------------------------------------------------
    def suggest(self, trial) -> TrialSettings:
        """Ask an Optuna trial for values (define-by-run: unmet conditions are not asked)."""
        values: dict[str, Any] = {}
        for p in self.parameters:
            if not self.condition_met(p, values):
                continue
            values[p.name] = _suggest_one(trial, p)
        return self.settings_for(values)

    def suggest_fixed(self, trial, values: dict[str, Any]) -> dict[str, Any]:
        """Ask an Optuna trial only for the parameters in `values` (enqueued with them: it returns them), so
        that a trial whose settings come from elsewhere (a baseline) records the space's values it has."""
        out = {}
        for p in self.parameters:
            if p.name in values:
                out[p.name] = _suggest_one(trial, p)
        return out

    def settings_for(self, values: dict[str, Any]) -> TrialSettings:
        """Fixed settings + searched values + derived values -> a trial's server options and env."""
        server = dict(self.server)
        env = dict(self.env)
        params, fitted = {}, {}
        for p in self.parameters:
            if p.name not in values or not self.condition_met(p, params):
                continue
            v = values[p.name]
            params[p.name] = v
            if p.target == "env":
                env[p.key] = _env_text(v)
            elif p.target == "fitted":
                fitted[p.key] = int(v)
            else:
                server[p.key] = v
        scope = {**server, **{k: _number(v) for k, v in env.items()}, **params}
        for name, expr in self.derived.items():
            v = _evaluate(expr, scope, self.source, name)
            scope[name] = v
            if name in SERVER_OPTIONS:
                server[name] = v
            else:
                env[name] = _env_text(v)
        if fitted:
            if self.fitted_resolver is None:
                raise SpaceError(f"{self.source}: fitted bucket counts need the study's workload to place the "
                                 "buckets (tuner.space.fitted.bind_fitted)")
            env[BUCKET_FILE_VARIABLE] = self.fitted_resolver(fitted, server)
        return TrialSettings(server=server, env=env, params=params, fitted=fitted)

    def condition_met(self, p: Parameter, sampled: dict[str, Any]) -> bool:
        for cond, allowed in p.when.items():
            current = sampled.get(cond, self.env.get(cond, self.server.get(cond)))
            allowed_list = allowed if isinstance(allowed, list) else [allowed]
            if _env_text(current) not in {_env_text(a) for a in allowed_list}:
                return False
        return True

    def grid(self, levels: int = 4) -> dict[str, list]:
        return {p.name: p.grid_values(levels) for p in self.parameters}


# ------------------------------------------------------------------------------------------ helpers

def known_variables() -> frozenset[str]:
    """Every VLLM_*/PT_HPU_* name some release reads (kept here for callers; tuner/buckets/names.py)."""
    from ..buckets.names import known_variables as known

    return known()


def _is_strategy_switch(profile, key: str) -> bool:
    return any(key in profile.strategy_env(s) for s in profile.strategies)


def _parse_parameter(source: str, name: str, spec: Any) -> Parameter:  # noqa: C901 (one validation per parameter type and key, each with its own message)
    where = f"{source}: parameter {name!r}"
    if not isinstance(spec, dict):
        raise SpaceError(f"{where}: definition must be a mapping, got {spec!r}")
    unknown = set(spec) - {"type", "env", "server", "low", "high", "step", "log", "choices", "when", "phase"}
    if unknown:
        raise SpaceError(f"{where}: unknown key(s): {', '.join(sorted(unknown))}")
    ptype = spec.get("type")
    if ptype not in TYPES:
        raise SpaceError(f"{where}: type must be one of {', '.join(TYPES)}, got {ptype!r}")
    if ptype == "fitted":
        return _parse_fitted(where, name, spec)
    if "phase" in spec:
        raise SpaceError(f"{where}: phase: belongs to type: fitted parameters")
    if "env" in spec and "server" in spec:
        raise SpaceError(f"{where}: give either env: or server:, not both")
    if "env" in spec:
        target, key = "env", str(spec["env"])
    elif "server" in spec:
        target, key = "server", str(spec["server"])
    elif name in SERVER_OPTIONS:
        target, key = "server", name
    elif name.startswith(_ENV_PREFIXES):
        target, key = "env", name
    else:
        raise SpaceError(f"{where}: say what it sets with env: NAME or server: option")
    if target == "server" and key not in SERVER_OPTIONS:
        raise SpaceError(f"{where}: unknown server option {key!r}; known: {', '.join(SERVER_OPTIONS)}")
    when = spec.get("when") or {}
    if not isinstance(when, dict):
        raise SpaceError(f"{where}: when must map parameter names to allowed values")
    kwargs: dict[str, Any] = {"when": dict(when)}
    if ptype in ("int", "float"):
        for bound in ("low", "high"):
            if not isinstance(spec.get(bound), (int, float)) or isinstance(spec.get(bound), bool):
                raise SpaceError(f"{where}: {bound} must be a number, got {spec.get(bound)!r}")
        low, high = spec["low"], spec["high"]
        if ptype == "int" and (int(low) != low or int(high) != high):
            raise SpaceError(f"{where}: int bounds must be integers, got low={low}, high={high}")
        if low > high:
            raise SpaceError(f"{where}: low={low} is greater than high={high}")
        step, log = spec.get("step"), bool(spec.get("log", False))
        if step is not None and (not isinstance(step, (int, float)) or step <= 0):
            raise SpaceError(f"{where}: step must be a positive number, got {step!r}")
        if log and step is not None and ptype == "float":
            raise SpaceError(f"{where}: a float parameter cannot have both step and log (Optuna refuses it)")
        if log and low <= 0:
            raise SpaceError(f"{where}: log scale needs low > 0, got {low}")
        kwargs.update(low=low, high=high, step=step, log=log)
    elif ptype == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{where}: categorical needs a non-empty list of choices")
        kwargs["choices"] = tuple(_check_server_value(where, "choices", key, c) if target == "server"
                                  and key in TOKEN_COUNTS else c for c in choices)
    if target == "server" and SERVER_OPTIONS[key] is bool and ptype != "bool":
        raise SpaceError(f"{where}: server option {key} is a flag; use type: bool")
    if target == "env" and key in IMAGE_VARIABLES:
        kwargs["choices"] = _image_choices(where, key, ptype, kwargs.get("choices", ()))
    return Parameter(name=name, type=ptype, target=target, key=key, **kwargs)


def _parse_fitted(where: str, name: str, spec: dict) -> Parameter:
    """`type: fitted`: a bucket count for one phase, searched as an int (low/high) or from `choices`."""
    phase = spec.get("phase")
    if phase not in FITTED_PHASES:
        raise SpaceError(f"{where}: a fitted parameter needs phase: prompt or phase: decode, got {phase!r}")
    if "env" in spec or "server" in spec:
        raise SpaceError(f"{where}: a fitted parameter sets the bucket file; it takes no env: or server:")
    when = spec.get("when") or {}
    if not isinstance(when, dict):
        raise SpaceError(f"{where}: when must map parameter names to allowed values")
    if "choices" in spec:
        choices = spec["choices"]
        if (not isinstance(choices, list) or not choices or set(spec) & {"low", "high", "step", "log"}
                or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in choices)):
            raise SpaceError(f"{where}: choices must be a non-empty list of bucket counts (integers >= 1), "
                             f"without low/high/step/log; got {choices!r}")
        return Parameter(name=name, type="categorical", target="fitted", key=phase, choices=tuple(choices),
                         when=dict(when))
    for bound in ("low", "high"):
        value = spec.get(bound)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpaceError(f"{where}: {bound} must be a bucket count (an integer >= 1), got {value!r}")
    if spec["low"] > spec["high"]:
        raise SpaceError(f"{where}: low={spec['low']} is greater than high={spec['high']}")
    step = spec.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 1):
        raise SpaceError(f"{where}: step must be a positive integer, got {step!r}")
    return Parameter(name=name, type="int", target="fitted", key=phase, low=spec["low"], high=spec["high"],
                     step=step, log=bool(spec.get("log", False)), when=dict(when))


def _image_choices(where: str, key: str, ptype: str, choices: tuple) -> tuple[str, ...]:
    """An image-bucket variable's choices as the release's text, each checked as it reads them."""
    if ptype != "categorical":
        raise SpaceError(f"{where}: {key} is a list; search it with type: categorical and choices: a list of "
                         "bucket lists (or resolution lists)")
    texts = []
    for choice in choices:
        try:
            text = image_value_text(key, choice)
        except ValueError as exc:
            raise SpaceError(f"{where}: {key} choice {exc}") from None
        if text in texts:
            raise SpaceError(f"{where}: {key} choices {choice!r} and an earlier one are the same list ({text!r})")
        texts.append(text)
    return tuple(texts)


def _fixed_env_text(source: str, key: str, value: Any) -> str:
    if key not in IMAGE_VARIABLES:
        return _env_text(value)
    try:
        return image_value_text(key, value)
    except ValueError as exc:
        raise SpaceError(f"{source}: env: {key} {exc}") from None


def _mapping(source: str, key: str, value: Any) -> dict[str, Any]:
    """A `key:` section as a dict with text keys; absent or empty is {}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpaceError(f"{source}: '{key}' must be a mapping of name -> value, got {value!r}"[:300])
    return {str(k): v for k, v in value.items()}


def _check_server_value(source: str, where: str, key: str, value: Any):
    """The value checked against its option's type; a token count as vLLM's CLI writes it (32k, 8K, auto) as
    the integer it means."""
    if key not in SERVER_OPTIONS:
        raise SpaceError(f"{source}: {where}: unknown server option; known: {', '.join(SERVER_OPTIONS)}")
    if key in TOKEN_COUNTS and isinstance(value, str):
        try:
            return TOKEN_COUNTS[key](value)
        except ValueError as exc:
            raise SpaceError(f"{source}: {where}: {exc}") from None
    kind = SERVER_OPTIONS[key]
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise SpaceError(f"{source}: {where}: expected {kind.__name__}, got {value!r}")
    return value


def _suggest_one(trial, p: Parameter):
    if p.type == "int":
        return trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    if p.type == "float":
        return trial.suggest_float(p.name, float(p.low), float(p.high), step=p.step, log=p.log)
    if p.type == "bool":
        return trial.suggest_categorical(p.name, [False, True])
    return trial.suggest_categorical(p.name, list(p.choices))


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".6g")
    return str(value)


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except (TypeError, ValueError):
            pass
    return text


_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_FUNCS = {
    "ceil": math.ceil, "floor": math.floor, "min": min, "max": max, "int": int, "round": round,
    "round_up": lambda v, k: math.ceil(v / k) * k,
}


def _expression_names(source: str, name: str, expr: str) -> set[str]:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise SpaceError(f"{source}: derived {name!r}: not an expression: {expr!r}") from None
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in _FUNCS}


@functools.lru_cache(maxsize=256)
def _parsed(expr: str) -> ast.Expression:
    """An expression parsed once (a plan evaluates the same few for every point of a space)."""
    return ast.parse(expr, mode="eval")


def _evaluate(expr: str, scope: dict[str, Any], source: str, name: str):
    """Arithmetic on names, + - * / // % **, and ceil/floor/min/max/int/round/round_up. Nothing else."""

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name) and node.id in scope:
            return scope[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
                raise SpaceError(f"{source}: derived {name!r}: exponent {right} in {expr!r} is too large")
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                and not node.keywords):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise SpaceError(f"{source}: derived {name!r}: unsupported or unknown element in {expr!r}")

    try:
        value = ev(_parsed(expr))
    except (ArithmeticError, TypeError, ValueError, RecursionError) as exc:
        raise SpaceError(f"{source}: derived {name!r}: {expr!r} failed with these values: {exc}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value
