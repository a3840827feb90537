"""The check of every setting value, once: raw strings in, typed values out, or one line naming the
setting and the rule (docs/settings.md).

AUTHORIZED_CIDR's rules among them: which blocks may reach a GKE control plane's public endpoint
(refused: too wide, or address space no client connects from), and the warning when every block is
private. One rule for the setting and for tpu_rl.infra.gke_cluster.GkeClusterProps."""

from __future__ import annotations

import ipaddress
import re
from typing import Collection, Mapping, NamedTuple, Sequence, TypedDict

from tpu_rl.recipes.capacity.modes import CapacityMode, WaitKey, parse_capacity, parse_capacity_wait
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.settings.specs import (BY_FIELD, REQUIRED, SPECS, UNSET, VM_STAYS, VM_STOPS, SettingSpec,
                                           missing_settings)


# The control plane's public endpoint: public blocks admitting more than a /16 (65,536 addresses), one
# block or all together, open it to much of the internet. Private ranges (RFC 1918) are not reachable
# from outside, so any size is kept.
MIN_PUBLIC_CIDR_PREFIX = 16
MAX_PUBLIC_ADDRESSES = 2 ** (32 - MIN_PUBLIC_CIDR_PREFIX)


# Blocks no client can connect from, so the control plane would refuse everyone and deploy would fail
# only after its 15-25 minutes: loopback, "this network" (0.0.0.0/8, unspecified), link-local, multicast
# and reserved (240.0.0.0/4, broadcast). The names are the attributes of Python's ipaddress, which reads
# them from the IANA special-purpose registry (RFC 6890).
_UNREACHABLE = (("is_loopback", "loopback"), ("is_link_local", "link-local"), ("is_multicast", "multicast"),
                ("is_reserved", "reserved"))
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
# Address space that never leaves a private network (RFC 1918).
_PRIVATE = tuple(ipaddress.IPv4Network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def _unreachable(network: ipaddress.IPv4Network) -> str | None:
    if network.subnet_of(_THIS_NETWORK):
        return "'this network' (0.0.0.0/8)"
    return next((name for attribute, name in _UNREACHABLE if getattr(network, attribute)), None)


def is_private_block(network: ipaddress.IPv4Network) -> bool:
    return any(network.subnet_of(block) for block in _PRIVATE)


def authorized_cidrs_problem(items: Sequence[str]) -> str | None:
    """What is wrong with a list of control-plane CIDRs, or None. One rule for AUTHORIZED_CIDR and for
    tpu_rl.infra.gke_cluster.GkeClusterProps, so no construct accepts what the setting refuses."""
    if not items:
        return "lists no CIDR block: name your own egress address, e.g. 203.0.113.7/32"
    public = 0
    for item in items:
        try:
            network = ipaddress.ip_network(item, strict=True)
        except ValueError:
            return f"'{item}' is not a CIDR block like 203.0.113.7/32 (host bits must be zero)"
        if not isinstance(network, ipaddress.IPv4Network):
            return f"'{item}' is IPv6; GKE master authorized networks take IPv4 CIDR blocks"
        unreachable = _unreachable(network)
        if unreachable:
            return (f"'{item}' is {unreachable} address space, from which no client can reach the control plane: "
                    "list your own egress address, e.g. 203.0.113.7/32 (`curl -s ifconfig.me` shows it)")
        if network.is_private:
            continue
        if network.prefixlen < MIN_PUBLIC_CIDR_PREFIX:
            return (f"'{item}' admits {network.num_addresses:,} public addresses, which is public in effect: list "
                    f"your own egress address, e.g. 203.0.113.7/32 (public blocks wider than "
                    f"/{MIN_PUBLIC_CIDR_PREFIX} are refused)")
        public += network.num_addresses
    if public > MAX_PUBLIC_ADDRESSES:
        return (f"'{','.join(items)}' admits {public:,} public addresses in all, which is public in effect: list "
                f"your own egress addresses (at most {MAX_PUBLIC_ADDRESSES:,} public addresses together)")
    return None


def authorized_cidrs_warning(items: Sequence[str]) -> str | None:
    """A warning, not a refusal: when every block is private address space, only a machine inside the VPC
    (or connected to it) reaches the public endpoint's allowlist, so `cdktf deploy` must run from there."""
    if items and all(is_private_block(ipaddress.IPv4Network(item)) for item in items):
        return (f"warning: AUTHORIZED_CIDR '{','.join(items)}' lists only private address space: kubectl, helm "
                "and `tpu-rl run` then reach the control plane only from a machine inside the VPC (or connected "
                "to it); add your public egress address, e.g. 203.0.113.7/32, to work from elsewhere")
    return None


_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_RESOURCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_SECRET_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
MAX_CLUSTER_NAME = 20

def _fail(spec: SettingSpec, rule: str) -> UserError:
    return UserError(f"{spec.env} {rule}")

def _missing(values: Mapping[str, str], needs: Collection[str]) -> list[SettingSpec]:
    """The specs of `needs` that `values` leaves unset, in SPECS order. `vm_name` is met by TPU_NAME or
    CLUSTER_NAME (named when neither is set); the rules (RESERVATION, AUTHORIZED_CIDR) are checked with the
    recipe, by Settings.for_recipe."""
    wanted = set(needs) - {"reservation", "authorized_cidr"}
    if "vm_name" in wanted:
        wanted.discard("vm_name")
        if not values.get("tpu_name"):
            wanted.add("cluster_name")
    return [spec for spec in SPECS if spec.field in wanted and not values.get(spec.field)]


class Parsed(TypedDict, total=False):
    """The settings a check turns into more than their text, each only when set (Settings' fields of these names)."""

    zones: tuple[str, ...]
    authorized_cidr: tuple[str, ...]
    capacity: tuple[CapacityMode, ...]
    capacity_wait: tuple[tuple[WaitKey, float], ...]


class Checked(NamedTuple):
    """The checked values, typed as Settings takes them (`Settings(**text, **parsed)`): `text` the settings a
    string holds, UNSET where a required one is left out, and `parsed` the others."""

    text: dict[str, str]
    parsed: Parsed


def check_values(values: Mapping[str, str], needs: Collection[str] = REQUIRED) -> Checked:
    """Validate raw strings and convert them to typed values: refuse what `needs` lacks, check every value
    that is set (needed or not), and leave the other required fields UNSET."""
    missing = _missing(values, needs)
    if missing:
        raise missing_settings(missing)
    # The values as strings (stripped, or a default); `text` the strings they stay, UNSET where left out, and
    # `parsed` what the others become.
    given: dict[str, str] = {}
    for spec in SPECS:
        raw = values.get(spec.field)
        if raw:
            given[spec.field] = raw.strip()
        elif not spec.required and spec.default is not None:
            given[spec.field] = spec.default
    text: dict[str, str] = {spec.field: UNSET for spec in SPECS if spec.required and spec.field not in given}
    text.update(given)
    parsed: Parsed = {}

    project = given.get("project")
    if project is not None and not _PROJECT.match(project):
        raise _fail(BY_FIELD["project"], f"'{project}' is not a valid project id: 6-30 characters, lowercase "
                    "letters, digits and hyphens, starting with a letter and not ending with a hyphen")
    region = given.get("region")
    if region is not None and not _REGION.match(region):
        raise _fail(BY_FIELD["region"], f"'{region}' is not a region name like us-east5")
    if "zone" in given:
        zones = _check_zones(given["zone"], region)
        parsed["zones"], text["zone"] = zones, zones[0]
    cluster = given.get("cluster_name")
    if cluster is None:
        pass
    elif len(cluster) > MAX_CLUSTER_NAME:
        raise _fail(BY_FIELD["cluster_name"], f"'{cluster}' has {len(cluster)} characters; the limit is "
                    f"{MAX_CLUSTER_NAME} (GKE node pool and service account names derive from it)")
    elif not _DNS_1035.match(cluster):
        raise _fail(BY_FIELD["cluster_name"], f"'{cluster}' is not a DNS-1035 label: lowercase letters, digits "
                    "and '-', starting with a letter and ending with a letter or digit")
    if "gcs_bucket" in given:
        _check_bucket(given["gcs_bucket"], BY_FIELD["gcs_bucket"])
    if "state_bucket" in given:
        _check_bucket(given["state_bucket"], BY_FIELD["state_bucket"])
        if given["state_bucket"] == given.get("gcs_bucket"):
            # The artifacts stack creates GCS_BUCKET: its own state cannot live in a bucket that does not
            # exist before its first deploy, and destroying the stack would delete the state with it.
            raise _fail(BY_FIELD["state_bucket"], f"'{given['state_bucket']}' is GCS_BUCKET, the artifacts bucket a "
                        "stack manages: create a separate bucket for Terraform state (docs/stacks.md, 'State "
                        "backend') or unset TF_STATE_BUCKET for local state")
    reservation = given.get("reservation")
    if reservation is not None and not _RESOURCE_NAME.match(reservation):
        raise _fail(BY_FIELD["reservation"], f"'{reservation}' is not a reservation name: lowercase letters, "
                    "digits and '-', 1-63 characters, starting with a letter")
    if "authorized_cidr" in given:
        parsed["authorized_cidr"] = _check_cidrs(given["authorized_cidr"])
    secret = given["hf_token_secret"]
    if not _SECRET_NAME.match(secret):
        raise _fail(BY_FIELD["hf_token_secret"], f"'{secret}' is not a Secret Manager secret id: 1-255 letters, "
                    "digits, '-' or '_'")
    if "capacity" in given:
        try:
            parsed["capacity"] = parse_capacity(given["capacity"])
        except ValueError as error:
            raise _fail(BY_FIELD["capacity"], str(error)) from None
    if "capacity_wait" in given:
        try:
            parsed["capacity_wait"] = parse_capacity_wait(given["capacity_wait"])
        except ValueError as error:
            raise _fail(BY_FIELD["capacity_wait"], str(error)) from None
    tpu_name = given.get("tpu_name")
    if tpu_name is not None and not _RESOURCE_NAME.match(tpu_name):
        raise _fail(BY_FIELD["tpu_name"], f"'{tpu_name}' is not an instance name: lowercase letters, digits "
                    "and '-', 1-63 characters, starting with a letter")
    after = given["vm_after_run"]
    if after not in (VM_STOPS, VM_STAYS):
        raise _fail(BY_FIELD["vm_after_run"], f"'{after}' is neither {VM_STOPS} (the TPU VM stops itself once every "
                    f"output of its run is verified; the default) nor {VM_STAYS} (it stays up until you destroy it)")
    return Checked({field: value for field, value in text.items() if field not in parsed}, parsed)


def _check_zones(raw: str, region: str | None) -> tuple[str, ...]:
    """ZONE: one zone, or a comma-separated list in fallback order, every one in REGION (when a command
    reads REGION too, or it is set), none twice."""
    spec = BY_FIELD["zone"]
    zones = [part.strip() for part in raw.split(",")]
    like = region or "us-east5"
    for zone in zones:
        if not zone:
            raise _fail(spec, f"'{raw}' has an empty item: list zones like {like}-b,{like}-a")
        zone_match = _ZONE.match(zone)
        if not zone_match:
            raise _fail(spec, f"'{zone}' is not a zone name like {like}-b")
        if region is not None and zone_match.group(1) != region:
            raise _fail(spec, f"'{zone}' is not in REGION '{region}': pick a zone named {region}-<letter>")
    repeated = next((zone for index, zone in enumerate(zones) if zone in zones[:index]), None)
    if repeated:
        raise _fail(spec, f"'{raw}' lists {repeated} twice: name each zone once, in fallback order")
    return tuple(zones)

def bucket_name_problem(bucket: str) -> str | None:
    """What breaks GCS bucket naming in `bucket` (a bare name), or None: one rule for GCS_BUCKET,
    TF_STATE_BUCKET and the gs:// URLs a command takes."""
    rule = ("GCS names are 3-63 characters of lowercase letters, digits, '-', '_' and '.', start and end with "
            "a letter or digit, and may not start with 'goog' or contain 'google'")
    if not _BUCKET.match(bucket) or bucket.startswith("goog") or "google" in bucket or ".." in bucket:
        return f"breaks GCS bucket naming: {rule}"
    try:
        ipaddress.ip_address(bucket)
    except ValueError:
        return None
    return "looks like an IP address, which GCS does not allow as a bucket name"


def _check_bucket(bucket: str, spec: SettingSpec) -> None:
    if bucket.startswith("gs://"):
        raise _fail(spec, f"'{bucket}' must be the bare bucket name, without gs://")
    problem = bucket_name_problem(bucket)
    if problem:
        raise _fail(spec, f"'{bucket}' {problem}")


def _check_cidrs(raw: str) -> tuple[str, ...]:
    items = [part.strip() for part in raw.split(",")]
    problem = authorized_cidrs_problem(items)
    if problem:
        raise _fail(BY_FIELD["authorized_cidr"], problem)
    return tuple(str(ipaddress.ip_network(item)) for item in items)
