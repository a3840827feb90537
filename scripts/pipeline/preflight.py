"""Checks to run before money is spent: capacity, bucket and token, each a pass or a one-line fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from google.api_core import exceptions as gexc

from recipes import Recipe, Settings, UserError
from scripts.cloud import hf_token
from scripts.cloud.clients import Clients


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # what was found (pass) or what is wrong and how to fix it (fail)


def _resource_name(value: str) -> str:
    """Compute returns some references as URLs; the last segment is the name."""
    return value.rstrip("/").rsplit("/", 1)[-1]


def check_reservation(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    name = "reservation"
    shape = recipe.shape
    if "reservation" not in recipe.capacity:
        return Check(name, True, f"not needed (capacity '{','.join(recipe.capacity)}')")
    try:
        found = clients.reservations().get(project=settings.project, zone=settings.zone,
                                           reservation=settings.reservation)
    except gexc.NotFound:
        return Check(name, False, f"reservation '{settings.reservation}' not found in zone {settings.zone}: check "
                     f"RESERVATION and ZONE (`gcloud compute reservations list --project {settings.project}`)")
    specific = found.specific_reservation
    machine_type = _resource_name(specific.instance_properties.machine_type or "")
    if machine_type != shape.machine_type:
        return Check(name, False, f"reservation '{settings.reservation}' is for {machine_type or 'no machine type'}, "
                     f"recipe '{recipe.name}' needs {shape.machine_type}: use a {shape.machine_type} reservation")
    count, free = int(specific.count), int(specific.count) - int(specific.in_use_count)
    if count < shape.total_hosts:  # too small even when idle: freeing capacity would not help
        slices = "its slice" if shape.slices == 1 else f"its {shape.slices} slices"
        return Check(name, False, f"reservation '{settings.reservation}' has {count} {machine_type} hosts in all, "
                     f"recipe '{recipe.name}' needs {shape.total_hosts} for {slices}: use a reservation of at least "
                     f"{shape.total_hosts} hosts, or a recipe with a smaller slice")
    if free < shape.total_hosts:
        return Check(name, False, f"reservation '{settings.reservation}' has {free} of {specific.count} "
                     f"{machine_type} free, recipe '{recipe.name}' needs {shape.total_hosts}: free capacity "
                     "(delete idle node pools or VMs using it) or use a larger reservation")
    return Check(name, True, f"'{settings.reservation}' in {settings.zone}: {free} of {specific.count} "
                 f"{machine_type} free, {shape.total_hosts} needed")


def check_machine_type(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    machine_type = recipe.shape.machine_type
    try:
        clients.machine_types().get(project=settings.project, zone=settings.zone, machine_type=machine_type)
    except gexc.NotFound:
        return Check("machine type", False, f"{machine_type} is not offered in zone {settings.zone}: pick a zone "
                     "with TPU v6e (`gcloud compute machine-types list --filter=name~ct6e`) and set ZONE")
    return Check("machine type", True, f"{machine_type} offered in {settings.zone}")


def check_accelerator_type(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    accelerator = recipe.shape.accelerator_type
    name = f"projects/{settings.project}/locations/{settings.zone}/acceleratorTypes/{accelerator}"
    try:
        clients.tpu().get_accelerator_type(request={"name": name})
    except gexc.NotFound:
        return Check("accelerator type", False, f"{accelerator} is not offered in zone {settings.zone}: pick a zone "
                     f"that lists it (`gcloud compute tpus accelerator-types list --zone {settings.zone}`)")
    return Check("accelerator type", True, f"{accelerator} offered in {settings.zone}")


def check_bucket(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    bucket = clients.storage().lookup_bucket(settings.gcs_bucket)
    if bucket is None:
        return Check("bucket", False, f"bucket gs://{settings.gcs_bucket} does not exist: deploy the artifacts "
                     "stack (`npx cdktf deploy artifacts`) or fix GCS_BUCKET")
    location = (bucket.location or "").lower()
    if location != settings.region:
        return Check("bucket", False, f"bucket gs://{settings.gcs_bucket} is in {location or 'an unknown location'}, "
                     f"not REGION {settings.region}: checkpoints would cross regions; use a bucket in {settings.region}")
    return Check("bucket", True, f"gs://{settings.gcs_bucket} in {location}")


def check_token(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    try:
        enabled = hf_token.enabled_versions(clients.secrets(), settings)
    except UserError as error:
        return Check("token secret", False, str(error))
    if not enabled:
        return Check("token secret", False, f"secret '{settings.hf_token_secret}' has no enabled version: "
                     f"{hf_token.no_version_fix(settings)}")
    return Check("token secret", True, f"'{settings.hf_token_secret}' has {len(enabled)} enabled version(s)")


CHECKS: tuple[Callable[[Clients, Recipe, Settings], Check], ...] = (
    check_reservation, check_machine_type, check_accelerator_type, check_bucket, check_token)


def run_checks(clients: Clients, recipe: Recipe, settings: Settings) -> list[Check]:
    """Every check, even after a failure, so the user sees all fixes at once."""
    results = []
    for check in CHECKS:
        label = check.__name__.removeprefix("check_").replace("_", " ")
        try:
            results.append(check(clients, recipe, settings))
        except (gexc.PermissionDenied, gexc.Forbidden) as error:
            results.append(Check(label, False, f"permission denied ({error.message[:120]}): grant your account "
                                 "read access to it in the project"))
        except gexc.GoogleAPIError as error:
            results.append(Check(label, False, f"the API call failed ({type(error).__name__}: {str(error)[:160]}); "
                                 "retry, or check the API is enabled in the project"))
    return results
