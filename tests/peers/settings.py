"""The settings every peer and test share: a project, region, cluster and bucket of the test cloud."""

from __future__ import annotations

SETTINGS = {
    "PROJECT": "tpu-rl-test",
    "REGION": "us-east5",
    "ZONE": "us-east5-b",
    "CLUSTER_NAME": "rl-test",
    "GCS_BUCKET": "rl-test-artifacts",
    "RESERVATION": "v6e-reservation",
    "AUTHORIZED_CIDR": "203.0.113.7/32",
}


def peer_settings():
    from tpu_rl.recipes import load_settings

    return load_settings(env=SETTINGS)


def spec_of(recipe):
    """The run a test names: a RunSpec as it is, or a catalog Recipe's own run (RunSpec.of_catalog)."""
    from tpu_rl.recipes.runs.spec import RunSpec

    return recipe if isinstance(recipe, RunSpec) else RunSpec.of_catalog(recipe)
