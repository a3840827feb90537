"""The run's driver's Role is the least that works (issue 27): its rules (recipes/driver/access.py) and the
calls the driver's code makes match both ways. Nothing is missing: every call is one a rule allows. Nothing
is unused: every verb of every rule is used by some call.

The driver runs `run`'s pipeline (GKE's Platform.run) in the cluster. Here that pipeline runs the
scenarios the `run` tests script, each against fresh peers: a run that succeeds, one that fails over to
another mode and one to another zone, one whose slice is lost and submitted again, one that stalls, and
one with a reward file. The fake Kubernetes API records each request it answers and reads it as the API
server's RequestInfo does (peers/kube_api.py, request_info).

What the attaching `tpu-rl run` does with the user's credentials is not the driver's: filling the token
Secret from Secret Manager and creating the user-files ConfigMap (submit.prepare_run). Each scenario runs
that first, recorded as the attacher's, then the driver's own path (Platform.drive, run_gke driven), and
only the latter counts.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from cli_helpers import BOUND_SECONDS, CONVERT, RECIPE, TRAIN, stall_clock, succeeds
from contracts.tunix_log import train_step_line
from tpu_rl.jobs import jobset_name
from peers import simulated_run
from peers.fixtures import CONTEXT, SETTINGS, make_artifacts_bucket, put_step_output, start_kube, storage_client, spec_of
from peers.jobset_plan import Plan
from peers.kube_api import RequestInfo, request_info
from tpu_rl.recipes import STEPS, conventions, get_recipe
from tpu_rl.recipes.driver.access import DRIVER_RULES, AccessRule
from tpu_rl.recipes.outcome import Outcome, StepFailed


# Non-resource URLs every authenticated user may GET: Kubernetes' default ClusterRole system:discovery,
# bound to the group system:authenticated (kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/
# bootstrappolicy/policy.go, clusterRoles and clusterRoleBindings). The driver's discovery of the JobSet
# API (Cluster.check_ready) needs no rule of its own.
DISCOVERY_URLS = ("/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*",
                  "/api", "/api/*", "/apis", "/apis/*")


def allows(rule: AccessRule, call: RequestInfo) -> bool:
    """Whether the namespaced Role rule allows the call: a Role's rules hold in its own namespace only."""
    resource = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
    return (call.namespace == conventions.NAMESPACE and rule.api_group == call.api_group
            and rule.resource == resource and call.verb in rule.verbs)


def discovery(call: RequestInfo) -> bool:
    """A GET of a URL system:discovery grants (a rule's URL ending in * matches as a prefix)."""
    return not call.is_resource and call.verb == "get" and any(
        call.path == url or (url.endswith("*") and call.path.startswith(url[:-1])) for url in DISCOVERY_URLS)


def mismatches(calls: dict[str, list[RequestInfo]], rules: tuple[AccessRule, ...]) -> tuple[list[str], list[str]]:
    """(the calls no rule allows, by scenario; the verbs of rules no call used)."""
    missing = sorted({f"{scenario}: {call}" for scenario, made in calls.items() for call in made
                      if not discovery(call) and not any(allows(rule, call) for rule in rules)})
    everything = [call for made in calls.values() for call in made]
    unused = [f"{verb} {rule.resource} of group '{rule.api_group}'" for rule in rules for verb in rule.verbs
              if not any(allows(AccessRule(rule.api_group, rule.resource, (verb,), rule.why), call)
                         for call in everything)]
    return missing, unused


# -- the scenarios, as the `run` tests script them -------------------------------------------------------

def drive(cloud, monkeypatch, steps=STEPS, capacity: str | None = None, wait: str | None = None,
          rewards: str | None = None) -> Outcome | None:
    """GKE's pipeline as the driver runs it: the attacher's part (submit.prepare_run, as the attacher), then
    Platform.drive on the Session make_session builds, for the recipe as `run` makes it (CAPACITY and
    CAPACITY_WAIT as run_train sets them). What it ended with: None when every step was verified, else the
    Outcome it raised. The driver's part reads no secret of Secret Manager."""
    from tpu_rl.scripts.cli import cloud as cli_cloud
    from tpu_rl.scripts.cli.run_input import run_recipe
    from tpu_rl.scripts.pipeline.gke.submit import prepare_run
    from tpu_rl.scripts.pipeline.platforms import platform_for

    if capacity:
        monkeypatch.setenv("CAPACITY", capacity)
        monkeypatch.setenv("CAPACITY_WAIT", wait)
        put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    spec, settings = run_recipe("run", RECIPE, None, None, rewards)
    kube = cloud["kube"]
    kube.actor = "attacher"
    prepare_run(cli_cloud.make_session(spec, settings, "writes"), steps, False)
    kube.actor = "driver"
    secret_reads = _secret_manager_requests(cloud["google"])
    started = time.monotonic()
    try:
        platform_for(spec.recipe).drive(cli_cloud.make_session(spec, settings, "writes"), steps, replace=False,
                                        follow_logs=False)
    except Outcome as outcome:
        return outcome
    finally:
        assert time.monotonic() - started < BOUND_SECONDS
        assert _secret_manager_requests(cloud["google"]) == secret_reads  # the driver never reads the token
    return None


def _secret_manager_requests(google) -> int:
    return sum(1 for _, path, _ in google.requests if "/secrets/" in path)


def succeeds_whole_run(cloud, monkeypatch):
    """test_cli_run: convert, train (its head logging steps and evaluations) and export succeed."""
    simulated_run.script_successful_run(cloud["kube"], cloud["gcs"], get_recipe(RECIPE), with_train_log=True)
    assert drive(cloud, monkeypatch) is None
    assert cloud["kube"].created == [CONVERT, TRAIN, jobset_name(spec_of(get_recipe(RECIPE)), "export")]


def fails_over_to_another_mode(cloud, monkeypatch):
    """test_cli_capacity_loss: a spot stockout moves on to on-demand after the spot wait."""
    cloud["kube"].plan(TRAIN, capacity="spot", stockout=("spot",), **succeeds(cloud))
    assert drive(cloud, monkeypatch, ("train",), "spot,on-demand", "spot=2s") is None
    assert cloud["kube"].deleted == [TRAIN]


def fails_over_to_another_zone(cloud, monkeypatch):
    """test_cli_capacity_loss: flex-start in the second zone of ZONE when the first has no stock."""
    monkeypatch.setenv("ZONE", "us-east5-b,us-east5-a")
    cloud["kube"].plan(TRAIN, capacity="flex-start", zone="us-east5-b", stockout=("flex-start@us-east5-b",),
                       **succeeds(cloud))
    assert drive(cloud, monkeypatch, ("train",), "flex-start", "flex-start=2s") is None
    assert cloud["kube"].deleted == [TRAIN]


def loses_its_slice(cloud, monkeypatch):
    """test_cli_capacity_loss: the flex-start slice ends mid-run; the JobSet is submitted again."""
    cloud["kube"].plan(TRAIN, capacity="flex-start", reclaimed_after=3, nodes_return=False,
                       resubmitted=Plan(capacity="flex-start", **succeeds(cloud)))
    assert drive(cloud, monkeypatch, ("train",), "flex-start", "flex-start=3s") is None
    assert cloud["kube"].created == [TRAIN, TRAIN]


def stalls(cloud, monkeypatch):
    """test_cli_stall_gke: the train step's log stops advancing; the pipeline ends at the stall bound."""
    stall_clock(monkeypatch)
    steps = [f"{train_step_line(step, 0.5)}\n" for step in (1, 2, 3)]
    cloud["kube"].plan(TRAIN, capacity="spot", outcome="hang",
                       log_reads=["loading\n", *("".join(steps[:count]) for count in (1, 2, 3))])
    outcome = drive(cloud, monkeypatch, ("train",), "spot", "4h")
    assert isinstance(outcome, StepFailed) and "looks stalled" in str(outcome), outcome


REWARDS = "def short_answer(prompts, completions, tmvp_config, **kwargs):\n" \
          "    return [1.0 if len(c) < 80 else 0.0 for c in completions]\n"


def trains_with_a_reward_file(cloud, monkeypatch, tmp_path):
    """test_cli_rewards: `run --rewards` mounts the file from the user-files ConfigMap."""
    from tpu_rl.recipes.runs.spec import RunSpec, run_name
    from tpu_rl.recipes.runs.user_files import read_user_file

    rewards = tmp_path / "my_rewards.py"
    rewards.write_text(REWARDS)
    recipe = get_recipe(RECIPE)
    custom = RunSpec.requested(recipe).with_user_files((read_user_file(recipe, "rewards", rewards, ("short_answer",)),))
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(f"{run_name(custom)}-train", ticks=2,
                       on_success=lambda: put_step_output(cloud["gcs"], custom, "train"))
    assert drive(cloud, monkeypatch, ("train",), rewards=f"{rewards}:short_answer") is None
    assert cloud["kube"].configmaps


SCENARIOS = {"succeeds": succeeds_whole_run, "fails over to another mode": fails_over_to_another_mode,
             "fails over to another zone": fails_over_to_another_zone, "loses its slice": loses_its_slice,
             "stalls": stalls, "trains with a reward file": trains_with_a_reward_file}


@contextlib.contextmanager
def fresh_cloud(gcs_server, google, tmp_path, monkeypatch):
    """The peers of the `cloud` fixture, fresh for one scenario: an empty cluster and bucket."""
    server, url = gcs_server
    server.wipe()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    client = storage_client(SETTINGS["PROJECT"], url)
    make_artifacts_bucket(gcs_server, client, SETTINGS["GCS_BUCKET"], SETTINGS["REGION"])
    kube = start_kube(tmp_path / "kubeconfig", CONTEXT)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    try:
        yield {"gcs": client, "kube": kube, "google": google}
    finally:
        kube.stop()


@pytest.fixture
def driver_calls(settings_env, gcs_server, google, tmp_path, monkeypatch) -> dict[str, list[RequestInfo]]:
    """What the driver's code asked of the Kubernetes API in each scenario."""
    calls, attacher = {}, set()
    for index, (name, scenario) in enumerate(SCENARIOS.items()):
        scratch = tmp_path / f"scenario-{index}"
        scratch.mkdir()
        with monkeypatch.context() as patch, fresh_cloud(gcs_server, google, scratch, patch) as cloud:
            extra = {"tmp_path": scratch} if scenario is trains_with_a_reward_file else {}
            scenario(cloud, patch, **extra)
            calls[name] = cloud["kube"].calls_of("driver")
            attacher |= {(call.api_group, call.resource, call.verb) for call in cloud["kube"].calls_of("attacher")}
            assert cloud["kube"].calls_of("client") == [], name  # every request was someone's
    # The split the driver's Job keeps: the attacher fills the token Secret and the user-files ConfigMap.
    assert {("", "secrets", "create"), ("", "configmaps", "create")} <= attacher, attacher
    return calls


def test_the_drivers_calls_and_its_roles_rules_match_both_ways(driver_calls):
    missing, unused = mismatches(driver_calls, DRIVER_RULES)
    assert missing == [], f"calls the driver makes that no rule of DRIVER_RULES allows: {missing}"
    assert unused == [], f"verbs of DRIVER_RULES that no call of the driver used: {unused}"
    made = [call for calls in driver_calls.values() for call in calls]
    assert not any(call.resource in ("secrets", "configmaps") for call in made)  # never the token, never a file
    assert any(discovery(call) for call in made)  # check_ready's discovery, which no rule needs


def test_a_call_without_a_rule_and_a_rule_without_a_call_are_named():
    calls = {"a scenario": [request_info("GET", "/api/v1/namespaces/default/pods/p-0/log", {}),
                            request_info("GET", "/api/v1/namespaces/default/pods", {"labelSelector": "a=b"})]}
    rules = (AccessRule("", "pods", ("list", "watch"), "the pods"),)
    missing, unused = mismatches(calls, rules)
    assert missing == ["a scenario: get pods/log of group '' in namespace default"]
    assert unused == ["watch pods of group ''"]


@pytest.mark.parametrize("method, path, query, expected", [
    ("GET", "/api/v1/namespaces/default/pods", {"labelSelector": "a=b"}, ("list", "", "pods", "", "default")),
    ("GET", "/api/v1/namespaces/default/pods", {"watch": "true"}, ("watch", "", "pods", "", "default")),
    ("GET", "/api/v1/namespaces/default/pods", {"watch": "false"}, ("list", "", "pods", "", "default")),
    ("GET", "/api/v1/watch/namespaces/default/pods", {}, ("watch", "", "pods", "", "default")),
    ("GET", "/api/v1/namespaces/default/pods/p-0/log", {"follow": "true"}, ("get", "", "pods", "log", "default")),
    ("POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets", {},
     ("create", "jobset.x-k8s.io", "jobsets", "", "default")),
    ("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/j", {},
     ("delete", "jobset.x-k8s.io", "jobsets", "", "default")),
    ("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets", {},
     ("deletecollection", "jobset.x-k8s.io", "jobsets", "", "default")),
    ("PATCH", "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads/w", {},
     ("patch", "kueue.x-k8s.io", "workloads", "", "default")),
    ("PUT", "/api/v1/namespaces/default/secrets/s", {}, ("update", "", "secrets", "", "default")),
    ("GET", "/api/v1/nodes", {}, ("list", "", "nodes", "", "")),
    ("GET", "/api/v1/namespaces/default", {}, ("get", "", "namespaces", "", "default")),
    ("PUT", "/api/v1/namespaces/default/finalize", {}, ("update", "", "namespaces", "finalize", "default")),
])
def test_requests_read_as_the_api_servers_request_info_reads_them(method, path, query, expected):
    call = request_info(method, path, query)
    assert (call.verb, call.api_group, call.resource, call.subresource, call.namespace) == expected


@pytest.mark.parametrize("path", ["/apis/jobset.x-k8s.io/v1alpha2", "/version/", "/api", "/apis"])
def test_discovery_paths_are_non_resource_requests_that_system_discovery_grants(path):
    call = request_info("GET", path, {})
    assert not call.is_resource and discovery(call)


def test_a_list_by_metadata_name_names_the_object_as_the_api_server_does():
    call = request_info("GET", "/api/v1/namespaces/default/pods", {"fieldSelector": "metadata.name=p-0"})
    assert (call.verb, call.name) == ("list", "p-0")
