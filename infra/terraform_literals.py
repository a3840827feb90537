"""Every literal string reaches Terraform as the literal it is; cdktf tokens stay Terraform expressions.

In Terraform's JSON syntax every string is a template: `${` opens an interpolation and `%{` a directive,
and a literal must spell them `$${` and `%%{`. cdktf writes plain strings through unchanged (it treats a
literal `${...}` as a raw expression the author meant), so a startup script's `${VAR:-10}` became an
expression and Terraform refused the stack. The `EscapeLiterals` aspect, which every stack adds
(stacks/base.py), escapes the literal parts of every string of every element at synth, and leaves
cdktf's token markers (references, `Fn`/`Op` calls) alone; a raw expression written as text must say so
with `terraform_expression`. Why an aspect and how cdktf 0.21.0 resolves strings: docs/stacks.md.
"""

from __future__ import annotations

import re
from typing import Any

import jsii
from cdktf import (
    IAspect,
    IResolveContext,
    IStringProducer,
    Lazy,
    TerraformDataSource,
    TerraformElement,
    TerraformLocal,
    TerraformOutput,
    TerraformProvider,
    TerraformResource,
    Token,
)
from constructs import IConstruct

# cdktf 0.21.0 encodes a string token as this marker (packages/cdktf/lib/tokens/private/encoding.ts,
# BEGIN_STRING_TOKEN_MARKER, VALID_KEY_CHARS); it resolves to the expression after the aspects ran.
TOKEN_MARKER = re.compile(r"\$\{TfToken\[[a-zA-Z0-9:._-]+\]\}")
# Terraform's template openers, escaped by doubling (hashicorp/hcl@0751c4dd hclsyntax/spec.md, "Template Literals").
_TEMPLATE_OPENERS = re.compile(r"([$%])\{")


def escape_literal(text: str) -> str:
    """`text` as a Terraform template whose value is `text`: `${` -> `$${`, `%{` -> `%%{`."""
    return _TEMPLATE_OPENERS.sub(r"\1\1{", text)


def escape_template(text: str) -> str:
    """Escape the literal parts of a string and keep its cdktf token markers as they are."""
    if not Token.is_unresolved(text):
        return escape_literal(text)
    parts, start = [], 0
    for marker in TOKEN_MARKER.finditer(text):
        parts += [escape_literal(text[start:marker.start()]), marker.group()]
        start = marker.end()
    return "".join(parts) + escape_literal(text[start:])


def escaped(value: Any) -> Any:
    """`value` with every string in it escaped, a map's keys too (dicts and lists copied; anything else as it
    is): Terraform's JSON syntax evaluates an object's keys in an expression as templates too (hashicorp/hcl
    @1c605916 json/structure.go, expression.Value, `*objectVal`; Terraform 1.11.4 plans `{"k${1+1}": "v"}` as
    `k2`); a block's attribute names never hold `${` or `%{`, so they are unchanged."""
    if isinstance(value, str):
        return escape_template(value)
    if isinstance(value, dict):
        return {escaped(key): escaped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [escaped(item) for item in value]
    return value


@jsii.implements(IStringProducer)
class _Expression:
    def __init__(self, text: str) -> None:
        self.text = text

    def produce(self, context: IResolveContext) -> str:
        return self.text


def terraform_expression(expression: str) -> str:
    """A Terraform expression written as text (e.g. one that reads `self`), as a cdktf token, so that it
    reaches Terraform as `${expression}` rather than escaped as a literal."""
    return Lazy.string_value(_Expression(f"${{{expression}}}"))


def _bodies(node: TerraformElement) -> list[dict]:
    """The attribute maps of an element as cdktf will write them (before tokens are resolved)."""
    tree = node.to_terraform()
    if isinstance(node, (TerraformResource, TerraformDataSource)):
        return [body for kind in ("resource", "data") for by_id in (tree.get(kind) or {}).values()
                for body in by_id.values()]
    if isinstance(node, TerraformProvider):
        return [body for bodies in tree["provider"].values() for body in bodies]
    return list(tree["output"].values())


@jsii.implements(IAspect)
class EscapeLiterals:
    """Escape the literal parts of every string an element writes (added last, so it also sees what
    other aspects added, such as PlanGuard's preconditions)."""

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, TerraformLocal):
            (value,) = node.to_terraform()["locals"].values()  # the getter `expression` is a reference
            if escaped(value) != value:
                node.expression = escaped(value)
            return
        if not isinstance(node, (TerraformResource, TerraformDataSource, TerraformProvider, TerraformOutput)):
            return
        for body in _bodies(node):
            for key, value in body.items():
                if key != "//" and escaped(value) != value:
                    # Token.as_any: cdktf merges an override into the attribute and appends lists, and a
                    # token replaces it whole.
                    node.add_override(key, value=Token.as_any(escaped(value)))
