"""Reading the optional TOML config file (tpu-rl.toml, or the file TPU_RL_CONFIG names): every key a
known setting, every value a string (or a list of strings for a list setting), and never a token."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tpu_rl.recipes.capacity_modes import CapacityMode
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.setting_specs import BY_FIELD, CONFIG_ENV, DEFAULT_CONFIG, EXAMPLE

# Keys that would put a secret into a file we read; the token belongs in Secret Manager.
_SECRET_KEYS = {"hf_token", "hf_access_token", "token"}

# Settings whose value is a comma-separated list; a config file may give them as a TOML list of strings.
_LIST_FIELDS = {"authorized_cidr", "capacity", "zone"}


def read_config(path: Path, named: bool = True) -> dict[str, str]:
    """The file's settings. `named`: the path came from TPU_RL_CONFIG (so unsetting it is a way out),
    else it is ./tpu-rl.toml, read when it exists."""
    way_out = f" or unset {CONFIG_ENV}" if named else ""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{CONFIG_ENV} points to {path}, which does not exist: create it or unset {CONFIG_ENV}") from None
    except IsADirectoryError:
        if not named:
            raise UserError(f"{path} is a directory, not the TOML file of settings tpu-rl reads from the working "
                            f"directory: rename it, or point {CONFIG_ENV} at your settings file") from None
        raise UserError(f"{CONFIG_ENV} points to {path}, which is a directory: name the TOML file, e.g. "
                        f"{CONFIG_ENV}={path / DEFAULT_CONFIG}, or unset {CONFIG_ENV}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path} cannot be read as a text file ({error.__class__.__name__}: {error}): fix the "
                        f"file{way_out}") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path} is not valid TOML ({error}): fix the file{way_out}") from None
    values: dict[str, str] = {}
    for key, value in data.items():
        if key.lower() in _SECRET_KEYS:
            raise UserError(f"{path} has a '{key}' key: tokens do not belong in config files; remove it and "
                            "store the token with `tpu-rl secret set` (it reads stdin)")
        if key not in BY_FIELD:
            raise UserError(f"{path} has an unknown key '{key}' (known: {', '.join(BY_FIELD)})")
        if key in _LIST_FIELDS and isinstance(value, list):
            value = _joined(path, key, value)
        if not isinstance(value, str):
            raise UserError(f"{path}: {key} must be {_expected_form(key)}, not a TOML {_toml_type(value)}")
        values[key] = value
    return values


def _joined(path: Path, key: str, items: list) -> str:
    """A list setting's TOML array as the comma-separated string; one line naming an item that is no string."""
    if not items:
        raise UserError(f"{path}: {key} is an empty list: give at least one value, as {_expected_form(key)}")
    for item in items:
        if not isinstance(item, str):
            raise UserError(f"{path}: {key} holds {item!r}, a TOML {_toml_type(item)}: write every item as a string "
                            f"(in quotes), as {_expected_form(key)}")
    return ",".join(items)


def _expected_form(key: str) -> str:
    """How a config-file value is written, with the example's value (or the setting's own example)."""
    example = {"authorized_cidr": "203.0.113.7/32", "capacity": CapacityMode.FLEX_START.value}.get(key) or \
        EXAMPLE.get(key) or BY_FIELD[key].default or "..."
    if key in _LIST_FIELDS:
        return f'a string or a list of strings, e.g. {key} = "{example}" or {key} = ["{example}"]'
    return f'a string, e.g. {key} = "{example}"'


def _toml_type(value: object) -> str:
    return {bool: "boolean", int: "integer", float: "float", list: "array", dict: "table"}.get(type(value), "date")
