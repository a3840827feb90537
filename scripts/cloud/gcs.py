"""What each step must leave in GCS before the next may start, checked against the bucket.

The paths come from tpu_rl.jobs.paths.ArtifactPaths, the same object the manifests are rendered from. A step
whose container was interrupted leaves some objects behind, so a check asks for what the writer puts
down last, not for any object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from google.api_core import exceptions as gexc

from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from tpu_rl.recipes import Settings, UserError
from tpu_rl.recipes.conventions import (HF_CONFIG, HF_SINGLE_WEIGHTS, HF_TOKENIZER_FILES, HF_WEIGHTS_INDEX,
                                 ORBAX_COMMIT_MARKER)
from tpu_rl.recipes.outcome import ApiError
from tpu_rl.scripts.cloud.foreign import describe

# orbax's commit marker, the last object of a checkpoint on gs:// (its source: recipes/conventions.py).

# The files of a Hugging Face export, and the order MaxText writes them in: recipes/conventions.py.


@dataclass(frozen=True)
class Requirement:
    """An object that must exist (`name` under `prefix`), or, with no name, any object under `prefix`."""

    prefix: str  # gs://bucket/dir/
    name: str | None = None
    what: str = ""  # what the object is, when its name does not say

    def describe(self) -> str:
        target = f"{self.prefix}{self.name}" if self.name else f"objects under {self.prefix}"
        return f"{target} ({self.what})" if self.what else target

    def missing(self, storage) -> list[Requirement]:
        bucket, prefix = split_gs_url(self.prefix)
        if self.name is None:
            found = any(True for _ in storage.list_blobs(bucket, prefix=prefix, max_results=1))
        else:
            found = storage.bucket(bucket).blob(prefix + self.name).exists()
        return [] if found else [self]


@dataclass(frozen=True)
class SafetensorsWeights(Requirement):
    """The weights of a Hugging Face export: the index and every shard it names, or the single file."""

    name: str | None = HF_WEIGHTS_INDEX
    what: str = f"or {HF_SINGLE_WEIGHTS}"

    def missing(self, storage) -> list[Requirement]:
        bucket_name, prefix = split_gs_url(self.prefix)
        bucket = storage.bucket(bucket_name)
        index = bucket.blob(prefix + HF_WEIGHTS_INDEX)
        if not index.exists():
            return [] if bucket.blob(prefix + HF_SINGLE_WEIGHTS).exists() else [self]
        try:
            shards = sorted(set(json.loads(index.download_as_bytes())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            return [Requirement(self.prefix, HF_WEIGHTS_INDEX, "with a readable weight_map")]
        present = {blob.name[len(prefix):] for blob in storage.list_blobs(bucket_name, prefix=prefix, delimiter="/")}
        return [Requirement(self.prefix, shard, f"named in {HF_WEIGHTS_INDEX}") for shard in shards
                if shard not in present]


def _orbax_checkpoint(item_dir: str) -> tuple[Requirement, ...]:
    """The item the next step loads, and the commit marker of the step directory that holds it."""
    step_dir = item_dir.rstrip("/").rpartition("/")[0] + "/"
    return Requirement(item_dir), Requirement(step_dir, ORBAX_COMMIT_MARKER, "orbax completion marker")


@dataclass(frozen=True)
class TrainedCheckpoint(Requirement):
    """What training leaves: its newest finished checkpoint, and proof that training finished there.

    The computed step count is an upper bound, not the step train_rl reaches: train_rl's slice of its rows
    counts the long prompts it drops (grain's filter yields None for them), and tunix's trainer saves the step it reached when the data runs out
    (google/tunix @c4ec573d tunix/sft/peft_trainer.py `close`; docs/provenance.md#the-last-step-train_rl-reaches).

    So the output is the newest actor step with orbax's commit marker (latest_checkpoint_step), with its
    model_params; and training finished when that step is the computed last step, or when `finished` (the
    step's JobSet succeeded) or the run's train progress marker (written once train_rl exited 0: by the VM
    startup script, or by `run` when the train JobSet succeeded) says so. A preempted training's
    intermediate checkpoint is therefore never taken for the trained model."""

    paths: ArtifactPaths | None = None
    finished: bool = False

    def missing(self, storage) -> list[Requirement]:
        paths = self.paths
        assert paths is not None
        step = latest_checkpoint_step(storage, paths)
        if step is None:
            return [Requirement(paths.actor_checkpoints, f"<step>/{ORBAX_COMMIT_MARKER}",
                                "no checkpoint step with orbax's commit marker yet")]
        if step == 0:
            # tunix's close() saves step 0 when no batch came at all (`last_saved_step is None`): the model
            # as converted, not a trained one.
            return [Requirement(paths.actor_checkpoints, f"<step>/{ORBAX_COMMIT_MARKER}",
                                "only step 0, the untrained model: no batch reached training (are all prompts "
                                "longer than max_prefill_predict_length?)")]
        params = Requirement(paths.params_at(step))
        missing = params.missing(storage)
        upper = paths.recipe.last_step
        if not missing and step < upper and not self.finished and not exists(storage, paths.progress_marker("train")):
            marker_dir, _, marker = paths.progress_marker("train").rpartition("/")
            missing = [Requirement(f"{marker_dir}/", marker, f"training has checkpoints up to step {step} of at "
                                   f"most {upper} and has not finished: it runs, or was interrupted")]
        return missing


def step_outputs(paths: ArtifactPaths, step: str, finished: bool = False) -> tuple[Requirement, ...]:
    """What `step` must leave; `finished`: the step's JobSet succeeded (train then counts from its newest
    finished checkpoint, whatever its number)."""
    if step == "convert":
        return _orbax_checkpoint(paths.converted_items)
    if step == "train":
        return (TrainedCheckpoint(paths.actor_checkpoints, what="the newest finished training checkpoint",
                                  paths=paths, finished=finished),)
    if step == "export":
        return (Requirement(paths.hf_export, HF_CONFIG),
                *(Requirement(paths.hf_export, name) for name in HF_TOKENIZER_FILES),
                SafetensorsWeights(paths.hf_export))
    raise ValueError(step)


def bucket_location(storage, settings: Settings, within: float | None = None) -> str:
    """GCS_BUCKET's location, lowercase ("" when unknown). A bucket that does not exist is bad input: the
    one line `preflight` prints for it, which every command that reads the bucket stops with first.
    `within`: the first contact's bound in seconds (tpu_rl.scripts.cloud.reach), else the library's retries."""
    if within is None:
        bucket = storage.lookup_bucket(settings.gcs_bucket)
    else:
        bucket = _lookup_within(storage, settings.gcs_bucket, within)
    if bucket is None:
        raise UserError(f"bucket gs://{settings.gcs_bucket} does not exist: deploy the artifacts stack "
                        "(`npx cdktf deploy artifacts`) or fix GCS_BUCKET")
    return (bucket.location or "").lower()


def _lookup_within(storage, name: str, within: float):
    """storage.lookup_bucket, retried (google-cloud-storage's DEFAULT_RETRY) for `within` seconds in all."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    from tpu_rl.scripts.cloud.reach import Unreachable, reaching

    endpoint = storage.api_endpoint
    try:
        with reaching(f"bucket gs://{name}", endpoint, within):
            return storage.lookup_bucket(name, timeout=within, retry=DEFAULT_RETRY.with_timeout(within))
    except gexc.RetryError as error:
        cause = describe(error.cause) if error.cause is not None else "no answer"
        raise Unreachable(f"bucket gs://{name}", endpoint, within, cause, "check the network") from None


def require_source_bucket(storage, settings: Settings, url: str) -> None:
    """Refuse (UserError, exit 2) a gs:// --from location whose bucket does not exist, in preflight's words
    when it is GCS_BUCKET, before anything is listed."""
    bucket, _ = split_gs_url(url)
    if bucket == settings.gcs_bucket:
        bucket_location(storage, settings)
    elif storage.lookup_bucket(bucket) is None:
        raise UserError(f"--from {url}: bucket gs://{bucket} does not exist: fix the gs:// URL (the bucket "
                        "of the run's tensorboard/ directory)")


def bucket_region_problem(location: str, settings: Settings) -> str | None:
    """Why a bucket in `location` must not take a run's checkpoints, or None."""
    if location == settings.region:
        return None
    return (f"bucket gs://{settings.gcs_bucket} is in {location or 'an unknown location'}, not REGION "
            f"{settings.region}: checkpoints would cross regions; use a bucket in {settings.region}")


def require_bucket(storage, settings: Settings, *, writes: bool = False, within: float | None = None) -> None:
    """Refuse (UserError, exit 2) as `preflight` does when GCS_BUCKET does not exist, and, for a command
    that writes checkpoints to it (`run`), when it is in another region. `within`: bucket_location's."""
    location = bucket_location(storage, settings, within)
    problem = bucket_region_problem(location, settings) if writes else None
    if problem:
        raise UserError(problem)


def missing_outputs(storage, paths: ArtifactPaths, step: str, finished: bool = False) -> list[Requirement]:
    """What the bucket lacks of the output of `step`, one entry per missing piece (empty: verified)."""
    try:
        return [piece for req in step_outputs(paths, step, finished) for piece in req.missing(storage)]
    except gexc.NotFound:  # no bucket: nothing is there
        return list(step_outputs(paths, step, finished))
    except gexc.GoogleAPIError as error:
        raise ApiError(f"checking {step} output in gs://{paths.bucket} failed: {error}") from None


def finished_checkpoint_steps(storage, paths: ArtifactPaths) -> list[int]:
    """The steps train_rl finished saving, newest first: each `actor/<step>/` whose step directory holds
    orbax's commit marker (the last object of a checkpoint, see ORBAX_COMMIT_MARKER). A step directory
    without it is a save that was cut off."""
    bucket, prefix = split_gs_url(paths.actor_checkpoints)
    try:
        listing = storage.list_blobs(bucket, prefix=prefix, delimiter="/")
        for _ in listing:  # the prefixes fill in as the pages are read
            pass
        steps = sorted((int(name[len(prefix):].rstrip("/")) for name in listing.prefixes
                        if name[len(prefix):].rstrip("/").isdigit()), reverse=True)
        return [step for step in steps if storage.bucket(bucket).blob(f"{prefix}{step}/{ORBAX_COMMIT_MARKER}").exists()]
    except gexc.NotFound:
        return []
    except gexc.GoogleAPIError as error:
        raise ApiError(f"reading the checkpoints in {paths.actor_checkpoints} failed: {error}") from None


def latest_checkpoint_step(storage, paths: ArtifactPaths) -> int | None:
    """The newest finished checkpoint step (finished_checkpoint_steps); None when there is none yet."""
    steps = finished_checkpoint_steps(storage, paths)
    return steps[0] if steps else None


def delete_prefix(storage, prefix_url: str) -> int:
    """Delete every object under the gs:// prefix (a scratch run's directory); how many there were."""
    bucket_name, prefix = split_gs_url(prefix_url)
    if not prefix.endswith("/") or prefix == "/":
        raise ValueError(f"refusing to delete {prefix_url}: not a directory prefix")
    try:
        blobs = list(storage.list_blobs(bucket_name, prefix=prefix))
        for blob in blobs:
            try:
                blob.delete()
            except gexc.NotFound:
                pass  # gone meanwhile: what was wanted
    except gexc.GoogleAPIError as error:
        raise ApiError(f"deleting {prefix_url} failed: {error}") from None
    return len(blobs)


def read_json(storage, url: str) -> dict | None:
    """The JSON object at a gs:// URL (a run record), or None when there is none."""
    try:
        text = read_text(storage, url)
        return None if text is None else json.loads(text)
    except ValueError:  # not UTF-8, or not JSON
        raise ApiError(f"{url} is not JSON: delete it or fix it by hand", transient=False) from None


def write_json(storage, url: str, data: dict) -> None:
    write_text(storage, url, json.dumps(data, indent=2) + "\n", content_type="application/json")


def write_text(storage, url: str, text: str, content_type: str = "text/plain") -> None:
    bucket, name = split_gs_url(url)
    try:
        storage.bucket(bucket).blob(name).upload_from_string(text, content_type=content_type)
    except gexc.GoogleAPIError as error:
        raise ApiError(f"writing {url} failed: {error}") from None


def read_text(storage, url: str) -> str | None:
    """The text of the object at a gs:// URL (a marker), or None when there is none."""
    bucket, name = split_gs_url(url)
    try:
        return storage.bucket(bucket).blob(name).download_as_text()
    except gexc.NotFound:
        return None
    except gexc.GoogleAPIError as error:
        raise ApiError(f"reading {url} failed: {error}") from None


def exists(storage, url: str) -> bool:
    """Whether the object at a gs:// URL exists (a missing bucket: no)."""
    bucket, name = split_gs_url(url)
    try:
        return storage.bucket(bucket).blob(name).exists()
    except gexc.NotFound:
        return False
    except gexc.GoogleAPIError as error:
        raise ApiError(f"checking {url} failed: {error}") from None


def object_names(storage, prefix_url: str) -> list[str]:
    """Names of the objects under a prefix, relative to it (progress markers)."""
    bucket, prefix = split_gs_url(prefix_url)
    return [blob.name[len(prefix):] for blob in storage.list_blobs(bucket, prefix=prefix)]
