"""The values `--set KEY=VALUE` may give MaxText: each read as MaxText reads it, checked against the type,
bounds and choices of the recipe's release, and spelled one way.

How MaxText reads a `key=value` item (both releases): train_rl hands argv to pyconfig
(utils/model_creation_utils.py setup_configs_and_devices -> configs/pyconfig.py _initialize_pydantic:
`omegaconf.OmegaConf.from_cli(cli_args)`, both releases). omegaconf parses each value as one YAML
document with its own SafeLoader (omry/omegaconf v2.3.0/v2.3.1 omegaconf/_utils.py, 2.4 omegaconf/_yaml.py
get_yaml_loader: `1e-5` is a float, dates stay strings), a dotted key becomes a nested mapping, and
pyconfig's _prepare_for_pydantic turns a top-level string "none" (any case) into None (both releases)
before the config class validates every field with pydantic. This module parses with omegaconf
itself and validates with pydantic against the types shipped in recipes/runs/maxtext_keys/<version>.toml
(generated from each wheel by tools/generate_maxtext_keys.py).

Pure: check_value(version, key, text) is the one entry point; tests/contracts/maxtext_set_cases.py holds
the table of cases a harness can feed to each release's real config class as well.
"""

from __future__ import annotations

import ast
import enum
import json
import math
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import Field, TypeAdapter, ValidationError

from tpu_rl.recipes.errors import UserError

KEY_LIST_DIR = "maxtext_keys"  # in the recipes package: one <version>.toml per MaxText release


@dataclass(frozen=True)
class RuntimeBound:
    """A bound the trainer enforces after the config class accepted the value, with where it says so."""

    ge: int
    why: str


# Sources: google/tunix at the commits MaxText 0.2.3 and 0.2.4 pin (683256db, c4ec573d: each wheel's
# dependencies/extra_deps/post_train_github_deps.txt; tpu-post-train-requirements.txt says only >=0.1.3/>=0.1.7).
_GROUP = RuntimeBound(2, "tunix GrpoConfig: num_generations must be greater than 1, GRPO scores each "
                         "completion against the others for its prompt")  # tunix/rl/grpo/grpo_learner.py __post_init__
_BATCH = RuntimeBound(1, "train_rl passes it to tunix as mini_batch_size, which must be a positive integer")
# ^ train_rl.py create_rl_components (0.2.3, 0.2.4) mini_batch_size=trainer_config.batch_size; tunix/rl/rl_cluster.py
#   RLTrainingConfig.__post_init__ -> tunix/rl/utils.py is_positive_integer.
# pyconfig._prepare_for_pydantic turns a string or tuple into a list for these list[str] keys before pydantic
# sees them (_coerce_to_list: "[...]"/"(...)" through ast.literal_eval, any other string -> [string]);
# maxtext 0.2.4 maxtext/configs/pyconfig.py _coerce_to_list and _prepare_for_pydantic, 0.2.3 _prepare_for_pydantic.
LIST_COERCED = ("train_data_columns", "eval_data_columns", "trainable_parameters_mask", "adamw_mask")
# The micro batches train_rl hands tunix (maxtext 0.2.4 and 0.2.3 train_rl.py create_rl_components: -1
# becomes None, mini_batch_size=batch_size); tunix RLTrainingConfig.__post_init__ (tunix/rl/rl_cluster.py,
# c4ec573d and 683256db) wants each a positive int and train_micro_batch_size to divide mini_batch_size.
# rl.yml (0.2.4 train_micro_batch_size, rollout_micro_batch_size) sets both to -1.
MICRO_BATCH_KEYS = ("train_micro_batch_size", "rollout_micro_batch_size")
# train_rl hands the rollout max_tokens_to_generate = max_target_length - max_prefill_predict_length (maxtext
# 0.2.4 and 0.2.3 train_rl.py create_rl_components), and vLLM's SamplingParams._verify_args refuses max_tokens < 1
# (vllm-project/vllm vllm/sampling_params.py "max_tokens must be at least 1"): the sequence must be longer
# than the prompt. rl.yml's values where the recipe sets neither (configs/post_train/rl.yml of 0.2.4 and
# 0.2.3, max_prefill_predict_length and max_target_length).
LENGTH_DEFAULTS = {"max_target_length": 1024, "max_prefill_predict_length": 256}
RUNTIME_BOUNDS: dict[str, RuntimeBound] = {
    "rl.num_generations": _GROUP,
    "num_generations": _GROUP,  # 0.2.4: RLConfig copies the top-level key into rl (map_flat_fields_to_nested_models)
    "batch_size": _BATCH,
}

_INTERPOLATION = re.compile(r"\$\{")
_WORDS: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str, "None": None, "Any": Any,
                          "list": list, "list[int]": list[int], "list[str]": list[str], "list[float]": list[float],
                          "dict": dict, "model": dict}
_ARTICLE = {"int": "an int", "float": "a float", "bool": "true or false", "str": "a string", "None": "null",
            "Any": "any value", "list": "a list", "list[int]": "a list of ints", "list[str]": "a list of strings",
            "list[float]": "a list of floats", "dict": "a mapping", "model": "a mapping"}
_BOUND_WORDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


@cache
def release_schema(version: str) -> dict:
    """The shipped recipes/runs/maxtext_keys/<version>.toml of a MaxText release."""
    source = resources.files("tpu_rl.recipes.runs").joinpath(KEY_LIST_DIR, f"{version}.toml")
    if not source.is_file():
        raise UserError(f"--set needs the key list of MaxText {version} (recipes/runs/{KEY_LIST_DIR}/{version}.toml): "
                        f"generate it with `tools/generate_maxtext_keys.py {version}`")
    return tomllib.loads(source.read_text())


@cache
def release_values(version: str) -> dict[str, Any]:
    """The value each key of a MaxText release has before the model's yml and the command line (its
    config yml, else its field's default), as tools/generate_maxtext_keys.py read them from the wheel
    into recipes/runs/maxtext_keys/<version>.values.json; a dotted key is a nested model's field."""
    source = resources.files("tpu_rl.recipes.runs").joinpath(KEY_LIST_DIR, f"{version}.values.json")
    if not source.is_file():
        raise UserError(f"the values of MaxText {version} (recipes/runs/{KEY_LIST_DIR}/{version}.values.json) are "
                        f"missing: generate them with `tools/generate_maxtext_keys.py {version}`")
    return json.loads(source.read_text())["values"]


def config_values(version: str, model_name: str | None, items: tuple[str, ...]) -> dict[str, Any]:
    """What train_rl's config holds for `items` (key=value, the train command's): the release's values,
    then the model's yml, then the items as pyconfig reads them, then the nested fields a top-level key
    overwrites (copied_from_top_level). An item MaxText would refuse keeps its text."""
    schema = release_schema(version)
    values = dict(release_values(version))
    if model_name:
        values.update(schema.get("models", {}).get(model_base(model_name), {}))
    for item in items:
        key, _, text = item.partition("=")
        try:
            values[key] = parse_override(key, text)
        except UserError:
            values[key] = text
    for nested, top in schema.get("copied_from_top_level", {}).items():
        if top in values:
            values[nested] = values[top]
    return values


def model_base(model_name: str) -> str:
    """The configs/models/ yml a model name loads: pyconfig strips "-Instruct" (_initialize_pydantic, both)."""
    return model_name.replace("-Instruct", "")


def maxtext_keys(version: str) -> frozenset[str]:
    """Every override key a MaxText release's train_rl accepts."""
    return frozenset(release_schema(version)["keys"])


def model_keys(version: str) -> dict[str, str]:
    """The keys that make a MaxText release's model, each with the configs/types.py class declaring it:
    every key a configs/models/*.yml of the release sets, less the run choices those files also make, and
    the weights' dtype and quantization (tools/generate_maxtext_keys.py, tests/contracts/maxtext_types.py
    model_keys). A checkpoint trained with one value is not the model another value describes."""
    return dict(release_schema(version).get("model_keys", {}))


# --- reading a value as MaxText does -------------------------------------------------------------------

def parse_override(key: str, text: str) -> Any:
    """The value MaxText's pyconfig hands pydantic for `key=text` (see the module docstring)."""
    from omegaconf import OmegaConf  # noqa: PLC0415 -- only --set needs it

    try:
        parsed: object = OmegaConf.to_container(OmegaConf.from_dotlist([f"{key}={text}"]), resolve=False)
    except (yaml.YAMLError, ValueError) as error:
        detail = str(error).splitlines()[0]
        raise UserError(f"--set {key}={text}: MaxText reads the value as YAML, and it is not ({detail})") from None
    for part in key.split("."):
        assert isinstance(parsed, dict)  # from_dotlist nests a table for each dotted part
        parsed = parsed[part]
    if _has_interpolation(parsed):
        raise UserError(f"--set {key}={text}: an omegaconf interpolation ${{...}} is resolved only inside "
                        "MaxText, so tpu-rl cannot check it; give the value itself")
    if "." not in key and isinstance(parsed, str) and parsed.lower() == "none":
        return None
    return parsed


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_INTERPOLATION.search(value))
    if isinstance(value, dict):
        return any(_has_interpolation(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_interpolation(item) for item in value)
    return False


# --- the field's type ----------------------------------------------------------------------------------

def _bounds(spec: dict, runtime: RuntimeBound | None = None) -> dict[str, Any]:
    bounds = {name: spec[name] for name in _BOUND_WORDS if name in spec}
    if runtime is not None:
        bounds["ge"] = max(bounds.get("ge", runtime.ge), runtime.ge)
    return bounds


def _member(word: str, spec: dict, runtime: RuntimeBound | None) -> Any:
    if word == "literal":
        return Literal[tuple(spec["choices"])]
    if word == "enum":
        return enum.Enum(spec["enum"], [(f"V{i}", value) for i, value in enumerate(spec["choices"])])
    python = _WORDS[word]
    bounds = _bounds(spec, runtime)
    if word == "float":  # inf and nan (YAML .inf, .nan, 1e999) are no learning rate: finite only
        return Annotated[python, Field(**bounds, allow_inf_nan=False)]
    if word == "int" and bounds:
        return Annotated[python, Field(**bounds)]
    return type(None) if python is None else python


@cache
def _adapter(version: str, key: str, runtime: bool = True) -> TypeAdapter:
    """The field's type, read at run time (no static type names it), with the trainer's bound unless told."""
    spec = release_schema(version)["keys"][key]
    bound = RUNTIME_BOUNDS.get(key) if runtime else None
    members = tuple(_member(word, spec, bound) for word in spec["type"].split(" | "))
    return TypeAdapter(members[0] if len(members) == 1 else Union[members])  # type: ignore[arg-type]  # noqa: UP007


def describe(version: str, key: str) -> str:
    """The type and bounds of a key in words: 'a float > 0 and <= 1', 'one of grpo, gspo-token or null'."""
    spec = release_schema(version)["keys"][key]
    bounds = _bounds(spec, RUNTIME_BOUNDS.get(key))
    words = []
    for word in spec["type"].split(" | "):
        if word in ("literal", "enum"):
            words.append("one of " + ", ".join(json.dumps(c) if c == "" else str(c) for c in spec["choices"]))
        elif word in ("int", "float") and bounds:
            article = "a finite float" if word == "float" else _ARTICLE[word]
            words.append(f"{article} " + " and ".join(f"{_BOUND_WORDS[b]} {v}" for b, v in bounds.items()))
        elif word == "float":
            words.append("a finite float")
        else:
            words.append(_ARTICLE[word])
    return " or ".join(words)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f"the string '{value}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _plain(value: Any) -> Any:
    """A validated value as JSON data: enums as their value."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def spelling(value: Any) -> str:
    """One YAML spelling of a validated value: 2e-5, 0.5, true, null, plain strings bare."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return re.sub(r"e([-+])0*(\d)", r"e\1\2", repr(value))  # 2e-05 -> 2e-5
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    return json.dumps(value)


# --- the check -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checked:
    """A value MaxText accepts: as pydantic validated it (JSON data) and spelled one way."""

    key: str
    value: Any
    text: str

    @property
    def item(self) -> str:
        return f"{self.key}={self.text}"


def refusal(version: str, key: str) -> str | None:
    """Why a value for `key` changes nothing in this release, or None."""
    schema = release_schema(version)
    overwritten = schema.get("set_by_maxtext", {}).get(key)
    if overwritten:
        return (f"MaxText {version} sets it itself ({overwritten['validator']}, configs/types.py "
                f"L{overwritten['line']}: {key} = {overwritten['value']}), so a value would change nothing")
    flat = schema.get("copied_from_top_level", {}).get(key)
    if flat:
        return (f"MaxText {version} copies the top-level {flat}, which rl.yml sets, over it "
                f"({schema['source']['flat_to_nested']}), so a value would change nothing; use --set {flat}=...")
    nested = schema.get("read_only_nested", {}).get(key)
    if nested:
        return (f"MaxText {version}'s train_rl reads {nested}, and no module outside experimental/ reads the "
                f"top-level {key}, so a value would change nothing; use --set {nested}=...")
    return None


def check_value(version: str, key: str, text: str, model: str | None = None) -> Checked:
    """`key=text` as MaxText `version` reads it, or UserError in one line naming the field, its type and its
    bounds. The key must be one of maxtext_keys(version). With `model` (the recipe's model_name, unless
    override_model_config is true), a key the model's yml sets must keep that value."""
    item = f"{key}={text}"
    parsed = parse_override(key, text)
    if model is not None:
        _check_model_key(version, model, key, parsed, item)
    value = _validated(version, key, parsed, item)
    canonical = spelling(value)
    try:  # the one spelling must read back as the same value, or the given one is kept
        same = _validated(version, key, parse_override(key, canonical), item) == value
    except UserError:
        same = False
    return Checked(key, value, canonical if same else text)


def _check_model_key(version: str, model: str, key: str, value: Any, item: str) -> None:
    """pyconfig's validate_no_keys_overridden_twice (0.2.3 and 0.2.4): a command-line key that
    configs/models/<model>.yml also sets must have the same value, unless override_model_config is true."""
    base = model_base(model)
    models = release_schema(version).get("models", {})
    if base in models and key in models[base] and models[base][key] != value:
        raise UserError(f"--set {item}: configs/models/{base}.yml sets {key}={spelling(models[base][key])} and "
                        f"MaxText {version} refuses another value for it (pyconfig "
                        "validate_no_keys_overridden_twice) unless you also --set override_model_config=true")


def _validated(version: str, key: str, value: Any, item: str) -> Any:
    """The value as pydantic validates it (JSON data); `item` is the --set item the messages name."""
    why = refusal(version, key)
    if why:
        raise UserError(f"--set {key} is refused: {why}")
    spec = release_schema(version)["keys"][key]
    if key in LIST_COERCED:
        value = _as_list(value)
    if spec.get("before_validator"):  # a field_validator reshapes it first: only its own code knows how
        return value
    if "model" in spec["type"].split(" | ") and isinstance(value, dict):
        keys = maxtext_keys(version)
        unknown = [name for name in value if f"{key}.{name}" not in keys]
        if unknown:
            raise UserError(f"--set {item}: '{unknown[0]}' is not a key of {key} in MaxText {version}")
        return {name: _validated(version, f"{key}.{name}", inner, item) for name, inner in value.items()}
    try:
        return _plain(_adapter(version, key).validate_python(value))
    except ValidationError:
        runtime = RUNTIME_BOUNDS.get(key)
        because = f" ({runtime.why})" if runtime and _accepts(_adapter(version, key, runtime=False), value) else ""
        null = ("; YAML writes it null" if isinstance(value, str) and value.lower() == "none"
                and "None" in spec["type"].split(" | ") else "")
        raise UserError(f"--set {item}: {key} takes {describe(version, key)} in MaxText {version}"
                        f"{because}, not {_shown(value)}{null}") from None


def _as_list(value: Any) -> Any:
    """What pyconfig's _coerce_to_list makes of a value (LIST_COERCED has the source)."""
    if not isinstance(value, str):
        return list(value) if isinstance(value, tuple) else value
    cleaned = value.strip()
    if cleaned[:1] + cleaned[-1:] in ("[]", "()"):
        try:
            parsed = ast.literal_eval(cleaned)
        except (ValueError, SyntaxError):
            return [value]
        return list(parsed) if isinstance(parsed, (list, tuple)) else [str(parsed)]
    return [value]


def check_micro_batches(version: str, values: dict[str, Any], item: str) -> None:
    """batch_size and the micro batches (MICRO_BATCH_KEYS has the source) as tunix will take them; `values`
    holds the run's last value of each key it sets, `item` is the --set item the message names."""
    batch = values.get("batch_size")
    for key in MICRO_BATCH_KEYS:
        micro = values.get(key, -1)
        if micro == -1:
            continue
        if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1:
            raise UserError(f"--set {item}: tunix needs {key} a positive int or -1 (none) in MaxText {version}, "
                            f"not {_shown(micro)}")
        if key == "train_micro_batch_size" and isinstance(batch, int) and batch > 0 and batch % micro:
            raise UserError(f"--set {item}: tunix needs batch_size ({batch}) to be a multiple of "
                            f"train_micro_batch_size ({micro}) in MaxText {version}")


def check_lengths(version: str, values: dict[str, Any], item: str) -> None:
    """max_target_length against max_prefill_predict_length as train_rl uses them (LENGTH_DEFAULTS has the
    source); `values` holds the run's last value of each key it sets, `item` is the --set item named."""
    target, prompt = (values.get(key, default) for key, default in LENGTH_DEFAULTS.items())
    if isinstance(target, int) and isinstance(prompt, int) and target <= prompt:
        raise UserError(f"--set {item}: max_target_length ({target}) must exceed max_prefill_predict_length "
                        f"({prompt}) in MaxText {version}: train_rl generates the difference, and vLLM needs "
                        "at least 1 token")


def _accepts(adapter: TypeAdapter, value: Any) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True
