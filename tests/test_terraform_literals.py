"""Every literal string reaches Terraform as that literal, whoever wrote it, while cdktf tokens (references,
`Fn`/`Op` calls, the guards' conditions, terraform_expression) stay Terraform expressions: a stack with
literals full of `${` and `%{` in a resource, an output, a local and a provider, planned by Terraform."""

from __future__ import annotations

import json

import pytest
from conftest import USER_ENV
from terraform_cli import check_stack, planned

from tpu_rl.infra.terraform_literals import escape_template, terraform_expression

LITERAL = 'echo "${HOME:-/root}" %{if x}done%{endif} $${kept} ${'  # shell, a directive, an escape, a bare ${


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    from cdktf import App, DataResource, Fn, TerraformLocal, TerraformOutput, TerraformProvider

    from tpu_rl.recipes.settings.load import load_settings
    from tpu_rl.stacks.base import TpuRlStack

    outdir = tmp_path_factory.mktemp("literals")
    app = App(outdir=str(outdir))
    stack = TpuRlStack(app, "literals", load_settings(USER_ENV))
    literal = DataResource(stack, "literal", input={"script": LITERAL, "list": [LITERAL], "map": {"k": LITERAL, LITERAL: "key"}})
    local = TerraformLocal(stack, "text", LITERAL)
    DataResource(stack, "refs", input={
        "reference": literal.get_any_map_attribute("input"),  # a reference to another block's attribute
        "function": Fn.upper(local.as_string),  # Fn over a reference
        "mixed": f"{local.as_string} and ${{USER}}",  # a token inside a literal
        "expression": terraform_expression('join("-", ["a", "b"])'),
    })
    TerraformOutput(stack, "shown", value=LITERAL)
    (provider,) = [child for child in stack.node.children if isinstance(child, TerraformProvider)]
    provider.add_override("request_reason", LITERAL)  # a string attribute of the google provider
    app.synth()
    synthesized = json.loads((outdir / "stacks" / "literals" / "cdk.tf.json").read_text())
    run = check_stack("literals", synthesized, tmp_path_factory.mktemp("terraform"))
    assert run.errors == []
    return planned(run.directory, run.env)


def _input(plan: dict, name: str) -> dict:
    (change,) = [c for c in plan["resource_changes"] if c["address"] == f"terraform_data.terraform_data__{name}"]
    return change["change"]["after"]["input"]["input"]  # the stand-in's input is the body: {"input": ...}


def test_literals_in_resources_outputs_locals_and_providers_reach_terraform_unchanged(plan):
    # A map's keys too (before, a key with `${` reached Terraform as a template: `k${1+1}` planned as `k2`).
    assert _input(plan, "literal") == {"script": LITERAL, "list": [LITERAL], "map": {"k": LITERAL, LITERAL: "key"}}
    assert plan["output_changes"]["shown"]["after"] == LITERAL
    (provider,) = [c for c in plan["resource_changes"] if c["address"] == "terraform_data.provider__google__0"]
    assert provider["change"]["after"]["input"]["request_reason"] == LITERAL


def test_references_functions_and_expressions_stay_terraform_expressions(plan):
    refs = _input(plan, "refs")
    assert refs["reference"] == {"script": LITERAL, "list": [LITERAL], "map": {"k": LITERAL, LITERAL: "key"}}
    assert refs["function"] == LITERAL.upper()
    assert refs["mixed"] == f"{LITERAL} and ${{USER}}"
    assert refs["expression"] == "a-b"


def test_escape_template_keeps_cdktf_token_markers_and_escapes_the_text_around_them():
    from cdktf import Token

    token = Token.as_string(Token.as_any("x"))  # a value cdktf resolves later, encoded as its marker
    assert Token.is_unresolved(token) and token.startswith("${TfToken[")
    assert escape_template(f"${{a}} {token} %{{b}}") == f"$${{a}} {token} %%{{b}}"
    assert escape_template("$${a} 100%") == "$$${a} 100%"
