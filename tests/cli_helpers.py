"""What the in-process CLI tests against the local peers share: one home, so no test module imports another.

- the shape of the output: the one error line, 80 columns;
- a GKE recipe's runs (qwen3-v6e32): its JobSets succeeding as the containers would, run.json, the drills'
  virtual clock, a trained run to evaluate;
- `tpu-rl` at a real terminal, Ctrl-C at its [y/N] prompt.

The VM recipe's share is tests/vm_helpers.py.
"""

from __future__ import annotations

import re

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from contracts.tunix_log import evaluation_line
from tpu_rl.jobs import jobset_name, render_manifests
from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from peers.event_files import put_event_files
from peers.fixtures import SETTINGS, peer_settings, put_checkpoint, put_step_output, spec_of
from peers.google_apis import CPU_QUOTAS
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.recipes.settings.specs import SPECS
from tpu_rl.scripts.cli import app

runner = CliRunner()
TPU_RL = Path(sys.executable).parent / "tpu-rl"


# -- the output ----------------------------------------------------------------------------------------------

def error_line(result) -> str:
    """The one `error: ` line of a command's output, which has no traceback."""
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def fits_80_columns_with_whole_paths(output: str) -> bool:
    """Every line fits 80 columns, but for a line that is one path, URL or image reference longer than
    that, or one command in backquotes, whole (it is never broken, so a copied one works)."""
    return all(len(line) <= 80 or (len(line.split()) == 1 and "/" in line)
               or re.fullmatch(r"\s*[^\s`]*`[^`]*`\S*", line) for line in output.splitlines())


# -- a GKE recipe's runs ---------------------------------------------------------------------------------------

RECIPE = "qwen3-v6e32"
TRAIN = jobset_name(spec_of(get_recipe(RECIPE)), "train")
CONVERT = jobset_name(spec_of(get_recipe(RECIPE)), "convert")
BOUND_SECONDS = 60  # every drill ends well within this, whatever the machine


def run_train(cloud, monkeypatch, capacity: str, wait: str):
    monkeypatch.setenv("CAPACITY", capacity)
    monkeypatch.setenv("CAPACITY_WAIT", wait)
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    started = time.monotonic()
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert time.monotonic() - started < BOUND_SECONDS, result.output
    assert "Traceback" not in result.output, result.output
    return result


def run_record(cloud) -> dict:
    from tpu_rl.recipes import load_settings

    recipe = load_settings().recipe(get_recipe(RECIPE))
    bucket, name = split_gs_url(ArtifactPaths(spec_of(recipe), peer_settings()).run_record)
    return json.loads(cloud["gcs"].bucket(bucket).blob(name).download_as_bytes())


def succeeds(cloud) -> dict:
    return {"on_success": lambda: put_step_output(cloud["gcs"], get_recipe(RECIPE), "train")}


POLL_MINUTES = 10  # the drills' virtual time per poll: a train step of a few polls outlasts a 30 min wait


def slow_polls(monkeypatch) -> list:
    """Every sleep of `run` advances its clock by POLL_MINUTES and returns at once, so a healthy step
    outlasts CAPACITY_WAIT's default 30 min in a few polls, whatever the machine's speed. The fake Kueue
    shares that clock, so a failed request's retry backoff (1, 2, 4 min) passes within a poll. Returns
    the clock, [now]."""
    from datetime import datetime, timedelta, timezone

    from peers import kueue
    from tpu_rl.scripts.cli import cloud as cli_cloud

    build = cli_cloud.make_session
    clock = [datetime.now(timezone.utc)]

    def advance(_seconds: float) -> None:
        clock[0] += timedelta(minutes=POLL_MINUTES)

    def make_session(spec, settings, *args):
        session = build(spec, settings, *args)
        session.now, session.sleep = (lambda: clock[0]), advance
        return session

    monkeypatch.setattr(cli_cloud, "make_session", make_session)
    kueue.use_clock(lambda: clock[0])
    return clock


def run_of(*sets: str, run: str | None = None):
    """The run `tpu-rl run RECIPE --set ... --run ...` trains, and its paths."""
    spec = RunSpec.requested(get_recipe(RECIPE), sets, run)
    return spec, ArtifactPaths(spec, peer_settings())


def names(recipe) -> dict[str, str]:
    manifests = render_manifests(spec_of(recipe), peer_settings())
    return {step: manifest["metadata"]["name"] for step, manifest in manifests.items()}


def plan_success(cloud, recipe, **plan) -> None:
    """Each step's JobSet of `recipe` succeeds and leaves its output, as the containers would."""
    for step, name in names(recipe).items():
        cloud["kube"].plan(name, on_success=lambda step=step: put_step_output(cloud["gcs"], recipe, step),
                           **(plan if step == "train" else {}))


def record(gcs, paths: ArtifactPaths) -> dict | None:
    bucket, name = split_gs_url(paths.run_record)
    blob = gcs.bucket(bucket).blob(name)
    return json.loads(blob.download_as_bytes()) if blob.exists() else None


def train_script(kube, name: str) -> str:
    spec = kube.jobsets[name]["spec"]
    head = next(job for job in spec["replicatedJobs"] if job["name"] == "pathways-head")
    pod = head["template"]["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "workload-container")["command"][2]


def trained_run(cloud, *sets: str):
    recipe, paths = run_of(*sets)
    plan_success(cloud, recipe)
    # the fit check is tests/test_cli_fit.py's: a --set of memory would compile here, minutes in the suite
    assert runner.invoke(app, ["run", RECIPE, "--skip-fit-check",
                               *(item for s in sets for item in ("--set", s))]).exit_code == 0
    put_checkpoint(cloud["gcs"], paths, 20)
    return recipe, paths


POLL_BUDGET = 40  # polls (of 10 min) before the test's Ctrl-C: far beyond every stall bound


def stall_clock(monkeypatch) -> list:
    """The drills' virtual clock for `run` (slow_polls), which the stall's monotonic clock reads too, and a
    budget of polls."""
    from tpu_rl.scripts.cli import cloud as cli_cloud
    from tpu_rl.scripts.pipeline import stall

    clock = slow_polls(monkeypatch)
    monkeypatch.setattr(stall, "clock", lambda: clock[0].timestamp())
    build = cli_cloud.make_session

    def make_session(*args):
        session = build(*args)
        sleep, polls = session.sleep, [0]

        def budgeted(seconds: float) -> None:
            polls[0] += 1
            if polls[0] > POLL_BUDGET:
                raise KeyboardInterrupt
            sleep(seconds)

        session.sleep = budgeted
        return session

    monkeypatch.setattr(cli_cloud, "make_session", make_session)
    return clock


# MaxText's evaluation lines before and after training (tests/contracts/tunix_log.py).
PRE = evaluation_line("pre", 26, 64, 30, 50, 0.8123)
POST = evaluation_line("post", 38, 64, 40, 63, 1.9, second=50)


# -- `tpu-rl` at a terminal ------------------------------------------------------------------------------------

def _read_until(fd: int, done, seconds: float) -> str:
    """What the process writes to its terminal until `done(text)` holds, the terminal closes (the
    process ended) or `seconds` pass. Reading all along keeps the process from blocking on a full pty."""
    text, deadline = "", time.monotonic() + seconds
    while not done(text) and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the terminal's other end closed, the process ended
                break
            if not chunk:
                break
            text += chunk.decode(errors="replace")
    return text


def _wait_until_sleeping(pid: int, seconds: float = 30) -> None:
    """Wait until the process sleeps, i.e. (after it printed its prompt) it is blocked reading the terminal.
    A SIGINT sent earlier, between the prompt and the read, would be taken only when the read returns
    (CPython checks signals after an interrupted read, not before the first one): no person is that quick."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "S":
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never waited for input")


def ctrl_c_at_the_prompt(args: list[str]) -> tuple[str, str, int]:
    """`tpu-rl *args` in a real terminal (so it asks instead of refusing): wait for its [y/N] prompt, press
    Ctrl-C, and return what it wrote up to the prompt, what it wrote after, and its exit code."""
    master, terminal = pty.openpty()
    proc = subprocess.Popen([str(TPU_RL), *args], stdin=terminal, stdout=terminal, stderr=terminal,
                            env=dict(os.environ), close_fds=True)
    os.close(terminal)
    try:
        asked = _read_until(master, lambda text: "[y/N]" in text, 120)
        assert "[y/N]" in asked, asked
        _wait_until_sleeping(proc.pid)
        # What Ctrl-C at the terminal sends. On a loaded machine the process can still be between printing
        # the prompt and blocking in read(); a signal taken there waits for the read to return, so, like a
        # person whose first Ctrl-C seemed lost, press it again until the process ends.
        for _ in range(30):
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=2)
                break
            except subprocess.TimeoutExpired:
                continue
        rest = _read_until(master, lambda text: False, 120)  # until the process ends and closes its terminal
        return asked, rest, proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


# -- what several CLI test modules share (so none imports another) ------------------------------------

def session_hook(monkeypatch, **changes):
    """Every Session the CLI makes gets these attributes (sleep, confirm)."""
    from tpu_rl.scripts.cli import cloud as cli_cloud

    real = cli_cloud.make_session

    def make_session(*args, **kwargs):
        session = real(*args, **kwargs)
        for name, value in changes.items():
            setattr(session, name, value)
        return session

    monkeypatch.setattr(cli_cloud, "make_session", make_session)


def interrupt(seconds):
    raise KeyboardInterrupt


def left_running(cloud, monkeypatch, *args: str) -> None:
    """`tpu-rl run RECIPE *args`, interrupted while it waits: its JobSet keeps running, its record says so."""
    with monkeypatch.context() as patch:
        session_hook(patch, sleep=interrupt)
        result = runner.invoke(app, ["run", RECIPE, *args])
    assert result.exit_code == ExitCode.INTERRUPTED
    assert f"stop it with `tpu-rl cancel {' '.join([RECIPE, *args])}`" in error_line(result)  # the same run


def put_actor_checkpoint(client, recipe, step: int) -> str:
    """A train_rl checkpoint of `step` as orbax leaves it (tunix's actor items, no OCDBT under Pathways);
    returns its step directory."""
    from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
    from peers.fixtures import peer_settings, spec_of
    from peers.step_outputs import orbax_checkpoint

    step_dir = f"{ArtifactPaths(spec_of(recipe), peer_settings()).actor_checkpoints}{step}/"
    for url, data in orbax_checkpoint(f"{step_dir}model_params/", ("model_params", "optimizer_state"), ocdbt=False):
        bucket, blob = split_gs_url(url)
        client.bucket(bucket).blob(blob).upload_from_string(data)
    return step_dir


def tpu_selector(manifest: dict) -> dict:
    worker = next(rj for rj in manifest["spec"]["replicatedJobs"] if rj["name"] == "worker")
    return worker["template"]["spec"]["template"]["spec"]["nodeSelector"]


# Three points per tag, as the trainer counts steps: rewards/* and completions/* from 0 (rl_cluster
# global_steps), actor/* from 1 (the trainer's train_steps after the update).
RUN_RL = {
    "rewards/train/mean": [(0, 0.1), (1, 0.4), (2, 1.1)],
    "actor/train/loss": [(1, 0.5), (2, 0.2), (3, 0.3)],
    "actor/train/kl": [(1, 0.0), (2, 0.01), (3, 0.02)],
    "completions/train/mean_length": [(0, 300.0), (1, 260.0), (2, 200.0)],
    # one of MaxText's reward functions, logged by name (tunix reward_manager L214-216): not a summary tag
    "rewards/train/check_numbers": [(0, 0.0), (1, 1.0), (2, 1.0)],
}


def upload_run(client, tmp_path: Path, run: str, scalars: dict) -> str:
    """Write a run's event files and put them where train_rl writes them in the bucket; return that prefix."""
    url = f"gs://{SETTINGS['GCS_BUCKET']}/{get_recipe(RECIPE).model.maxtext_name}/trained/{run}/tensorboard/"
    put_event_files(client, url, scalars, tmp_path / run)
    return url


# The intermediate evaluation, and the pre-training one of a run resumed from checkpoint 20.
MIDDLE = evaluation_line("intermediate", 33, 64, 36, 60, 1.25, step=20, second=40)
RESUMED_PRE = evaluation_line("pre", 33, 64, 36, 60, 1.2, second=45)  # checkpoint 20's accuracy, 51.6%

# Where preflight sends a user who needs more quota, for the peers' project.
CONSOLE = "https://console.cloud.google.com/iam-admin/quotas?project=tpu-rl-test"


def with_quota(google, **metrics) -> None:
    """The region's quotas as regions.get lists them: a few of every project's, plus `metrics`."""
    google.regions[SETTINGS["REGION"]] = {**CPU_QUOTAS, "PREEMPTIBLE_TPU_LITE_PODSLICE_V5": (0, 0), **metrics}


# -- `tpu-rl plan-review` in a clone of two small trees, without a synth of the real stacks -----------------

# A clone for plan-review: at main, a stacks/app.py that synthesizes one empty stack; in the working tree
# (uncommitted), one whose stack holds every setting variable it finds in its environment. The review
# prints the working tree's additions, so a setting that reached a side would be in its output.
SETTING_ENVS = sorted({spec.env for spec in SPECS} | {"TPU_RL_CONFIG"})
_SYNTH = """import json, os, pathlib
out = pathlib.Path(os.environ.get("CDKTF_OUTDIR", "cdktf.out")) / "stacks" / "probe"
out.mkdir(parents=True, exist_ok=True)
seen = {{name: os.environ[name] for name in {names!r} if name in os.environ}}
out.joinpath("cdk.tf.json").write_text(json.dumps({{"resource": {{"probe": {{"side": {body}}}}}}}))
"""
_CLONE_FILES = {
    "stacks/__init__.py": "", "jobs/__init__.py": "render_manifests = render_startup_script = None\n",
    "recipes/__init__.py": "def example_settings():\n    return None\n\ndef all_recipes():\n    return {}\n",
    "recipes/model.py": "", "recipes/recipes.toml": "", "stacks/app.py": _SYNTH.format(names=SETTING_ENVS, body='{}'),
}


def make_review_clone(work: Path) -> None:
    git = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "PATH": "/usr/bin:/bin", "HOME": str(work)}
    for name, text in _CLONE_FILES.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", *_CLONE_FILES], ["commit", "-q", "-m", "probe"]):
        subprocess.run(["git", *args], cwd=work, env=git, check=True, capture_output=True)
    (work / "stacks/app.py").write_text(_SYNTH.format(names=SETTING_ENVS, body='{"settings": seen}'))


def status_blocks(output: str) -> dict[str, list[str]]:
    """Each step's block of the status view: its first line after the step name, then the indented
    lines under it, each stripped."""
    blocks: dict[str, list[str]] = {}
    for line in output.splitlines():
        words = line.split()
        if words[:1] in (["convert"], ["train"], ["export"]):
            blocks[words[0]] = [line.strip().removeprefix(words[0]).strip()]
        elif blocks and line.startswith(" ") and words:
            blocks[list(blocks)[-1]].append(line.strip())
    return blocks
