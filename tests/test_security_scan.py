"""checkov over everything we would hand to a cloud: the synthesized stacks and the rendered manifests.

checkov runs from its own venv (`make install` puts it in .venv-checkov; its pinned dependencies clash
with ours), once per framework over a directory, as a subprocess. Every failed check must be matched
by an entry in security/suppressions.yaml, and every entry must still match a failed check.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kept import files_of, kept
from peers.settings import spec_of
from tpu_rl.jobs import render_manifests
from tpu_rl.recipes import all_recipes, example_settings

REPO = Path(__file__).resolve().parents[1]
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
SUPPRESSIONS = REPO / "security" / "suppressions.yaml"

# Guards against a scan that "passes" because checkov understood nothing: it must have evaluated at
# least this many checks per stack / per rendered manifest file, and looked at these resource types.
MIN_CHECKS_PER_STACK = {"artifacts": 4, "gke": 40, "vm": 15}
MIN_CHECKS_PER_JOB = 20
TYPES_THAT_MUST_BE_SCANNED = {
    "artifacts": {"google_storage_bucket"},
    "gke": {"google_container_cluster", "google_container_node_pool"},
    "vm": {"google_compute_instance"},
}


@dataclass(frozen=True)
class Finding:
    framework: str
    check_id: str
    check_name: str
    resource: str  # the string suppressions match against (see security/suppressions.yaml)
    file: str


@dataclass(frozen=True)
class Scan:
    framework: str
    passed: list[Finding]
    failed: list[Finding]
    parsing_errors: list[str]


CHECKOV_FLAGS = ("--output", "json", "--skip-download", "--no-cert-verify")


def run_checkov(directory: Path, framework: str) -> list[dict]:
    """One checkov run over a directory; returns its JSON reports (one per check type). The reports are kept
    by the digest of the directory's files, the framework, the flags and checkov's venv (tests/kept.py):
    checkov reads nothing else, so the same files get the same reports (a scan costs ~7 s of CPU)."""
    assert CHECKOV.is_file(), f"checkov is missing at {CHECKOV}: run `make install`"

    def ask() -> list[dict]:
        result = subprocess.run(
            [str(CHECKOV), "--directory", str(directory), "--framework", framework, *CHECKOV_FLAGS],
            capture_output=True, text=True, timeout=600, cwd=directory,
        )
        # checkov exits 1 when a check failed; anything else (or no JSON) means it did not run properly.
        assert result.returncode in (0, 1), f"checkov failed ({result.returncode}): {result.stderr[-2000:]}"
        report = json.loads(result.stdout)
        reports = report if isinstance(report, list) else [report]
        return [r for r in reports if r.get("check_type") == framework]

    return kept("checkov", CHECKOV.parents[1], [framework, *CHECKOV_FLAGS, *files_of(directory)], ask)


# ---------------------------------------------------------------------------------------------------
# Terraform JSON: map checkov's "resource.<logical id>" back to the stack, the resource type and the
# construct path that CDKTF records under "//" -> metadata -> path.


def _resource_index(stacks_dir: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(stack, logical id) -> (resource type, construct path without the stack prefix)."""
    index = {}
    for tf_json in sorted(stacks_dir.glob("*/cdk.tf.json")):
        stack = tf_json.parent.name
        config = json.loads(tf_json.read_text())
        for rtype, resources in config.get("resource", {}).items():
            for logical_id, body in resources.items():
                path = body.get("//", {}).get("metadata", {}).get("path", logical_id)
                index[(stack, logical_id)] = (rtype, path.removeprefix(f"{stack}/"))
    return index


def _stack_of(file_path: str) -> str:
    return Path(file_path).parent.name


def _terraform_findings(reports: list[dict], stacks_dir: Path, key: str) -> list[Finding]:
    index = _resource_index(stacks_dir)
    findings = []
    for report in reports:
        for check in report["results"][key]:
            stack = _stack_of(check["file_path"])
            # checkov names a resource "resource.<logical id>" (resource checks) or "<type>.<logical id>"
            # (graph checks); the logical id is what the index knows.
            logical_id = check["resource"].split(".", 1)[1]
            rtype, path = index[(stack, logical_id)]
            findings.append(Finding("terraform_json", check["check_id"], check["check_name"],
                                    f"{stack}:{rtype}.{path}", check["file_path"]))
    return findings


def _k8s_findings(reports: list[dict], key: str) -> list[Finding]:
    return [
        Finding("kubernetes", check["check_id"], check["check_name"], check["resource"], check["file_path"])
        for report in reports
        for check in report["results"][key]
    ]


def _parsing_errors(reports: list[dict]) -> list[str]:
    return [error for report in reports for error in report["results"].get("parsing_errors", [])]


@pytest.fixture(scope="session")
def stacks_scan(synthesized) -> Scan:
    stacks_dir = synthesized / "stacks"
    reports = run_checkov(stacks_dir, "terraform_json")
    return Scan("terraform_json", _terraform_findings(reports, stacks_dir, "passed_checks"),
                _terraform_findings(reports, stacks_dir, "failed_checks"), _parsing_errors(reports))


# ---------------------------------------------------------------------------------------------------
# Kubernetes: checkov knows Jobs and Pods, not the JobSet CRD. Each replicatedJob's template is the
# Job that the JobSet controller creates, so we write it out as that Job and scan both.


def jobs_of(jobset: dict) -> list[dict]:
    """The batch/v1 Jobs a JobSet's controller creates (one per replicatedJob; replicas share a spec)."""
    name = jobset["metadata"]["name"]
    namespace = jobset["metadata"].get("namespace", "default")
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{name}-{rjob['name']}", "namespace": namespace,
                         "labels": dict(jobset["metadata"].get("labels", {}))},
            "spec": rjob["template"]["spec"],
        }
        for rjob in jobset["spec"]["replicatedJobs"]
    ]


def driver_rbac() -> list[dict]:
    """The run driver's service account, Role and RoleBinding, as the GKE stacks install them (the
    Google SA's email, a Terraform reference there, is an example here)."""
    from tpu_rl.infra.cluster_addons import workload_service_account_manifest
    from tpu_rl.infra.driver_identity import driver_role_manifests
    from tpu_rl.recipes.conventions import DRIVER_KSA, NAMESPACE

    email = f"wl@{example_settings().project}.iam.gserviceaccount.com"
    return [workload_service_account_manifest(NAMESPACE, DRIVER_KSA, email), *driver_role_manifests(NAMESPACE, DRIVER_KSA)]


@pytest.fixture(scope="session")
def manifests_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("manifests")
    (out / "driver-rbac.yaml").write_text(yaml.safe_dump_all(driver_rbac(), sort_keys=False))
    settings = example_settings()
    for recipe in all_recipes().values():
        if recipe.platform != "gke":
            continue
        for step, jobset in render_manifests(spec_of(recipe), settings).items():
            documents = [jobset, *jobs_of(jobset)]
            (out / f"{recipe.name}-{step}.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return out


@pytest.fixture(scope="session")
def manifests_scan(manifests_dir) -> Scan:
    reports = run_checkov(manifests_dir, "kubernetes")
    return Scan("kubernetes", _k8s_findings(reports, "passed_checks"), _k8s_findings(reports, "failed_checks"),
                _parsing_errors(reports))


# ---------------------------------------------------------------------------------------------------
# Suppressions


@dataclass(frozen=True)
class Suppression:
    check: str
    framework: str
    resource: tuple[str, ...]  # globs
    why: str

    def matches(self, finding: Finding) -> bool:
        return (finding.framework == self.framework and finding.check_id == self.check
                and any(fnmatch.fnmatchcase(finding.resource, glob) for glob in self.resource))


def load_suppressions() -> list[Suppression]:
    entries = yaml.safe_load(SUPPRESSIONS.read_text())["suppressions"] or []
    suppressions = []
    for entry in entries:
        assert set(entry) == {"check", "framework", "resource", "why"}, f"suppression fields: {entry}"
        assert len(entry["why"].split()) >= 8, f"say why {entry['check']} is acceptable: {entry}"
        globs = entry["resource"] if isinstance(entry["resource"], list) else [entry["resource"]]
        suppressions.append(Suppression(**{**entry, "resource": tuple(globs)}))
    return suppressions


def _unsuppressed(scan: Scan) -> list[str]:
    suppressions = load_suppressions()
    return [
        f"{f.check_id} {f.resource} ({f.check_name}) in {f.file}"
        for f in scan.failed
        if not any(s.matches(f) for s in suppressions)
    ]


def test_suppressions_file_gives_check_resource_and_reason():
    suppressions = load_suppressions()
    assert all(s.framework in {"terraform_json", "kubernetes"} for s in suppressions)
    keys = [(s.framework, s.check, s.resource) for s in suppressions]
    assert len(keys) == len(set(keys)), "a suppression is listed twice"


def test_checkov_parses_every_synthesized_stack_and_runs_checks(stacks_scan, synthesized):
    assert not stacks_scan.parsing_errors
    stacks = sorted(p.parent.name for p in (synthesized / "stacks").glob("*/cdk.tf.json"))
    recipes = all_recipes()
    assert set(stacks) >= {"artifacts", *recipes}
    for stack in stacks:
        evaluated = [f for f in stacks_scan.passed + stacks_scan.failed if f.resource.startswith(f"{stack}:")]
        kind = "artifacts" if stack == "artifacts" else "gke" if recipes[stack].platform == "gke" else "vm"
        assert len(evaluated) >= MIN_CHECKS_PER_STACK[kind], f"checkov evaluated only {len(evaluated)} checks in {stack}"
        scanned_types = {f.resource.split(":", 1)[1].split(".", 1)[0] for f in evaluated}
        assert TYPES_THAT_MUST_BE_SCANNED[kind] <= scanned_types, (stack, scanned_types)


def test_checkov_parses_every_rendered_manifest_and_runs_checks(manifests_scan, manifests_dir):
    assert not manifests_scan.parsing_errors
    for path in sorted(manifests_dir.glob("*.yaml")):
        jobs = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "Job"]
        for job in jobs:
            resource = f"Job.{job['metadata']['namespace']}.{job['metadata']['name']}"
            evaluated = [f for f in manifests_scan.passed + manifests_scan.failed if f.resource == resource]
            assert len(evaluated) >= MIN_CHECKS_PER_JOB, f"checkov evaluated only {len(evaluated)} checks on {resource}"


def test_checkov_runs_its_rbac_checks_on_the_drivers_role_and_binding(manifests_scan):
    """checkov's checks of Roles (wildcards, bind, escalate) and of what a bound service account may do
    (read all Secrets, impersonate, pods/exec) looked at the driver's Role; none failed
    (test_rendered_manifests_pass_checkov_except_listed_suppressions)."""
    from tpu_rl.recipes.conventions import DRIVER_KSA, NAMESPACE

    evaluated = {(f.check_id, f.resource) for f in manifests_scan.passed + manifests_scan.failed}
    for kind, checks in (("Role", {"CKV_K8S_49", "CKV_K8S_157", "CKV_K8S_158"}),
                         ("RoleBinding", {"CKV2_K8S_1", "CKV2_K8S_3", "CKV2_K8S_5"})):
        assert {(check, f"{kind}.{NAMESPACE}.{DRIVER_KSA}") for check in checks} <= evaluated, kind


def test_synthesized_stacks_pass_checkov_except_listed_suppressions(stacks_scan):
    assert _unsuppressed(stacks_scan) == []


def test_rendered_manifests_pass_checkov_except_listed_suppressions(manifests_scan):
    assert _unsuppressed(manifests_scan) == []


def test_every_suppression_still_matches_a_failed_check(stacks_scan, manifests_scan):
    failed = stacks_scan.failed + manifests_scan.failed
    stale = [
        f"{s.check} {glob}"
        for s in load_suppressions()
        for glob in s.resource
        if not any(s.matches(f) and fnmatch.fnmatchcase(f.resource, glob) for f in failed)
    ]
    assert stale == [], "remove these suppressions from security/suppressions.yaml, they match nothing"


def test_security_page_accounts_for_every_suppressed_check():
    page = (REPO / "docs" / "security.md").read_text()
    assert page.startswith("# Security\n")
    missing = sorted({s.check for s in load_suppressions()} - {word.strip("(),.;:") for word in page.split()})
    assert missing == [], "explain these accepted checks in docs/security.md"


# ---------------------------------------------------------------------------------------------------
# The reasons say what is true (issue 20, item 6): the remedies they name make the checks pass, and the
# NetworkPolicy entries own up to the pods a policy could protect.

REMEDIES = {
    # check -> (resource type, the attributes a reason names as the fix), from checkov 3.3.30's own
    # checks: terraform/checks/resource/gcp/GoogleComputeBootDiskEncryption.py (CKV_GCP_38 passes on
    # boot_disk.kms_key_self_link as on disk_encryption_key_raw), GKENetworkPolicyEnabled.py (CKV_GCP_12
    # passes on Dataplane V2), GKEEnableVPCFlowLogs.py (CKV_GCP_61: enable_intranode_visibility) and
    # GKEBinaryAuthorization.py (CKV_GCP_66: the project singleton policy enforced).
    "CKV_GCP_38": ("google_compute_instance", "boot_disk.kms_key_self_link",
                   {"kms_key_self_link": "projects/p/locations/us-east5/keyRings/r/cryptoKeys/k"}),
    # CKV_GCP_12 reads Dataplane V2 only beside a network_policy block (Calico off, as GKE requires).
    "CKV_GCP_12": ("google_container_cluster", "datapath_provider",
                   {"datapath_provider": "ADVANCED_DATAPATH", "network_policy": {"enabled": False}}),
    "CKV_GCP_61": ("google_container_cluster", "enable_intranode_visibility", {"enable_intranode_visibility": True}),
    "CKV_GCP_66": ("google_container_cluster", "binary_authorization",
                   {"binary_authorization": {"evaluation_mode": "PROJECT_SINGLETON_POLICY_ENFORCE"}}),
    # CloudStorageVersioningEnabled.py (CKV_GCP_78) reads versioning/[0]/enabled.
    "CKV_GCP_78": ("google_storage_bucket", "versioning.enabled", {"versioning": {"enabled": True}}),
}


def test_the_remedies_the_reasons_name_pass_their_checks(synthesized, tmp_path):
    """Each reason names what would make its check pass; on the real synthesized resource, that does."""
    stacks = {path.parent.name: json.loads(path.read_text()) for path in (synthesized / "stacks").glob("*/cdk.tf.json")}
    reasons = {s.check: s.why for s in load_suppressions() if s.framework == "terraform_json"}
    config: dict = {"resource": {}}
    for check, (rtype, named, fix) in REMEDIES.items():
        assert named.split(".")[-1] in reasons[check], f"the reason for {check} should name {named}"
        body = json.loads(json.dumps(next(r for stack in stacks.values()
                                          for r in stack.get("resource", {}).get(rtype, {}).values())))
        if rtype == "google_compute_instance":
            body["boot_disk"].update(fix)
        else:
            body.update(fix)
        config["resource"].setdefault(rtype, {})[check.lower()] = body
    (tmp_path / "remedies").mkdir()
    (tmp_path / "remedies" / "cdk.tf.json").write_text(json.dumps(config))
    reports = run_checkov(tmp_path / "remedies", "terraform_json")
    results = {(c["check_id"], c["resource"].split(".", 1)[1]): outcome for report in reports
               for outcome in ("passed_checks", "failed_checks") for c in report["results"][outcome]}
    assert {check: results.get((check, check.lower())) for check in REMEDIES} == {
        check: "passed_checks" for check in REMEDIES}


def test_network_policy_entries_are_gaps_because_convert_and_export_pods_are_not_host_network():
    settings = example_settings()
    ordinary = sorted(
        f"{recipe.name} {step}"
        for recipe in all_recipes().values() if recipe.platform == "gke"
        for step, jobset in render_manifests(spec_of(recipe), settings).items()
        for rjob in jobset["spec"]["replicatedJobs"]
        if not rjob["template"]["spec"]["template"]["spec"].get("hostNetwork")
    )
    assert any(" convert" in pod for pod in ordinary) and any(" export" in pod for pod in ordinary), ordinary
    reasons = {s.check: s.why for s in load_suppressions()}
    assert all(reasons[check].startswith("GAP") for check in ("CKV_GCP_12", "CKV2_K8S_6")), reasons
