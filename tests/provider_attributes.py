"""The attribute names of each resource and data source type, read from the generated provider bindings
that synthesize the stacks (the cdktf_cdktf_provider_google and cdktf_cdktf_provider_helm classes), so the
tests' provider-free Terraform (tests/terraform_cli.py) can refuse a reference to an attribute the provider
does not have, as the provider's schema would.

A resource class's own properties are its attributes under cdktf's names (hashicorp/terraform-cdk@003b480e
packages/@cdktf/provider-generator/lib/get/generator/): a nested block is a property of its own name (an
OutputReference or a List); each settable attribute also has an input getter `<name>Input`, or
`<name>TfInput` when the schema has an attribute `<name>_input` too (emitter/attributes-emitter.ts
getInputName, needsInputEscape); and a few names are changed (models/attribute-model.ts `name`).
"""

from __future__ import annotations

import functools
import importlib
import re
import threading

# Provider -> the module its bindings are imported from (google through infra/google.py's door: only the
# submodules asked for are imported, and a process that synthesized the stacks has them already).
BINDINGS = {"google": "tpu_rl.infra.google", "helm": "cdktf_cdktf_provider_helm"}
# Terraform's built-in resource (hashicorp/terraform internal/builtin/providers/terraform/resource_data.go,
# dataStoreResourceSchema: id, input, output, triggers_replace), whose class cdktf ships itself.
BUILT_IN = {"terraform_data": "DataResource"}
# cdktf's renamed attributes, as the Python property reads them -> the Terraform name (attribute-model.ts
# `name`: self, build, get*, equals, node, system, tfResourceType).
_RENAMED = {"self_attribute": "self", "build_attribute": "build", "equal_to": "equals",
            "node_attribute": "node", "system_attribute": "system",
            "tf_resource_type_attribute": "tf_resource_type"}


# check_stacks rewrites stacks side by side in threads: one import of the bindings at a time (the provider's
# lazy import in infra/google.py decides its mode once, and the jsii kernel loads each assembly once).
_IMPORTING = threading.Lock()


class NoBindings(LookupError):
    """No generated class for a type: the check cannot know its attributes."""


def _bindings_class(kind: str, type_name: str) -> type:
    import cdktf

    if kind == "resource" and type_name in BUILT_IN:
        return getattr(cdktf, BUILT_IN[type_name])
    provider, _, rest = type_name.partition("_")
    if provider not in BINDINGS or not rest:
        raise NoBindings(f"no generated bindings for {type_name}: add its provider to BINDINGS in {__name__}")
    submodule = f"data_{type_name}" if kind == "data" else rest  # data_google_client_config, storage_bucket
    try:
        package = importlib.import_module(BINDINGS[provider])
        module = getattr(package, submodule, None) or importlib.import_module(f"{package.__name__}.{submodule}")
    except ModuleNotFoundError as missing:
        raise NoBindings(f"{BINDINGS[provider]} has no module {submodule} for {kind} {type_name}") from missing
    base = cdktf.TerraformDataSource if kind == "data" else cdktf.TerraformResource
    classes = [value for value in vars(module).values()
               if isinstance(value, type) and value.__module__ == module.__name__ and issubclass(value, base)]
    if len(classes) != 1:
        raise NoBindings(f"{module.__name__} has {len(classes)} {base.__name__} classes, expected one")
    return classes[0]


@functools.cache
def attributes(kind: str, type_name: str) -> tuple[str, frozenset[str]]:
    """(the bindings class's dotted name, the Terraform attribute names of a `resource` or `data` type)."""
    with _IMPORTING:
        cls = _bindings_class(kind, type_name)
    properties = {name for name, value in vars(cls).items() if isinstance(value, property)}
    names = set()
    for name in properties:
        if name.endswith("_tf_input"):
            continue  # the input getter of an attribute whose schema also has `<name>_input`
        if name.endswith("_input") and name.removesuffix("_input") in properties \
                and f"{name.removesuffix('_input')}_tf_input" not in properties:
            continue  # an input getter, not an attribute
        names.add(_RENAMED.get(name, re.sub(r"^fetch_", "get_", name)))
        names.add(name)  # a Terraform attribute may itself be named fetch_x or node_attribute
    return f"{cls.__module__}.{cls.__qualname__}", frozenset(names)
