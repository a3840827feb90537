"""How far a run is, while `tpu-rl run` waits: the step and loss from the trainer's log line, kept between
steps when the log's end holds only rollouts, and the latest mean reward from the run's event files in the
bucket (read at most once a minute); on GKE (fake Kubernetes API) and on the VM (serial console)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from typer.testing import CliRunner

from contracts.tunix_log import rollout_lines, train_step_line
from tpu_rl.jobs.paths import ArtifactPaths
from tpu_rl.jobs.vm import STARTING
from peers.event_files import put_event_files
from peers.fixtures import SETTINGS, deploy_vm, jobset_of, peer_settings, put_step_output, spec_of
from tpu_rl.recipes import get_recipe
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.rundata.progress import RewardReader

RECIPE = "qwen3-v6e32"
VM_RECIPE = "llama31-v6e8"
runner = CliRunner()
# 250 completions: numpy prints one a line, more than the 200 lines `run` reads from the log's end.
ROLLOUT = rollout_lines("completions", [f"<reasoning>{i} + {i} = {2 * i}, so the answer follows from the sum"
                                        f"</reasoning><answer>{2 * i}</answer>" for i in range(250)])


def tensorboard(recipe_name: str) -> str:
    return ArtifactPaths(spec_of(get_recipe(recipe_name)), peer_settings()).tensorboard


def running_lines(output: str, prefix: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(prefix)]


def test_the_step_stays_when_the_log_end_holds_only_rollouts(cloud):
    recipe = get_recipe(RECIPE)
    put_step_output(cloud["gcs"], recipe, "convert")
    steps = f"loading\n{train_step_line(11, 0.5)}\n{train_step_line(12, 0.412)}\n"
    cloud["kube"].plan(jobset_of(RECIPE, "train"), ticks=5, log_reads=["loading\n", steps, steps + ROLLOUT + "\n"],
                       on_success=lambda: put_step_output(cloud["gcs"], recipe, "train"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    lines = running_lines(result.output, "train: step ")
    assert lines and all(line.startswith("train: step 12/50, loss 0.412") for line in lines[1:]), result.output


def test_the_progress_line_shows_the_latest_mean_reward(cloud, tmp_path):
    recipe = get_recipe(RECIPE)
    put_step_output(cloud["gcs"], recipe, "convert")
    put_event_files(cloud["gcs"], tensorboard(RECIPE), {"rewards/train/mean": [(0, 0.12), (11, 0.37)],
                                                        "actor/train/loss": [(12, 0.412)]}, tmp_path)
    cloud["kube"].plan(jobset_of(RECIPE, "train"), ticks=3, logs=f"{train_step_line(12, 0.412)}\n",
                       on_success=lambda: put_step_output(cloud["gcs"], recipe, "train"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    assert "train: running, pods 9/9 scheduled, 9/9 ready" in result.output
    [line] = running_lines(result.output, "train: step ")
    assert line.startswith("train: step 12/50, loss 0.412, reward 0.37, 0:00:"), result.output
    assert line.endswith(" elapsed") and len(line) <= 80  # one step seen: no pace yet, so no time left


class CountingStorage:
    """The emulator's client, counting the listings (one per read of the event files)."""

    def __init__(self, client) -> None:
        self.client, self.listings = client, 0

    def list_blobs(self, *args, **kwargs):
        self.listings += 1
        return self.client.list_blobs(*args, **kwargs)


def test_the_reward_is_read_at_most_once_a_minute_and_a_failed_read_keeps_the_last(settings_env, gcs, tmp_path):
    url = tensorboard(RECIPE)
    put_event_files(gcs, url, {"rewards/train/mean": [(0, 0.1), (1, 0.25)]}, tmp_path / "first")
    storage = CountingStorage(gcs)
    clock = [datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc)]
    reader = RewardReader(lambda: storage, url, lambda: clock[0])
    assert reader.latest() == 0.25 and storage.listings == 1
    # tensorboardX's next flush re-uploads the file with the points since (tensorboardX record_writer.py).
    put_event_files(gcs, url, {"rewards/train/mean": [(0, 0.1), (1, 0.25), (2, 0.5)]}, tmp_path / "flushed")
    clock[0] += timedelta(seconds=59)
    assert reader.latest() == 0.25 and storage.listings == 1  # not read again within the minute
    clock[0] += timedelta(seconds=1)
    assert reader.latest() == 0.5 and storage.listings == 2

    def unreachable():
        raise ConnectionError("no route to the bucket")

    reader.storage = unreachable
    clock[0] += timedelta(seconds=60)
    assert reader.latest() == 0.5


def test_the_vm_shows_step_loss_and_reward_from_the_console(settings_env, gcs, google, tmp_path):
    from vm_helpers import console, finish, progress

    recipe = get_recipe(VM_RECIPE)
    deploy_vm(google, SETTINGS)
    finish(google, gcs, "convert")()
    put_event_files(gcs, tensorboard(VM_RECIPE), {"rewards/train/mean": [(2, 0.37)]}, tmp_path)
    # The guest agent copies each line of the script's output to the console behind its prefix.
    agent = "".join(f"startup-script: {line}\n" for line in (train_step_line(3, 0.5) + "\n" + ROLLOUT).splitlines())
    google.on_serial_read += [console(google, progress("train", STARTING) + "startup-script: loading\n"),
                              console(google, agent), console(google, "startup-script: sampling\n"),
                              finish(google, gcs, "train")]
    result = runner.invoke(app, ["run", VM_RECIPE, "--steps", "train"])
    assert result.exit_code == 0, result.output
    lines = running_lines(result.output, "train: running")
    total = recipe.train_steps
    assert lines == ["train: running, reward 0.37",
                     f"train: running, step 3/{total}, loss 0.5, reward 0.37"], result.output
