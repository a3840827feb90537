"""When the work ends, the billing ends (issue 27, section 4, GKE), against the local peers:

- `tpu-rl runs` on a GKE recipe whose cluster has no run active or queued says so, and what still bills per
  hour from the nodes the fake Kubernetes API shows (a reservation's pool bills its chips; an autoscaled
  flex-start pool at 0 nodes bills nothing);
- `tpu-rl down` refuses while a run is active or queued, when the stack's state holds another cluster, and
  with no terminal and no --yes; otherwise it runs `npx cdktf destroy RECIPE --auto-approve` in the checkout
  (a stand-in npx records the call) and keeps the bucket.

Expected figures are computed here from recipes/costs/prices.toml's entries and the recipe's shape, not by
recipes/costs/standing.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
from typer.testing import CliRunner

from peers.http import Fault

from cli_helpers import error_line
from tpu_rl.jobs import render_manifests
from tpu_rl.jobs.k8s import RECIPE_LABEL, RUN_LABEL
from peers.fixtures import REPO, SETTINGS, peer_settings, spec_of
from peers.simulated_run import put_idle_cluster_nodes
from peers.tf_state import cluster_state, leftover_state, put_state
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.costs.prices import load_prices, usd
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cli import app

RECIPE = "qwen3-v6e32"
STATE_BUCKET = f"{SETTINGS['GCS_BUCKET']}-tf-state"  # peers/tf_state.py put_state
runner = CliRunner()


def nodes(kube, pool: str, count: int, capacity: str | None = None) -> None:
    for index in range(count):
        kube.put_node(pool, index, {"tpu-rl/capacity": capacity} if capacity else None)


def expected_hourly(chips_mode: str | None, chips: int, nodes_total: int, system_nodes: int = 1) -> float:
    """The bill from prices.toml's own entries: fee, system pool, TPU chips, and NAT per node + one IP."""
    prices = load_prices()
    tpu = chips * prices.tpu[get_recipe(RECIPE).shape.generation][chips_mode].usd_per_hour if chips_mode else 0.0
    return (prices.gke_cluster.usd_per_hour + system_nodes * prices.machines["e2-standard-4"].usd_per_hour + tpu
            + nodes_total * prices.nat_per_vm.usd_per_hour + prices.nat_per_ip)


def runs_with_a_slice_up(cloud, pool: str, mode: str):
    """`tpu-rl runs` on a cluster whose system node and one slice's hosts (of `pool`, labelled `mode`) are
    up; the result, the slice's chips and hosts."""
    shape = get_recipe(RECIPE).shape
    nodes(cloud["kube"], "system-np", 1)
    nodes(cloud["kube"], pool, shape.hosts_per_slice, mode)
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    return result, shape.chips_per_slice, shape.hosts_per_slice


def test_runs_with_an_empty_queue_says_the_reservation_pool_still_bills(cloud):
    result, chips, hosts = runs_with_a_slice_up(cloud, "tpu-np-0", "reservation")
    total = expected_hourly("reservation", chips, 1 + hosts)
    reserved = chips * load_prices().tpu["v6e"]["reservation"].usd_per_hour
    text = " ".join(result.output.split())
    assert (f"no run of {RECIPE} is active or queued on cluster rl-test; `tpu-rl down {RECIPE}` destroys its stack, "
            f"keeping gs://{SETTINGS['GCS_BUCKET']} with no run, stack {RECIPE} bills {usd(total)}/h (estimates "
            f"from list prices); `tpu-rl down {RECIPE}` stops {usd(total - reserved)}/h of it: ") in text, text
    assert "cpu-np at 0 nodes" in text
    # issue 37: the reservation is not the stack's to end, and the account says so rather than "delete it"
    assert text.endswith(f"the reservation's {chips} chips bill {usd(reserved)}/h with or without the stack, until "
                         "the reservation ends: it may be shared or tied to a commitment, so only its owner can end "
                         "it (tpu-rl never deletes it)"), text


def test_runs_with_an_empty_queue_on_flex_start_bills_no_tpu(cloud, monkeypatch):
    monkeypatch.setenv("CAPACITY", "flex-start")
    nodes(cloud["kube"], "system-np", 1)
    result = runner.invoke(app, ["runs", RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    cluster = json.loads(result.output)["cluster"]
    assert cluster["active"] == []
    bill = cluster["idle_bill"]
    assert bill["usd_per_hour"] == round(expected_hourly(None, 0, 1), 2)
    assert [item["item"] for item in bill["items"]] == ["cluster fee", "system-np 1 node", "Cloud NAT"]
    assert bill["at_zero_nodes"] == ["cpu-np", "the flex-start TPU pools"]


def test_runs_prices_a_flex_start_slice_not_yet_scaled_down(cloud, monkeypatch):
    monkeypatch.setenv("CAPACITY", "flex-start")
    result, chips, hosts = runs_with_a_slice_up(cloud, "tpu-np-flex-start-0", "flex-start")
    assert f"bills {usd(expected_hourly('flex-start', chips, 1 + hosts))}/h" in " ".join(result.output.split())
    assert f"tpu-np-flex-start-0 {chips} flex-start chips" in result.output


def running_jobset(kube, step: str = "train") -> str:
    manifest = render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())[step]
    kube.put_jobset(manifest, phase="running")
    return manifest["metadata"]["labels"][RUN_LABEL]


def test_runs_says_nothing_of_idle_billing_while_a_run_is_active(cloud):
    nodes(cloud["kube"], "system-np", 1)
    run = running_jobset(cloud["kube"])
    result = runner.invoke(app, ["runs", RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    cluster = json.loads(result.output)["cluster"]
    assert cluster["idle_bill"] is None
    assert cluster["active"] == [{"run": run, "what": f"JobSet {running_jobset_name(run)} running"}]
    assert "with no run, stack" not in runner.invoke(app, ["runs", RECIPE]).output


def running_jobset_name(run: str) -> str:
    return render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["train"]["metadata"]["name"]


def test_a_running_driver_job_counts_as_active_and_a_finished_one_does_not(cloud):
    nodes(cloud["kube"], "system-np", 1)
    labels = {RECIPE_LABEL: RECIPE, RUN_LABEL: "lr-sweep-1"}
    cloud["kube"].put_job("tpu-rl-driver-lr-sweep-0", {**labels, RUN_LABEL: "lr-sweep-0"}, finished="Complete")
    assert "with no run, stack" in runner.invoke(app, ["runs", RECIPE]).output
    cloud["kube"].put_job("tpu-rl-driver-lr-sweep-1", labels)
    cluster = json.loads(runner.invoke(app, ["runs", RECIPE, "--json"]).output)["cluster"]
    assert cluster["active"] == [{"run": "lr-sweep-1", "what": "driver Job tpu-rl-driver-lr-sweep-1"}]


def test_a_driver_job_labelled_by_run_labels_counts_as_active(cloud):
    """The driver Job takes its labels from jobs/k8s.py run_labels, the function billing's selector is
    built with (recipe_selector), so `down` and `runs` find it."""
    from tpu_rl.jobs.k8s import recipe_selector, run_labels
    from tpu_rl.recipes.runs.spec import RunSpec

    spec = RunSpec.requested(get_recipe(RECIPE), (), "lr-sweep-2")
    assert recipe_selector(spec.recipe) == f"{RECIPE_LABEL}={RECIPE}"
    cloud["kube"].put_job("tpu-rl-driver-lr-sweep-2", run_labels(spec))
    cluster = json.loads(runner.invoke(app, ["runs", RECIPE, "--json"]).output)["cluster"]
    assert cluster["active"] == [{"run": "lr-sweep-2", "what": "driver Job tpu-rl-driver-lr-sweep-2"}]


# -- tpu-rl down -------------------------------------------------------------------------------------------

@pytest.fixture
def deployed(cloud, monkeypatch, tmp_path):
    """The stack's state in TF_STATE_BUCKET naming the settings' cluster, and a stand-in npx first on PATH
    that records each call (its arguments, working directory and TPU_RL_CONFIG) and exits NPX_EXIT."""
    env = dict(SETTINGS)
    put_state(cloud["gcs"], env, RECIPE)
    monkeypatch.setenv("TF_STATE_BUCKET", env["TF_STATE_BUCKET"])
    bin_dir, log = tmp_path / "bin", tmp_path / "npx.log"
    bin_dir.mkdir()
    npx = bin_dir / "npx"
    npx.write_text(f'#!/bin/sh\necho "$PWD|$*|$TPU_RL_CONFIG" >> {log}\nexit "${{NPX_EXIT:-0}}"\n')
    npx.chmod(npx.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    put_idle_cluster_nodes(cloud["kube"], get_recipe(RECIPE))
    cloud["npx_calls"] = lambda: log.read_text().splitlines() if log.exists() else []
    return cloud


def test_down_destroys_the_stack_keeping_the_bucket_and_says_what_still_bills(deployed):
    objects = {blob.name for blob in deployed["gcs"].bucket(SETTINGS["GCS_BUCKET"]).list_blobs()}
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert deployed["npx_calls"]() == [f"{REPO}|cdktf destroy {RECIPE} --auto-approve|"]
    assert f"deletes cluster {SETTINGS['CLUSTER_NAME']}, its pools and network" in result.output
    chips = get_recipe(RECIPE).shape.chips_per_slice
    reserved = chips * load_prices().tpu["v6e"]["reservation"].usd_per_hour
    text = " ".join(result.output.split())
    assert (f"still billed after: gs://{SETTINGS['GCS_BUCKET']} and the token secret (the artifacts stack, cents), "
            f"and reservation {SETTINGS['RESERVATION']}") in text
    stops = expected_hourly(None, 0, 1 + get_recipe(RECIPE).shape.hosts_per_slice)
    assert f"`tpu-rl down {RECIPE}` stops {usd(stops)}/h of it" in text  # the words `runs` uses
    assert (f"the reservation's {chips} chips bill {usd(reserved)}/h with or without the stack, until the "
            "reservation ends") in text
    assert f"to start again: `npx cdktf deploy {RECIPE}`" in result.output
    assert {blob.name for blob in deployed["gcs"].bucket(SETTINGS["GCS_BUCKET"]).list_blobs()} == objects


def test_down_refuses_while_a_run_is_active_and_names_how_to_cancel(deployed):
    run = running_jobset(deployed["kube"])
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert error_line(result) == (
        f"error: run {run} of {RECIPE} is active or queued (JobSet {running_jobset_name(run)} running): cancel it "
        f"with `tpu-rl cancel {RECIPE} --run {run}` (or wait for it to end), then run `tpu-rl down {RECIPE}` again")
    assert deployed["npx_calls"]() == []


def test_down_refuses_while_a_shared_conversion_runs(deployed):
    convert = render_manifests(spec_of(get_recipe(RECIPE)), peer_settings())["convert"]
    deployed["kube"].put_jobset(convert, phase="running")
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert error_line(result).startswith(
        f"error: a conversion of {RECIPE} is active or queued (JobSet {convert['metadata']['name']} running)")
    assert deployed["npx_calls"]() == []


def put_record(gcs_client, run: str, status: str = "running", recipe: str = RECIPE) -> None:
    """A run.json as `run` writes it (scripts/pipeline/record.py RunRecord.start), only the fields `down`
    reads: where `tpu-rl runs` finds it, its recipe and its status."""
    from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
    from tpu_rl.recipes.runs.spec import RunSpec

    bucket, name = split_gs_url(ArtifactPaths(RunSpec.requested(get_recipe(RECIPE), (), run), peer_settings()).run_record)
    gcs_client.bucket(bucket).blob(name).upload_from_string(
        json.dumps({"format": 1, "run": run, "recipe": recipe, "status": status, "steps": {
            "convert": {"status": "succeeded"}, "train": {"status": "waiting"}}}))


def later_by(monkeypatch, minutes: int) -> None:
    """`down`'s clock `minutes` ahead of the bucket's (the record then looks that old)."""
    from datetime import datetime, timedelta, timezone

    import tpu_rl.scripts.cli.cloud as scripts_cli_cloud

    real = scripts_cli_cloud.make_session

    def make_session(*args, **kwargs):
        session = real(*args, **kwargs)
        session.now = lambda: datetime.now(timezone.utc) + timedelta(minutes=minutes)
        return session

    monkeypatch.setattr(scripts_cli_cloud, "make_session", make_session)


def test_down_refuses_while_a_run_between_two_steps_wrote_its_record_lately(deployed):
    """convert succeeded, train not yet submitted: no JobSet on the cluster, but the `run` that wrote
    run.json a moment ago submits train next."""
    put_record(deployed["gcs"], "lr-1")
    put_record(deployed["gcs"], "lr-0", status="succeeded")
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    line = error_line(result)
    assert line.startswith(f"error: run lr-1 of {RECIPE} is running: its run.json was written 0 min ago"), line
    assert f"`tpu-rl cancel {RECIPE} --run lr-1`" in line and line.endswith(f"`tpu-rl down {RECIPE}` again")
    assert deployed["npx_calls"]() == []


def test_down_says_a_stale_running_record_and_destroys(deployed, monkeypatch):
    """A record left `running` by a `run` that stopped (a laptop that died) does not block `down` for ever:
    past the bound it is named in one line and --yes destroys."""
    from tpu_rl.scripts.pipeline.gke.billing import ATTACHED_FRESH

    put_record(deployed["gcs"], "lr-1")
    put_record(deployed["gcs"], "other", recipe="another-recipe")
    minutes = int(ATTACHED_FRESH.total_seconds() // 60) + 1
    later_by(monkeypatch, minutes)
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert (f"run lr-1 says running, but its run.json is {minutes} min old and nothing of it is on the "
            "cluster: the `run` that followed it stopped") in " ".join(result.output.split())
    assert "run other" not in result.output
    assert deployed["npx_calls"]() == [f"{REPO}|cdktf destroy {RECIPE} --auto-approve|"]


def test_down_destroys_what_a_failed_destroy_left_after_the_cluster(deployed):
    """Terraform deletes the cluster before its network: a destroy that failed later leaves the network,
    NAT and service accounts in the state, which `down` destroys, without asking the cluster that is gone."""
    deployed["gcs"].bucket(STATE_BUCKET).blob(f"tpu-rl/{RECIPE}/default.tfstate").upload_from_string(
        leftover_state(SETTINGS["PROJECT"], SETTINGS["REGION"], SETTINGS["CLUSTER_NAME"]))
    deployed["kube"].calls.clear()
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert deployed["kube"].calls == []
    text = " ".join(result.output.split())
    assert ("holds no cluster but 3 resources an earlier destroy left (google_compute_network, "
            "google_compute_router_nat, google_service_account)") in text
    assert deployed["npx_calls"]() == [f"{REPO}|cdktf destroy {RECIPE} --auto-approve|"]


def test_down_refuses_a_leftover_state_whose_network_is_another_projects(deployed):
    deployed["gcs"].bucket(STATE_BUCKET).blob(f"tpu-rl/{RECIPE}/default.tfstate").upload_from_string(
        leftover_state(SETTINGS["PROJECT"], SETTINGS["REGION"], SETTINGS["CLUSTER_NAME"],
                       network_project="someone-else"))
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert error_line(result) == (
        f"error: the state of stack {RECIPE} (gs://{STATE_BUCKET}/tpu-rl/{RECIPE}/default.tfstate) holds "
        f"google_compute_network 'projects/someone-else/global/networks/{SETTINGS['CLUSTER_NAME']}-net' of project "
        "'someone-else', "
        f"not PROJECT '{SETTINGS['PROJECT']}': set the settings that stack was deployed with, or destroy it "
        "yourself")
    assert deployed["npx_calls"]() == []


def test_down_answered_no_destroys_nothing(deployed, monkeypatch):
    import tpu_rl.scripts.cli.cloud as scripts_cli_cloud

    real = scripts_cli_cloud.make_session
    questions = []

    def make_session(*args, **kwargs):
        session = real(*args, **kwargs)
        session.confirm = lambda question: questions.append(question) or False
        return session

    monkeypatch.setattr(scripts_cli_cloud, "make_session", make_session)
    result = runner.invoke(app, ["down", RECIPE])
    assert result.exit_code == 0, result.output
    assert questions == [f"Destroy stack {RECIPE} (gs://{SETTINGS['GCS_BUCKET']} is kept)?"]
    assert "nothing was destroyed" in result.output and deployed["npx_calls"]() == []


def test_down_refuses_a_state_that_holds_another_projects_cluster(deployed):
    deployed["gcs"].bucket(STATE_BUCKET).blob(f"tpu-rl/{RECIPE}/default.tfstate").upload_from_string(
        cluster_state("someone-else", SETTINGS["REGION"], SETTINGS["CLUSTER_NAME"]))
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "holds cluster 'rl-test' of project 'someone-else'" in error_line(result)
    assert deployed["npx_calls"]() == []


def test_down_with_no_state_has_nothing_to_stop(deployed):
    deployed["gcs"].bucket(STATE_BUCKET).blob(f"tpu-rl/{RECIPE}/default.tfstate").delete()
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert (f"nothing to stop: no resource in the state of stack {RECIPE} "
            f"(gs://{STATE_BUCKET}/tpu-rl/{RECIPE}/default.tfstate)") in result.output
    assert deployed["npx_calls"]() == []


def test_down_without_a_terminal_or_yes_asks_for_yes_and_destroys_nothing(deployed):
    result = runner.invoke(app, ["down", RECIPE])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert error_line(result) == (f"error: down would destroy stack {RECIPE}: rerun with --yes to confirm "
                                  "(there is no terminal to ask in)")
    assert deployed["npx_calls"]() == []


def test_down_reports_a_failed_destroy_in_one_line(deployed, monkeypatch):
    monkeypatch.setenv("NPX_EXIT", "1")
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == ExitCode.API_ERROR, result.output
    assert error_line(result).startswith(f"error: `npx cdktf destroy {RECIPE}` exited 1")


def test_down_refuses_the_vm_recipe(settings_env):
    result = runner.invoke(app, ["down", "llama31-v6e8", "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "`npx cdktf destroy llama31-v6e8`" in error_line(result)


def test_the_vm_recipes_destroy_lines_are_the_one_standing_account(settings_env, monkeypatch):
    """`down` and `recipes` on llama31-v6e8 give the account GKE's give: its reservation's chips bill with or
    without the stack, and `npx cdktf destroy` stops only what the stack holds (the NAT's IP; the VM stops
    itself after its run, VM_AFTER_RUN=stop), not the $/h of a running VM."""
    monkeypatch.setenv("CAPACITY", "reservation")
    vm, prices = get_recipe("llama31-v6e8"), load_prices()
    chips = vm.shape.total_chips * prices.tpu[vm.shape.generation]["reservation"].usd_per_hour
    expected = [f"with no run, stack llama31-v6e8 bills {usd(chips + prices.nat_per_ip)}/h (estimates from list "
                f"prices); `npx cdktf destroy llama31-v6e8` stops {usd(prices.nat_per_ip)}/h of it: Cloud NAT "
                f"{usd(prices.nat_per_ip)}; node boot disks not included (prices.toml has no disk price)",
                f"the reservation's {vm.shape.total_chips} chips bill {usd(chips)}/h with or without the stack, "
                "until the reservation ends: it may be shared or tied to a commitment, so only its owner can end "
                "it (tpu-rl never deletes it)"]
    down = runner.invoke(app, ["down", "llama31-v6e8", "--yes"])
    assert " ".join(expected[0].split()) in " ".join(down.output.split()), down.output
    assert " ".join(expected[1].split()) in " ".join(down.output.split()), down.output
    listed = runner.invoke(app, ["recipes", "--json"])
    [facts] = [entry for entry in json.loads(listed.output) if entry["name"] == "llama31-v6e8"]
    assert facts["idle"] == expected


def test_the_destroy_command_is_one_cdktf_takes():
    """Each option `down` passes is one the installed cdktf-cli's destroy lists."""
    from tpu_rl.scripts.pipeline.gke.down import destroy_command

    cdktf = REPO / "node_modules" / ".bin" / "cdktf"
    if not cdktf.exists():
        pytest.fail("node_modules/.bin/cdktf is missing: run `make install` (npm ci installs cdktf-cli)")
    help_text = subprocess.run([str(cdktf), "destroy", "--help"], capture_output=True, text=True, timeout=120,
                               env={**os.environ, "CHECKPOINT_DISABLE": "1"}, cwd=REPO).stdout
    command = destroy_command(RECIPE)
    assert command[:3] == ["npx", "cdktf", "destroy"] and command[3] == RECIPE
    for option in command[4:]:
        assert f"  {option} " in help_text, help_text


def test_down_without_npx_says_what_to_install_and_destroys_nothing(deployed, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert error_line(result).startswith("error: `tpu-rl down` needs npx (Node.js 22, README prerequisites)")
    assert deployed["npx_calls"]() == []


def test_down_reads_a_local_state_and_runs_cdktf_in_the_checkout_with_the_same_config_file(deployed, monkeypatch,
                                                                                          tmp_path):
    """Without TF_STATE_BUCKET the state is terraform.<stack>.tfstate at the checkout's root; cdktf runs there
    and reads the config file these settings came from (./tpu-rl.toml here), by its absolute path."""
    import tpu_rl.scripts.pipeline.gke.down as down

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "cdktf.json").write_text("{}")
    (checkout / f"terraform.{RECIPE}.tfstate").write_text(
        cluster_state(SETTINGS["PROJECT"], SETTINGS["REGION"], SETTINGS["CLUSTER_NAME"]))
    monkeypatch.setattr(down, "CHECKOUT", checkout)
    monkeypatch.delenv("TF_STATE_BUCKET")
    (tmp_path / "tpu-rl.toml").write_text(f'gcs_bucket = "{SETTINGS["GCS_BUCKET"]}"\n')  # the cwd (settings_env)
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert deployed["npx_calls"]() == [f"{checkout}|cdktf destroy {RECIPE} --auto-approve|{tmp_path / 'tpu-rl.toml'}"]


def test_runs_lists_the_runs_and_says_in_one_line_when_rbac_hides_the_nodes(cloud):
    cloud["kube"].faults.append(Fault("GET", "/api/v1/nodes", 403))
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("(what the stack still bills is not shown: listing the "
                                                     "cluster's nodes failed with HTTP 403"), result.output
    assert result.output.splitlines()[-1].endswith("your account needs to list nodes (roles/container.viewer))")


def test_a_cpu_node_still_up_is_priced_and_a_pool_the_stack_does_not_make_is_named_unpriced():
    from tpu_rl.recipes.costs.standing import standing_cost

    recipe = get_recipe(RECIPE)
    pool = {"cloud.google.com/gke-nodepool": "cpu-np"}
    bill = standing_cost(recipe, [{"cloud.google.com/gke-nodepool": "system-np"}, pool,
                                  {"cloud.google.com/gke-nodepool": "someone-elses-np"}])
    cpu = load_prices().machines[recipe.cpu_machine_type].usd_per_hour
    assert ("cpu-np 1 node", cpu) in [(item.item, item.usd_per_hour) for item in bill.items]
    assert bill.at_zero == () and bill.unpriced == ("someone-elses-np 1 node",)
    assert "; not priced: someone-elses-np 1 node; " in bill.summary()


def test_the_idle_bill_says_the_boot_disks_are_not_included(cloud):
    """recipes/costs/prices.toml has no disk price, so the figure leaves out system-np's boot disks and says so."""
    assert not any("disk" in key for key in load_prices().machines)
    nodes(cloud["kube"], "system-np", 1)
    result = runner.invoke(app, ["runs", RECIPE])
    assert result.exit_code == 0, result.output
    line = " ".join(result.output.split())
    assert "system-np 1 node" in line and "node boot disks not included (prices.toml has no disk price)" in line


def test_down_says_a_state_that_still_waits_on_uninstalling_the_kueue_releases(deployed, monkeypatch):
    """A stack deployed before its Kueue and queue releases stopped waiting: helm provider 3.1.1 uninstalls
    with the state's wait and timeout, so `down` says so before the question, and in its failure line."""
    from peers.tf_state import cluster_state

    state = cluster_state(SETTINGS["PROJECT"], SETTINGS["REGION"], SETTINGS["CLUSTER_NAME"],
                          {"jobset": (True, 300), "kueue": (True, 300), "tpu-rl-queues": (True, 600)})
    deployed["gcs"].bucket(STATE_BUCKET).blob(f"tpu-rl/{RECIPE}/default.tfstate").upload_from_string(state)
    monkeypatch.setenv("NPX_EXIT", "1")
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == ExitCode.API_ERROR, result.output
    assert (f"! the state of stack {RECIPE} still records a wait on uninstalling Helm release(s) kueue (up to 5 "
            "min), tpu-rl-queues (up to 10 min), as deployed before tpu-rl stopped waiting on them: the helm "
            "provider uninstalls with the state's wait, so the destroy may wait that long on Kueue's finalizers "
            "and stop before the cluster. First run the deploy (it records no wait), then down:") in " ".join(
                result.output.split())
    lines = result.output.splitlines()  # each command whole on a line of its own
    assert f"  npx cdktf deploy {RECIPE}" in lines and f"  tpu-rl down {RECIPE}" in lines
    assert f"run `npx cdktf deploy {RECIPE}` (its Helm releases then uninstall without waiting), then `tpu-rl " \
           f"down {RECIPE}` again" in error_line(result)


def test_down_says_nothing_of_waits_when_the_state_records_none(deployed):
    from peers.tf_state import cluster_state

    state = cluster_state(SETTINGS["PROJECT"], SETTINGS["REGION"], SETTINGS["CLUSTER_NAME"],
                          {"jobset": (True, 300), "kueue": (False, 300), "tpu-rl-queues": (False, 600)})
    deployed["gcs"].bucket(STATE_BUCKET).blob(f"tpu-rl/{RECIPE}/default.tfstate").upload_from_string(state)
    result = runner.invoke(app, ["down", RECIPE, "--yes"])
    assert result.exit_code == 0, result.output
    assert "records a wait" not in result.output
