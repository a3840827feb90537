"""The TPU VM recipe stack (llama31-v6e8), as seed 002 creates the VM, read from the synthesized JSON."""

from __future__ import annotations

import pytest
from conftest import only, outputs, resources

from tpu_rl.infra.network import IAP_TCP_FORWARDING_RANGE
from tpu_rl.recipes import example_settings

STACK = "llama31-v6e8"


@pytest.fixture(scope="module")
def vm_stack(stacks_json):
    return stacks_json[STACK]


@pytest.fixture(scope="module")
def instance(vm_stack):
    return only(vm_stack, "google_compute_instance")


def test_llama_vm_is_one_ct6e_standard_8t_on_the_accelerator_image_with_200_gb(instance):
    assert instance["machine_type"] == "ct6e-standard-8t"
    params = instance["boot_disk"]["initialize_params"]
    assert params["image"] == (
        "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"
    )
    assert params["size"] == 200
    assert instance["zone"] == example_settings().zone
    assert instance["name"] == example_settings().vm_name


def test_llama_vm_is_reservation_bound_terminates_on_maintenance_and_is_deleted_at_the_end(instance):
    assert instance["scheduling"] == {
        "on_host_maintenance": "TERMINATE",
        "provisioning_model": "RESERVATION_BOUND",
        "instance_termination_action": "DELETE",
    }


def test_llama_vm_consumes_the_specific_reservation(instance):
    assert instance["reservation_affinity"] == {
        "type": "SPECIFIC_RESERVATION",
        "specific_reservation": {
            "key": "compute.googleapis.com/reservation-name",
            "values": [example_settings().reservation],
        },
    }


def test_llama_vm_has_no_external_ip_but_nat_for_egress_and_iap_for_ssh(vm_stack, instance):
    (interface,) = instance["network_interface"]
    assert "access_config" not in interface
    assert only(vm_stack, "google_compute_router_nat")["source_subnetwork_ip_ranges_to_nat"] == (
        "ALL_SUBNETWORKS_ALL_IP_RANGES"
    )
    firewall = only(vm_stack, "google_compute_firewall")
    assert firewall["source_ranges"] == [IAP_TCP_FORWARDING_RANGE] == ["35.235.240.0/20"]
    assert firewall["allow"] == [{"protocol": "tcp", "ports": ["22"]}]


def test_llama_vm_service_account_reaches_the_bucket_the_secret_and_cloud_logging(vm_stack, instance):
    settings = example_settings()
    (sa_id,) = resources(vm_stack, "google_service_account")
    assert instance["service_account"]["email"] == f"${{google_service_account.{sa_id}.email}}"
    bucket_grant = only(vm_stack, "google_storage_bucket_iam_member")
    secret_grant = only(vm_stack, "google_secret_manager_secret_iam_member")
    assert bucket_grant["bucket"] == settings.gcs_bucket
    assert (secret_grant["secret_id"], secret_grant["role"]) == (settings.hf_token_secret,
                                                                 "roles/secretmanager.secretAccessor")
    # The guest agent sends every line of the startup script to Cloud Logging as the VM's account.
    [log_grant] = resources(vm_stack, "google_project_iam_member").values()
    assert (log_grant["role"], log_grant["member"]) == ("roles/logging.logWriter",
                                                        f"${{google_service_account.{sa_id}.member}}")
    # The startup script reads the secret and logs at once: the grants exist before the VM does.
    assert sorted(instance["depends_on"]) == sorted([
        f"google_storage_bucket_iam_member.{next(iter(resources(vm_stack, 'google_storage_bucket_iam_member')))}",
        "google_secret_manager_secret_iam_member."
        f"{next(iter(resources(vm_stack, 'google_secret_manager_secret_iam_member')))}",
        f"google_project_iam_member.{next(iter(resources(vm_stack, 'google_project_iam_member')))}",
    ])


def test_llama_vm_startup_script_runs_the_llama_pipeline_of_seed_002(instance):
    """The VM boots into this recipe's pipeline for these settings (the script's content is tested in
    test_jobs_vm_script.py). From seed 002: a v6e-8 slice (TPU_ACCELERATOR_TYPE=v6e-8) runs to_maxtext,
    train_rl and to_huggingface in that order on llama3.1-8b-Instruct; the token comes from the settings'
    secret and the model goes to the settings' bucket."""
    settings = example_settings()
    text = instance["metadata_startup_script"]
    assert text.startswith("#!/bin/bash\n") and "[TPU_ACCELERATOR_TYPE]='v6e-8' " in text  # the preamble's TPU_ENV
    modules = ["maxtext.checkpoint_conversion.to_maxtext", "maxtext.trainers.post_train.rl.train_rl",
               "maxtext.checkpoint_conversion.to_huggingface"]
    starts = [text.index(f"\npython3 -m {module} ") for module in modules]
    assert starts == sorted(starts)
    assert f"\nreadonly HF_TOKEN_SECRET={settings.hf_token_secret}\nreadonly PROJECT={settings.project}\n" in text
    assert f"base_output_directory=gs://{settings.gcs_bucket}/llama3.1-8b-Instruct/hf-trained/" in text
    assert instance["metadata"] == {"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE"}


def test_llama_vm_script_is_metadata_startup_script_so_a_changed_recipe_replaces_the_vm(instance):
    """hashicorp/google 6.50.0 (google/services/compute/resource_compute_instance.go): a change of
    metadata_startup_script forces a new instance (customdiff.ForceNewIf), a change of the `metadata` map is
    applied in place by setMetadata, and a startup script runs only at boot. So the script is the former:
    deploying a changed recipe gives a VM that runs it, and the plan says so (a replacement)."""
    assert "startup-script" not in instance["metadata"]
    assert instance["metadata_startup_script"].startswith("#!/bin/bash\n")


def test_llama_vm_outputs_say_how_to_reach_it(vm_stack):
    settings = example_settings()
    got = outputs(vm_stack)
    assert got["vm_name"] == settings.vm_name
    assert got["vm_zone"] == settings.zone
    assert got["ssh_command"] == (
        f"gcloud compute ssh {settings.vm_name} --zone={settings.zone} --project={settings.project} "
        "--tunnel-through-iap"
    )
    assert got["bucket"] == f"gs://{settings.gcs_bucket}"


def test_spot_vm_is_preemptible_without_reservation(data_only_variants):
    instance = only(data_only_variants["llama31-spot"], "google_compute_instance")
    assert instance["scheduling"] == {
        "on_host_maintenance": "TERMINATE",
        "provisioning_model": "SPOT",
        "instance_termination_action": "DELETE",
        "preemptible": True,
        "automatic_restart": False,
    }
    assert instance["reservation_affinity"] == {"type": "NO_RESERVATION"}


def test_on_demand_vm_is_standard_without_reservation(data_only_variants):
    instance = only(data_only_variants["llama31-ondemand"], "google_compute_instance")
    assert instance["scheduling"] == {"on_host_maintenance": "TERMINATE", "provisioning_model": "STANDARD"}
    assert instance["reservation_affinity"] == {"type": "NO_RESERVATION"}


@pytest.fixture(scope="module")
def vm_by_capacity_setting(tmp_path_factory):
    """The VM recipe synthesized with CAPACITY=spot, and with CAPACITY=flex-start,spot (a VM has no
    flex-start, so it takes the first mode it can use: spot)."""
    from dataclasses import replace

    from conftest import synthesize

    from tpu_rl.recipes import all_recipes

    recipes = {STACK: all_recipes()[STACK]}
    return {capacity: synthesize(tmp_path_factory.mktemp(",".join(capacity)), recipes=recipes,
                                 settings=replace(example_settings(), capacity=capacity))[STACK]
            for capacity in (("spot",), ("flex-start", "spot"))}


@pytest.mark.parametrize("capacity", [("spot",), ("flex-start", "spot")], ids=["spot", "flex-start,spot"])
def test_capacity_setting_makes_the_vm_spot_without_its_reservation(vm_by_capacity_setting, capacity):
    instance = only(vm_by_capacity_setting[capacity], "google_compute_instance")
    assert instance["scheduling"]["provisioning_model"] == "SPOT"
    assert instance["scheduling"]["preemptible"] is True
    assert instance["reservation_affinity"] == {"type": "NO_RESERVATION"}


def test_the_vm_leaves_desired_status_unset_so_a_deploy_after_its_self_stop_changes_nothing(instance):
    """The VM powers itself off after its run (jobs/vm_outputs.py). hashicorp/google 6.50.0
    (resource_compute_instance.go, v6.50.0) reads the instance's status into the computed current_status and
    writes desired_status back only when the configuration sets it; its update starts the instance only when
    desired_status is RUNNING. Unset, a deploy after the self-stop plans no change (no start, which a TPU VM
    refuses anyway); with desired_status = "RUNNING" it would try to start it and fail."""
    assert "desired_status" not in instance
    assert instance.get("allow_stopping_for_update") is None  # nothing else stops or starts it either
