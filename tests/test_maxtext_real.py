"""Each recipe's own convert, train and export commands run in MaxText's real code, on a CPU, with tiny models.

The other MaxText tests read the wheels (key lists, flags) and our fixtures of the layouts; this one runs
the code. Per recipe, in the venv of its pinned release (`make install` builds .venv-maxtext-<version>):
the commands `tpu-rl render` writes, changed only where a CPU needs it (tests/maxtext_cpu/chain.py), run
to_maxtext, then the train probe (train_rl's own config parsing and model loading on the recipe's device
count of fake CPU devices and its parallelism, then the actor saved as tunix's trainer saves it), then
to_huggingface, with orbax's commit-file atomicity (its mode for gs://). Then:

- the package's own output checks (scripts/cloud/gcs.py) accept what the real code wrote, uploaded to the
  GCS emulator with the same object names, and refuse a copy with a completion marker removed;
- transformers loads the export with no missing or unexpected keys, and its logits equal the original's;
- the export's vision step also runs on an export in shards, as the real 26B one is (the tiny export fits
  one model.safetensors, so the chain runs the script's other branch only).

What this cannot show (docs/development.md): train_rl with vLLM on TPU, Pathways, a real bucket.
Each step prints its time and peak memory (stderr, shown with -s or on failure).
"""

from __future__ import annotations

import json
import re
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tpu_rl import jobs
from tpu_rl.jobs.export import VISION_SHARD, carry_vision_script
from tpu_rl.jobs.maxtext import MaxTextCommand, maxtext_commands
from tpu_rl.jobs.paths import ArtifactPaths, split_gs_url
from tpu_rl.jobs.vm import EXPORT_STEP_VAR
from maxtext_cpu.chain import REPO, Chain, StepRun, in_venv, last_json, need_venv, tiny_model
from maxtext_cpu.run import REFUSED_BEGIN, REFUSED_END
from peers.fixtures import peer_settings, spec_of
from tpu_rl.recipes import Recipe, all_recipes, get_recipe
from tpu_rl.scripts.cloud.gcs import ORBAX_COMMIT_MARKER, missing_outputs

RECIPES = list(all_recipes())
# The steps of two recipes run at once: each is one CPU-bound process, and pytest itself runs serially.
WORKERS = 2


def _recipe(name: str) -> Recipe:
    settings = peer_settings()
    return settings.recipe(get_recipe(name))


@dataclass
class Outcome:
    chain: Chain
    steps: dict[str, StepRun] = field(default_factory=dict)
    reload: dict = field(default_factory=dict)
    error: str = ""

    def step(self, name: str) -> StepRun:
        if name not in self.steps:
            pytest.fail(f"{self.chain.recipe.name}: {name} did not run: {self.error}")
        return self.steps[name]


def _run_chain(recipe: Recipe, root: Path, misspell: bool = False) -> Outcome:
    """The recipe's steps; with `misspell`, its convert process first runs the conversion with the flag
    --lazy_load_tensors misspelt (tests/maxtext_cpu/run.py refused_attempt), in the same process, so
    the release's imports are paid once."""
    chain = Chain(recipe, ArtifactPaths(spec_of(recipe), peer_settings()), root, tiny_model(recipe))
    outcome = Outcome(chain)
    for step in ("convert", "train", "export"):
        refused = _misspelt(chain) if misspell and step == "convert" else None
        run = chain.run(step, refused)
        outcome.steps[step] = run
        if run.returncode != 0:
            outcome.error = f"{step} exited {run.returncode}:\n{run.log[-4000:]}"
            return outcome
    script = chain.after_export()
    if script:
        run = chain.run_script("carry-vision", script)
        outcome.steps[run.step] = run
        if run.returncode != 0:
            outcome.error = f"carrying the vision tensors exited {run.returncode}:\n{run.log[-4000:]}"
            return outcome
    result = in_venv(recipe.maxtext_version, "reload.py", str(chain.tiny),
                     str(chain.local(chain.paths.hf_export)))
    outcome.reload = last_json(result.stdout + result.stderr) if result.returncode == 0 else {
        "error": result.stderr[-3000:]}
    return outcome


VERSIONS = sorted({_recipe(name).maxtext_version for name in RECIPES})
BAD_FLAG = ("--lazy_load_tensors=", "--lazy_loading_tensors=")  # no prefix of a real flag (argparse abbreviates)


def _misspelt(chain: Chain) -> list[str]:
    """The recipe's conversion arguments with its flag --lazy_load_tensors misspelt."""
    argv = chain.cpu_argv("convert", chain.commands()["convert"])
    assert any(arg.startswith(BAD_FLAG[0]) for arg in argv), argv
    return [arg.replace(*BAD_FLAG) for arg in argv]


# Per release, the first recipe of it also tries the misspelt flag.
MISSPELT = {next(name for name in RECIPES if _recipe(name).maxtext_version == version): version
            for version in VERSIONS}



pytestmark = pytest.mark.usefixtures("maxtext_warm_interpreters")  # tests/conftest.py

@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Every recipe's chain (per release, one with a misspelt conversion flag first), on WORKERS processes."""
    for version in VERSIONS:
        need_venv(version)
    root = tmp_path_factory.mktemp("maxtext-real")
    # Unscanned models convert one tensor per layer and take longest: they start first.
    order = sorted(RECIPES, key=lambda name: _recipe(name).model.scan_layers)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {name: pool.submit(_run_chain, _recipe(name), root / name, name in MISSPELT) for name in order}
        done = {name: futures[name].result() for name in RECIPES}
    print("\nMaxText's real code on CPU (wall time, CPU time, peak RSS of the step's process):", file=sys.stderr)
    for name, outcome in done.items():
        for run in outcome.steps.values():
            print(f"  {name:<14} {run.line()}", file=sys.stderr)
    return done


# --- the commands are the rendered ones ----------------------------------------------------------------

def _strings(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return []


@pytest.mark.parametrize("name", RECIPES)
def test_the_commands_run_here_are_the_ones_render_writes(name):
    recipe, settings = _recipe(name), peer_settings()
    commands = maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), settings))
    if recipe.platform == "gke":
        rendered = {step: "\n".join(_strings(manifest)) for step, manifest in jobs.render_manifests(spec_of(recipe), settings).items()}
    else:
        script = jobs.render_startup_script(spec_of(recipe), settings)
        rendered = {step: script for step in commands}
    paths = ArtifactPaths(spec_of(recipe), settings)
    for step, command in commands.items():
        # The VM's export finds its step at run time (jobs/vm_script/steps.sh find_export_step): the same
        # command, with that step in its load_parameters_path.
        expand = ({"load_parameters_path": f"{paths.actor_checkpoints}${{{EXPORT_STEP_VAR}}}/model_params/"}
                  if recipe.platform != "gke" and step == "export" else None)
        assert command.shell(expand=expand) in rendered[step], \
            f"{name}: the rendered {step} does not run {command.module} as built"


def test_the_gemma_export_script_carries_the_vision_tower_it_renders():
    recipe, settings = _recipe("gemma4-v6e64"), peer_settings()
    paths = ArtifactPaths(spec_of(recipe), settings)
    script = next(text for text in _strings(jobs.render_manifests(spec_of(recipe), settings)["export"])
                  if "python3 -m maxtext.checkpoint_conversion.to_huggingface" in text)
    assert recipe.model.vision_parts  # the gemma recipe's export is multimodal
    assert carry_vision_script(recipe.model.hf_repo, paths.hf_export, recipe.model.vision_parts) in script
    # to_huggingface must finish before the copy starts: no exec, and bash's -e stops at its failure
    assert "exec python3 -m maxtext.checkpoint_conversion.to_huggingface" not in script
    assert script.startswith("set -euo pipefail")


def test_the_seed_differences_page_lists_the_steps_we_add():
    from seed_differences import added_steps_table

    assert added_steps_table() in (REPO / "docs" / "seed-differences.md").read_text()


# --- the real code runs them ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", RECIPES)
def test_convert_train_probe_and_export_run_in_maxtexts_real_code(outcomes, name):
    outcome = outcomes[name]
    assert not outcome.error, outcome.error
    ran = [run.step for run in outcome.steps.values() if run.returncode == 0]
    assert ran[:3] == ["convert", "train", "export"]


@pytest.mark.parametrize("name", RECIPES)
def test_the_train_probe_loaded_the_conversion_on_the_recipes_devices_and_mesh(outcomes, name):
    recipe = _recipe(name)
    probe = outcomes[name].step("train").report["probe"]
    train = maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), peer_settings()))["train"]
    # train_rl splits the devices between trainer and sampler only with Pathways on several hosts
    # (model_creation_utils.setup_configs_and_devices).
    fraction = float(_value(train, "trainer_devices_fraction", "1")) if recipe.pathways else 1.0
    assert probe["trainer_devices"] == int(recipe.shape.total_chips * fraction)
    mesh = probe["actor_mesh"]
    for axis in ("tensor", "expert", "fsdp", "data"):
        given = _value(train, f"ici_{axis}_parallelism", None)
        if given not in (None, "-1"):
            assert mesh[axis] == int(given), f"{name}: actor mesh {mesh}"
    product = 1
    for size in mesh.values():
        product *= size
    assert product == probe["trainer_devices"]
    assert probe["scan_layers"] is recipe.model.scan_layers


def _value(command: MaxTextCommand, key: str, default):
    try:
        return command.value(key)
    except KeyError:
        return default


@pytest.mark.parametrize("name", RECIPES)
def test_the_conversion_records_the_recipes_scan_layers(outcomes, name):
    recipe = _recipe(name)
    chain = outcomes[name].chain
    step_dir = chain.local(chain.paths.converted_items).parent
    metadata = json.loads((step_dir / "_CHECKPOINT_METADATA").read_text())
    # 0.2.4's to_maxtext writes custom_metadata.scan_layers, which to_huggingface's
    # verify_and_sync_scan_layers checks; 0.2.3 writes none.
    recorded = metadata.get("custom_metadata", {}).get("scan_layers")
    if recipe.maxtext_version == "0.2.3":
        assert recorded is None
    else:
        assert recorded is recipe.model.scan_layers


# --- the package's output checks on what the real code wrote -------------------------------------------

# A zarr v2 chunk file is named by its chunk indices (`0`, `0.1.0`): the array data. The output checks read
# object names (step directories, orbax's markers, the export's files), never array data, and Gemma's
# per-array (non-OCDBT) trained step alone holds about 12,000 chunks, so the upload leaves them out.
_ZARR_CHUNK = re.compile(r"\d+(\.\d+)*")


def _upload(gcs, chain: Chain) -> None:
    bucket = gcs.bucket(chain.paths.bucket)
    for path in sorted(chain.bucket_dir.rglob("*")):
        if path.is_file() and not _ZARR_CHUNK.fullmatch(path.name):
            bucket.blob(str(path.relative_to(chain.bucket_dir))).upload_from_filename(str(path))


def _markers(chain: Chain) -> dict[str, list[str]]:
    """Per step, the objects the real code wrote last (each marker the checks must miss)."""
    paths = chain.paths
    converted_step = paths.converted_items.removesuffix("items/")
    trained_step = paths.final_params.removesuffix("model_params/")
    export = chain.local(paths.hf_export)
    weights = ["model.safetensors.index.json"] if (export / "model.safetensors.index.json").exists() else [
        "model.safetensors"]
    return {"convert": [converted_step + ORBAX_COMMIT_MARKER],
            "train": [trained_step + ORBAX_COMMIT_MARKER],
            "export": [paths.hf_export + name for name in ("config.json", "tokenizer.json", *weights)]}


@pytest.mark.parametrize("name", RECIPES)
def test_the_output_checks_accept_what_maxtext_wrote_and_refuse_it_without_a_marker(outcomes, gcs, name):
    chain = outcomes[name].chain
    outcomes[name].step("export")
    _upload(gcs, chain)
    for step, markers in _markers(chain).items():
        assert missing_outputs(gcs, chain.paths, step) == [], step
        for marker in markers:
            assert chain.local(marker).is_file(), f"the real {step} did not write {marker}"
            bucket, object_name = split_gs_url(marker)
            blob = gcs.bucket(bucket).blob(object_name)
            blob.delete()
            missing = [req.describe() for req in missing_outputs(gcs, chain.paths, step)]
            # Train's output is the newest step with that marker: without it no finished step is left.
            expected = f"{chain.paths.actor_checkpoints}<step>/{ORBAX_COMMIT_MARKER}" if step == "train" else marker
            assert len(missing) == 1 and missing[0].startswith(expected), (marker, missing)
            blob.upload_from_filename(str(chain.local(marker)))  # the copy is whole again


# --- the export as a user loads it ---------------------------------------------------------------------

@pytest.mark.parametrize("name", RECIPES)
def test_the_export_reloads_in_transformers_with_identical_logits(outcomes, name):
    outcomes[name].step("export")
    reload = outcomes[name].reload
    assert "error" not in reload, reload.get("error")
    assert reload["export_class"] == reload["original_class"]
    assert reload["missing"] == [] and reload["unexpected"] == [] and reload["mismatched"] == [], reload
    assert reload["only_in_export"] == [] and reload["differing_tensors"] == [], reload
    assert reload["only_in_original"] == [], reload
    assert reload["max_logit_diff"] == 0.0
    assert reload["tokenizer_same"] and reload["chat_template_same"]


def test_the_vm_recipes_export_takes_its_tokenizer_from_the_hub_id():
    """0.2.3's to_huggingface has no --hf_model_path: it bundles the tokenizer of HF_IDS[model_name]."""
    recipe = _recipe("llama31-v6e8")
    export = maxtext_commands(recipe, ArtifactPaths(spec_of(recipe), peer_settings()))["export"]
    assert not any(flag.startswith("--hf_model_path") for flag in export.flags)


def test_the_vm_recipes_real_export_asked_the_hub_for_the_instruct_tokenizer(outcomes):
    run = outcomes["llama31-v6e8"].step("export")
    assert run.report.get("tokenizer_from_hub_id") == _recipe("llama31-v6e8").model.tokenizer


# --- a flag the release does not accept fails ----------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_a_conversion_flag_the_release_does_not_accept_fails_the_real_conversion(outcomes, version):
    """The release's to_maxtext, run as `python3 -m` runs it with the flag misspelt, fails for that flag
    and writes nothing into the bucket; the same process then converts with the right flag (the chain)."""
    name = next(name for name, of in MISSPELT.items() if of == version)
    run = outcomes[name].step("convert")
    refused = run.report["refused"]
    assert BAD_FLAG[1] in " ".join(refused["argv"]) and BAD_FLAG[0] not in " ".join(refused["argv"])
    assert refused["exit"] not in (0, None), refused
    attempt = run.log.split(REFUSED_BEGIN, 1)[1].split(REFUSED_END, 1)[0]  # the attempt's own output
    assert BAD_FLAG[1].rstrip("=") in refused["error"] + attempt, (refused, attempt[-3000:])
    bucket = str(outcomes[name].chain.bucket_dir.resolve())
    assert not [path for path in refused["written"] if path.startswith(bucket)], refused["written"]
    assert refused["backends_initialized"] is False, "the attempt started JAX: the real conversion would not be fresh"


# --- the train probe saved as the real workload does (tests/maxtext_cpu/run.py probe, workload.py) --------

@pytest.mark.parametrize("name", RECIPES)
def test_the_train_probe_saved_the_layout_the_recipes_workload_writes(outcomes, name):
    """On GKE train_rl runs with JAX_PLATFORMS=proxy,cpu (jobs/train.py workload_env), and then tunix saves
    without OCDBT and zarr v3 (google/tunix c4ec573d tunix/sft/checkpoint_manager.py L115-133, 683256db /
    PyPI 0.1.7 L53-66): zarr v2, one directory per array, as Pathways' CloudPathwaysArrayHandler writes
    too (orbax-checkpoint 0.12.2 _src/serialization/cloud_pathways_array_handler.py L74-75, L120-128).
    The VM runs on its TPU runtime: orbax's default OCDBT. The export and the output checks above read
    that layout."""
    from maxtext_cpu.workload import tunix_commit

    recipe = _recipe(name)
    probe = outcomes[name].step("train").report["probe"]
    assert probe["tunix"] == tunix_commit(recipe.maxtext_version)
    if recipe.platform == "gke":
        assert probe["workload_env"]["JAX_PLATFORMS"] == "proxy,cpu"
        assert probe["layout"] == {"ocdbt": False, "zarr3": False, "zarr2": True}
    else:
        assert probe["workload_env"] == {}
        assert probe["layout"]["ocdbt"] is True


@pytest.mark.parametrize("name", RECIPES)
def test_the_train_probe_ran_the_recipes_patches_and_saved_the_patched_optimizer_state(outcomes, name):
    """The recipe's rendered source patches of MaxText's files ran on the wheel's own utils_rl.py, and the
    optimizer_state saved is the patched optimizer's: optax's adafactor keeps FactoredState (count, v_row,
    v_col, v), adamw ScaleByAdamState (count, mu, nu) (optax 0.2.6 _src/factorized.py L70-76,
    _src/transform.py L238-243)."""
    recipe = _recipe(name)
    probe = outcomes[name].step("train").report["probe"]
    patched = {patch.name for patch in recipe.patches if (patch.path or "").startswith("/deps/src/maxtext/")}
    assert [line.split()[2] for line in probe["patches"]] == sorted(patched)
    fields = set(probe["optimizer_state_fields"])
    if "rl-optimizer-adafactor" in patched:
        assert {"v_row", "v_col"} <= fields and not {"mu", "nu"} & fields, fields
    else:
        assert {"mu", "nu"} <= fields, fields
    # train_rl's own checks before loading: 0.2.3 validate_config, 0.2.4 configure_tokenizer_chat_template
    assert probe["validate_config"] is (recipe.maxtext_version == "0.2.3")
    assert probe["configure_tokenizer_chat_template"] is (recipe.maxtext_version == "0.2.4")


@pytest.mark.parametrize("name", RECIPES)
def test_maxtexts_own_forward_pass_of_the_conversion_matches_transformers(outcomes, name):
    """The export's reload above compares transformers with transformers: a conversion mapping that the
    export maps back cancels out. Here MaxText's own forward pass of the converted checkpoint (the tunix
    adapter the trainer calls) meets transformers' logits of the original on reload.py's prompt. bf16
    activations keep them from being equal (measured on llama: correlation 0.9998, max |diff| 0.29 at a
    logit std of 2.0); a transposed or swapped tensor leaves them uncorrelated. MoE models: not compared
    (tests/maxtext_cpu/workload.py compares_forward says why)."""
    from maxtext_cpu.workload import compares_forward

    forward = outcomes[name].step("train").report["probe"]["forward"]
    if not compares_forward(tiny_model(_recipe(name))):
        assert forward is None
        return
    assert forward["correlation"] > 0.99, forward
    assert forward["argmax_agree"] >= 0.75, forward


# --- the export's vision step on a sharded export, as the real 26B one is (jobs/export.py) ------------------
# Here, not in a module of its own, so that it forks from this module's warm 0.2.4 interpreter (~8 s of CPU
# to start) rather than starting another.
SHARD_BYTES = 256 * 1024  # the tiny text tensors (~1 MB) in four of MaxText's shards


def _tensor_bytes(shard: Path) -> int:
    """The bytes of a safetensors file's tensors, from its header (8-byte length, then JSON)."""
    with shard.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sum(end - start for key, entry in header.items() if key != "__metadata__"
               for start, end in [entry["data_offsets"]])


def test_the_vision_tower_is_carried_into_a_sharded_export_which_then_reloads_whole(outcomes, tmp_path):
    """The real 26B export is over to_huggingface's 3 GB shard size, so MaxText writes it as
    model-0000i-of-0000N.safetensors with model.safetensors.index.json. Here MaxText 0.2.4's own save path
    writes the tiny model's text tensors in shards (tests/maxtext_cpu/sharded_export.py), the rendered
    script runs on it in the release's venv, and transformers loads the result as a user would. After
    `outcomes`, whose chains started the warm interpreter and built the tiny model."""
    recipe = _recipe("gemma4-v6e64")
    prefixes = recipe.model.vision_parts
    tiny = tiny_model(recipe)
    source_map = json.loads((tiny / "model.safetensors.index.json").read_text())["weight_map"]
    vision_shards = {shard for key, shard in source_map.items() if key.startswith(prefixes)}
    assert len(vision_shards) >= 2, f"the tiny model's vision tensors lie in one shard: {vision_shards}"

    export = tmp_path / "hf"
    written = in_venv(recipe.maxtext_version, "sharded_export.py", str(tiny), str(export), ",".join(prefixes),
                      str(SHARD_BYTES))
    assert written.returncode == 0, written.stderr[-3000:]
    maxtext_shards = last_json(written.stdout)["shards"]
    assert len(maxtext_shards) >= 2 and not (export / "model.safetensors").exists(), maxtext_shards
    before = json.loads((export / "model.safetensors.index.json").read_text())
    assert not [key for key in before["weight_map"] if key.startswith(prefixes)]

    chain = Chain(recipe, ArtifactPaths(spec_of(recipe), peer_settings()), tmp_path, tiny)
    run = chain.run_script("carry-vision", carry_vision_script(str(tiny), f"{export}/", prefixes))
    assert run.returncode == 0, run.log[-3000:]

    after = json.loads((export / "model.safetensors.index.json").read_text())
    vision = {key for key in source_map if key.startswith(prefixes)}
    assert {key: after["weight_map"][key] for key in vision} == dict.fromkeys(vision, VISION_SHARD)
    assert {k: v for k, v in after["weight_map"].items() if k not in vision} == before["weight_map"]
    shards = sorted(set(after["weight_map"].values()))
    assert shards == sorted([*maxtext_shards, VISION_SHARD])
    assert after["metadata"]["total_size"] == sum(_tensor_bytes(export / shard) for shard in shards)

    reload = in_venv(recipe.maxtext_version, "reload.py", str(tiny), str(export))
    assert reload.returncode == 0, reload.stderr[-3000:]
    result = last_json(reload.stdout)
    assert result["export_class"] == result["original_class"] == "Gemma4ForConditionalGeneration"
    assert result["missing"] == [] and result["unexpected"] == [] and result["mismatched"] == [], result
    # every tensor of the original, the vision tower's included, is in the export and equal to it
    assert result["only_in_original"] == [] and result["only_in_export"] == [], result
    assert result["differing_tensors"] == [] and result["max_logit_diff"] == 0.0, result


# --- the warm interpreter the steps are forked from (tests/maxtext_cpu/warm.py) ---------------------------
STEP_PROBE = '''
import atexit, os, sys
print(os.environ.get("PROBE_ONLY_THIS_STEP"), sys.stdin.read(), sys.argv[1:], "torch" in sys.modules,
      os.environ.get("HF_DATASETS_DISABLE_DILL"))
atexit.register(print, "atexit ran")
print("to stderr", file=sys.stderr)
sys.exit(3)
'''


@pytest.mark.parametrize("version", VERSIONS)
def test_a_step_forked_from_the_warm_interpreter_has_its_own_environment_input_and_exit(outcomes, version,
                                                                                       tmp_path):
    """The steps above ran forked from it (after `outcomes`). A step gets its request's environment, stdin,
    arguments and output files, what the warm imports set in the environment, its own exit code and
    its atexit handlers; a step whose environment differs beyond the names read at run time is refused,
    so that it runs as a fresh process instead."""
    from maxtext_cpu.chain import step_env, warm_venv

    script = tmp_path / "step.py"
    script.write_text(STEP_PROBE)
    out, err = tmp_path / "out", tmp_path / "err"
    env = {**step_env(version), "PROBE_ONLY_THIS_STEP": "mine"}
    answer = warm_venv(version).run(script, ["a", "b"], env, tmp_path, out, err, input="from stdin")
    assert answer["code"] == 3 and answer["cpu_seconds"] < 5, answer
    # torch: imported by the warm interpreter; the variable: set by MaxText's pyconfig on import
    assert out.read_text() == "mine from stdin ['a', 'b'] True 1\natexit ran\n"
    assert err.read_text() == "to stderr\n"
    other = {**env, "HF_HOME": str(tmp_path / "another-hf-home")}
    assert warm_venv(version).run(script, [], other, tmp_path, out, err) is None
    fresh = in_venv(version, str(script), env=other)  # refused by the warm one: a fresh interpreter
    assert fresh.returncode == 3 and fresh.stdout == "mine  [] False None\natexit ran\n", fresh
