"""Where things are, as the groups of settings that find each: the words each platform's `needs` column
(recipes/platforms/) is written in."""

from __future__ import annotations

BUCKET = ("project", "gcs_bucket")
CLUSTER = ("project", "region", "cluster_name")  # the kube context gke_<project>_<region>_<cluster>
VM = ("project", "zone", "vm_name")
# What a deploy needs of every stack (`make synth`, `npx cdktf deploy`): all five, and the rules.
DEPLOY = ("project", "region", "zone", "cluster_name", "gcs_bucket")


def fields(*groups: tuple[str, ...]) -> tuple[str, ...]:
    """The groups' fields, each once, in order."""
    return tuple(dict.fromkeys(field for group in groups for field in group))
