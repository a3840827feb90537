"""A validation error of the recipe table or of a --set field in our own words: the field, the rule it broke
and the value it got, never pydantic's ("Input should be a valid integer, unable to parse string as an
integer"). The two places where pydantic validates what a person wrote (recipes/catalog/recipe.py build_recipes,
recipes/runs/identity.py with_sets) say their first error through first_error; a rule of our own (a
validator's ValueError) is said as its validator wrote it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

# pydantic-core's error types (pydantic_core ErrorType) -> what the field takes; `{...}` from the error's ctx.
_TAKES = {
    "int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
    "float_parsing": "a number", "float_type": "a number", "finite_number": "a finite number",
    "bool_parsing": "true or false", "bool_type": "true or false", "string_type": "a string",
    "dict_type": "a table", "list_type": "a list", "tuple_type": "a list",
    "greater_than_equal": "{ge} or more", "greater_than": "more than {gt}",
    "less_than_equal": "{le} or less", "less_than": "less than {lt}",
    "literal_error": "one of {expected}", "enum": "one of {expected}",
    "string_too_short": "at least {min_length} characters", "string_too_long": "at most {max_length} characters",
    "string_pattern_mismatch": "a string matching {pattern}",
}


def shown(value: Any, quoted: bool = True) -> str:
    """A value as the person wrote it: a string in quotes (unless not `quoted`), cut at 40 characters."""
    text = (repr(value) if quoted else value) if isinstance(value, str) else \
        str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def first_error(error: ValidationError) -> str:
    """`<field>: <field's last part> takes <rule>, not <value>` for the first error, or the field and our own
    rule's words; no location for an error of the whole table."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    kind, rule = first["type"], what_it_takes(error)
    name = str(first["loc"][-1]) if first["loc"] else "it"
    if rule is not None:
        message = f"{name} takes {rule}, not {shown(first.get('input'))}"
    elif kind == "missing":
        message = f"{name} is missing: add it"
    elif kind == "extra_forbidden":
        message = f"{name} is no field here: remove it, or correct its spelling"
    else:  # a rule of our own (a validator's ValueError), in its own words
        message = first["msg"].removeprefix("Value error, ")
    return f"{location}: {message}" if location else message


def what_it_takes(error: ValidationError) -> str | None:
    """What the first error's value should have been (`a whole number`, `1 or more`), where pydantic's error
    type says it; None for another error."""
    first = error.errors()[0]
    rule = _TAKES.get(first["type"])
    return rule.format(**(first.get("ctx") or {})) if rule else None


def takes(model: type[BaseModel], field: str) -> str:
    """What a model's field takes, its type and bounds: `a whole number, 1 or more`."""
    info = model.model_fields[field]
    kinds: dict[object, str] = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}
    kind = kinds.get(info.annotation, "a value")
    bounds = [_TAKES[name].format(**{key: getattr(rule, key)}) for rule in info.metadata
              for name, key in (("greater_than_equal", "ge"), ("greater_than", "gt"), ("less_than_equal", "le"),
                                ("less_than", "lt")) if getattr(rule, key, None) is not None]
    return ", ".join([kind, *bounds])
