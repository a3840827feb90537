"""docs/security.md against the synthesized stacks: the identities table says what each account is
granted, and the token section names the namespaces the stacks and the CLI use."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import resources

from tpu_rl.infra.cluster_addons import QUEUES_RELEASE_NAMESPACE
from tpu_rl.recipes import all_recipes, conventions

DOC = Path(__file__).resolve().parents[1] / "docs" / "security.md"
ACCOUNTS = {"GKE node SA": "-gke-np-sa", "GKE workload SA": "-gke-wl-sa", "TPU VM SA": "-tpu-vm-sa"}


def _documented() -> dict[str, set[tuple[str, str]]]:
    """account -> {(where, role)} from the identities table ("project: `a`, `b`; the artifacts bucket: `c`")."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        name = next((n for n in ACCOUNTS if cells[0].startswith(n)), None)
        if name is None or len(cells) != 3:
            continue
        grants = set()
        for part in cells[2].split(";"):
            where, roles = part.split(":", 1)
            grants |= {(where.strip(), f"roles/{role}") for role in re.findall(r"`([\w.]+)`", roles)}
        rows[name] = grants
    return rows


def _synthesized(stacks_json, suffix: str) -> set[tuple[str, str]]:
    grants = set()
    for stack in stacks_json.values():
        accounts = {f"${{google_service_account.{key}.member}}"
                    for key, sa in resources(stack, "google_service_account").items() if sa["account_id"].endswith(suffix)}
        for kind, where in (("google_project_iam_member", "project"),
                            ("google_storage_bucket_iam_member", "the artifacts bucket"),
                            ("google_secret_manager_secret_iam_member", "the token secret")):
            grants |= {(where, g["role"]) for g in resources(stack, kind).values() if g["member"] in accounts}
    return grants


def test_the_identities_table_is_what_the_stacks_grant(stacks_json):
    documented = _documented()
    assert set(documented) == set(ACCOUNTS)
    platforms = {recipe.platform for recipe in all_recipes().values()}
    assert platforms == {"gke", "vm"}
    for name, suffix in ACCOUNTS.items():
        assert documented[name] == _synthesized(stacks_json, suffix), name


def test_the_token_section_names_the_secret_and_the_namespaces_in_use():
    text = " ".join(DOC.read_text().split())
    assert f"Kubernetes Secret `{conventions.HF_TOKEN_K8S_SECRET}` in `{conventions.NAMESPACE}`" in text
    assert f"No Helm release is installed in `{conventions.NAMESPACE}`" in text
    assert f"its own namespace, `{QUEUES_RELEASE_NAMESPACE}`" in text


def test_each_weighed_hardening_is_done_or_says_why_not():
    section = DOC.read_text().split("## Hardening weighed", 1)[1]
    items = re.findall(r"^- \*\*(.+?)\*\*.*?\*\*(not done|kept|done)\*\*", section, re.MULTILINE | re.DOTALL)
    assert [name for name, _ in items][:3] == [
        "Application-layer Secrets encryption", "Secure Boot on the TPU VM", "`hostPath: /tmp` on the train pods"]
