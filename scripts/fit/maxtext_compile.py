"""Compile a run's trainer programs for its TPU topology on a CPU, and say what each holds per chip.

This file runs inside MaxText's own environment (MaxText, JAX, tunix and libtpu), not tpu-rl's: it
imports nothing of tpu-rl. It reads one JSON request on stdin (scripts/fit/compiler.py writes it) and
prints one JSON line. XLA's TPU compiler (libtpu) compiles ahead of time for a topology with no TPU
attached (jax.experimental.topologies), and its memory analysis is the chip's (docs/fit.md).

What it compiles is train_rl's own, built from MaxText's and tunix's code, not restated:
- the config: MaxText's pyconfig with train_rl's config file, from the run's rendered train arguments;
- the devices: MaxText's accelerator table for the topology, split between trainer and sampler by
  model_creation_utils.setup_configs_and_devices itself;
- the models: create_nnx_abstract_model on the trainer mesh (the actor and the reference have the same
  layout, create_models_and_meshes), wrapped in TunixMaxTextAdapter as train_rl wraps them;
- the optimizer: utils_rl.get_optimizer with the recipe's source patches applied, laid out and
  accumulated as the image's tunix does (maxtext_pieces.IMAGE_TUNIX);
- train_step: tunix's PeftTrainer._train_step with GrpoLearner's loss, jitted as PeftTrainer jits it
  (nnx.jit, the optimizer donated), on one micro-batch;
- reference_logps: tunix's common.compute_per_token_logps as the InferenceWorker calls it.

Each program is compiled as the chip compiles it, with its own arguments only, and says what else the
chip holds while it runs (the other model, the optimizer state, vLLM's share where vLLM shares the
chips): scripts/fit/account.py adds them and keeps the margin free.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import TYPE_CHECKING

# imported as tpu_rl.scripts.fit.maxtext_compile (the import checks of the tests, and a type checker)
if TYPE_CHECKING or __package__:
    from .maxtext_pieces import (chip_limit, compile_program, configs_and_devices, image_tunix, laid_out,
                                 module_file, patched_utils_rl, per_chip, say, shaped, topology,
                                 train_rl_function, vllm_rules, vllm_weights_per_chip)
else:  # run as a script in MaxText's environment, beside maxtext_pieces.py
    from maxtext_pieces import (chip_limit, compile_program, configs_and_devices, image_tunix, laid_out,
                                module_file, patched_utils_rl, per_chip, say, shaped, topology,
                                train_rl_function, vllm_rules, vllm_weights_per_chip)

# Before JAX loads libtpu: no lock shared with another compile (the suite runs several), no metadata
# server (no TPU VM here), no TPU backend, and the host names libtpu otherwise warns about.
COMPILE_ENV = {"ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_SKIP_MDS_QUERY": "1", "TPU_WORKER_HOSTNAMES": "localhost",
               "JAX_PLATFORMS": "cpu"}


def main() -> None:
    for name, value in COMPILE_ENV.items():
        os.environ.setdefault(name, value)
    request = json.load(sys.stdin)
    started = time.monotonic()
    import importlib.metadata as metadata

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from jax.sharding import PartitionSpec
    from maxtext.integration.tunix.tunix_adapter import TunixMaxTextAdapter
    from maxtext.utils import maxtext_utils, model_creation_utils
    from tunix.rl import algo_core, common, function_registry  # noqa: F401  algo_core registers "grpo"
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo.grpo_learner import GrpoConfig
    from tunix.sft import peft_trainer, sharding_utils

    say(f"imported MaxText's environment in {time.monotonic() - started:.0f} s")
    tunix_commit, trainer_rules = image_tunix()
    utils_rl = patched_utils_rl(request["patches"], request["source_root"])
    devices = topology(request["accelerator"], request["slices"])
    limit = chip_limit(devices[0])
    argv0 = module_file("maxtext.trainers.post_train.rl.train_rl")
    config, sampler_config, trainer_devices, sampler_devices = configs_and_devices([argv0, *request["argv"]], devices)
    try:
        mesh = maxtext_utils.get_mesh_from_config(config, trainer_devices)
    except AssertionError as error:  # the axes' product and the chips disagree (max_utils.fill_unspecified_mesh_axes)
        keys = config.model_dump() if hasattr(config, "model_dump") else config.get_keys()
        axes = {key: value for key, value in sorted(keys.items())
                if key.startswith("ici_") and key.endswith("_parallelism") and isinstance(value, int) and value != 1}
        print(json.dumps({"mesh_refused": " ".join(str(error).split()), "trainer_chips": len(trainer_devices),
                          "accelerator": request["accelerator"], "axes": axes}))
        return
    try:  # the sampler's split, before any compile: MaxText refuses axes its chips cannot hold
        rollout = train_rl_function("get_rollout_kwargs_for_parallelism")(sampler_config, len(sampler_devices))
    except ValueError as error:
        print(json.dumps({"rollout_refused": " ".join(str(error).split()), "sampler_chips": len(sampler_devices),
                          "accelerator": request["accelerator"]}))
        return
    shared = bool(set(trainer_devices) & set(sampler_devices))

    def rules():
        return nn.logical_axis_rules(config.logical_axis_rules)

    _, base = model_creation_utils.create_nnx_abstract_model(config, mesh, trainer_devices)
    # train_rl gives the adapter the tokenizer's pad id; with one it masks pads by segment ids.
    model = TunixMaxTextAdapter(base_model=base, pad_id=request["pad_id"])
    params = per_chip(nnx.state(model, nnx.Param))

    steps = request["train_steps"]
    optimizer = (utils_rl.get_optimizer(config) if utils_rl.get_optimizer.__code__.co_argcount == 1
                 else utils_rl.get_optimizer(config, steps))  # 0.2.3 takes max_train_steps
    micro = None if config.train_micro_batch_size == -1 else config.train_micro_batch_size
    training = rl_cluster_lib.RLTrainingConfig(actor_optimizer=optimizer, mini_batch_size=config.batch_size,
                                               train_micro_batch_size=micro, max_steps=steps,
                                               eval_every_n_steps=config.eval_interval)
    accumulation = training.gradient_accumulation_steps
    accumulator = 0
    if trainer_rules["accumulator"] == "multisteps" and accumulation is not None:
        optimizer = optax.MultiSteps(optimizer, accumulation)
    elif trainer_rules["accumulator"] == "float32_past_one" and (accumulation or 1) > 1:
        # float32 gradients laid out as the parameters: an account, since PyPI's tunix has no such buffer
        accumulator = per_chip(jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, jnp.float32, sharding=p.sharding),
                                            nnx.state(model, nnx.Param)))
    with mesh, rules():
        abstract = nnx.eval_shape(lambda m: nnx.Optimizer(m, optimizer, wrt=nnx.Param), model)
        graphdef, opt_state = nnx.split(abstract)
        specs = nnx.get_partition_spec(opt_state)
    state = nnx.merge(graphdef, laid_out(opt_state, specs, mesh, trainer_rules["layout"]))
    optimizer_bytes = per_chip(nnx.state(state, nnx.optimizer.OptState)) + accumulator

    rl = config.rl
    algo = GrpoConfig(num_generations=rl.num_generations, num_iterations=rl.num_iterations, beta=rl.grpo_beta,
                      epsilon=rl.grpo_epsilon, loss_algo=rl.loss_algo,
                      **({"loss_agg_mode": rl.loss_agg_mode} if hasattr(rl, "loss_agg_mode") else {}))
    algo.temperature = config.decode_sampling_temperature  # GrpoLearner takes the rollout's temperature
    loss = function_registry.get_policy_loss_fn(algo.policy_loss_fn)
    pad, eos = request["pad_id"] or 0, request["eos_id"]
    trainer = type("GrpoActorTrainer", (), {  # what _train_step reads of the actor's PeftTrainer
        "loss_fn": staticmethod(lambda m, train_example, algo_config: loss(
            m, train_example, algo_config=algo, pad_id=pad, eos_id=eos)),
        "gen_model_input_fn": staticmethod(lambda x: {"train_example": x, "algo_config": algo}),
        "_lora_enabled": False, "_has_aux": True})()

    def train_step(model, optimizer, inputs):
        return peft_trainer.PeftTrainer._train_step(trainer, model, optimizer, inputs)

    rows = (micro or config.batch_size) * rl.num_generations
    prompt = config.max_prefill_predict_length
    completion = config.max_target_length - prompt
    data_axes = PartitionSpec(*training.data_sharding_axis)

    def batch(shape, dtype):  # each array of a batch as PeftTrainer's shard_input lays it out
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding_utils.get_sharding(shaped(shape, dtype), mesh, data_axes))

    example = common.TrainExample(
        prompt_ids=batch((rows, prompt), jnp.int32), prompt_mask=batch((rows, prompt), jnp.bool_),
        completion_ids=batch((rows, completion), jnp.int32), completion_mask=batch((rows, completion), jnp.bool_),
        advantages=batch((rows,), jnp.float32),
        ref_per_token_logps=batch((rows, completion), jnp.float32) if algo.beta != 0.0 else None,
        old_per_token_logps=batch((rows, completion), jnp.float32) if rl.num_iterations > 1 else None)

    # vLLM on chips it shares with the trainer: once started, its weights and KV cache fill
    # hbm_utilization_vllm of the chip less what was in use then, both models (tpu_inference
    # tpu_worker.determine_available_memory); RLCluster starts it before the trainer's optimizer. Its chip
    # is the HBM the runtime reports (bytes_limit), or under Pathways tpu_inference's table
    # (utils.get_device_hbm_limit): request["vllm_hbm_bytes"]. "actor": the actor samples, no vLLM.
    with_vllm = request.get("sampler", "vllm") == "vllm"
    vllm_share = round(config.hbm_utilization_vllm * (request.get("vllm_hbm_bytes") or limit)) if with_vllm else 0
    other_model = vllm_share - params if shared and vllm_share else params  # beside one model: the other, or vLLM's share
    options = request.get("compiler_options") or {}  # the run's flags, for its programs only: not chip_limit's
    programs = {}
    with mesh, rules():
        programs["train_step"] = compile_program(
            "train_step", nnx.jit(train_step, donate_argnames=("optimizer",)), (model, state, example),
            other_model + accumulator, options)
        if algo.beta != 0.0 or rl.num_iterations > 1:
            model_graph, weights = nnx.split(model)

            def logps(weights, prompts, completions):
                return common.compute_per_token_logps(
                    model_graph, weights, prompt_tokens=prompts, completion_tokens=completions, pad_id=pad,
                    eos_id=eos, stop_gradient=True, return_logits=False, temperature=algo.temperature)

            # compute_logps_micro_batch_size: the train micro-batch unless set (rl_learner)
            programs["reference_logps"] = compile_program(
                "reference_logps", jax.jit(logps),
                (weights, batch((rows, prompt), jnp.int32), batch((rows, completion), jnp.int32)),
                other_model + optimizer_bytes, options)

    kv_heads = -(-config.num_kv_heads // rollout["tensor_parallel_size"])  # at least one head's K and V a chip
    print(json.dumps({
        "versions": {name: metadata.version(name) for name in ("maxtext", "jax", "jaxlib", "libtpu", "google-tunix")},
        "image_tunix": tunix_commit, "trainer_rules": trainer_rules,
        "accelerator": request["accelerator"], "limit_bytes": limit,
        "trainer_chips": len(trainer_devices), "sampler_chips": len(sampler_devices), "shared_chips": shared,
        "trainer_mesh": {name: size for name, size in mesh.shape.items() if size > 1}, "rollout": rollout,
        "sampler": request.get("sampler", "vllm"), "hbm_utilization_vllm": config.hbm_utilization_vllm,
        "vllm_share_bytes": vllm_share,
        "held_bytes": {"actor": params, "reference": params, "optimizer": optimizer_bytes},
        "vllm_weights_bytes": vllm_weights_per_chip(nnx.state(model, nnx.Param), rollout, vllm_rules(config)),
        "kv_bytes_per_token": 2 * config.num_decoder_layers * kv_heads * config.head_dim * 2,
        "max_model_len": config.max_target_length + config.kv_cache_buffer,
        "rows": rows, "prompt": prompt, "completion": completion, "gradient_accumulation_steps": accumulation,
        "programs": programs, "seconds": round(time.monotonic() - started, 1)}))


if __name__ == "__main__":
    try:
        main()
    except SystemExit as stop:
        if isinstance(stop.code, str):  # a refusal of ours, as one JSON line
            print(json.dumps({"error": stop.code}))
            sys.exit(1)
        raise
    except Exception as error:  # noqa: BLE001  one JSON line for the caller, whatever MaxText raised
        print(json.dumps({"error": f"{type(error).__name__}: {' '.join(str(error).split())[:1500]}",
                          "traceback": traceback.format_exc()[-4000:]}))
        sys.exit(1)
