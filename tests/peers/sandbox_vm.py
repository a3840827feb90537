"""The sandbox's TPU VM (peers/sandbox.py), for the VM recipe: deployed as its stack creates it, the recipe's
startup script in its metadata (peers/fixtures.py deploy_vm). The VM boots when a command first reads it
(a real one boots at `cdktf deploy`; here a run would be over before anyone looked), and its boot runs the
real startup script under bash with the stand-ins the VM tests use (peers/vm_guest.py Guest: the bucket a
local directory, gcloud, MaxText's python3 taking STEP_SECONDS a step). While it runs, every SYNC_SECONDS:
a cancel marker `tpu-rl cancel` wrote is copied to the script's bucket, what the script wrote is copied to
the GCS emulator (each finished step's output as MaxText would leave it, peers/step_outputs.py, before its
progress marker), and its output goes onto the serial console as the guest agent writes it. The script's
own power-off, once every output is verified, stops the instance (TERMINATED)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from peers.fixtures import TOKEN, deploy_vm, power_off_vm
from peers.vm_guest import Guest
from tpu_rl.jobs.vm_outputs import STOP_COMMAND

STEP_SECONDS = 4  # each step's stand-in MaxText: long enough for `status` and `cancel` to catch it running
SYNC_SECONDS = 0.3
CANCEL_POLL_SECONDS = 1  # how often the script looks for the cancel marker (its knob, jobs/vm.py)
INSTANCE_ID = 7351236548216840001  # the first VM's id, as the metadata server answers it (vm_guest.FAKE_CURL)
BOOT_SECONDS = 120  # a boot runs the three steps in seconds here; one that outlasts this is killed


class SandboxVm:
    """The VM of `recipe_name` for the settings in `env`; its guest's files under `root`."""

    def __init__(self, google, gcs_client, env: dict[str, str], recipe_name: str, root: Path) -> None:
        from tpu_rl.jobs.paths import ArtifactPaths
        from tpu_rl.recipes import conventions, get_recipe, load_settings
        from tpu_rl.recipes.runs.spec import RunSpec

        settings = load_settings(env=env)
        self.google, self.gcs_client = google, gcs_client
        self.vm = deploy_vm(google, env, recipe_name=recipe_name)
        self.spec = RunSpec.of_catalog(settings.recipe(get_recipe(recipe_name)))
        self.paths = ArtifactPaths(self.spec, settings)
        self.guest = Guest(root, google.metadata[self.vm]["startup-script"], TOKEN,
                           installed=self.spec.recipe.maxtext_version, actor_checkpoints=self.paths.actor_checkpoints)
        self.uploaded: dict[Path, tuple[int, int]] = {}  # each local object's (mtime, size) when last copied
        self.env = env
        self.state = gcs_client.bucket(env["TF_STATE_BUCKET"]).blob(conventions.remote_state_object(recipe_name))
        self.deploying = threading.Lock()
        self.deploys = 0
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.process: subprocess.Popen | None = None
        google.on_read = self.read

    def read(self, vm: tuple) -> None:
        """A command reads the VM or its console: the VM is there while its stack's state is (`cdktf destroy`
        deletes it, a later `cdktf deploy` makes a new one, booted anew); the first read of a VM boots it."""
        if vm != self.vm:
            return
        with self.deploying:
            deployed = self.state.exists()
            if not deployed and vm in self.google.instances:
                self.stop()
                self.google.instances.pop(vm)
                self.google.serial.pop(vm, None)
            elif deployed and vm not in self.google.instances:
                deploy_vm(self.google, self.env, recipe_name=self.spec.recipe.name)
                self.google.boots.pop(vm, None)
                self.guest.boots, self.deploys = [], self.deploys + 1  # a new VM: its own console and id
                self.stopping.clear()
                self.thread = None
            if deployed and self.thread is None:
                self.thread = threading.Thread(target=self._boot, name="sandbox-vm", daemon=True)
                self.thread.start()

    def _boot(self) -> None:
        command, env = self.guest.command(FAKE_STEP_SECONDS=str(STEP_SECONDS),
                                          TPU_RL_CANCEL_POLL_SECONDS=str(CANCEL_POLL_SECONDS),
                                          FAKE_INSTANCE_ID=str(INSTANCE_ID + self.deploys))
        powered_off = len(self.guest.power_offs)
        output = self.guest.root / "console.out"
        with open(output, "w") as sink:
            self.process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + BOOT_SECONDS
        while self.process.poll() is None:
            if self.stopping.is_set() or time.monotonic() > deadline:
                self._kill()
                break
            self._sync(output.read_text(errors="replace"), running=True)
            time.sleep(SYNC_SECONDS)
        self.process.wait(timeout=30)
        self.guest.boots.append((output.read_text(errors="replace"), self.process.returncode))
        self._sync("", running=False)
        if STOP_COMMAND in self.guest.power_offs[powered_off:]:  # the script stopped the VM: every output verified
            power_off_vm(self.google, self.vm)

    def _sync(self, output: str, running: bool) -> None:
        from peers.step_outputs import put_step_output
        from tpu_rl.jobs.paths import split_gs_url

        bucket, name = split_gs_url(self.paths.cancel_marker)
        local_cancel, cancel = self.guest.object(self.paths.cancel_marker), self.gcs_client.bucket(bucket).blob(name)
        if not local_cancel.exists() and cancel.exists():  # as `tpu-rl cancel` wrote it, not copied back
            local_cancel.parent.mkdir(parents=True, exist_ok=True)
            local_cancel.write_bytes(cancel.download_as_bytes())
            self.uploaded[local_cancel] = (local_cancel.stat().st_mtime_ns, local_cancel.stat().st_size)
        changed = [path for path in sorted(self.guest.gcs.rglob("*")) if path.is_file()
                   and self.uploaded.get(path) != (path.stat().st_mtime_ns, path.stat().st_size)]
        markers = {self.guest.object(self.paths.progress_marker(step)): step for step in ("convert", "train", "export")}
        for path in sorted(changed, key=lambda path: path in markers):  # a step's marker after its output
            if path in markers and path not in self.uploaded:
                put_step_output(self.gcs_client, self.spec, markers[path])
            bucket, _, name = str(path.relative_to(self.guest.gcs)).partition("/")
            stat = path.stat()
            self.gcs_client.bucket(bucket).blob(name).upload_from_string(path.read_bytes())
            self.uploaded[path] = (stat.st_mtime_ns, stat.st_size)
        boots = [*self.guest.boots, (output, 0)] if running else None
        self.google.serial[self.vm] = self.guest.console(boots=boots, running=running)

    def _kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the script, its watchers and the stand-ins' sleeps
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        """Ends the boot that runs, if one does (its script killed)."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=SYNC_SECONDS + 60)
