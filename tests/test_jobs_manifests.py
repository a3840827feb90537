"""Behaviour of the rendered JobSets: placement, Pathways shape, paths, names, secrets."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from peers.settings import spec_of
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl import jobs
from tpu_rl.jobs.k8s import manifest_yaml
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.recipes import UserError, all_recipes, example_settings, get_recipe
from tpu_rl.recipes.conventions import HF_TOKEN_ENV, HF_TOKEN_K8S_SECRET, LOCAL_QUEUE, WORKLOAD_KSA, cpu_pool_name

SETTINGS = example_settings()
GKE_RECIPES = [name for name, recipe in all_recipes().items() if recipe.platform == "gke"]


def manifests(name: str) -> dict:
    return jobs.render_manifests(spec_of(get_recipe(name)), SETTINGS)


def replicated(jobset: dict, name: str) -> dict:
    return next(job for job in jobset["spec"]["replicatedJobs"] if job["name"] == name)


def pod_spec(jobset: dict, name: str) -> dict:
    return replicated(jobset, name)["template"]["spec"]["template"]["spec"]


def container(spec: dict, name: str) -> dict:
    return next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)


def env(c: dict) -> dict:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in c["env"]}


def script(jobset: dict, replicated_job: str) -> str:
    return container(pod_spec(jobset, replicated_job), jobs.MAIN_CONTAINER)["command"][2]


def test_gke_recipe_renders_convert_train_export_jobsets_in_step_order():
    rendered = manifests("qwen3-v6e32")
    assert list(rendered) == ["convert", "train", "export"]
    assert {m["apiVersion"] for m in rendered.values()} == {"jobset.x-k8s.io/v1alpha2"}
    convert, train, export = (m["metadata"]["name"] for m in rendered.values())
    # convert is named after the conversion it shares with other runs, train and export after the run
    run = train.removesuffix("-train")
    assert re.fullmatch(r"qwen3-v6e32-[0-9a-f]{7}-convert", convert) and re.fullmatch(r"qwen3-v6e32-[0-9a-f]{7}", run)
    assert export == f"{run}-export" and not convert.startswith(run)


def test_vm_recipe_is_refused_by_render_manifests_with_one_line():
    with pytest.raises(UserError, match="runs its steps as a startup script, not JobSets; render them with render_steps"):
        jobs.render_manifests(spec_of(get_recipe("llama31-v6e8")), SETTINGS)


def test_gke_recipe_is_refused_by_render_startup_script():
    with pytest.raises(UserError, match="runs its steps as jobsets, not a startup script; render them with render_steps"):
        jobs.render_startup_script(spec_of(get_recipe("qwen3-v6e32")), SETTINGS)


@pytest.mark.parametrize("name", list(all_recipes()))
def test_jobset_names_fit_28_characters_even_for_the_longest_step_name(name):
    for step in ("convert", "train", "export"):
        assert len(jobs.jobset_name(spec_of(get_recipe(name)), step)) <= 28


def test_the_longest_recipe_name_is_shortened_in_jobset_names_and_a_too_long_run_name_is_refused():
    recipe = get_recipe("qwen3-v6e32").model_copy(update={"name": "a-very-long-recipe-x"})  # 20, the most allowed
    names = [jobs.jobset_name(spec_of(recipe), step) for step in ("convert", "train", "export")]
    assert all(len(name) <= 28 and name.startswith("a-very-long-") for name in names), names
    with pytest.raises(UserError, match="28"):  # a name that did not go through --run's check
        jobs.jobset_name(RunSpec.in_bucket(recipe, "a-twenty-two-characters"), "export")


@pytest.mark.parametrize("name", GKE_RECIPES)
@pytest.mark.parametrize("step", ["convert", "export"])
def test_conversion_steps_run_one_pod_on_the_cpu_pool_without_tpus(name, step):
    jobset = manifests(name)[step]
    [only] = jobset["spec"]["replicatedJobs"]
    job = only["template"]["spec"]
    assert (only["replicas"], job["parallelism"], job["completions"]) == (1, 1, 1)
    spec = job["template"]["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": cpu_pool_name()}
    # Only the CPU pool's own taint (tests/test_stacks_gke_nodes_and_destroy.py checks it against the pool).
    assert spec["tolerations"] == [{"key": "tpu-rl/dedicated", "operator": "Equal", "value": "cpu-np",
                                    "effect": "NoSchedule"}]
    assert "google.com/tpu" not in str(spec)


def _cpu(quantity: str) -> int:
    return int(quantity)


def _gib(quantity: str) -> int:
    assert quantity.endswith("Gi")
    return int(quantity[:-2])


def test_qwen3_conversion_requests_three_quarters_of_an_n4_standard_64():
    # 64 vCPUs and 256 GiB; GKE keeps roughly 5% of such a node for itself, so 75% always schedules.
    [main] = pod_spec(manifests("qwen3-v6e32")["convert"], "main")["containers"]
    assert main["resources"] == {"requests": {"cpu": "48", "memory": "192Gi"}}


@pytest.mark.parametrize("name", GKE_RECIPES)
def test_pathways_head_containers_together_request_the_same_share_of_the_cpu_node(name):
    recipe = get_recipe(name)
    spec = pod_spec(manifests(name)["train"], "pathways-head")
    requests = [c["resources"]["requests"] for c in spec["initContainers"] + spec["containers"]]
    assert len(requests) == 3
    machine = recipe.cpu_machine
    total_cpu = sum(_cpu(r["cpu"]) for r in requests)
    total_memory = sum(_gib(r["memory"]) for r in requests)
    # Rounded down per container: at most one unit per container below three quarters of the node.
    assert machine.vcpus * 0.75 - 3 <= total_cpu <= machine.vcpus * 0.75
    assert machine.memory_gib * 0.75 - 3 <= total_memory <= machine.memory_gib * 0.75


def test_qwen3_train_worker_has_8_hosts_with_4_chips_each():
    worker = replicated(manifests("qwen3-v6e32")["train"], "worker")
    job = worker["template"]["spec"]
    assert worker["replicas"] == 1
    assert job["parallelism"] == job["completions"] == 8
    limits = container(job["template"]["spec"], "pathways-worker")["resources"]["limits"]
    assert limits == {"google.com/tpu": "4"}


def test_gemma4_train_worker_has_16_hosts_on_8x8():
    worker = replicated(manifests("gemma4-v6e64")["train"], "worker")
    job = worker["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 16
    assert job["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "8x8",
    }


def test_two_slices_become_two_worker_replicas_and_instance_count_2():
    base = get_recipe("qwen3-v6e32")
    recipe = base.model_copy(update={"shape": base.shape.model_copy(update={"slices": 2})})
    train = jobs.render_manifests(spec_of(recipe), SETTINGS)["train"]
    assert replicated(train, "worker")["replicas"] == 2
    rm = container(pod_spec(train, "pathways-head"), "pathways-rm")
    assert "--instance_count=2" in rm["args"]
    assert env(container(pod_spec(train, "worker"), "pathways-worker"))["MEGASCALE_NUM_SLICES"] == "2"


def test_qwen3_train_worker_tolerates_tpu_taint_and_uses_host_network():
    spec = pod_spec(manifests("qwen3-v6e32")["train"], "worker")
    assert spec["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["hostNetwork"] is True
    assert spec["restartPolicy"] == "OnFailure"
    worker = container(spec, "pathways-worker")
    assert "--server_port=29005" in worker["args"]
    assert {p["containerPort"] for p in worker["ports"]} >= {29005}


def test_pathways_head_runs_on_cpu_pool_with_proxy_and_resource_manager_sidecars():
    train = manifests("qwen3-v6e32")["train"]
    spec = pod_spec(train, "pathways-head")
    assert spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": cpu_pool_name()}
    assert [c["name"] for c in spec["initContainers"]] == ["pathways-proxy", "pathways-rm"]
    assert all(c["restartPolicy"] == "Always" for c in spec["initContainers"])  # native sidecars
    proxy, rm = spec["initContainers"]
    scratch = f"--gcs_scratch_location={ArtifactPaths(spec_of(get_recipe('qwen3-v6e32')), SETTINGS).pathways_scratch}"
    assert proxy["args"] == ["--server_port=29000", "--resource_manager_address=$(PATHWAYS_HEAD):29001", scratch]
    assert "--server_port=29001" in rm["args"] and scratch in rm["args"]
    assert "--instance_type=tpuv6e:4x8" in rm["args"] and "--instance_count=1" in rm["args"]
    assert env(rm)["TPU_SKIP_MDS_QUERY"] == "true"
    assert [c["name"] for c in spec["containers"]] == ["workload-container"]
    head_job = replicated(train, "pathways-head")["template"]["spec"]
    assert head_job["parallelism"] == head_job["completions"] == 1 and head_job["backoffLimit"] == 0


def test_train_jobset_has_coordinator_inorder_startup_success_on_head_and_explicit_restarts():
    spec = manifests("gemma4-v6e64")["train"]["spec"]
    assert spec["coordinator"] == {"replicatedJob": "pathways-head"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "InOrder"}
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["pathways-head"]}
    assert spec["failurePolicy"] == {"maxRestarts": 0, "restartStrategy": "Recreate"}
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["ttlSecondsAfterFinished"] == 86400


def test_train_jobset_is_queued_in_the_local_queue():
    assert manifests("qwen3-v6e32")["train"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == LOCAL_QUEUE


def test_exclusive_topology_annotations_sit_on_the_job_templates():
    train = manifests("qwen3-v6e32")["train"]
    key = "alpha.jobset.sigs.k8s.io/exclusive-topology"
    head = replicated(train, "pathways-head")["template"]
    worker = replicated(train, "worker")["template"]
    assert head["metadata"]["annotations"][key] == "kubernetes.io/hostname"
    assert worker["metadata"]["annotations"][key] == "cloud.google.com/gke-nodepool"
    assert key not in str(train["metadata"])
    assert key not in str(head["spec"]["template"].get("metadata"))


def test_workload_container_env_points_jax_at_the_pathways_proxy():
    values = env(container(pod_spec(manifests("qwen3-v6e32")["train"], "pathways-head"), "workload-container"))
    assert values["JAX_PLATFORMS"] == "proxy,cpu"
    assert values["JAX_BACKEND_TARGET"] == "grpc://$(PATHWAYS_HEAD):29000"
    assert values["PATHWAYS_HEAD"] == {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}}
    assert values["XCLOUD_ENVIRONMENT"] == "GCP"
    assert values["VLLM_HOST_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    for name, value in get_recipe("qwen3-v6e32").rl.env.items():
        assert values[name] == value


def test_env_variables_that_reference_others_come_after_them():
    # Kubernetes expands $(VAR) only for variables defined earlier in the list.
    for name in GKE_RECIPES:
        for jobset in manifests(name).values():
            for replicated_job in jobset["spec"]["replicatedJobs"]:
                spec = replicated_job["template"]["spec"]["template"]["spec"]
                for c in spec.get("initContainers", []) + spec["containers"]:
                    seen: set[str] = set()
                    for item in c["env"]:
                        for other in ("PATHWAYS_HEAD",):
                            if f"$({other})" in item.get("value", ""):
                                assert other in seen, (c["name"], item["name"])
                        seen.add(item["name"])
                    if any("$(PATHWAYS_HEAD)" in arg for arg in c.get("args", [])):
                        assert "PATHWAYS_HEAD" in seen


@pytest.mark.parametrize("name", GKE_RECIPES)
def test_every_pod_uses_the_workload_service_account_and_pinned_images(name):
    for jobset in manifests(name).values():
        for replicated_job in jobset["spec"]["replicatedJobs"]:
            spec = replicated_job["template"]["spec"]["template"]["spec"]
            assert spec["serviceAccountName"] == WORKLOAD_KSA
            for c in spec.get("initContainers", []) + spec["containers"]:
                tag = c["image"].rsplit("/", 1)[-1]
                assert ":" in tag and not tag.endswith(":latest"), c["image"]


@pytest.mark.parametrize("name", GKE_RECIPES)
def test_hf_token_comes_from_the_kubernetes_secret_in_every_maxtext_container(name):
    for jobset in manifests(name).values():
        main = next(j for j in jobset["spec"]["replicatedJobs"] if j["name"] in ("main", "pathways-head"))
        values = env(container(main["template"]["spec"]["template"]["spec"], jobs.MAIN_CONTAINER))
        assert values[HF_TOKEN_ENV] == {"secretKeyRef": {"name": HF_TOKEN_K8S_SECRET, "key": HF_TOKEN_ENV}}


def test_train_loads_exactly_what_convert_writes_and_export_reads_the_last_step():
    """The layout of seed 000 (MODEL_NAME=qwen3-30b-a3b; GCS_BUCKET is ours) with a directory per conversion
    and per run: convert writes gs://${GCS_BUCKET}/${MODEL_NAME}/max-text-format/<version>-scan-<hash>/,
    train loads its 0/items/ and writes its run under trained/, export reads
    trained/<run>/checkpoints/actor/50/model_params/ (50 = num_batches, the last step) into hf-trained/<run>/."""
    recipe = get_recipe("qwen3-v6e32")
    commands = jobs.maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), SETTINGS))
    model = f"gs://{SETTINGS.gcs_bucket}/qwen3-30b-a3b/"
    converted = commands["convert"].value("base_output_directory")
    assert re.fullmatch(rf"{re.escape(model)}max-text-format/0\.2\.4-scan-[0-9a-f]{{7}}/", converted)
    assert commands["train"].value("load_parameters_path") == f"{converted}0/items/"
    run = commands["train"].value("run_name")
    assert re.fullmatch(r"qwen3-v6e32-[0-9a-f]{7}", run)
    assert commands["train"].value("base_output_directory") == f"{model}trained/"
    assert commands["export"].value("load_parameters_path") == f"{model}trained/{run}/checkpoints/actor/50/model_params/"
    assert commands["export"].value("base_output_directory") == f"{model}hf-trained/{run}/"
    assert commands["export"].value("scan_layers") == commands["train"].value("scan_layers") == "True"


def carry_vision_step(recipe):
    from tpu_rl.jobs.export import carry_vision_script

    vision = recipe.model.vision_parts
    if not vision or recipe.model.use_multimodal:
        return None
    return carry_vision_script(recipe.model.hf_repo, ArtifactPaths(spec_of(recipe), SETTINGS).hf_export, vision)


@pytest.mark.parametrize("name", GKE_RECIPES)
def test_rendered_scripts_end_with_exactly_the_checked_maxtext_command(name):
    recipe = get_recipe(name)
    commands = jobs.maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), SETTINGS))
    rendered = manifests(name)
    for step, replicated_job in (("convert", "main"), ("train", "pathways-head"), ("export", "main")):
        text = script(rendered[step], replicated_job)
        carry = carry_vision_step(recipe) if step == "export" else None
        if carry:  # Gemma 4's export copies the vision tower after to_huggingface (jobs/export.py)
            assert text.endswith(f"\n\n{carry}\n")
            text = text[: -len(carry) - 3]
            tail = text[text.index(f"\npython3 -m {commands[step].module}") + 1:]
        else:
            tail = text[text.index(f"exec python3 -m {commands[step].module}") + len("exec "):]
        # The tail runs to the end of the script, so this also says nothing follows the command. bash drops
        # backslash-newline; shlex does not know line continuations.
        assert shlex.split(tail.replace("\\\n", "")) == commands[step].argv


def test_qwen3_train_script_applies_the_optimizer_patch_before_training():
    text = script(manifests("qwen3-v6e32")["train"], "pathways-head")
    patch = text.index("source patch 'rl-optimizer-adafactor'")
    assert patch < text.index("exec python3 -m maxtext.trainers.post_train.rl.train_rl")
    # rl.reshard_chunk_size reaches tunix's sampler as a setting (see tests/seed_differences.py): no source edit
    assert "reshard_chunk_size" not in text.split("exec python3", 1)[0]
    assert "rl.reshard_chunk_size=4" in text


def test_gemma4_on_0_2_4_patches_the_fused_moe_source():
    train = manifests("gemma4-v6e64")["train"]
    assert "source patch 'fused-moe-onehot-threshold'" in script(train, "pathways-head")
    assert "ONEHOT_MOE_PERMUTE_THRESHOLD" not in env(container(pod_spec(train, "pathways-head"), "workload-container"))


def test_gemma4_on_0_2_5_uses_the_onehot_setting_instead_of_the_patch():
    recipe = get_recipe("gemma4-v6e64").model_copy(update={"maxtext_version": "0.2.5"})
    train = jobs.render_manifests(spec_of(recipe), SETTINGS)["train"]
    assert "source patch" not in script(train, "pathways-head")
    values = env(container(pod_spec(train, "pathways-head"), "workload-container"))
    assert values["ONEHOT_MOE_PERMUTE_THRESHOLD"] == "100000"


def test_a_patch_unknown_for_the_pinned_version_is_refused():
    recipe = get_recipe("qwen3-v6e32").model_copy(update={"maxtext_version": "0.2.5"})
    with pytest.raises(UserError, match="rl-optimizer-adafactor"):
        jobs.render_manifests(spec_of(recipe), SETTINGS)


def test_an_override_that_repeats_a_derived_key_is_refused():
    recipe = get_recipe("gemma4-v6e64")
    rl = recipe.rl.model_copy(update={"overrides": (*recipe.rl.overrides, "num_batches=3")})
    with pytest.raises(UserError, match="num_batches"):
        jobs.render_manifests(spec_of(recipe.model_copy(update={"rl": rl})), SETTINGS)


def test_main_pod_selector_finds_the_head_for_train_and_the_single_pod_otherwise():
    recipe = get_recipe("qwen3-v6e32")
    run = ArtifactPaths(spec_of(recipe), SETTINGS).run_name
    assert jobs.main_pod_selector(spec_of(recipe), "train") == (
        f"jobset.sigs.k8s.io/jobset-name={run}-train,jobset.sigs.k8s.io/replicatedjob-name=pathways-head")
    assert jobs.main_replicated_job(recipe, "convert") == "main"
    convert = manifests("qwen3-v6e32")["convert"]
    assert convert["spec"]["replicatedJobs"][0]["name"] == jobs.main_replicated_job(recipe, "convert")


def test_manifest_yaml_round_trips_and_shows_the_command_as_a_literal_block():
    train = manifests("qwen3-v6e32")["train"]
    text = manifest_yaml(train)
    assert yaml.safe_load(text) == train
    assert f"\n                    run_name={ArtifactPaths(spec_of(get_recipe('qwen3-v6e32')), SETTINGS).run_name} \\\n" in text
    assert "&id" not in text


@pytest.mark.parametrize("name", list(all_recipes()))
def test_bash_parses_each_rendered_command_into_exactly_the_checked_arguments(name):
    import subprocess

    recipe = get_recipe(name)
    for command in jobs.maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), SETTINGS)).values():
        printer = 'python3() { printf "%s\\0" "$@"; }\n'
        result = subprocess.run(["bash", "-c", printer + command.shell()], capture_output=True, text=True, check=True)
        assert result.stdout.split("\0")[:-1] == command.argv[1:]


def test_an_rl_env_entry_that_clashes_with_a_derived_variable_is_refused():
    recipe = get_recipe("qwen3-v6e32")
    rl = recipe.rl.model_copy(update={"env": {**recipe.rl.env, "JAX_PLATFORMS": "cpu"}})
    with pytest.raises(UserError, match="JAX_PLATFORMS is set twice"):
        jobs.render_manifests(spec_of(recipe.model_copy(update={"rl": rl})), SETTINGS)


@pytest.mark.parametrize("name", GKE_RECIPES)
def test_no_container_can_escalate_privileges_and_cpu_only_pods_use_runtime_default_seccomp(name):
    for step, jobset in manifests(name).items():
        for replicated_job in jobset["spec"]["replicatedJobs"]:
            spec = replicated_job["template"]["spec"]["template"]["spec"]
            if step in ("convert", "export"):
                assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
            assert spec["automountServiceAccountToken"] is False
            for c in spec.get("initContainers", []) + spec["containers"]:
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert not c["securityContext"].get("privileged")
