"""What every stack shares: the google provider, the state backend, the example guard, outputs."""

from __future__ import annotations

import jsii
from cdktf import (
    Aspects,
    GcsBackend,
    IAspect,
    LocalBackend,
    Op,
    TerraformDataSource,
    TerraformLocal,
    TerraformOutput,
    TerraformResource,
    TerraformStack,
)
from constructs import Construct, IConstruct

from tpu_rl.infra.google import provider as google_provider
from tpu_rl.infra.terraform_literals import EscapeLiterals
from tpu_rl.recipes.conventions import STATE_PREFIX, local_state_file
from tpu_rl.recipes.settings.load import Settings
from tpu_rl.recipes.settings.specs import EXAMPLE_PROJECT, SPECS

# Local state lives next to the repository (tpu_rl.recipes.conventions.local_state_file), seen from
# cdktf.out/stacks/<stack>/, where Terraform runs.
LOCAL_STATE_DIR = "../../.."


def example_guard_message() -> str:
    names = ", ".join(spec.env for spec in SPECS if spec.required)
    return (
        f"These are the example settings (PROJECT={EXAMPLE_PROJECT}) and must never reach a cloud. Export "
        f"{names} (and RESERVATION, AUTHORIZED_CIDR for the recipes), or write them to tpu-rl.toml, then "
        "synthesize again (docs/settings.md)."
    )


class TpuRlStack(TerraformStack):
    """A stack with the google provider, its state backend and, for the example settings, the guard."""

    def __init__(self, scope: Construct, name: str, settings: Settings, blocked: str | None = None) -> None:
        """`blocked`: why this stack must never be planned with these settings (every resource's plan then
        fails with that line), or None."""
        super().__init__(scope, name)
        self.settings = settings
        # Every resource that takes labels gets these (billing exports attribute TPU spend by stack).
        self.labels = {"managed_by": "tpu-rl", "tpu_rl_stack": name}
        google_provider.GoogleProvider(
            self,
            "google",
            project=settings.project,
            region=settings.region,
            zone=settings.zone,
            default_labels=self.labels,
        )
        if settings.state_bucket:
            GcsBackend(self, bucket=settings.state_bucket, prefix=f"{STATE_PREFIX}/{name}")
        else:
            LocalBackend(self, path=f"{LOCAL_STATE_DIR}/{local_state_file(name)}")
        guards = []
        if settings.is_example:
            project = TerraformLocal(self, "settings_project", settings.project)
            guards.append({"condition": Op.neq(project.as_string, EXAMPLE_PROJECT),
                           "error_message": example_guard_message()})
        if blocked:
            # Terraform refuses a condition that refers to nothing (it would check nothing), so the verdict
            # is a local the condition reads.
            allowed = TerraformLocal(self, "plan_allowed", False)
            guards.append({"condition": allowed.as_boolean, "error_message": blocked})
        if guards:
            # An aspect visits the whole tree at synth, so resources added after this point, by any
            # composition, get the guard too: no "call it last" rule to forget.
            Aspects.of(self).add(PlanGuard(guards))
        # Every string reaching Terraform is a template. An aspect, not a helper each construct must remember,
        # so every element of every stack is escaped; added last, it sees the guards too (docs/stacks.md).
        Aspects.of(self).add(EscapeLiterals())

    def output(self, name: str, value: str, description: str) -> None:
        TerraformOutput(self, name, value=value, description=description)


@jsii.implements(IAspect)
class PlanGuard:
    """Make `terraform plan` fail before anything is created: with the example settings, or when the
    settings leave the stack nothing to run on.

    Every resource and data source gets the same preconditions, so no resource can be planned (and so none
    created) with placeholder values."""

    def __init__(self, guards: list[dict]) -> None:
        self.guards = guards

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, (TerraformResource, TerraformDataSource)):
            node.add_override("lifecycle.precondition", self.guards)
