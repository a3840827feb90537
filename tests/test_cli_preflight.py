"""`tpu-rl preflight` against the Compute, TPU, Secret Manager peers and the GCS emulator."""

from __future__ import annotations

from typer.testing import CliRunner

from cli_helpers import CONSOLE, with_quota
from peers.fixtures import SETTINGS, _free_port, make_bucket
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

runner = CliRunner()
ZONE = SETTINGS["ZONE"]


def preflight(recipe: str = "qwen3-v6e32"):
    return runner.invoke(app, ["preflight", recipe])


def failed_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("FAIL")]


def test_preflight_passes_when_capacity_bucket_and_token_are_in_place(settings_env, gcs, google):
    result = preflight()
    assert result.exit_code == 0, result.output
    for check in ("reservation", "machine type", "accelerator type", "bucket", "token secret"):
        assert f"pass  {check}:" in result.output
    assert "16 of 16 ct6e-standard-4t free, 8 needed" in result.output
    assert "v6e-32 offered in us-east5-b" in result.output


def test_preflight_of_the_vm_recipe_checks_its_own_shape(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-8t", 1, 0)
    result = preflight("llama31-v6e8")
    assert result.exit_code == 0, result.output
    assert "1 of 1 ct6e-standard-8t free, 1 needed" in result.output and "v6e-8 offered" in result.output


def test_preflight_reports_every_failure_with_its_fix(settings_env, gcs, google):
    google.reservations.clear()
    google.machine_types.clear()
    google.accelerator_types.clear()
    google.secrets["hf-token"] = []
    gcs.get_bucket(SETTINGS["GCS_BUCKET"]).delete()
    result = preflight()
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED
    lines = failed_lines(result)
    assert len(lines) == 6, result.output
    assert "reservation 'v6e-reservation' not found in zone us-east5-b" in lines[0]
    assert "ct6e-standard-4t is not offered in zone us-east5-b" in lines[1]
    assert "v6e-32 is not offered in zone us-east5-b" in lines[2]
    assert "n4-standard-64, the CPU pool's machine (the Pathways head, convert, export), is not offered in zone " \
           "us-east5-b" in lines[3]
    assert "bucket gs://rl-test-artifacts does not exist: deploy the artifacts stack" in lines[4]
    assert "no enabled version" in lines[5] and "tpu-rl secret set" in lines[5]
    assert "error: 6 of 11 preflight checks failed" in result.output  # the CPU quota, 3 image lines and the fit pass
    assert "Traceback" not in result.output


def test_preflight_fails_a_reservation_for_another_machine_type(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-8t", 16, 0)
    [line] = failed_lines(preflight())
    assert "is for ct6e-standard-8t, recipe 'qwen3-v6e32' needs ct6e-standard-4t" in line


def test_preflight_fails_a_reservation_without_enough_free_hosts(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-4t", 8, 3)
    result = preflight()
    [line] = failed_lines(result)
    assert "has 5 of 8 ct6e-standard-4t free, recipe 'qwen3-v6e32' needs 8" in line
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED


def test_preflight_tells_a_reservation_smaller_than_the_slice_from_a_busy_one(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-4t", 4, 0)
    result = preflight()
    [line] = failed_lines(result)
    assert ("reservation 'v6e-reservation' has 4 ct6e-standard-4t hosts in all, recipe 'qwen3-v6e32' needs 8 for "
            "its slice: use a reservation of at least 8 hosts") in line
    assert "idle node pools" not in line and result.exit_code == ExitCode.PREFLIGHT_FAILED


def test_preflight_fails_a_bucket_in_another_region(settings_env, gcs, google):
    gcs.get_bucket(SETTINGS["GCS_BUCKET"]).delete()
    make_bucket(gcs, SETTINGS["GCS_BUCKET"], "europe-west4")
    [line] = failed_lines(preflight())
    assert "is in europe-west4, not REGION us-east5" in line


def test_preflight_needs_a_reservation_setting_for_reservation_recipes(settings_env, gcs, google, monkeypatch):
    monkeypatch.delenv("RESERVATION")
    result = preflight()
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "RESERVATION is not set" in result.output and google.requests == []


def test_an_api_error_is_a_failed_check_not_a_crash(settings_env, gcs, google):
    from peers.http import Fault

    google.faults.append(Fault("GET", "/acceleratorTypes/", 403))
    [line] = failed_lines(preflight())
    assert line.startswith("FAIL  accelerator type: permission denied")


def test_expired_google_credentials_are_one_line_naming_the_login(settings_env, monkeypatch):
    from google.auth.exceptions import RefreshError

    import tpu_rl.scripts.pipeline.preflight as scripts_pipeline_preflight

    def expired(*args):  # what google-auth raises when the stored login expired or was revoked
        raise RefreshError("Reauthentication is needed. Please run `gcloud auth application-default login`.")

    monkeypatch.setattr(scripts_pipeline_preflight, "run_checks", expired)
    result = preflight()
    assert result.exit_code == ExitCode.API_ERROR, result.output
    [line] = result.output.splitlines()
    assert line.startswith("error: Google did not accept your credentials (RefreshError: Reauthentication")
    assert line.endswith("run `gcloud auth application-default login`")


def test_an_unreachable_google_api_is_one_line(settings_env, gcs, google, monkeypatch):
    endpoint = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    monkeypatch.setenv("TPU_RL_COMPUTE_ENDPOINT", endpoint)
    result = preflight()
    assert result.exit_code == ExitCode.API_ERROR, result.output
    [line] = result.output.splitlines()
    assert line.startswith(f"error: cannot reach the Compute Engine API for reservation '{SETTINGS['RESERVATION']}' "
                           f"at {endpoint} within 20 s (ConnectionError") and "check the network" in line


# -- per capacity mode ------------------------------------------------------------------------------
REGION = SETTINGS["REGION"]


def line_of(result, check: str) -> str:
    [line] = [line for line in result.output.splitlines() if line.split(":")[0].split(maxsplit=1)[-1] == check]
    return line


def test_spot_checks_the_preemptible_quota_instead_of_a_reservation(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("CAPACITY", "spot")
    with_quota(google, PREEMPTIBLE_TPU_V6E=(64, 16))
    result = preflight()
    assert result.exit_code == 0, result.output
    assert line_of(result, "reservation") == "pass  reservation: not needed (capacity 'spot')"
    assert line_of(result, "preemptible quota") == (
        "pass  preemptible quota: PREEMPTIBLE_TPU_V6E in us-east5: 48 of 64 chips free, 32 chips for spot")
    assert "on-demand quota" not in result.output and "flex-start:" not in result.output
    assert not any("/reservations/" in path for _, path, _ in google.requests)


def test_too_little_preemptible_quota_is_a_failure_saying_where_to_ask_for_more(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("CAPACITY", "spot")
    with_quota(google, PREEMPTIBLE_TPU_V6E=(16, 0))
    result = preflight()
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED
    assert failed_lines(result) == [
        "FAIL  preemptible quota: preemptible TPU v6e quota in us-east5 (PREEMPTIBLE_TPU_V6E) is 16 chips, recipe "
        f"'qwen3-v6e32' needs 32 chips for spot: request more at {CONSOLE}"]


def test_preemptible_quota_taken_by_other_tpus_is_a_failure_naming_what_is_in_use(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("CAPACITY", "spot")
    with_quota(google, PREEMPTIBLE_TPU_V6E=(48, 32))
    [line] = failed_lines(preflight())
    assert line == ("FAIL  preemptible quota: preemptible TPU v6e quota in us-east5 (PREEMPTIBLE_TPU_V6E) is 48 chips, "
                    "32 in use, 16 free; recipe 'qwen3-v6e32' needs 32 chips for spot: wait until the TPUs using it "
                    f"are gone, or request more at {CONSOLE}")


def test_a_quota_the_region_does_not_list_is_a_warning_not_a_failure(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("CAPACITY", "spot")
    with_quota(google)  # regions.get may list no v6e metric at all
    result = preflight()
    assert result.exit_code == 0, result.output
    assert line_of(result, "preemptible quota") == (
        "pass  preemptible quota: warning: could not read it, region us-east5 lists no PREEMPTIBLE_TPU_V6E, a name "
        f"not confirmed by Google: check the preemptible TPU v6e quota of us-east5 at {CONSOLE} (32 chips for spot)")


def test_on_demand_checks_the_on_demand_quota(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("CAPACITY", "on-demand")
    with_quota(google, TPUS_PER_TPU_FAMILY=(0, 0), PREEMPTIBLE_TPU_V6E=(64, 0))
    result = preflight()
    assert failed_lines(result) == [
        "FAIL  on-demand quota: on-demand TPU v6e quota in us-east5 (TPUS_PER_TPU_FAMILY) is 0 chips, recipe "
        f"'qwen3-v6e32' needs 32 chips for on-demand: request more at {CONSOLE}"]
    assert "preemptible quota" not in result.output


def test_a_fallback_list_checks_each_mode_it_names(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("CAPACITY", "reservation,spot,on-demand")
    with_quota(google, TPUS_PER_TPU_FAMILY=(32, 0), PREEMPTIBLE_TPU_V6E=(32, 0))
    result = preflight()
    assert result.exit_code == 0, result.output
    assert "16 of 16 ct6e-standard-4t free, 8 needed" in line_of(result, "reservation")
    assert line_of(result, "preemptible quota").endswith("32 of 32 chips free, 32 chips for spot")
    assert line_of(result, "on-demand quota").endswith("32 of 32 chips free, 32 chips for on-demand")


def test_the_vm_recipe_on_spot_needs_preemptible_quota_for_its_eight_chips(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("CAPACITY", "spot")
    with_quota(google, PREEMPTIBLE_TPU_V6E=(4, 0))
    [line] = failed_lines(preflight("llama31-v6e8"))
    assert "is 4 chips, recipe 'llama31-v6e8' needs 8 chips for spot" in line


def flex_start_preflight(google, monkeypatch):
    """`tpu-rl preflight` with CAPACITY=flex-start and the preemptible quota for the slice."""
    monkeypatch.setenv("CAPACITY", "flex-start")
    with_quota(google, PREEMPTIBLE_TPU_V6E=(64, 0))
    return preflight()


def test_flex_start_reads_the_cluster_version_and_the_preemptible_quota(settings_env, gcs, google, kube, monkeypatch):
    kube.version = "v1.33.5-gke.1080000"
    result = flex_start_preflight(google, monkeypatch)
    assert result.exit_code == 0, result.output
    assert line_of(result, "flex-start") == (
        "pass  flex-start: us-east5-b offers flex-start TPU v6e; cluster 'rl-test' runs GKE 1.33.5-gke.1080000, at "
        "least 1.33.0-gke.1712000")
    assert line_of(result, "preemptible quota").endswith("64 of 64 chips free, 32 chips for flex-start")
    assert [path for _, path, _ in kube.requests] == ["/version/"]  # nothing else reaches the cluster


def test_flex_start_on_an_older_cluster_fails_with_the_upgrade(settings_env, gcs, google, kube, monkeypatch):
    kube.version = "v1.33.0-gke.1711999"  # one build short
    [line] = failed_lines(flex_start_preflight(google, monkeypatch))
    assert line == ("FAIL  flex-start: cluster 'rl-test' runs GKE 1.33.0-gke.1711999; flex-start TPU node pools need "
                    "1.33.0-gke.1712000 or later: upgrade its control plane (`gcloud container clusters upgrade "
                    "rl-test --master --cluster-version <1.33.0-gke.1712000 or later> --region us-east5 "
                    "--project tpu-rl-test`)")


def test_flex_start_before_the_cluster_exists_leaves_the_version_to_the_stack(settings_env, gcs, google, monkeypatch,
                                                                             tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    result = flex_start_preflight(google, monkeypatch)
    assert result.exit_code == 0, result.output
    assert line_of(result, "flex-start") == (
        "pass  flex-start: us-east5-b offers flex-start TPU v6e; warning: cluster 'rl-test' is not in your kubeconfig "
        "(not deployed yet?), so its GKE version was not read: the stack's `terraform plan` refuses a cluster older "
        "than 1.33.0-gke.1712000")


def test_flex_start_with_an_unreachable_cluster_warns_and_names_the_refresh(settings_env, gcs, google, kube,
                                                                           monkeypatch):
    kube.stop()  # the kubeconfig points at a control plane that does not answer
    result = flex_start_preflight(google, monkeypatch)
    assert result.exit_code == 0, result.output
    line = line_of(result, "flex-start")
    assert line.startswith("pass  flex-start: us-east5-b offers flex-start TPU v6e; warning: could not read cluster "
                           "'rl-test''s GKE version (MaxRetryError"), line
    assert line.endswith("the stack's `terraform plan` refuses a cluster older than 1.33.0-gke.1712000; `gcloud "
                         "container clusters get-credentials rl-test --region us-east5 --project tpu-rl-test` "
                         "refreshes the context")


def test_flex_start_in_two_zones_checks_each_zone_for_the_offer_and_the_tpu_types(settings_env, gcs, google, kube,
                                                                                  monkeypatch):
    """A GKE stack has TPU pools in every zone of ZONE, so each must offer flex-start and the machine and
    accelerator types; the first that does not is the failure, named."""
    monkeypatch.setenv("ZONE", "us-east5-b,us-east5-a")
    kube.version = "v1.33.5-gke.1080000"
    result = flex_start_preflight(google, monkeypatch)
    assert line_of(result, "flex-start").startswith("pass  flex-start: us-east5-b, us-east5-a offer flex-start TPU v6e;")
    assert line_of(result, "machine type") == "FAIL  machine type: ct6e-standard-4t is not offered in zone us-east5-a: " \
        "pick a zone with TPU v6e (`gcloud compute machine-types list --filter=name~ct6e`) and set ZONE"
    google.machine_types.add(("us-east5-a", "ct6e-standard-4t"))
    google.accelerator_types.add(("us-east5-a", "v6e-32"))
    result = flex_start_preflight(google, monkeypatch)
    assert result.exit_code == 0, result.output
    assert line_of(result, "machine type") == "pass  machine type: ct6e-standard-4t offered in us-east5-b, us-east5-a"
    assert line_of(result, "accelerator type") == "pass  accelerator type: v6e-32 offered in us-east5-b, us-east5-a"


PATHWAYS_SERVER = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"  # recipes.toml [pathways]


def test_preflight_passes_each_image_the_registry_holds_with_its_digest(settings_env, gcs, google):
    result = preflight()
    assert result.exit_code == 0, result.output
    image_lines = [line for line in result.output.splitlines() if line.startswith("pass  image:")]
    assert len(image_lines) == 3, result.output  # MaxText, Pathways server, Pathways proxy
    assert "tpu_post_training:0.2.4 (sha256:" in result.output
    heads = [path for method, path, _ in google.requests if method == "HEAD"]
    assert "/v2/cloud-tpu-v2-images/pathways/server/manifests/20260911-jax_0.11.0" in heads


def test_preflight_fails_an_image_tag_the_registry_does_not_know(settings_env, gcs, google):
    google.images.discard("cloud-tpu-v2-images/pathways/server:20260911-jax_0.11.0")
    result = preflight()
    assert result.exit_code == ExitCode.PREFLIGHT_FAILED
    [line] = failed_lines(result)
    assert f"image: {PATHWAYS_SERVER}:20260911-jax_0.11.0 does not exist" in " ".join(result.output.split())
    assert line.startswith("FAIL  image:")
    text = " ".join(result.output.split())
    assert 'set pathways_tag of [maxtext."0.2.4"] in recipes/recipes.toml' in text
    assert f"`gcloud artifacts docker tags list {PATHWAYS_SERVER}` lists" in text


def test_the_registry_peer_answers_a_get_of_an_unknown_tag_with_the_manifest_unknown_error(google):
    import json
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{google.url}/v2/cloud-tpu-v2-images/pathways/server/manifests/nope", timeout=5)
    except urllib.error.HTTPError as error:
        assert error.code == 404
        assert json.loads(error.read())["errors"][0]["code"] == "MANIFEST_UNKNOWN"
    else:
        raise AssertionError("the peer served a tag it does not hold")


def test_preflight_warns_instead_of_failing_when_the_registry_cannot_be_read(settings_env, gcs, google,
                                                                             monkeypatch):
    monkeypatch.setenv("TPU_RL_REGISTRY_ENDPOINT", "http://127.0.0.1:9")
    result = preflight()
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "pass image: warning: could not read us-docker.pkg.dev/cloud-tpu-images/maxtext-images/" in text
    assert "gcloud artifacts docker images describe" in text


def test_the_vm_recipe_pulls_no_image_so_preflight_checks_none(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-8t", 1, 0)
    result = preflight("llama31-v6e8")
    assert result.exit_code == 0, result.output
    assert "image:" not in result.output


def test_a_registry_endpoint_that_is_not_an_http_url_is_refused(settings_env, gcs, google, monkeypatch):
    monkeypatch.setenv("TPU_RL_REGISTRY_ENDPOINT", "us-docker.pkg.dev")
    result = preflight()
    assert result.exit_code == 2
    assert "TPU_RL_REGISTRY_ENDPOINT='us-docker.pkg.dev' is not an http(s) URL" in " ".join(result.output.split())


def test_a_redirected_registry_that_asks_for_credentials_gets_none_and_the_image_line_warns(
        settings_env, gcs, google, monkeypatch):
    from peers.http import Fault
    from tpu_rl.scripts.cloud.clients import Clients

    def no_token(self):
        raise AssertionError("a Google token was requested for a redirected registry")

    monkeypatch.setattr(Clients, "access_token", no_token)
    google.faults.append(Fault("HEAD", "/manifests/", 401, times=3))
    result = preflight()
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()).count("pass image: warning: could not read") == 3


# The CPU pool (the Pathways head, convert, export) scales from zero: its machine type must exist in its
# zone and REGION's quota must hold one node, or a flex-start slice idles for CAPACITY_WAIT's `cpu`.

def test_a_cpu_machine_type_the_zone_does_not_offer_fails_with_where_to_look(settings_env, gcs, google):
    google.machine_types.discard((ZONE, "n4-standard-64"))
    assert failed_lines(preflight()) == [
        "FAIL  cpu machine type: n4-standard-64, the CPU pool's machine (the Pathways head, convert, export), is not "
        "offered in zone us-east5-b: pick a first ZONE that lists it (`gcloud compute machine-types list --zones "
        "us-east5-b --filter=name=n4-standard-64`) or set another cpu_machine_type for recipe 'qwen3-v6e32' in "
        "recipes/recipes.toml"]


def test_too_little_n4_quota_for_one_cpu_node_fails_naming_the_metric_and_what_is_in_use(settings_env, gcs, google):
    with_quota(google, N4_CPUS=(96, 48))
    assert failed_lines(preflight()) == [
        "FAIL  cpu quota: N4_CPUS quota in us-east5 is 96 vCPUs, 48 in use, 48 free; one n4-standard-64 node of the "
        f"CPU pool (the Pathways head, convert, export) needs 64: request more at {CONSOLE}, or set another "
        "cpu_machine_type for recipe 'qwen3-v6e32' in recipes/recipes.toml"]


def test_the_cpu_quota_passes_with_room_for_a_node_and_reads_each_series_own_metric(settings_env, gcs, google,
                                                                                   monkeypatch):
    with_quota(google, N4_CPUS=(128, 0), C4D_CPUS=(100, 0))
    result = preflight()
    assert result.exit_code == 0, result.output
    assert line_of(result, "cpu quota") == \
        "pass  cpu quota: N4_CPUS in us-east5: 128 of 128 vCPUs free, 64 per n4-standard-64 node (2 fit)"
    assert line_of(result, "cpu machine type") == "pass  cpu machine type: n4-standard-64 offered in us-east5-b"
    monkeypatch.setenv("CAPACITY", "spot")  # gemma4-v6e64's CPU pool is C4D
    with_quota(google, N4_CPUS=(0, 0), C4D_CPUS=(100, 0), PREEMPTIBLE_TPU_V6E=(64, 0))
    result = preflight("gemma4-v6e64")
    assert line_of(result, "cpu quota") == \
        "pass  cpu quota: C4D_CPUS in us-east5: 100 of 100 vCPUs free, 96 per c4d-standard-96 node (1 fit)"


def test_a_series_quota_the_region_does_not_list_is_a_warning_not_a_failure(settings_env, gcs, google):
    google.regions[REGION] = {"CPUS": (24, 0)}  # CPUS alone may not count N4: no verdict from it
    result = preflight()
    assert result.exit_code == 0, result.output
    assert line_of(result, "cpu quota") == (
        "pass  cpu quota: warning: could not read it, region us-east5 lists no N4_CPUS, a name not confirmed by "
        f"Google: check the n4-standard-64 vCPU quota of us-east5 at {CONSOLE} (64 vCPUs per node)")


def test_a_series_quota_the_region_does_not_list_is_never_judged_on_cpus_even_with_room(settings_env, gcs, google):
    # recipes.toml's cpu_quota comment once said preflight falls back to CPUS; it does not, on purpose: CPUS may
    # not count the series, and a pass read from it could let a billed slice wait for a CPU node.
    google.regions[REGION] = {"CPUS": (10_000, 0)}
    assert line_of(preflight(), "cpu quota").startswith(
        "pass  cpu quota: warning: could not read it, region us-east5 lists no N4_CPUS")


def test_the_vm_recipe_has_no_cpu_pool_to_check(settings_env, gcs, google):
    google.reservations[(ZONE, SETTINGS["RESERVATION"])] = ("ct6e-standard-8t", 1, 0)
    google.regions.clear()
    result = preflight("llama31-v6e8")
    assert result.exit_code == 0, result.output
    assert "cpu machine type" not in result.output and "cpu quota" not in result.output
