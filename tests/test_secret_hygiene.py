"""The Hugging Face token never leaks: a sentinel token is put everywhere a user might put it, then synth,
render and every CLI command that runs offline or against the local fake APIs are run for real
(`python -m tpu_rl.stacks.app` and the `tpu-rl` console script, each a process forked from a warm interpreter,
tests/forked_cli.py). The sentinel must appear in
none of: cdktf.out, the rendered files, stdout/stderr, and anything the CLI sends to the fake Kubernetes
API - except the one place it belongs, the data of the Kubernetes Secret that `tpu-rl run` fills from
Secret Manager (checked to hold exactly the token, so the search is known to look in the right place).

Where the user might put it:
- HF_TOKEN (and HUGGING_FACE_HUB_TOKEN) in the environment of every command;
- the config file (settings refuse token keys; the refusal must not echo the value);
- `tpu-rl secret set` on stdin, which stores it in (fake) Secret Manager, where `run` reads it.
"""

from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest

from cli_helpers import make_review_clone
from forked_cli import WarmPool
from peers.settings import spec_of
from tpu_rl.jobs import render_manifests
from tpu_rl.jobs.paths import ArtifactPaths
from peers.fixtures import (SETTINGS, TOKEN, TRACEBACK, VENV_BIN, clean_environment, deploy_vm, jobset_of,
                            put_step_output, start_gcs_emulator, start_peers)
from tpu_rl.recipes import all_recipes, example_settings, get_recipe, load_settings
from tpu_rl.recipes.conventions import HF_TOKEN_ENV, HF_TOKEN_K8S_SECRET

GKE_RECIPE = "qwen3-v6e32"
VM_RECIPE = "llama31-v6e8"


@dataclass
class Session:
    """Everything the commands printed and wrote, and what the fake APIs received."""

    token: str
    root: Path
    warm: WarmPool | None = None  # runs the commands
    outputs: dict[str, str] = field(default_factory=dict)  # command -> stdout + stderr
    exit_codes: dict[str, int] = field(default_factory=dict)
    kube_requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    google_requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    hub_requests: list[tuple[str, str, bytes]] = field(default_factory=list)  # secret set's and preflight's
    hub_bearers: list[str] = field(default_factory=list)  # the token each Hub request carried
    stored_versions: list[bytes] = field(default_factory=list)
    kube_secrets: dict = field(default_factory=dict)
    run_records: list[str] = field(default_factory=list)  # the run.json objects `run` wrote to the bucket

    @property
    def forms(self) -> list[str]:
        """The token as itself, base64 (Secret data), and URL-quoted (query strings)."""
        return [self.token, base64.b64encode(self.token.encode()).decode(), quote(self.token, safe="")]

    def leaks(self, text: str) -> list[str]:
        return [form for form in self.forms if form in text]


def _run(session: Session, label: str, argv: list[str], env: dict[str, str], cwd: Path, stdin: str = "") -> None:
    result = session.warm.run(argv, cwd=cwd, env=env, input=stdin, timeout=600)
    session.outputs[label] = result.stdout + result.stderr
    session.exit_codes[label] = result.returncode


def _tpu_rl(*args: str) -> list[str]:
    return [str(VENV_BIN / "tpu-rl"), *args]


@pytest.fixture(scope="module")
def session(tmp_path_factory, warm_cli) -> Session:
    root = tmp_path_factory.mktemp("secret-hygiene")
    work, home = root / "work", root / "home"
    work.mkdir()
    home.mkdir()
    token = TOKEN
    session = Session(token, root, warm_cli)

    env = clean_environment(home)
    env.update(SETTINGS)  # the peers' settings, so that put_step_output writes the right paths
    env.update({HF_TOKEN_ENV: token, "HUGGING_FACE_HUB_TOKEN": token})

    # The config file: a token key is refused, by synth and by the CLI, without echoing the value.
    config = home / "tpu-rl-with-token.toml"
    config.write_text(f'hf_token = "{token}"\n')
    with_config = {**env, "TPU_RL_CONFIG": str(config)}
    review_clone = root / "review-clone"
    synth = [str(VENV_BIN / "python"), "-m", "tpu_rl.stacks.app"]
    offline = [
        ("synth with a token in the config file", synth, with_config, work / "refused"),
        ("render with a token in the config file", _tpu_rl("render", GKE_RECIPE, "--out", str(work / "x")),
         with_config, work),
        # Offline: synth every stack, list the recipes, render every recipe, review the plan.
        ("synth", synth, env, work),
        ("recipes", _tpu_rl("recipes"), env, work),
        ("recipes --json", _tpu_rl("recipes", "--json"), env, work),
        *[(f"render {name}", _tpu_rl("render", name, "--out", str(work / "rendered" / name)), env, work)
          for name in all_recipes()],
        # The review passes its environment on to each side's synth, which is the synth above (its output
        # holds no token), so a clone whose sides synthesize a small stack stands for this checkout here.
        ("plan-review", _tpu_rl("plan-review"), env, review_clone),
    ]
    (work / "refused").mkdir()
    review_clone.mkdir()
    make_review_clone(review_clone)
    # They are independent of each other and of the fake APIs below, so they run alongside.
    pool = ThreadPoolExecutor(max_workers=2)
    offline_runs = [pool.submit(_run, session, *command) for command in offline]

    # Against the local fake APIs: store the token from stdin, preflight, run the pipeline, inspect it.
    server, url = start_gcs_emulator()
    peers = start_peers({"secret": "empty"}, env, home, token, (server, url))
    try:
        recipe = get_recipe(GKE_RECIPE)
        for step in ("convert", "train", "export"):
            peers.kube.plan(jobset_of(GKE_RECIPE, step), logs=f"{step} step 1/1\n",
                            on_success=lambda step=step: put_step_output(peers.gcs_client, recipe, step))
        _run(session, "secret set", _tpu_rl("secret", "set"), env, work, stdin=f"{token}\n")
        _run(session, "preflight", _tpu_rl("preflight", GKE_RECIPE), env, work)
        _run(session, "run", _tpu_rl("run", GKE_RECIPE, "--follow-logs"), env, work)
        _run(session, "status", _tpu_rl("status", GKE_RECIPE), env, work)
        _run(session, "logs", _tpu_rl("logs", GKE_RECIPE, "train"), env, work)
        # The VM recipe's view: its instance and serial console (where the startup script logs).
        vm = (env["ZONE"], load_settings(env=env).vm_name)
        deploy_vm(peers.google, env)
        vm_run = ArtifactPaths(spec_of(get_recipe(VM_RECIPE)), load_settings(env=env)).run_name
        peers.google.serial[vm] = f"boot\ntpu-rl: 2026-11-30T00:00:00Z {vm_run} convert: starting\nconverting\n"
        _run(session, f"status {VM_RECIPE}", _tpu_rl("status", VM_RECIPE), env, work)
        _run(session, f"logs {VM_RECIPE}", _tpu_rl("logs", VM_RECIPE, "convert"), env, work)
        session.kube_requests = list(peers.kube.requests)
        session.google_requests = list(peers.google.requests)
        session.hub_requests, session.hub_bearers = list(peers.hub.requests), list(peers.hub.bearers)
        session.stored_versions = [version["data"] for version in peers.google.secrets["hf-token"]]
        session.kube_secrets = json.loads(json.dumps(peers.kube.secrets))
        session.run_records = [blob.download_as_text() for blob in peers.gcs_client.list_blobs(env["GCS_BUCKET"])
                               if blob.name.endswith("/run.json")]
    finally:
        peers.stop()
        server.stop()
        for run in offline_runs:
            run.result()
        pool.shutdown()
    return session


def test_every_command_ran_to_its_expected_end(session):
    refused = {"synth with a token in the config file", "render with a token in the config file"}
    for label, code in session.exit_codes.items():
        assert TRACEBACK not in session.outputs[label], session.outputs[label][-2000:]
        if label in refused:
            assert code != 0 and "tokens do not belong in config files" in session.outputs[label], label
        else:
            assert code == 0, f"{label} exited {code}:\n{session.outputs[label][-2000:]}"


def test_no_output_of_any_command_shows_the_token(session):
    leaked = {label: session.leaks(text) for label, text in session.outputs.items() if session.leaks(text)}
    assert leaked == {}


def test_no_synthesized_or_rendered_file_contains_the_token(session):
    files = [path for path in (session.root / "work").rglob("*") if path.is_file()]
    assert any(path.name == "cdk.tf.json" for path in files) and any(path.name == "train.yaml" for path in files)
    assert any(path.name == "startup.sh" for path in files)
    leaked = [str(path) for path in files if session.leaks(path.read_text(errors="replace"))]
    assert leaked == []


def test_the_run_record_in_the_bucket_does_not_contain_the_token(session):
    assert len(session.run_records) == 1  # the GKE run's; the run ran with HF_TOKEN in its environment
    assert json.loads(session.run_records[0])["status"] == "succeeded"
    assert [leak for record in session.run_records for leak in session.leaks(record)] == []


def test_secret_set_stores_the_token_from_stdin_in_secret_manager(session):
    # Positive control: the sentinel did travel its one intended path.
    assert session.stored_versions == [session.token.encode()]


def _kube_bodies(session: Session) -> list[dict]:
    return [json.loads(body) for method, _, body in session.kube_requests if method in ("POST", "PUT", "PATCH") and body]


def test_the_kubernetes_secret_is_the_only_object_that_carries_the_token(session):
    bodies = _kube_bodies(session)
    secrets = [body for body in bodies if body.get("kind") == "Secret"]
    assert secrets, "run created no Kubernetes Secret"
    for secret in secrets:
        assert secret["metadata"]["name"] == HF_TOKEN_K8S_SECRET
        assert base64.b64decode(secret["data"][HF_TOKEN_ENV]).decode() == session.token
        rest = {**secret, "data": {k: v for k, v in secret["data"].items() if k != HF_TOKEN_ENV}}
        assert session.leaks(json.dumps(rest)) == []
    others = [body for body in bodies if body.get("kind") != "Secret"]
    # the run's driver: its request ConfigMap, its Job, the ConfigMap again with the Job as its owner (a
    # create answered 409, then a replace), and the JobSets the driver submits; none with the token
    kinds = [body["kind"] for body in others]
    assert [kind for kind in kinds if kind != "JobSet"] == ["ConfigMap", "Job", "ConfigMap", "ConfigMap"]
    assert kinds.index("Job") < kinds.index("JobSet") and kinds.count("JobSet") == 3
    assert [leak for body in others for leak in session.leaks(json.dumps(body))] == []


def test_the_hub_gets_the_token_only_in_the_authorization_header(session):
    # Positive control: secret set and preflight did ask the Hub, with the token.
    assert session.hub_requests and session.hub_bearers == [session.token] * len(session.hub_requests)
    assert [body for _, _, body in session.hub_requests if body] == []


def test_no_request_path_or_query_to_any_api_carries_the_token(session):
    paths = [path for _, path, _ in session.kube_requests + session.google_requests + session.hub_requests]
    assert paths and [path for path in paths if session.leaks(path)] == []
    google_bodies = [body.decode(errors="replace") for method, path, body in session.google_requests
                     if body and ":addVersion" not in path]
    assert [body for body in google_bodies if session.leaks(body)] == []


def _containers(manifest: dict) -> list[dict]:
    containers = []
    for rjob in manifest["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        containers += pod.get("initContainers", []) + pod["containers"]
    return containers


@pytest.mark.parametrize("recipe", [r for r in all_recipes().values() if r.platform == "gke"], ids=lambda r: r.name)
def test_manifests_reference_the_token_only_through_a_secret_key_ref(recipe):
    token_reference = {"secretKeyRef": {"name": HF_TOKEN_K8S_SECRET, "key": HF_TOKEN_ENV}}
    for step, manifest in render_manifests(spec_of(recipe), example_settings()).items():
        for container in _containers(manifest):
            for variable in container.get("env", []):
                if "TOKEN" in variable["name"].upper():
                    assert variable == {"name": variable["name"], "valueFrom": token_reference}, (step, variable)
            words = " ".join(container.get("command", []) + container.get("args", []))
            assert "hf_access_token=" not in words and "--hf_token" not in words, (step, container["name"])
        for volume in (rjob["template"]["spec"]["template"]["spec"].get("volumes", [])
                       for rjob in manifest["spec"]["replicatedJobs"]):
            assert all("secret" not in v for v in volume), "the token reaches containers as env, from the Secret"
    main_steps = [c for m in render_manifests(spec_of(recipe), example_settings()).values() for c in _containers(m)
                  if any(v.get("valueFrom") == token_reference for v in c.get("env", []))]
    assert main_steps, "no container receives the token at all"
