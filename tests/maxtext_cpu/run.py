"""Run one step of a recipe in MaxText's real code on a CPU (inside a MaxText test venv).

    python tests/maxtext_cpu/run.py STEP TINY_CONFIG_DIR MAXTEXT_NAME MODULE [ARG...]

STEP is convert or export (the module itself runs, as `python3 -m MODULE ARG...` would run it), or
probe (train_rl's own config parsing and model loading, then a save of the actor as tunix's trainer
saves it; see probe()). Before the step, only what a CPU test must change is changed:

- MaxText's HF_MODEL_CONFIGS entry of the model is the tiny config (to_maxtext and to_huggingface read
  layer and expert counts from that table, not from the model directory);
- orbax uses commit-file atomicity, the mode it picks for gs:// paths (atomicity_defaults), so that
  commit_success.txt markers are written where they are in a bucket, and a restore requires them.

Each step first imports what its module imports and sets those objects aside (settle_heap: MaxText's
per-tensor gc.collect() then scans only its own objects). It prints one JSON line `{"step": ..., "seconds": ..., "peak_rss_mb": ...}` at the end.

With REFUSED_ARGV_ENV set (a JSON list of arguments), a convert first runs the module with those
arguments (a flag misspelt), between two marker lines, and reports how it ended and what it wrote
under the working directory, then runs the real conversion: one process, so the release's imports are
paid once (runpy runs the module's own code again; the imports it shares are loaded already).
"""

from __future__ import annotations

import inspect
import json
import os
import resource
import runpy
import sys
import time


REFUSED_ARGV_ENV = "PROBE_REFUSED_ARGV"
REFUSED_BEGIN, REFUSED_END = "=== refused argv: begin ===", "=== refused argv: end ==="


def settle_heap() -> None:
    """Keep the objects the imports made out of every later collection. MaxText's conversions call
    gc.collect() after each tensor; with torch, jax and transformers loaded each full pass scanned
    millions of objects (0.4 s, 56 of gemma4's 77 s convert). The collections still run, on MaxText's own."""
    import gc

    gc.collect()
    gc.freeze()


def import_its_imports(module: str) -> None:
    """Import what `module`'s top-level import statements name, without running the module."""
    import ast
    import importlib
    import importlib.util

    path = importlib.util.find_spec(module).origin
    for node in ast.parse(open(path).read(), path).body:
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        for name in names:
            importlib.import_module(name)


def run_as_main(module: str, args: list[str]) -> None:
    """The module as `python3 -m MODULE ARG...` runs it; absl's app.run exits, only a non-zero code fails.
    The modules its top level imports are loaded first, so that settle_heap can set them aside (not the
    module itself: to_huggingface defines absl flags, which a second run would define twice)."""
    import_its_imports(module)
    settle_heap()
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code not in (0, None):
            raise


def refused_attempt(module: str, args: list[str]) -> dict:
    """How the module ends with `args`, and the files it wrote under the working directory meanwhile."""
    from pathlib import Path

    def files() -> set[str]:
        return {str(path) for path in Path.cwd().rglob("*") if path.is_file()}

    before = files()
    print(REFUSED_BEGIN, flush=True)
    print(REFUSED_BEGIN, file=sys.stderr, flush=True)
    try:
        run_as_main(module, args)
        ended = {"exit": 0, "error": ""}
    except SystemExit as done:
        ended = {"exit": done.code, "error": f"SystemExit: {done.code}"}
    except Exception as error:  # noqa: BLE001  whatever the release raises for the argument
        ended = {"exit": 1, "error": f"{type(error).__name__}: {str(error).strip()[:2000]}"}
    sys.stdout.flush()
    print(REFUSED_END, flush=True)
    print(REFUSED_END, file=sys.stderr, flush=True)
    # Refused before any JAX backend started (pyconfig, both releases): the real conversion after it
    # initializes the backend as a fresh process does.
    from jax._src import xla_bridge

    return {**ended, "argv": args, "written": sorted(files() - before),
            "backends_initialized": xla_bridge.backends_are_initialized()}


def use_commit_file_atomicity() -> None:
    from orbax.checkpoint._src.path import atomicity, atomicity_defaults

    # orbax-checkpoint 0.12.x _src/path/atomicity_defaults.py: CommitFileTemporaryPath for gs://,
    # AtomicRenameTemporaryPath otherwise; the checkpointer and is_path_finalized call these two.
    atomicity_defaults.get_default_temporary_path_class = lambda path: atomicity.CommitFileTemporaryPath
    atomicity_defaults.get_item_default_temporary_path_class = lambda path: atomicity.CommitFileTemporaryPath


def use_tiny_config(tiny_dir: str, maxtext_name: str) -> None:
    import transformers
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    config = transformers.AutoConfig.from_pretrained(tiny_dir)
    for name in {maxtext_name, maxtext_name.replace("-Instruct", "")}:
        if name in HF_MODEL_CONFIGS:
            HF_MODEL_CONFIGS[name] = config


def seed_hub_cache(tiny_dir: str, maxtext_name: str, args: list[str]) -> None:
    """to_huggingface without --hf_model_path (0.2.3 has no such flag) bundles the tokenizer of
    HF_IDS[model_name] from the hub. Offline, huggingface_hub resolves a repo id from its cache
    (HF_HOME/hub/models--ORG--NAME/refs/main -> snapshots/<revision>/), so the tiny tokenizer is put there
    under that id: the export still asks for the hub id, and gets the tiny files."""
    if any(arg.startswith("--hf_model_path") for arg in args):
        return
    import shutil
    from pathlib import Path

    from huggingface_hub import constants
    from maxtext.utils.globals import HF_IDS

    repo_id = HF_IDS[maxtext_name]
    revision = "0" * 40
    repo = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json"):
        if (Path(tiny_dir) / name).exists():
            shutil.copy(Path(tiny_dir) / name, snapshot / name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    print(json.dumps({"tokenizer_from_hub_id": repo_id}))


# The tunix commits of the releases' images (tools/generate_maxtext_constraints.py reads them from the
# wheels; tests/maxtext_cpu/workload.py passes the release's as PROBE_TUNIX_COMMIT).
TUNIX_0_2_3 = "683256db1a0919b5cfd46cee52cebc96331494fb"  # tunix/sft/checkpoint_manager.py = PyPI 0.1.7's
TUNIX_0_2_4 = "c4ec573d29e4c3a3955b348256d464b119c8a6d1"  # orbax v1 training.Checkpointer


def train_rl_function(module: str, name: str):
    """A function of train_rl.py, compiled from the module's own source without importing the module
    (importing it imports vLLM's TPU adapter). Only for functions whose names are builtins or imported
    inside the function (validate_config, configure_tokenizer_chat_template)."""
    import ast
    import importlib.util
    import typing

    path = importlib.util.find_spec(module).origin
    tree = ast.parse(open(path).read(), path)
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        return None
    namespace = {"Any": typing.Any}
    exec(compile(ast.Module([node], []), path, "exec"), namespace)  # noqa: S102  MaxText's own code
    return namespace[name]


def patched_utils_rl(site: str):
    """utils_rl as the train container runs it: each of the recipe's rendered source patches of MaxText's
    files (PROBE_PATCHES, tpu_rl.jobs.patches.render_patch) runs, as the container's bash step, on a copy of the
    wheel's file under the scratch root it names; then the module is that copy. Returns the module and the
    names of the patches applied."""
    import importlib.util
    import shutil
    import subprocess

    patches = json.loads(os.environ.get("PROBE_PATCHES", "[]"))
    module_name = "maxtext.trainers.post_train.rl.utils_rl"
    applied = []
    for patch in patches:
        target = os.path.join(patch["root"], patch["file"])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(os.path.join(site, patch["file"]), target)
        env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", patch["script"]], env=env, capture_output=True,
                              text=True, timeout=60)
        if done.returncode != 0:
            raise SystemExit(f"the recipe's patch failed on the wheel's {patch['file']}:\n{done.stdout}{done.stderr}")
        applied.append(done.stdout.strip())
        if patch["file"].replace("/", ".").removesuffix(".py") == module_name:
            spec = importlib.util.spec_from_file_location(module_name, target)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
    import importlib

    return importlib.import_module(module_name), applied


def checkpoint_layout(step_dir: str) -> dict:
    """Which TensorStore layout the arrays of a saved step use, from its files: OCDBT (manifest.ocdbt,
    ocdbt.process_* directories), zarr v3 (zarr.json) or zarr v2 (.zarray per array)."""
    names = [name for _, dirs, files in os.walk(step_dir) for name in (*dirs, *files)]
    return {"ocdbt": any(n == "manifest.ocdbt" or n.startswith("ocdbt.process_") for n in names),
            "zarr3": "zarr.json" in names, "zarr2": ".zarray" in names}


def save_with_orbax_v1(root: str, step: int, period: int, keep: int, checkpointables: dict) -> None:
    """The actor's save of tunix c4ec573d (MaxText 0.2.4's pin), with the same orbax calls and options:
    tunix/sft/checkpoint_manager.py L88-97 (ocp = orbax.checkpoint.v1: training.Checkpointer with a
    Context, the save and preservation policies and the step name format of the resolved options),
    L101-133 (_context: asynchronous.timeout_secs; pathways_options.checkpointing_impl =
    CheckpointingImpl.from_options(use_persistence_array_handler=proxy and ENABLE_PATHWAYS_PERSISTENCE);
    with 'proxy' in JAX_PLATFORMS array.saving.use_ocdbt = use_zarr3 = False), L135-160 (async save when
    enable_async_checkpointing), L189-213 (model_params = nnx.state(model), optimizer_state =
    nnx.state(optimizer, OptState)), L328-332 (close). The options: train_rl passes v0
    CheckpointManagerOptions(save_interval_steps=checkpoint_period, max_to_keep=...) (MaxText 0.2.4
    train_rl.py L443-446), which tunix/sft/checkpoint_options.py resolve_checkpointing_defaults turns into
    FixedIntervalPolicy(save_interval_steps), LatestN(max_to_keep), standard_name_format(), async on
    (CheckpointManagerOptions' default), AsyncOptions(timeout_secs=1200) (DEFAULT_CHECKPOINTING_OPTIONS).
    The custom metadata is rl_cluster.py L586-589's (global_step, role "actor").

    On a CPU the Pathways handlers are not registered (orbax 0.12.2 experimental/v1/_src/serialization/
    registration.py L90: only when multihost.is_pathways_backend(), i.e. the devices' runtime is
    Pathways), so the arrays go through orbax's ArrayHandler with the Context's layout options. On
    Pathways with persistence, CloudPathwaysArrayHandler writes the same layout: it refuses OCDBT and
    records use_ocdbt=False, use_zarr3=False (orbax 0.12.2 _src/serialization/
    cloud_pathways_array_handler.py L74-75, L120-128)."""
    from orbax.checkpoint import pathways as ocp_pathways
    from orbax.checkpoint import v1 as ocp

    proxy = "proxy" in os.getenv("JAX_PLATFORMS", "")
    context = ocp.Context()
    context.asynchronous.timeout_secs = 1200
    context.pathways_options.checkpointing_impl = ocp_pathways.CheckpointingImpl.from_options(
        use_persistence_array_handler=proxy and bool(os.getenv("ENABLE_PATHWAYS_PERSISTENCE", "")))
    if proxy:
        context.array.saving.use_ocdbt = False
        context.array.saving.use_zarr3 = False
    checkpointer = ocp.training.Checkpointer(
        root, context=context,
        save_decision_policy=ocp.training.save_decision_policies.FixedIntervalPolicy(period),
        preservation_policy=ocp.training.preservation_policies.LatestN(keep),
        step_name_format=ocp.path.step.standard_name_format())
    started = checkpointer.save_checkpointables_async(step, checkpointables, force=True,
                                                      custom_metadata={"global_step": step, "role": "actor"})
    if started is None:
        raise SystemExit(f"orbax did not start the save of step {step}")
    checkpointer.close()


# reload.py's prompt: the same token ids through MaxText's forward pass and transformers'
PROMPT_IDS = [2, 17, 42, 99, 180, 255, 7, 64, 128, 200, 33, 81]


def forward_against_transformers(actor_model, actor_mesh, tiny_dir: str) -> dict:
    """MaxText's own forward pass of the converted checkpoint (the tunix adapter's __call__ that the
    trainer's loss calls: maxtext/integration/tunix/tunix_adapter.py L103-122, 0.2.3 and 0.2.4) against
    transformers' logits of the tiny original, on one prompt. A conversion mapping that the export maps
    back (a transposed or swapped tensor) cancels out in the export's round trip, but not here."""
    import jax.numpy as jnp
    import numpy as np
    import torch
    import transformers

    # one row per device, as the trainer's batches are sharded over the mesh (a batch of one does not
    # divide over the MoE layer's expert-parallel shards)
    rows = actor_mesh.devices.size
    tokens = jnp.asarray([PROMPT_IDS] * rows, dtype=jnp.int32)
    positions = jnp.tile(jnp.arange(len(PROMPT_IDS), dtype=jnp.int32)[None, :], (rows, 1))
    with actor_mesh:
        logits, _ = actor_model(tokens, positions, None, None)
    maxtext = np.asarray(logits, dtype=np.float32)[0]
    config = transformers.AutoConfig.from_pretrained(tiny_dir)
    names = getattr(config, "architectures", None) or []
    model_class = getattr(transformers, names[0]) if names else transformers.AutoModelForCausalLM
    original = model_class.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        reference = original(input_ids=torch.tensor([PROMPT_IDS])).logits.float().numpy()[0]
    vocab = min(maxtext.shape[-1], reference.shape[-1])  # MaxText may pad the vocabulary
    maxtext, reference = maxtext[:, :vocab], reference[:, :vocab]
    return {"correlation": float(np.corrcoef(maxtext.ravel(), reference.ravel())[0, 1]),
            "max_abs_diff": float(np.abs(maxtext - reference).max()),
            "reference_std": float(reference.std()),
            "argmax_agree": float((maxtext.argmax(-1) == reference.argmax(-1)).mean())}


def probe(argv: list[str], tiny_dir: str) -> None:
    """What train_rl does before its first rollout, then the save its trainer makes at the last step.

    train_rl itself cannot start on a CPU: it imports maxtext.integration.vllm (hence tpu_inference)
    unconditionally and its rollout engine is always MaxTextVllmRollout. So this calls the functions
    train_rl's _rl_train_impl calls (0.2.3 train_rl.py L627-640, 0.2.4 L687-715):
    model_creation_utils.setup_configs_and_devices (RLConfig from 0.2.4), validate_config (0.2.3),
    AutoTokenizer.from_pretrained(tokenizer_path), configure_tokenizer_chat_template (0.2.4),
    create_models_and_meshes (which loads load_parameters_path into the actor and the reference on the
    recipe's meshes); utils_rl.get_optimizer (train_rl.py 0.2.3 L380, 0.2.4 L440) of utils_rl with the
    recipe's source patches applied (patched_utils_rl). Then it saves the actor under
    <checkpoint_dir>/actor (tunix rl_cluster.py) as peft_trainer's final save does (model_params and
    optimizer_state, force=True), with the tunix of the release's image, in the train container's
    environment (PROBE_WORKLOAD_ENV: JAX_PLATFORMS=proxy,cpu on GKE, set once jax has its CPU backend,
    before the checkpointer is built, which is when tunix reads it): tunix 683256db (0.2.3) is PyPI's
    0.1.7 file, so its CheckpointManager; c4ec573d (0.2.4) saves with orbax v1 (save_with_orbax_v1).
    The probe refuses a layout other than the one that environment selects (OCDBT, or zarr v2 without
    OCDBT under Pathways)."""
    import multiprocessing.pool  # noqa: F401  utils_rl's math_verify_pool annotates with it unimported;
    # in train_rl an earlier import (datasets) has loaded it
    import sysconfig

    from flax import nnx

    utils_rl, patches = patched_utils_rl(sysconfig.get_paths()["purelib"])
    from maxtext.configs import types
    from maxtext.utils import model_creation_utils
    from transformers import AutoTokenizer

    settle_heap()

    train_rl = "maxtext.trainers.post_train.rl.train_rl"
    setup = model_creation_utils.setup_configs_and_devices
    kwargs = {"config_class": types.RLConfig} if "config_class" in inspect.signature(setup).parameters else {}
    trainer_config, sampler_config, trainer_devices, sampler_devices = setup(argv, {}, **kwargs)
    validate_config = train_rl_function(train_rl, "validate_config")  # 0.2.3 only
    if validate_config:
        validate_config(trainer_config)
    tokenizer = AutoTokenizer.from_pretrained(trainer_config.tokenizer_path,
                                              token=trainer_config.hf_access_token or None)
    chat_template = train_rl_function(train_rl, "configure_tokenizer_chat_template")  # 0.2.4 only
    if chat_template:
        chat_template(tokenizer, trainer_config)
    _, _, actor_model, actor_mesh, _ = model_creation_utils.create_models_and_meshes(
        trainer_config, sampler_config, trainer_devices, sampler_devices, tokenizer_pad_id=tokenizer.pad_token_id)
    forward = (forward_against_transformers(actor_model, actor_mesh, tiny_dir)
               if os.environ.get("PROBE_FORWARD") == "1" else None)
    steps = int(os.environ["PROBE_LAST_STEP"])
    optimizer_args = inspect.signature(utils_rl.get_optimizer).parameters
    optimizer = (utils_rl.get_optimizer(trainer_config) if len(optimizer_args) == 1
                 else utils_rl.get_optimizer(trainer_config, steps))  # 0.2.3 takes max_train_steps
    with actor_mesh:
        state = nnx.Optimizer(actor_model, optimizer, wrt=nnx.Param)
    optimizer_state = nnx.state(state, nnx.optimizer.OptState)
    import jax

    jax.devices()  # the CPU backend exists before the workload's JAX_PLATFORMS is set
    workload = json.loads(os.environ.get("PROBE_WORKLOAD_ENV", "{}"))
    os.environ.update(workload)
    root = os.path.join(trainer_config.checkpoint_dir, "actor")
    commit = os.environ["PROBE_TUNIX_COMMIT"]
    if commit == TUNIX_0_2_3:
        from orbax import checkpoint as ocp
        from tunix.sft.checkpoint_manager import CheckpointManager

        manager = CheckpointManager(root, ocp.CheckpointManagerOptions(
            save_interval_steps=trainer_config.checkpoint_period,
            max_to_keep=trainer_config.max_num_checkpoints_to_keep))
        manager.save(steps, actor_model, state, force=True)
        manager.close()
    elif commit == TUNIX_0_2_4:
        save_with_orbax_v1(root, steps, trainer_config.checkpoint_period,
                           trainer_config.max_num_checkpoints_to_keep,
                           {"model_params": nnx.state(actor_model), "optimizer_state": optimizer_state})
    else:
        raise SystemExit(f"tunix {commit}: the probe does not know how this release's image saves the actor; "
                         "read its tunix/sft/checkpoint_manager.py and add it to probe()")
    layout = checkpoint_layout(os.path.join(root, str(steps)))
    pathways = "proxy" in workload.get("JAX_PLATFORMS", "")
    # orbax's PyTreeCheckpointHandler and v1 Context default to OCDBT, in which the arrays are inside
    # the OCDBT store (no per-array zarr files); under Pathways tunix turns OCDBT and zarr v3 off.
    expected = {"ocdbt": False, "zarr3": False, "zarr2": True} if pathways else {"ocdbt": True}
    if any(layout[key] != value for key, value in expected.items()):
        raise SystemExit(f"the actor was saved as {layout}, not as the train workload {workload} saves it: {expected}")
    # the names in the optimizer state that are not the model's: optax's state fields, e.g. mu and nu
    # (ScaleByAdamState, adamw) or v_row and v_col (FactoredState, adafactor)
    def names(tree) -> set[str]:
        return {str(getattr(key, "key", getattr(key, "name", key))) for path, _ in
                jax.tree_util.tree_flatten_with_path(tree)[0] for key in path}

    optimizer_fields = sorted(names(optimizer_state) - names(nnx.state(actor_model)))
    print(json.dumps({"probe": {"trainer_devices": len(trainer_devices), "sampler_devices": len(sampler_devices),
                                "actor_mesh": dict(actor_mesh.shape), "scan_layers": trainer_config.scan_layers,
                                "checkpoint_dir": str(trainer_config.checkpoint_dir), "tunix": commit,
                                "workload_env": workload, "layout": layout, "patches": patches,
                                "optimizer_state_fields": optimizer_fields,
                                "validate_config": bool(validate_config), "forward": forward,
                                "configure_tokenizer_chat_template": bool(chat_template)}}))


def judge(argv0: str, cases: list[dict]) -> None:
    """train_rl's config parsing as its judge: for each case, whether pyconfig accepts its overrides (as
    setup_configs_and_devices calls it, with RLConfig from 0.2.4) and, if not, the start of its error."""
    from maxtext.configs import pyconfig, types

    kwargs = ({"config_class": types.RLConfig}
              if "config_class" in inspect.signature(pyconfig.initialize_pydantic).parameters else {})
    verdicts = {}
    for case in cases:
        try:
            pyconfig.initialize_pydantic([argv0, *case["argv"]], **kwargs)
            verdicts[case["id"]] = {"accepted": True}
        except (Exception, SystemExit) as error:  # noqa: BLE001  pyconfig raises ValueError, pydantic errors, ...
            verdicts[case["id"]] = {"accepted": False, "error": f"{type(error).__name__}: {str(error).strip()[:600]}"}
    print(json.dumps({"verdicts": verdicts}))


def main(step: str, tiny_dir: str, maxtext_name: str, module: str, args: list[str]) -> None:
    start = time.monotonic()
    use_commit_file_atomicity()
    if step != "judge":  # the judge parses configs only: no model, no HF table
        use_tiny_config(tiny_dir, maxtext_name)
    if step in ("probe", "judge"):
        # absl's app.run passes sys.argv: argv[0] is train_rl.py's path, from which pyconfig infers the
        # module's config file (_CONFIG_FILE_MAPPING: rl.yml), argv[1:] are the overrides.
        import importlib.util

        argv0 = importlib.util.find_spec(module).origin
        if step == "probe":
            probe([argv0, *args], tiny_dir)
        else:
            judge(argv0, json.loads(sys.stdin.read()))
    else:
        if step == "export":
            seed_hub_cache(tiny_dir, maxtext_name, args)
        if step == "convert" and os.environ.get(REFUSED_ARGV_ENV):
            print(json.dumps({"refused": refused_attempt(module, json.loads(os.environ[REFUSED_ARGV_ENV]))}),
                  flush=True)
        run_as_main(module, args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"step": step, "seconds": round(time.monotonic() - start, 1), "peak_rss_mb": round(peak)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
