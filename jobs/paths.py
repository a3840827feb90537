"""Where each step reads and writes, derived once from a run (recipes/runs/spec.py RunSpec) + settings.

Training loads exactly what convert wrote and export reads the step training finished last (read from
the bucket by `run`, see export_step); the CLI checks the same paths. Nothing else builds a gs:// path by hand.

Per model (`gs://BUCKET/<model>/`): one conversion per conversion identity under max-text-format/, shared
by every run that needs it; per run (recipes/runs/identity.py), train_rl's run directory trained/<run>/ (checkpoints,
tensorboard, and our run.json) and the export hf-trained/<run>/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tpu_rl.recipes import Recipe, Settings, Step
from tpu_rl.recipes.runs.identity import conversion_directory
from tpu_rl.recipes.runs.spec import RunSpec, run_name

RUN_RECORD = "run.json"


@dataclass(frozen=True)
class ArtifactPaths:
    spec: RunSpec
    settings: Settings
    # The checkpoint step export converts: the newest finished one, which `run` reads from the bucket once
    # training ended (scripts/cloud/gcs.py TrainedCheckpoint says why it can be below the computed step).
    # None: the computed last step, an upper bound (what `tpu-rl render` shows).
    export_step: int | None = None

    @property
    def recipe(self) -> Recipe:
        return self.spec.recipe

    @property
    def bucket(self) -> str:
        return self.settings.gcs_bucket

    @property
    def model_root(self) -> str:
        return f"{self.settings.bucket_url}/{self.recipe.model.maxtext_name}/"

    @property
    def converted(self) -> str:
        """base_output_directory of to_maxtext: one directory per conversion identity."""
        return f"{self.model_root}max-text-format/{conversion_directory(self.recipe)}/"

    @property
    def converted_items(self) -> str:
        """What to_maxtext writes under its output directory, and what train_rl loads."""
        return f"{self.converted}0/items/"

    @property
    def train_loads(self) -> str:
        """train_rl's load_parameters_path: the conversion, or the checkpoint params `tpu-rl eval` names."""
        return self.spec.load_parameters or self.converted_items

    @property
    def trained(self) -> str:
        """base_output_directory of train_rl."""
        return f"{self.model_root}trained/"

    @property
    def run_name(self) -> str:
        return run_name(self.spec)

    @property
    def run_root(self) -> str:
        """train_rl's run directory: os.path.join(base_output_directory, run_name) (research §4)."""
        return f"{self.trained}{self.run_name}/"

    @property
    def run_record(self) -> str:
        """The run's record (scripts/pipeline/record.py): its configuration, versions and step outcomes."""
        return f"{self.run_root}{RUN_RECORD}"

    @property
    def tensorboard(self) -> str:
        """MaxText's tensorboard_dir: os.path.join(base_output_directory, run_name, "tensorboard", "")
        (types.py: RLConfig in 0.2.4, MaxTextConfig in 0.2.3)."""
        return f"{self.run_root}tensorboard/"

    @property
    def actor_checkpoints(self) -> str:
        return f"{self.run_root}checkpoints/actor/"

    def params_at(self, step: int) -> str:
        """The model parameters of training checkpoint `step`."""
        return f"{self.actor_checkpoints}{step}/model_params/"

    @property
    def final_params(self) -> str:
        """What export converts: the parameters at export_step, or else at the computed last step."""
        return self.params_at(self.recipe.last_step if self.export_step is None else self.export_step)

    @property
    def hf_export(self) -> str:
        return f"{self.model_root}hf-trained/{self.run_name}/"

    @property
    def pathways_scratch(self) -> str:
        return f"{self.settings.bucket_url}/pathways/"

    def progress_marker(self, step: Step) -> str:
        """The object the VM startup script writes once a step succeeded (and `run` on GKE for train, once
        its JobSet succeeded: training finished, whatever step it reached). Convert's sits with the
        conversion, so a run that shares it does not convert again; train's and export's with the run."""
        return self.converted + "progress/convert.done" if step == "convert" else self.run_marker(self.run_name, step)

    def run_marker(self, run: str, step: Step | Literal["<step>"]) -> str:  # "<step>": a hint's pattern
        """Train's or export's progress marker of any run of the recipe (`tpu-rl runs` reads every run's)."""
        return f"{self.trained}{run}/progress/{step}.done"

    def run_failure(self, run: str) -> str:
        """vm_failure of any run of the recipe."""
        return f"{self.trained}{run}/progress/failed"

    @property
    def cancel_marker(self) -> str:
        """The object `tpu-rl cancel` writes for a VM recipe's run: its startup script runs no step while it
        exists and stops the running one when it appears (jobs/vm.py). Beside the run's progress markers."""
        return f"{self.run_root}progress/cancel.requested"

    @property
    def vm_attempt(self) -> str:
        """The VM startup script's current attempt (one per boot) and the phase it is in: install, token,
        a step, done (jobs/vm.py writes it, scripts/pipeline/vm/state.py reads it)."""
        return f"{self.run_root}progress/attempt"

    @property
    def vm_failure(self) -> str:
        """Written by the VM startup script when a phase fails: its attempt, phase, exit code and log tail."""
        return self.run_failure(self.run_name)

    @property
    def vm_heartbeat(self) -> str:
        """Rewritten by the VM startup script every tpu_rl.jobs.vm.HEARTBEAT_SECONDS while it runs (its attempt and the
        time): when it goes stale on a running VM, the script ended without a word (scripts/pipeline/vm/run.py)."""
        return f"{self.run_root}progress/heartbeat"

    @property
    def vm_stop(self) -> str:
        """Written by the VM startup script once every output of the run is verified, just before the VM powers
        itself off (jobs/vm_outputs.py): its attempt and the time."""
        return f"{self.run_root}progress/stopped"

    def step_log(self, step: Step) -> str:
        """A VM step's whole log, uploaded when the step ends (done or failed); the console keeps only its
        last 1 MB."""
        return f"{self.run_root}progress/logs/{step}.log"


def split_gs_url(url: str) -> tuple[str, str]:
    """gs://bucket/a/b/ -> ("bucket", "a/b/")."""
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    return bucket, prefix
