"""Write recipes/runs/maxtext_keys/<version>.toml: every override key MaxText <version>'s train_rl accepts, with
the type, bounds and choices its config class validates the value against, and the keys a value changes
nothing for.

`tpu-rl run/render --set KEY=VALUE` checks KEY and VALUE against this file before anything is submitted,
so that a typo or a value MaxText refuses fails in a second instead of after a TPU slice was provisioned
(MaxText exits with "'<key>' not in ..." or a pydantic ValidationError at start-up, or, for a dotted sub-key,
drops it without a word). The file is read from the release's wheel without importing it
(tests/contracts/maxtext_schema.py: configs/types.py for the fields, configs/pyconfig.py for the rule,
train_rl.py for the config class; tests/contracts/maxtext_types.py: the types, bounds, choices and what
the config class overwrites); tests/test_maxtext_values.py checks that each shipped file equals the one
computed from its wheel.

    .venv/bin/python tools/generate_maxtext_keys.py 0.2.3 0.2.4

Run it when recipes.toml pins a new MaxText release. It lives outside the installed packages: the wheel
download and the ast reading are development tools, only the files ship.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from contracts.maxtext_schema import MaxTextSchema, fetch_wheel  # noqa: E402
from contracts.maxtext_types import SOURCES, MaxTextTypes  # noqa: E402
from tpu_rl.jobs.maxtext import TRAIN_RL  # noqa: E402
from tpu_rl.recipes import all_recipes  # noqa: E402
from tpu_rl.recipes.runs.maxtext_values import KEY_LIST_DIR, model_base  # noqa: E402


def _toml(value: object) -> str:
    """A TOML value for the few kinds the file holds (JSON's strings, numbers and arrays are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(key)} = {_toml(item)}" for key, item in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(value)


def _key(key: str) -> str:
    return key if key.replace("_", "").isalnum() else json.dumps(key)


def schema_data(version: str) -> tuple[dict, str]:
    """What the file holds, and the wheel's name (downloads the wheel into .cache/maxtext once)."""
    wheel, reason = fetch_wheel(version)
    if wheel is None:
        raise SystemExit(reason)
    schema = MaxTextSchema(version, wheel)
    types = MaxTextTypes(schema)
    config_yml = "configs/post_train/rl.yml"
    source = {
        "maxtext": version,
        "wheel": wheel.name,
        "config_class": schema.config_class(TRAIN_RL),
        "read": [*SOURCES, config_yml, TRAIN_RL.removeprefix("maxtext.").replace(".", "/") + ".py"],
        "accepts": ("fields of the config class and, recursively, of the models nested in it (pyconfig "
                    "_check_for_invalid_keys)" if schema.accepts_nested_fields
                    else "fields of the config class only (pyconfig _prepare_for_pydantic)"),
    }
    line = types.flat_to_nested_line(TRAIN_RL)
    if line:
        source["flat_to_nested"] = f"{source['config_class']}.map_flat_fields_to_nested_models, configs/types.py L{line}"
    data = {"source": source, "keys": types.key_specs(TRAIN_RL), "set_by_maxtext": types.set_by_maxtext(TRAIN_RL),
            "copied_from_top_level": types.copied_from_top_level(TRAIN_RL),
            "read_only_nested": types.read_only_nested(TRAIN_RL), "model_keys": types.model_keys(),
            "models": {model: types.model_values(model) for model in recipe_models(version)}}
    return data, wheel.name


def recipe_models(version: str) -> list[str]:
    """The models recipes.toml trains with this release, by the name of their configs/models/ yml."""
    return sorted({model_base(recipe.model.maxtext_name) for recipe in all_recipes().values()
                   if recipe.maxtext_version == version})


TABLES = ("source", "keys", "set_by_maxtext", "copied_from_top_level", "read_only_nested", "model_keys")


def file_text(version: str) -> str:
    data, wheel = schema_data(version)
    lines = [
        f"# The override keys MaxText {version}'s train_rl accepts, each with the type, bounds (ge/gt/le/lt)",
        f"# and choices its config class {data['source']['config_class']} validates the value against (a dotted",
        "# key names a field of a nested model); set_by_maxtext: keys the class's validator overwrites;",
        "# copied_from_top_level: dotted keys a top-level key of rl.yml overwrites; read_only_nested:",
        "# top-level keys no module reads, which read the nested field instead; model_keys: the keys that",
        "# make the model (any configs/models/*.yml sets them, or the weights' dtype), each with its types.py",
        "# class, which `tpu-rl eval` may not change from the run's value; models: what each recipe's",
        "# configs/models/<model>.yml sets, which --set may not change (pyconfig). Generated from",
        f"# {wheel} by tools/generate_maxtext_keys.py; do not edit.",
    ]
    for table in TABLES:
        lines += ["", f"[{table}]"]
        lines += [f"{_key(key)} = {_toml(value)}" for key, value in data[table].items()]
    for model, values in data["models"].items():
        lines += ["", f"[models.{_key(model)}]"]
        lines += [f"{_key(key)} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def values_text(version: str) -> str:
    """recipes/runs/maxtext_keys/<version>.values.json: the value of each key before the model's yml and the
    command line (MaxTextTypes.config_values), which `tpu-rl check-rewards` gives its tmvp_config."""
    wheel, reason = fetch_wheel(version)
    if wheel is None:
        raise SystemExit(reason)
    values = MaxTextTypes(MaxTextSchema(version, wheel)).config_values(TRAIN_RL)
    source = {"maxtext": version, "wheel": wheel.name, "generated_by": "tools/generate_maxtext_keys.py",
              "read": ["configs/post_train/rl.yml (and its base_config)", "configs/types.py"]}
    return json.dumps({"source": source,
                       "values": values}, indent=1, sort_keys=True) + "\n"


def main(versions: list[str]) -> None:
    if not versions:
        raise SystemExit("usage: tools/generate_maxtext_keys.py VERSION... (e.g. 0.2.3 0.2.4)")
    directory = REPO / "recipes" / "runs" / KEY_LIST_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for version in versions:
        path = directory / f"{version}.toml"
        path.write_text(file_text(version))
        print(f"wrote {path.relative_to(REPO)}")
        path = directory / f"{version}.values.json"
        path.write_text(values_text(version))
        print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main(sys.argv[1:])
