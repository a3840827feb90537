"""Files a run brings into the trainer: reward functions (`--rewards FILE.py:fn1,fn2`) and a dataset
processor (`--data-processor FILE.py`), and the MaxText settings that point train_rl at them.

Where the trainer reads them: a ConfigMap of the run, mounted read-only in the train head's main container
at USER_FILES_DIR. Not staged in the bucket: MaxText's utils_rl.load_custom_callable (0.2.3 and 0.2.4)
refuses a path that is not a local file (`os.path.isfile`), so a gs:// copy would need a download step in
the container command, while a mounted ConfigMap is the file itself (a ConfigMap holds up to 1 MiB, far
more than a Python file). The run record keeps a copy in the bucket beside the run's outputs.

Settings (configs/types.py of the wheels): `reward_functions_path` and `reward_functions` from 0.2.4
(RLReward; train_rl.build_reward_fns replaces the built-in reward functions with them);
`dataset_processor_path` in 0.2.3 and 0.2.4 (train_rl.prepare_datasets loads its `process_data`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tpu_rl.recipes.catalog.recipe import Recipe
from tpu_rl.recipes.errors import UserError
from tpu_rl.recipes.user_text import read_text_file

USER_FILES_DIR = "/etc/tpu-rl/user"
USER_FILES_VOLUME = "tpu-rl-user-files"
Kind = Literal["rewards", "data-processor"]
# The first MaxText release with each setting, and the settings (key list: recipes/runs/maxtext_keys/<v>.txt).
FIRST_RELEASE = {"rewards": "0.2.4", "data-processor": "0.2.3"}
SETTING = {"rewards": "reward_functions_path", "data-processor": "dataset_processor_path"}
# What the API server accepts in a ConfigMap, checked before any API call: 1 MiB of keys and values, keys
# as kubernetes/apimachinery pkg/util/validation/validation.go IsConfigMapKey (docs/provenance.md#configmap-limits).
CONFIGMAP_MAX_BYTES = 1024 * 1024
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}\Z")
_CONFIGMAP_BOUND = "the 1 MiB a ConfigMap holds (the trainer reads it from one)"
_SMALLER = "keep the file under 1 MiB, e.g. load large data from the bucket"


@dataclass(frozen=True)
class UserFile:
    kind: Kind
    name: str  # the file name in the ConfigMap and under USER_FILES_DIR
    content: str
    functions: tuple[str, ...] = ()
    source: str = ""  # the path as the option gave it (for the hints that repeat the option)
    unchecked: str = ""  # why check-rewards could not run it here (run --unchecked-imports), else ""

    @property
    def option(self) -> str:
        """The option's value again: FILE.py:fn1,fn2 for --rewards, FILE.py for --data-processor."""
        path = self.source or self.name
        return f"{path}:{','.join(self.functions)}" if self.functions else path

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()

    @property
    def mounted_path(self) -> str:
        return f"{USER_FILES_DIR}/{self.name}"

    def identity(self) -> dict:
        return {"kind": self.kind, "name": self.name, "sha256": self.sha256, "functions": list(self.functions)}


def configmap_name(run: str) -> str:
    return f"{run}-user-files"


def _release_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def read_user_files(recipe: Recipe | None, data_processor: Path | None = None,
                    rewards: tuple[Path, tuple[str, ...]] | None = None) -> tuple[UserFile, ...]:
    """The --data-processor and --rewards files as a run mounts them, refused as a run refuses them: the
    one rule that `run` and `check-rewards` share. `recipe` None: no recipe named (`check-rewards` alone),
    so only the files' own rules apply."""
    files = []
    if data_processor is not None:
        files.append(read_user_file(recipe, "data-processor", data_processor))
    if rewards is not None:
        files.append(read_user_file(recipe, "rewards", *rewards))
    check_together(files)
    return tuple(files)


def _check_recipe_takes(recipe: Recipe, kind: Kind) -> None:
    option = f"--{kind}"
    if kind not in recipe.platform_facts.user_file_kinds:
        raise UserError(f"{option} applies to GKE recipes: recipe '{recipe.name}' runs on a TPU VM whose startup "
                        "script trains the recipe as recipes.toml defines it (MaxText "
                        f"{FIRST_RELEASE[kind]} or later on GKE has {SETTING[kind]})")
    if _release_tuple(recipe.maxtext_version) < _release_tuple(FIRST_RELEASE[kind]):
        raise UserError(f"{option} needs MaxText {FIRST_RELEASE[kind]} or later ({SETTING[kind]}); recipe "
                        f"'{recipe.name}' pins {recipe.maxtext_version}")


def read_user_file(recipe: Recipe | None, kind: Kind, path: Path, functions: tuple[str, ...] = ()) -> UserFile:
    option = f"--{kind}"
    if recipe is not None:
        _check_recipe_takes(recipe, kind)
    if not CONFIGMAP_KEY.match(path.name) or path.name in (".", "..") or path.name.startswith(".."):
        raise UserError(f"{option} {path}: the name '{path.name}' is not a ConfigMap key, which the trainer "
                        "reads it from: rename it to letters, digits, '-', '_' and '.' only")
    content = read_text_file(path, option, "pass a UTF-8 Python file", CONFIGMAP_MAX_BYTES, _CONFIGMAP_BOUND,
                             _SMALLER)
    size = len(path.name.encode()) + len(content.encode())
    if size > CONFIGMAP_MAX_BYTES:
        raise UserError(f"{option} {path} has {size} bytes with its name, over {_CONFIGMAP_BOUND}: {_SMALLER}")
    return UserFile(kind, path.name, content, functions, str(path))


def check_together(files: tuple[UserFile, ...] | list[UserFile]) -> None:
    """The files share one ConfigMap: distinct keys, and 1 MiB in all."""
    if len({file.name for file in files}) < len(files):
        raise UserError("--rewards and --data-processor name files with the same name: rename one")
    size = sum(len(file.name.encode()) + len(file.content.encode()) for file in files)
    if size > CONFIGMAP_MAX_BYTES:
        raise UserError(f"--rewards and --data-processor: {size} bytes together, over the 1 MiB their ConfigMap "
                        "holds: make them smaller")
