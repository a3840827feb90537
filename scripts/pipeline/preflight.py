"""Checks to run before money is spent: capacity (per mode), bucket, token and images, each a pass or a
one-line fix. A check that could not read what it needs passes with a line starting "warning: " that says
how to look it up by hand."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from google.api_core import exceptions as gexc

from tpu_rl.recipes import Recipe, Settings, UserError
from tpu_rl.recipes.capacity.modes import MODE_RULES, CapacityMode, uses_queued_provisioning, uses_reservation
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.cloud import gcs, hf_hub, hf_token, registry
from tpu_rl.scripts.cloud.clients import Clients
from tpu_rl.scripts.cloud.foreign import describe
from tpu_rl.scripts.cloud.kubeconfig import get_credentials_command
from tpu_rl.scripts.pipeline.platforms import platform_for


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # what was found (pass) or what is wrong and how to fix it (fail)


def _resource_name(value: str) -> str:
    """Compute returns some references as URLs; the last segment is the name."""
    return value.rstrip("/").rsplit("/", 1)[-1]


def check_reservation(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    name = CapacityMode.RESERVATION.value
    shape = recipe.shape
    if not uses_reservation(recipe.capacity):
        return Check(name, True, f"not needed (capacity '{','.join(recipe.capacity)}')")
    try:
        found = clients.within(f"the Compute Engine API for reservation '{settings.reservation}'", "compute",
                               lambda timeout: clients.reservations().get(
                                   project=settings.project, zone=settings.zone, reservation=settings.reservation,
                                   timeout=timeout))
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


QUOTAS_CONSOLE = "https://console.cloud.google.com/iam-admin/quotas?project={project}"
# The GKE version scheme, e.g. 1.33.0-gke.1712000 (https://cloud.google.com/kubernetes-engine/versioning);
# /version reports it with a leading v.
_GKE_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)-gke\.(\d+)")
VERSION_TIMEOUT_SECONDS = 10


def region_quotas(clients: Clients, settings: Settings) -> dict:
    """REGION's quotas by metric name, as regions.get lists them (Region.quotas[]: metric, limit, usage)."""
    region = clients.within(f"the Compute Engine API for the quotas of {settings.region}", "compute",
                            lambda timeout: clients.regions().get(project=settings.project, region=settings.region,
                                                                  timeout=timeout))
    return {q.metric: q for q in region.quotas}


def _quota(clients: Clients, recipe: Recipe, settings: Settings, kind: str) -> Check | None:
    """The slice's chips against the region's quota of `kind` (preemptible, on_demand), for the modes of
    the capacity list that draw on it; None when none does."""
    modes = [mode for mode in recipe.capacity if MODE_RULES[mode].quota == kind]
    if not modes:
        return None
    label, generation, region = kind.replace("_", "-"), recipe.shape.generation, settings.region
    name, need = f"{label} quota", recipe.shape.total_chips
    wanted = f"{need} chips for {', '.join(modes)}"
    console = QUOTAS_CONSOLE.format(project=settings.project)
    by_hand = f"check the {label} TPU {generation} quota of {region} at {console} ({wanted})"
    metrics = recipe.tpu_facts.quota
    if metrics is None:
        return Check(name, True, f"warning: no quota metric is known for TPU {generation}, so it was not read: {by_hand}")
    metric = getattr(metrics, kind)
    quota = region_quotas(clients, settings).get(metric)
    if quota is None:
        unconfirmed = ", a name not confirmed by Google" if not metrics.confirmed else ""
        return Check(name, True, f"warning: could not read it, region {region} lists no {metric}{unconfirmed}: "
                     f"{by_hand}")
    limit, usage = int(quota.limit), int(quota.usage)
    found = f"{label} TPU {generation} quota in {region} ({metric}) is {limit} chips"
    if limit < need:
        return Check(name, False, f"{found}, recipe '{recipe.name}' needs {wanted}: request more at {console}")
    if limit - usage < need:
        return Check(name, False, f"{found}, {usage} in use, {limit - usage} free; recipe '{recipe.name}' needs "
                     f"{wanted}: wait until the TPUs using it are gone, or request more at {console}")
    return Check(name, True, f"{metric} in {region}: {limit - usage} of {limit} chips free, {wanted}")


def check_preemptible_quota(clients: Clients, recipe: Recipe, settings: Settings) -> Check | None:
    return _quota(clients, recipe, settings, "preemptible")


def check_on_demand_quota(clients: Clients, recipe: Recipe, settings: Settings) -> Check | None:
    return _quota(clients, recipe, settings, "on_demand")


def _gke_version(text: str) -> tuple[int, ...] | None:
    match = _GKE_VERSION.match(text)
    return tuple(int(part) for part in match.groups()) if match else None


def _cluster_version(clients: Clients) -> str:
    """The control plane's version through the Kubernetes /version endpoint, from the kubeconfig context of
    exactly this cluster (UserError when there is none)."""
    from kubernetes import client as k8s

    api = clients.kube()
    return k8s.VersionApi(api).get_code(_request_timeout=VERSION_TIMEOUT_SECONDS).git_version


def check_flex_start(clients: Clients, recipe: Recipe, settings: Settings) -> Check | None:
    """The zone offers flex-start for the generation, and the cluster (when the kubeconfig reaches it) is
    recent enough to create flex-start TPU node pools."""
    if not uses_queued_provisioning(recipe.capacity):
        return None
    name, generation, cluster = CapacityMode.FLEX_START.value, recipe.shape.generation, settings.cluster_name
    facts = recipe.tpu_facts.flex_start
    assert facts is not None  # recipes refuse flex-start for a generation without it (check_capacity)
    zones = settings.zones_for(recipe)  # a GKE stack has a flex-start pool in each zone of ZONE
    for zone in zones:
        if zone not in facts.zones:
            return Check(name, False, f"ZONE {zone} offers no flex-start TPU {generation}: pick one of "
                         f"{', '.join(facts.zones)} (and its REGION)")
    offers = "offers" if len(zones) == 1 else "offer"
    offered, minimum = f"{', '.join(zones)} {offers} flex-start TPU {generation}", facts.min_gke_version
    enforced = f"the stack's `terraform plan` refuses a cluster older than {minimum}"
    try:
        version = _cluster_version(clients)
    except UserError:
        return Check(name, True, f"{offered}; warning: cluster '{cluster}' is not in your kubeconfig (not deployed "
                     f"yet?), so its GKE version was not read: {enforced}")
    except Exception as error:  # noqa: BLE001 -- unreachable, refused, timed out: the version stays unknown
        return Check(name, True, f"{offered}; warning: could not read cluster '{cluster}''s GKE version "
                     f"({describe(error)}): {enforced}; `{get_credentials_command(settings)}` refreshes the context")
    found, needed = _gke_version(version), _gke_version(minimum)
    if needed is None:  # the catalog's own fact, [tpu.<generation>.flex_start] of recipes.toml
        raise ValueError(f"min_gke_version '{minimum}' of TPU {generation} is not a GKE version")
    if found is None:
        return Check(name, True, f"{offered}; warning: cluster '{cluster}' reports version '{version}', not a GKE "
                     f"version: {enforced}")
    if found < needed:
        return Check(name, False, f"cluster '{cluster}' runs GKE {version.lstrip('v')}; flex-start TPU node pools need "
                     f"{minimum} or later: upgrade its control plane (`gcloud container clusters upgrade {cluster} "
                     f"--master --cluster-version <{minimum} or later> --region {settings.region} "
                     f"--project {settings.project}`)")
    return Check(name, True, f"{offered}; cluster '{cluster}' runs GKE {version.lstrip('v')}, at least {minimum}")


def offered(clients: Clients, settings: Settings, zone: str, machine_type: str) -> None:
    """Nothing when `zone` offers `machine_type`; gexc.NotFound when it does not."""
    clients.within(f"the Compute Engine API for {machine_type} in {zone}", "compute",
                   lambda timeout: clients.machine_types().get(project=settings.project, zone=zone,
                                                               machine_type=machine_type, timeout=timeout))


def check_machine_type(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    """The TPU host's machine type in every zone the recipe's TPUs may be in (Settings.zones_for)."""
    machine_type = recipe.shape.machine_type
    zones = settings.zones_for(recipe)
    for zone in zones:
        try:
            offered(clients, settings, zone, machine_type)
        except gexc.NotFound:
            return Check("machine type", False, f"{machine_type} is not offered in zone {zone}: pick a zone "
                         "with TPU v6e (`gcloud compute machine-types list --filter=name~ct6e`) and set ZONE")
    return Check("machine type", True, f"{machine_type} offered in {', '.join(zones)}")


def check_accelerator_type(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    accelerator = recipe.shape.accelerator_type
    zones = settings.zones_for(recipe)
    for zone in zones:
        name = f"projects/{settings.project}/locations/{zone}/acceleratorTypes/{accelerator}"
        try:
            clients.within(f"the Cloud TPU API for {accelerator} in {zone}", "tpu",
                           lambda timeout: clients.tpu().get_accelerator_type(request={"name": name}, timeout=timeout))
        except gexc.NotFound:
            return Check("accelerator type", False, f"{accelerator} is not offered in zone {zone}: pick a zone "
                         f"that lists it (`gcloud compute tpus accelerator-types list --zone {zone}`)")
    return Check("accelerator type", True, f"{accelerator} offered in {', '.join(zones)}")


def cpu_pool_zones(settings: Settings) -> tuple[str, ...]:
    """Where the CPU pool (the Pathways head, convert, export) has its nodes: the first zone of ZONE, as
    the stack places every pool but the TPU slices' (infra/gke_cluster.py node_pool)."""
    return settings.zones[:1]


def _cpu_machine_fix(recipe: Recipe) -> str:
    return f"or set another cpu_machine_type for recipe '{recipe.name}' in recipes/recipes.toml"


def check_cpu_machine_type(clients: Clients, recipe: Recipe, settings: Settings) -> Check | None:
    """The CPU pool's machine type in its zone: without it the pool never scales up, and a train step's
    TPU slice idles for CAPACITY_WAIT's `cpu` while its head waits for a node."""
    machine_type = recipe.cpu_machine_type
    runs = ", ".join(recipe.platform_facts.cpu_machine_runs)
    if not runs or not machine_type:
        return None
    zones = cpu_pool_zones(settings)
    for zone in zones:
        try:
            offered(clients, settings, zone, machine_type)
        except gexc.NotFound:
            return Check("cpu machine type", False, f"{machine_type}, the CPU pool's machine ({runs}), is not "
                         f"offered in zone {zone}: pick a first ZONE that lists it "
                         f"(`gcloud compute machine-types list --zones {zone} --filter=name={machine_type}`) "
                         f"{_cpu_machine_fix(recipe)}")
    return Check("cpu machine type", True, f"{machine_type} offered in {', '.join(zones)}")


# The regional quota the CPU pool's vCPUs draw on: the machine series' own metric ([machines.*] cpu_quota
# in recipes.toml, which says where the names come from), else CPUS, the Compute API's "Guest CPUs"
# (Quota.Metric in google-cloud-compute 1.57.0). A series metric the region does not list is a warning:
# its name is not confirmed, and CPUS may not count that series.
GENERAL_CPU_QUOTA = "CPUS"


def check_cpu_quota(clients: Clients, recipe: Recipe, settings: Settings) -> Check | None:
    """Room in REGION's CPU quota for one node of the CPU pool at least (it scales from zero to 2)."""
    machine = recipe.cpu_machine
    runs = ", ".join(recipe.platform_facts.cpu_machine_runs)
    if not runs or machine is None:
        return None
    region, machine_type, need = settings.region, recipe.cpu_machine_type, machine.vcpus
    console = QUOTAS_CONSOLE.format(project=settings.project)
    quotas = region_quotas(clients, settings)
    metric = machine.cpu_quota or GENERAL_CPU_QUOTA
    if metric not in quotas:
        unconfirmed = ", a name not confirmed by Google" if machine.cpu_quota else ""
        return Check("cpu quota", True, f"warning: could not read it, region {region} lists no {metric}"
                     f"{unconfirmed}: check the {machine_type} vCPU quota of {region} at {console} ({need} vCPUs "
                     "per node)")
    limit, usage = int(quotas[metric].limit), int(quotas[metric].usage)
    free = limit - usage
    if free < need:
        in_use = f", {usage} in use" if usage else ""
        return Check("cpu quota", False, f"{metric} quota in {region} is {limit} vCPUs{in_use}, {free} free; one "
                     f"{machine_type} node of the CPU pool ({runs}) needs {need}: "
                     f"request more at {console}, {_cpu_machine_fix(recipe)}")
    return Check("cpu quota", True, f"{metric} in {region}: {free} of {limit} vCPUs free, {need} per {machine_type} "
                 f"node ({free // need} fit)")


def check_bucket(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    """The same rule every command that reads the bucket stops on (tpu_rl.scripts.cloud.gcs.require_bucket)."""
    try:
        location = gcs.bucket_location(clients.storage(), settings)
    except UserError as error:
        return Check("bucket", False, str(error))
    problem = gcs.bucket_region_problem(location, settings)
    if problem:
        return Check("bucket", False, problem)
    return Check("bucket", True, f"gs://{settings.gcs_bucket} in {location}")


def check_token(clients: Clients, recipe: Recipe, settings: Settings) -> list[Check]:
    """The secret has an enabled version, and the Hub says that token may download the recipe's model."""
    try:
        enabled = hf_token.enabled_versions(clients, settings)
    except UserError as error:
        return [Check("token secret", False, str(error))]
    if not enabled:
        return [Check("token secret", False, f"secret '{settings.hf_token_secret}' has no enabled version: "
                      f"{hf_token.no_version_fix(settings)}")]
    stored = Check("token secret", True, f"'{settings.hf_token_secret}' has {len(enabled)} enabled version(s)")
    try:
        token = hf_token.read_token(clients, settings)
    except UserError as error:
        return [stored, Check("model access", False, str(error))]
    return [stored, check_model_access(token, recipe.model.hf_repo, clients.endpoints.hub)]


def check_model_access(token: str, repo_id: str, endpoint: str | None) -> Check:
    """What the Hub says about the token and the model; the check `tpu-rl secret set` repeats."""
    try:
        name, accesses = hf_hub.check(token, [repo_id], endpoint)
    except hf_hub.Unreachable as error:
        where = endpoint or hf_hub.HUB
        what = (f"{error} ({where})" if isinstance(error, hf_hub.Unanswered)
                else f"the Hugging Face Hub ({where}) did not answer ({error})")
        return Check("model access", True, f"warning: {what}, so the token was not checked: open "
                     f"https://huggingface.co/{repo_id} signed in, and accept its licence if it asks")
    if name is None:
        return Check("model access", False, hf_hub.refused_token(endpoint or hf_hub.HUB))
    return Check("model access", accesses[0].ok, accesses[0].detail)


def recipe_images(recipe: Recipe) -> list[str]:
    """The images the recipe's pods pull: the MaxText image, and Pathways' server and proxy with it."""
    return platform_for(recipe).images(recipe)


def _image_fix(recipe: Recipe, image: str) -> str:
    field = "image" if image == recipe.maxtext.image else "pathways_tag"
    host, repository, _ = registry.split_image(image)
    return (f"set {field} of [maxtext.\"{recipe.maxtext_version}\"] in recipes/recipes.toml to a tag that "
            f"`gcloud artifacts docker tags list {host}/{repository}` lists")


def check_images(clients: Clients, recipe: Recipe, settings: Settings) -> list[Check] | None:
    """Each image exists in its registry, so a wrong tag fails here and not as ImagePullBackOff on a slice
    Kueue has already admitted (and flex-start or spot has already billed)."""
    images = recipe_images(recipe)
    if not images:
        return None
    checks = []
    for image in images:
        answer = registry.head_manifest(image, clients.endpoints.registry, clients.access_token)
        if answer.status == 200:
            digest = answer.digest[:len("sha256:") + 12] or "no digest reported"
            checks.append(Check("image", True, f"{image} ({digest})"))
        elif answer.status == 404:
            why = f"HTTP 404 {answer.error}".strip()
            checks.append(Check("image", False, f"{image} does not exist ({why}): {_image_fix(recipe, image)}"))
        else:
            found = f"HTTP {answer.status} {answer.error}".strip() if answer.status else answer.error
            checks.append(Check("image", True, f"warning: could not read {image} ({found}), so its tag was not "
                                f"checked: `gcloud artifacts docker images describe {image}` checks it by hand"))
    return checks


def check_fit(clients: Clients, recipe: Recipe, settings: Settings) -> Check:
    """The recipe's own plan judged by XLA's TPU compiler for its chips (scripts/fit; its shipped
    figures, or a compile here); a run's own --set items are judged by `run` and `tpu-rl fit`."""
    from tpu_rl.scripts.fit.check import fit_of

    fit = fit_of(RunSpec.of_catalog(recipe), settings)
    return Check("fit", fit.fits, fit.summary() if fit.fits else fit.refusal(recipe.name))


# Each check returns None when it does not apply to the recipe's capacity list (no line is printed).
CHECKS: tuple[Callable[[Clients, Recipe, Settings], Check | list[Check] | None], ...] = (
    check_reservation, check_flex_start, check_preemptible_quota, check_on_demand_quota, check_machine_type,
    check_accelerator_type, check_cpu_machine_type, check_cpu_quota, check_bucket, check_token, check_images,
    check_fit)


def run_checks(clients: Clients, recipe: Recipe, settings: Settings) -> list[Check]:
    """Every check, even after a failure, so the user sees all fixes at once."""
    results = []
    for check in CHECKS:
        label = check.__name__.removeprefix("check_").replace("flex_start", CapacityMode.FLEX_START.value)
        label = label.replace("_", " ")
        try:
            result = check(clients, recipe, settings)
            if result is not None:
                results.extend(result if isinstance(result, list) else [result])
        except (gexc.PermissionDenied, gexc.Forbidden) as error:
            results.append(Check(label, False, f"permission denied ({error.message[:120]}): grant your account "
                                 "read access to it in the project"))
        except gexc.GoogleAPIError as error:
            results.append(Check(label, False, f"the API call failed ({type(error).__name__}: {str(error)[:160]}); "
                                 "retry, or check the API is enabled in the project"))
    return results
