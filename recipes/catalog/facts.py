"""The facts recipes.toml records about what recipes run on: TPU generations (topologies, machine types,
flex-start, quota metrics), machine sizes, MaxText releases with their Pathways images, and source patches."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tpu_rl.recipes.catalog.strict import Strict
from tpu_rl.recipes.vm_script import BASH_VARIABLES, SCRIPT_ASSIGNED, SCRIPT_READONLY

# A name bash can assign (bash manual, Definitions: `name`); `export` refuses any other.
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FlexStartFacts(Strict):
    """Where and how GKE offers a generation through flex-start (Dynamic Workload Scheduler)."""

    zones: tuple[str, ...]
    min_gke_version: str  # the cluster version from which GKE creates flex-start TPU node pools
    max_run_hours: int = Field(ge=1)  # the longest a flex-start node may run (maxRunDurationSeconds)
    source: str


class QuotaMetrics(Strict):
    """The Compute Engine regional quotas a generation's TPU hosts draw on (regions.get `quotas[].metric`,
    in chips): preemptible for spot and flex-start, on-demand for on-demand. `confirmed` is false while the
    names come from material other than Google's own API reference; preflight then treats a metric the
    region does not list as unreadable (a warning), not as zero."""

    preemptible: str
    on_demand: str
    confirmed: bool
    source: str


class TpuGeneration(Strict):
    """Facts about one TPU generation: which topologies and machine types exist."""

    topologies: tuple[str, ...]
    gke_accelerator: str
    pathways_instance_prefix: str
    multi_host_machine_type: str
    machine_types: dict[str, int]  # machine type -> chips per VM
    flex_start: FlexStartFacts | None = None  # None: not offered through flex-start
    quota: QuotaMetrics | None = None  # None: preflight knows no quota metric for it
    # A chip's HBM as tpu-inference counts it under Pathways, where vLLM's share is a part of it.
    vllm_hbm_gib: int = Field(ge=1)


class MachineSize(Strict):
    """vCPUs, memory and boot disk type of one machine type; Kueue quotas are derived from these."""

    vcpus: int = Field(ge=1)
    memory_gib: int = Field(ge=1)
    disk_type: str  # boot disk type the machine series accepts (N4, C4D and ct6e take only Hyperdisk)
    cpu_quota: str | None = None  # the regional quota metric its vCPUs count against (a CPU pool's machine)


class MaxTextRelease(Strict):
    image: str
    pip: str
    python: str
    # The JAX version inside `image`, and the Pathways server/proxy tag built for that client JAX. Google
    # names the tags jax-<version> or <date>-jax_<version>; the IFRT proxy refuses clients outside a
    # narrow window, so the tag must name exactly `jax`.
    jax: str
    pathways_tag: str
    # The config defaults of the keys train_rl multiplies into its number of steps (configs/post_train/rl.yml
    # of the release), for the recipes that do not override them.
    train_step_defaults: dict[str, float]
    # The rl.yml defaults of the keys that size the held-out evaluation (recipes/runs/evaluation.py).
    eval_defaults: dict[str, float]
    # rl.yml's training data: dataset_name, subset, train_split, hf_train_files (recipes/runs/datasets.py);
    # the key that names the subset in this release, and whether train_rl drops a last partial batch.
    data_defaults: dict[str, str]
    subset_key: str
    last_batch_dropped: bool
    # Whether to_huggingface takes --hf_model_path, the repo whose tokenizer the export bundles; without it
    # the export bundles the tokenizer of MaxText's default repo for the model name.
    export_takes_hf_model_path: bool

    @field_validator("jax")
    @classmethod
    def _release_number(cls, jax: str) -> str:
        if not re.fullmatch(r"\d+\.\d+\.\d+", jax):
            raise ValueError(f"'{jax}' is not a JAX release number like 0.11.0")
        return jax

    @model_validator(mode="after")
    def _tag_serves_this_jax(self) -> "MaxTextRelease":
        names = re.fullmatch(r"(?:jax-|\d{8}(?:_RC\d+)?-jax_)(\d+\.\d+\.\d+)", self.pathways_tag)
        if names is None:
            raise ValueError(f"pathways_tag '{self.pathways_tag}' is not a Pathways tag like jax-0.11.0 or "
                             "20260911-jax_0.11.0 (never latest)")
        if names.group(1) != self.jax:
            raise ValueError(f"pathways_tag '{self.pathways_tag}' serves jax {names.group(1)}, but the image has "
                             f"jax {self.jax}: pick a tag built for jax {self.jax}")
        return self

    @field_validator("image")
    @classmethod
    def _pinned(cls, image: str) -> str:
        if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
            raise ValueError("must be pinned to a tag other than :latest")
        return image


class PathwaysRepositories(Strict):
    """Where the Pathways images live; the tag comes from the MaxText release (its JAX version)."""

    server_image: str
    proxy_image: str


class PathwaysImages(BaseModel):
    """The Pathways server and proxy images for one MaxText release, both with the release's tag."""

    model_config = ConfigDict(frozen=True)

    server_image: str
    proxy_image: str
    tag: str
    jax: str  # the client JAX the tag serves, which the train head checks against the image's

    @property
    def server(self) -> str:
        return f"{self.server_image}:{self.tag}"

    @property
    def proxy(self) -> str:
        return f"{self.proxy_image}:{self.tag}"


def exportable_on_vm(env: dict[str, str], field: str) -> dict[str, str]:
    """A TPU VM's startup script exports a recipe's environment (rl.env, a patch's setting_env) into its own
    shell (recipes/vm_script.py): a name that is none ends the boot, one of its own or of bash's changes it."""
    exports = f"the TPU VM's startup script exports {field} into its own shell"
    for name in env:
        if not SHELL_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a shell variable name (letters, digits and _, not first a digit), and "
                             f"{exports}: its boot would stop at 'export: not a valid identifier'; rename it")
        if name in SCRIPT_READONLY:
            raise ValueError(f"{name} is a readonly variable of the TPU VM's startup script, which exports "
                             f"{field} into its own shell: its boot would stop at '{name}: readonly variable'; "
                             "use another name, or rename the script's (recipes/vm_script.py)")
        if name in BASH_VARIABLES:
            raise ValueError(f"{name} is a variable bash itself reads or sets (bash manual, Shell Variables), and "
                             f"{exports}: its boot would run with it changed; use another name")
        if name in SCRIPT_ASSIGNED:
            raise ValueError(f"{name} is a variable the TPU VM's startup script sets itself, and it exports {field} "
                             "into its own shell: the export would replace the script's own value; use another "
                             "name, or rename the script's (recipes/vm_script.py)")
    return env


class SourcePatch(Strict):
    """A named edit of installed source that a seed applies before training."""

    name: str = ""
    description: str
    module: str | None = None  # patch the file of this importable module ...
    path: str | None = None  # ... or this absolute path inside the container
    regex: bool = False
    replacements: tuple[tuple[str, str], ...]
    maxtext_versions: tuple[str, ...]
    setting_from: str | None = None
    setting_env: dict[str, str] = Field(default_factory=dict)

    @field_validator("setting_env")
    @classmethod
    def _exportable(cls, env: dict[str, str]) -> dict[str, str]:
        return exportable_on_vm(env, "setting_env")

    @model_validator(mode="after")
    def _one_target(self) -> "SourcePatch":
        if (self.module is None) == (self.path is None):
            raise ValueError("give exactly one of module or path")
        return self
