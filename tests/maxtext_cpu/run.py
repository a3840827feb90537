"""Run one step of a recipe in MaxText's real code on a CPU (inside a MaxText test venv).

    python tests/maxtext_cpu/run.py STEP TINY_CONFIG_DIR MAXTEXT_NAME MODULE [ARG...]

STEP is convert or export (the module itself runs, as `python3 -m MODULE ARG...` would run it), or
probe (train_rl's own config parsing and model loading, then a save of the actor as tunix's trainer
saves it; see probe()). Before the step, only what a CPU test must change is changed:

- MaxText's HF_MODEL_CONFIGS entry of the model is the tiny config (to_maxtext and to_huggingface read
  layer and expert counts from that table, not from the model directory);
- orbax uses commit-file atomicity, the mode it picks for gs:// paths (atomicity_defaults), so that
  commit_success.txt markers are written where they are in a bucket, and a restore requires them.

It prints one JSON line `{"step": ..., "seconds": ..., "peak_rss_mb": ...}` at the end.
"""

from __future__ import annotations

import inspect
import json
import os
import resource
import runpy
import sys
import time


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


def probe(argv: list[str]) -> None:
    """What train_rl does before its first rollout, then the save its trainer makes at the last step.

    train_rl itself cannot start on a CPU: it imports maxtext.integration.vllm (hence tpu_inference)
    unconditionally and its rollout engine is always MaxTextVllmRollout. So this calls the functions
    train_rl's _rl_train_impl calls (0.2.3 and 0.2.4): model_creation_utils.setup_configs_and_devices
    (RLConfig from 0.2.4), AutoTokenizer.from_pretrained(tokenizer_path), create_models_and_meshes (which
    loads load_parameters_path into the actor and the reference on the recipe's meshes), and saves the
    actor with tunix's CheckpointManager under <checkpoint_dir>/actor (tunix rl_cluster.py), as
    peft_trainer's final save does: model_params and optimizer_state, force=True.
    """
    import multiprocessing.pool  # noqa: F401  utils_rl's math_verify_pool annotates with it unimported;
    # in train_rl an earlier import (datasets) has loaded it
    from flax import nnx
    from maxtext.configs import types
    from maxtext.trainers.post_train.rl import utils_rl
    from maxtext.utils import model_creation_utils
    from orbax import checkpoint as ocp
    from transformers import AutoTokenizer
    from tunix.sft.checkpoint_manager import CheckpointManager

    setup = model_creation_utils.setup_configs_and_devices
    kwargs = {"config_class": types.RLConfig} if "config_class" in inspect.signature(setup).parameters else {}
    trainer_config, sampler_config, trainer_devices, sampler_devices = setup(argv, {}, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(trainer_config.tokenizer_path,
                                              token=trainer_config.hf_access_token or None)
    _, _, actor_model, actor_mesh, _ = model_creation_utils.create_models_and_meshes(
        trainer_config, sampler_config, trainer_devices, sampler_devices, tokenizer_pad_id=tokenizer.pad_token_id)
    steps = int(os.environ["PROBE_LAST_STEP"])
    optimizer_args = inspect.signature(utils_rl.get_optimizer).parameters
    optimizer = (utils_rl.get_optimizer(trainer_config) if len(optimizer_args) == 1
                 else utils_rl.get_optimizer(trainer_config, steps))  # 0.2.3 takes max_train_steps
    with actor_mesh:
        state = nnx.Optimizer(actor_model, optimizer, wrt=nnx.Param)
    manager = CheckpointManager(
        os.path.join(trainer_config.checkpoint_dir, "actor"),
        ocp.CheckpointManagerOptions(save_interval_steps=trainer_config.checkpoint_period,
                                     max_to_keep=trainer_config.max_num_checkpoints_to_keep))
    manager.save(steps, actor_model, state, force=True)
    manager.close()
    print(json.dumps({"probe": {"trainer_devices": len(trainer_devices), "sampler_devices": len(sampler_devices),
                                "actor_mesh": dict(actor_mesh.shape), "scan_layers": trainer_config.scan_layers,
                                "checkpoint_dir": str(trainer_config.checkpoint_dir)}}))


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
            probe([argv0, *args])
        else:
            judge(argv0, json.loads(sys.stdin.read()))
    else:
        if step == "export":
            seed_hub_cache(tiny_dir, maxtext_name, args)
        sys.argv = [module, *args]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as done:  # absl's app.run exits; only a non-zero code is a failure
            if done.code not in (0, None):
                raise
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"step": step, "seconds": round(time.monotonic() - start, 1), "peak_rss_mb": round(peak)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
