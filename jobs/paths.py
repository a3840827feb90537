"""Where each step reads and writes, derived once from recipe + settings.

Training loads exactly what convert wrote and export reads exactly the step training writes last;
the CLI checks the same paths. Nothing else builds a gs:// path by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from recipes import Recipe, Settings

RUN_NAME = "rl"


@dataclass(frozen=True)
class ArtifactPaths:
    recipe: Recipe
    settings: Settings

    @property
    def bucket(self) -> str:
        return self.settings.gcs_bucket

    @property
    def model_root(self) -> str:
        return f"{self.settings.bucket_url}/{self.recipe.model.maxtext_name}/"

    @property
    def converted(self) -> str:
        """base_output_directory of to_maxtext."""
        return f"{self.model_root}max-text-format/"

    @property
    def converted_items(self) -> str:
        """What to_maxtext writes under its output directory, and what train_rl loads."""
        return f"{self.converted}0/items/"

    @property
    def trained(self) -> str:
        """base_output_directory of train_rl."""
        return f"{self.model_root}trained/"

    @property
    def run_name(self) -> str:
        return RUN_NAME

    @property
    def actor_checkpoints(self) -> str:
        return f"{self.trained}{self.run_name}/checkpoints/actor/"

    @property
    def final_params(self) -> str:
        """The last step train_rl saves, which export converts."""
        return f"{self.actor_checkpoints}{self.recipe.last_step}/model_params/"

    @property
    def hf_export(self) -> str:
        return f"{self.model_root}hf-trained/"

    @property
    def pathways_scratch(self) -> str:
        return f"{self.settings.bucket_url}/pathways/"

    @property
    def progress(self) -> str:
        """Progress markers of the VM startup script, one object per finished step."""
        return f"{self.model_root}progress/"


def split_gs_url(url: str) -> tuple[str, str]:
    """gs://bucket/a/b/ -> ("bucket", "a/b/")."""
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    return bucket, prefix
