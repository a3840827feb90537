"""The smoke's substitute for vLLM: a rollout that samples with the actor itself. SUBSTITUTED, not the
recipe's sampler: vLLM and tpu_inference cannot be installed on the lent chip's machine.

train_rl always rolls out with MaxTextVllmRollout (or tunix's "vllm" engine), and tunix's own "vanilla"
engine cannot take MaxText's adapter: it needs `rollout_actor.config` and a model that returns its KV
cache (tunix 0.1.7 rl_cluster.py RLCluster._init_cluster; TunixMaxTextAdapter.__call__ returns
(logits, None)). RLCluster accepts any BaseRollout subclass as its engine, so this one is passed there.

How it samples: prompts left-padded to max_prompt_length (or the longest prompt), then
max_tokens_to_generate tokens, each from a forward pass of the whole sequence (no KV cache), all inside
one jitted loop; temperature and top-k as the rollout config says; the pad id and ids the tokenizer
cannot decode are never drawn (the generated model's vocabulary is Llama's, its tokenizer a small one);
a row ends at its end-of-sequence id. Its memory: the actor's weights (shared, not copied) and one
forward pass of the batch.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tunix.rl import common
from tunix.rl.rollout import base_rollout

NEG = -1e30
WINDOW = 64  # prompt windows grow in these steps, so that few programs are compiled


class ActorSampler(base_rollout.BaseRollout):
    """Sampling with the rollout actor, which on one chip is the trainer's actor itself."""

    calls: list[dict] = []  # every generate call: rows, lengths and seconds, for the report

    def __init__(self, rollout_actor=None, tokenizer=None, mesh=None, rollout_config=None, **_):
        self._model = rollout_actor
        self._tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # tunix's TokenizerAdapter holds HF's
        self.mesh = mesh
        self._programs: dict[tuple, object] = {}
        self._seed = 0

    def pad_id(self) -> int:
        pad = self._tokenizer.pad_token_id
        return self.eos_id() if pad is None else int(pad)

    def eos_id(self) -> int:
        return int(self._tokenizer.eos_token_id)

    def model(self):
        return self._model

    def update_params(self, params, filter_types=None) -> None:
        nnx.update(self._model, params)  # the same arrays on one chip

    def get_per_token_logps(self, prompt_tokens, completion_tokens):
        graphdef, state = nnx.split(self._model)
        return common.compute_per_token_logps(graphdef, state, prompt_tokens=prompt_tokens,
                                              completion_tokens=completion_tokens, pad_id=self.pad_id(),
                                              eos_id=self.eos_id(), stop_gradient=True, return_logits=False)

    def _program(self, rows: int, prompt: int, new: int, top_k: int | None):
        key = (rows, prompt, new, top_k)
        if key not in self._programs:
            self._programs[key] = nnx.jit(self._loop(prompt, new, top_k))
        return self._programs[key]

    def _loop(self, prompt: int, new: int, top_k: int | None):
        pad, eos, drawable = self.pad_id(), self.eos_id(), len(self._tokenizer)

        def generate(model, tokens, positions, keys, temperature):
            graphdef, state = nnx.split(model)

            def step(t, carry):
                # the model's state travels in the carry, and what a call changes in it is dropped:
                # MaxText's decoder advances RNG counters (mutable only at the loop's own trace level) and
                # Gemma 4's wrapped Linen modules add state on a call (a carry cannot change shape)
                state, tokens, logps, done = carry
                logits, _ = nnx.merge(graphdef, state)(tokens, positions, None, None)
                row = jax.lax.dynamic_index_in_dim(logits, prompt + t - 1, axis=1, keepdims=False)
                row = row.astype(jnp.float32)
                ids = jnp.arange(row.shape[-1])
                row = jnp.where((ids == pad) | (ids >= drawable), NEG, row)
                if top_k and top_k < row.shape[-1]:
                    row = jnp.where(row < jax.lax.top_k(row, top_k)[0][:, -1:], NEG, row)
                row = row / jnp.maximum(temperature, 1e-6)
                drawn = jax.random.categorical(keys[t], row, axis=-1)
                greedy = jnp.argmax(row, axis=-1)
                token = jnp.where(temperature > 0, drawn, greedy).astype(tokens.dtype)
                logp = jnp.take_along_axis(jax.nn.log_softmax(row, axis=-1), token[:, None], axis=-1)[:, 0]
                token = jnp.where(done, pad, token)
                tokens = jax.lax.dynamic_update_slice_in_dim(tokens, token[:, None], prompt + t, axis=1)
                logps = jax.lax.dynamic_update_slice_in_dim(logps, logp[:, None], t, axis=1)
                return state, tokens, logps, done | (token == eos)

            logps = jnp.zeros((tokens.shape[0], new), jnp.float32)
            done = jnp.zeros((tokens.shape[0],), bool)
            _, tokens, logps, _ = jax.lax.fori_loop(0, new, step, (state, tokens, logps, done))
            return tokens, logps

        return generate

    def generate(self, prompts, rollout_config, **_) -> base_rollout.RolloutOutput:
        started = time.monotonic()
        encoded = [self._tokenizer.encode(text, add_special_tokens=False) for text in prompts]
        # MaxText's evaluation leaves max_prompt_length at tunix's default, 64 (evaluate_rl.py), and vLLM
        # takes a prompt whole: the window grows to the longest prompt, in steps of WINDOW, never cuts one
        longest = -(-max(map(len, encoded)) // WINDOW) * WINDOW
        prompt = max(int(rollout_config.max_prompt_length), longest)
        new = int(rollout_config.max_tokens_to_generate)
        pad, eos = self.pad_id(), self.eos_id()
        rows = len(prompts)
        left = np.full((rows, prompt), pad, np.int32)
        lengths = np.zeros(rows, np.int32)
        for row, ids in enumerate(encoded):
            left[row, prompt - len(ids):] = ids
            lengths[row] = len(ids)
        tokens = np.concatenate([left, np.full((rows, new), pad, np.int32)], axis=1)
        column = np.arange(prompt + new)[None, :]
        positions = np.maximum(column - (prompt - lengths[:, None]), 0).astype(np.int32)
        seed = rollout_config.seed if getattr(rollout_config, "seed", None) is not None else self._seed
        self._seed += 1
        keys = jax.random.split(jax.random.PRNGKey(int(seed)), new)
        temperature = jnp.float32(rollout_config.temperature or 0.0)
        program = self._program(rows, prompt, new, rollout_config.top_k)
        out, logps = program(self._model, jnp.asarray(tokens), jnp.asarray(positions), keys, temperature)
        out, logps = np.asarray(out), np.asarray(logps)
        completions, texts, logprobs = [], [], []
        for row in range(rows):
            generated = out[row, prompt:]
            stops = np.nonzero(generated == eos)[0]
            end = int(stops[0]) + 1 if len(stops) else new
            completions.append(generated[:end])
            logprobs.append(logps[row, :end])
            texts.append(self._tokenizer.decode(generated[:end].tolist(), skip_special_tokens=True))
        ActorSampler.calls.append({"rows": rows, "prompt": prompt, "new": new,
                                   "seconds": round(time.monotonic() - started, 3)})
        return base_rollout.RolloutOutput(text=texts, logits=None, tokens=completions,
                                          left_padded_prompt_tokens=left, logprobs=logprobs)
