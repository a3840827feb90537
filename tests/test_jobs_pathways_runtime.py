"""The train JobSet matches what the real Pathways runtime expects: the env and volumes xpk gives each
Pathways container (read from xpk's own template, vendored), a memory limit that is enforced, and
Pathways images tagged for the JAX inside the MaxText image, checked by the head before it trains."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from peers.settings import spec_of
from tpu_rl import jobs
from contracts.maxtext_schema import fetch_wheel
from seed_differences import XPK_DIFFERENCES, xpk_difference
from tpu_rl.recipes import UserError, build_recipes, example_settings, get_recipe

SETTINGS = example_settings()
XPK_TEMPLATE = Path(__file__).parent / "contracts" / "vendor" / "xpk" / "pathways_workload_create.yaml.j2"
PATHWAYS_RECIPES = ["qwen3-v6e32", "gemma4-v6e64"]


def xpk_env() -> dict[str, dict[str, str]]:
    """container -> env name -> value or fieldPath, as xpk's template writes them."""
    text = XPK_TEMPLATE.read_text()
    containers: dict[str, dict[str, str]] = {}
    # Containers are list items at 14 spaces; their env items at 16.
    for block in re.split(r"\n {14}- name: ", text)[1:]:
        name, body = block.split("\n", 1)
        if name not in ("pathways-proxy", "pathways-rm", "pathways-worker"):
            continue
        env = {}
        for match in re.finditer(r"\n {16}- name: (\S+)\n {18}(?:value: (.+)|valueFrom:\n(?: {20,}.*\n)*? {22}fieldPath: (.+))",
                                 body):
            env[match.group(1)] = (match.group(2) or match.group(3)).strip().strip('"')
        containers[name] = env
    return containers


def load_table() -> dict:
    return tomllib.loads(resources.files("tpu_rl.recipes").joinpath("recipes.toml").read_text())


def our_containers(recipe_name: str) -> dict[str, dict]:
    train = jobs.render_manifests(spec_of(get_recipe(recipe_name)), SETTINGS)["train"]
    found = {}
    for replicated in train["spec"]["replicatedJobs"]:
        spec = replicated["template"]["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            found[container["name"]] = {"container": container, "pod": spec}
    return found


def our_env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}


def test_the_vendored_xpk_template_is_read():
    """The parser finds what the template says (values read off the file by hand)."""
    env = xpk_env()
    assert env["pathways-worker"]["XCLOUD_ENVIRONMENT"] == "GCP"
    assert env["pathways-worker"]["MEGASCALE_GRPC_ENABLE_XOR_TRACER"] == "false"
    assert env["pathways-rm"]["HOST_ADDRESS"] == "metadata.labels['jobset.sigs.k8s.io/coordinator']"
    assert env["pathways-rm"]["JOBSET_NAME"] == "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"
    assert env["pathways-proxy"] == {"PATHWAYS_HEAD": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}


@pytest.mark.parametrize("recipe_name", PATHWAYS_RECIPES)
def test_every_env_xpk_sets_on_a_pathways_container_is_ours_or_a_listed_difference(recipe_name):
    ours = our_containers(recipe_name)
    unexplained = []
    for container, expected in xpk_env().items():
        have = our_env(ours[container]["container"])
        for name, value in expected.items():
            if have.get(name) != value and xpk_difference(container, name) is None:
                unexplained.append((container, name, value, have.get(name)))
    assert unexplained == []


def test_no_listed_difference_is_stale():
    """A listed env difference must still be a difference; otherwise the table lies."""
    xpk = xpk_env()
    for recipe_name in PATHWAYS_RECIPES:
        ours = our_containers(recipe_name)
        for difference in XPK_DIFFERENCES:
            for container in difference.containers:
                if difference.key in xpk.get(container, {}):
                    assert our_env(ours[container]["container"]).get(difference.key) != xpk[container][difference.key]


@pytest.mark.parametrize("recipe_name", PATHWAYS_RECIPES)
def test_workers_and_head_share_the_host_tmp_as_xpk_does(recipe_name):
    ours = our_containers(recipe_name)
    for container in ("pathways-proxy", "pathways-rm", "workload-container", "pathways-worker"):
        entry = ours[container]
        assert {"name": "shared-tmp", "mountPath": "/tmp"} in entry["container"]["volumeMounts"], container
        assert {"name": "shared-tmp", "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}} in entry["pod"]["volumes"]


# --- memory -------------------------------------------------------------------------------------------

def test_qwen3_train_rl_has_the_seeds_190_gib_as_an_enforced_limit():
    """Seed 000 wrote 190G to memory.max (the kernel reads G as GiB); the kubelet enforces a limit."""
    container = our_containers("qwen3-v6e32")["workload-container"]["container"]
    assert container["resources"]["limits"] == {"memory": "190Gi"}
    # n4-standard-64 has 256 GiB; a CPU-pool pod takes 75 % of it and train_rl 80 % of the pod: 153 GiB.
    assert container["resources"]["requests"]["memory"] == "153Gi"
    script = container["command"][-1]
    assert "memory.max" not in script and "/sys/fs/cgroup" not in script


def test_a_limit_below_the_computed_request_lowers_the_request_to_the_limit():
    recipe = get_recipe("qwen3-v6e32")
    small = recipe.model_copy(update={"rl": recipe.rl.model_copy(update={"memory_max": "100Gi"})})
    head = jobs.render_manifests(spec_of(small), SETTINGS)["train"]["spec"]["replicatedJobs"][0]
    container = head["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"memory": "100Gi"}
    assert container["resources"]["requests"]["memory"] == "100Gi"


def test_without_memory_max_there_is_no_limit():
    container = our_containers("gemma4-v6e64")["workload-container"]["container"]
    assert "limits" not in container["resources"]


@pytest.mark.parametrize("value", ["190G", "190", "1.5Gi", "0Gi", "190gi"])
def test_memory_max_that_is_not_a_binary_quantity_is_refused_where_the_table_is_loaded(value):
    table = load_table()
    table["recipes"]["qwen3-v6e32"]["rl"]["memory_max"] = value
    with pytest.raises(UserError, match=r"recipes\.qwen3-v6e32\.rl\.memory_max: .*190Gi"):
        build_recipes(table)


# --- the JAX of the image and the Pathways images -----------------------------------------------------

def head_script(recipe) -> str:
    head = jobs.render_manifests(spec_of(recipe), SETTINGS)["train"]["spec"]["replicatedJobs"][0]
    return head["template"]["spec"]["template"]["spec"]["containers"][0]["command"][-1]


def convert_script(recipe) -> str:
    main = jobs.render_manifests(spec_of(recipe), SETTINGS)["convert"]["spec"]["replicatedJobs"][0]
    return main["template"]["spec"]["template"]["spec"]["containers"][0]["command"][-1]


def run_check(recipe, tmp_path, image_jax: str | None, script: str | None = None) -> subprocess.CompletedProcess:
    """A script's first step under bash, with a python3 that reports `image_jax` for jax (None: a python3
    that crashes with a traceback)."""
    script = script or head_script(recipe)
    check = script.split("\n\n")[1]  # after `set -euo pipefail`
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "python3"
    answer = f"echo {image_jax}" if image_jax else "echo 'Traceback (most recent call last):' >&2; exit 1"
    stand_in.write_text(f"#!/bin/bash\n[[ \"$*\" == *'version(\"jax\")'* ]] && {{ {answer}; }}\n")
    stand_in.chmod(0o755)
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n{check}\necho reached-training"], capture_output=True,
                          text=True, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, timeout=30)


@pytest.mark.parametrize("recipe_name", PATHWAYS_RECIPES)
def test_every_pathways_image_is_tagged_for_the_jax_of_the_recipes_maxtext_release(recipe_name):
    recipe = get_recipe(recipe_name)
    tag = load_table()["maxtext"][recipe.maxtext_version]["pathways_tag"]
    images = {c["container"]["image"] for name, c in our_containers(recipe_name).items() if name.startswith("pathways")}
    assert images == {f"us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:{tag}",
                      f"us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:{tag}"}


@pytest.mark.parametrize(("tag", "rule"), [
    ("latest", "is not a Pathways tag"),
    ("jax-0.8.1", "serves jax 0.8.1, but the image has jax 0.11.0"),
    ("20260623-jax_0.10.1", "serves jax 0.10.1, but the image has jax 0.11.0"),
])
def test_a_pathways_tag_for_another_jax_is_refused_where_the_table_is_loaded(tag, rule):
    table = load_table()
    table["maxtext"]["0.2.4"]["pathways_tag"] = tag
    with pytest.raises(UserError, match=rf"maxtext\.0\.2\.4: pathways_tag '{tag}' {rule}"):
        build_recipes(table)


@pytest.mark.parametrize("recipe_name", PATHWAYS_RECIPES)
def test_the_head_checks_the_jax_pairing_before_it_patches_or_trains(recipe_name):
    script = head_script(get_recipe(recipe_name))
    check = script.index("tpu-rl check failed: the image has jax")
    assert check < script.index("exec python3 -m maxtext.trainers.post_train.rl.train_rl")
    if "source patch" in script:
        assert check < script.index("source patch")


def test_a_mismatched_image_jax_stops_the_head_with_one_line_naming_both_versions_and_the_field(tmp_path):
    recipe = get_recipe("qwen3-v6e32")  # MaxText 0.2.4
    result = run_check(recipe, tmp_path, "0.8.1")
    assert result.returncode == 78  # EX_CONFIG, which the head Job's podFailurePolicy tells from a crash
    assert "reached-training" not in result.stdout
    assert result.stderr.splitlines() == [
        "tpu-rl check failed: the image has jax 0.8.1 but the Pathways images are tagged 20260911-jax_0.11.0 "
        '(jax 0.11.0): set jax and a pathways_tag built for jax 0.8.1 under [maxtext."0.2.4"] in recipes/recipes.toml']


def test_a_matching_image_jax_goes_on_to_training(tmp_path):
    recipe = get_recipe("gemma4-v6e64")
    result = run_check(recipe, tmp_path, load_table()["maxtext"][recipe.maxtext_version]["jax"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "reached-training"


def wheel_jax_floor(version: str) -> tuple[int, ...]:
    """The jax>= bound of the tpu-post-train extra, read from the pinned MaxText wheel."""
    wheel, why = fetch_wheel(version)
    if wheel is None:
        pytest.fail(f"the maxtext=={version} wheel is needed to read its JAX floor: {why}")
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read("dependencies/requirements/generated_requirements/tpu-post-train-requirements.txt").decode()
    found = re.search(r"^jax>=([\d.]+)", text, re.MULTILINE)
    assert found, f"no jax>= line in maxtext {version}'s tpu-post-train requirements"
    return tuple(int(part) for part in found.group(1).split("."))


def pairing_below_floor(release: str, jax: str) -> bool:
    return tuple(int(part) for part in jax.split(".")) < wheel_jax_floor(release)


@pytest.mark.parametrize("release", sorted(load_table()["maxtext"]))
def test_each_release_is_paired_with_exactly_the_jax_its_image_installs(release):
    """The image installs the wheel's requirements with `uv pip install --resolution=lowest`
    (dependencies/scripts/setup.sh, install_post_training_deps), so it gets the floor itself: a table
    entry above the floor (e.g. 0.11.1 for 0.2.4) would pass a >= check and fail every run at the head."""
    wheel, why = fetch_wheel(release)
    if wheel is None:
        pytest.fail(f"the maxtext=={release} wheel is needed to read its setup.sh: {why}")
    with zipfile.ZipFile(wheel) as archive:
        setup = archive.read("dependencies/scripts/setup.sh").decode()
    assert "--resolution=lowest" in setup.split("install_post_training_deps()", 1)[1].split("\n}\n", 1)[0]
    jax = tuple(int(part) for part in load_table()["maxtext"][release]["jax"].split("."))
    assert jax == wheel_jax_floor(release)


def test_the_old_jax_0_8_1_pairing_is_below_the_wheels_floor():
    """The pairing every recipe had before: MaxText 0.2.3 needs jax>=0.10.1, 0.2.4 jax>=0.11.0."""
    assert wheel_jax_floor("0.2.3") == (0, 10, 1)
    assert wheel_jax_floor("0.2.4") == (0, 11, 0)
    assert pairing_below_floor("0.2.4", "0.8.1") and pairing_below_floor("0.2.3", "0.8.1")


@pytest.mark.parametrize("recipe_name", PATHWAYS_RECIPES)
def test_convert_checks_the_jax_pairing_first_so_a_mismatch_costs_no_tpu(recipe_name, tmp_path):
    """Convert runs in the same image on the CPU pool, before train asks Kueue for a slice."""
    recipe = get_recipe(recipe_name)
    script = convert_script(recipe)
    assert script.index("tpu-rl check failed: the image has jax") < script.index("exec python3 -m")
    result = run_check(recipe, tmp_path, "0.8.1", script)
    assert result.returncode == 78 and "reached-training" not in result.stdout
    assert result.stderr.startswith("tpu-rl check failed: the image has jax 0.8.1 but the Pathways images")


def test_the_vm_recipe_has_no_pathways_check():
    assert "tpu-rl check failed" not in jobs.render_startup_script(spec_of(get_recipe("llama31-v6e8")), SETTINGS)


def test_a_python_that_crashes_still_ends_in_the_one_check_line(tmp_path):
    result = run_check(get_recipe("qwen3-v6e32"), tmp_path, None)
    assert result.returncode == 78
    assert result.stderr.splitlines() == [
        "tpu-rl check failed: the image has jax unknown but the Pathways images are tagged 20260911-jax_0.11.0 "
        '(jax 0.11.0): set jax and a pathways_tag built for jax unknown under [maxtext."0.2.4"] in recipes/recipes.toml']


@pytest.mark.parametrize("recipe_name", PATHWAYS_RECIPES)
def test_train_rl_and_workers_get_a_memory_backed_dev_shm_as_cluster_toolkit_mounts(recipe_name):
    """Cluster Toolkit's pathways_jobset.tmpl (@0196a14a) mounts an emptyDir with medium Memory at /dev/shm
    on the workload container and on each worker; the default is a 64 MiB tmpfs."""
    ours = our_containers(recipe_name)
    for container in ("workload-container", "pathways-worker"):
        entry = ours[container]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in entry["container"]["volumeMounts"], container
        assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in entry["pod"]["volumes"]


@pytest.mark.parametrize("name", PATHWAYS_RECIPES)
def test_the_train_pods_run_without_a_seccomp_profile_as_xpk_runs_the_pathways_and_libtpu_binaries(name):
    # xpk's Pathways JobSet sets no seccomp profile on any pod or container, and GKE Standard then
    # applies none; containerd's RuntimeDefault would refuse mbind/set_mempolicy/get_mempolicy to
    # closed-source binaries never run under it (jobs/k8s.py UNCONFINED_STEPS cites the sources).
    assert "seccomp" not in XPK_TEMPLATE.read_text()
    for found in our_containers(name).values():
        assert "seccompProfile" not in found["pod"].get("securityContext", {})
        assert "seccompProfile" not in found["container"].get("securityContext", {})
