"""`--set` values and what becomes of them, per recipe: the table tests/test_maxtext_values.py checks
tpu-rl's check against (recipes/runs/maxtext_values.py check_value), and that a harness running each
release's real config class (pyconfig.initialize_pydantic on the rendered train arguments plus the item)
can feed to MaxText as well.

- accepted: tpu-rl lets the item through.
- parser_accepts: the release's config class accepts it (MaxTextConfig in 0.2.3, RLConfig in 0.2.4).
  It differs from `accepted` where the trainer refuses the value later (tunix) or ignores it.
- why: who refuses it, or what the value does; "" for a plain good value.

A harness should run the real parser on the rendered train arguments with the recipe's own overrides,
as tpu-rl renders them. Every value comes from the issue (learning_rate=abc, rl.num_generations=1, batch_size=0,
train_fraction=2, steps) or from the schema and sources cited in recipes/runs/maxtext_values.py and
recipes/runs/maxtext_keys/<version>.toml.
"""

from __future__ import annotations

from dataclasses import dataclass

QWEN, GEMMA, LLAMA = "qwen3-v6e32", "gemma4-v6e64", "llama31-v6e8"  # MaxText 0.2.4, 0.2.4, 0.2.3


@dataclass(frozen=True)
class SetCase:
    recipe: str
    key: str
    value: str
    accepted: bool
    parser_accepts: bool
    why: str = ""

    @property
    def id(self) -> str:
        return f"{self.recipe}:{self.key}={self.value}"


SCHEMA = "the config class refuses it"
TUNIX = "the config class accepts it and tunix refuses it once the slice is up"
IGNORED = "the config class accepts it and train_rl never sees the value"
GROUP = "tpu-rl refuses a whole group of keys as one item: each key is checked and priced on its own"
NONFINITE = "the config class accepts a non-finite float (pydantic's allow_inf_nan defaults to true)"
VLLM = ("the config class accepts it and vLLM refuses max_tokens = max_target_length - "
        "max_prefill_predict_length < 1 once the slice is up")

SET_CASES: list[SetCase] = [
    # the four, in both releases
    SetCase(QWEN, "learning_rate", "abc", False, False, SCHEMA),
    SetCase(LLAMA, "learning_rate", "abc", False, False, SCHEMA),
    SetCase(QWEN, "rl.num_generations", "1", False, True, TUNIX),
    SetCase(LLAMA, "rl.num_generations", "1", False, True, TUNIX),
    SetCase(QWEN, "num_generations", "1", False, True, TUNIX),  # 0.2.4 copies it into rl.num_generations
    SetCase(QWEN, "batch_size", "0", False, True, TUNIX),
    SetCase(LLAMA, "batch_size", "0", False, True, TUNIX),
    SetCase(QWEN, "train_fraction", "2", False, False, SCHEMA),  # 0.2.4: gt=0.0, le=1.0
    # 0.2.3 declares train_fraction a bare float: 2 slices twice the batches and trains twice the steps
    SetCase(LLAMA, "train_fraction", "2", True, True, "0.2.3 has no bound: twice the batches and steps"),
    # keys that change nothing
    SetCase(QWEN, "steps", "100", False, True, IGNORED + " (RLConfig sets steps = train_steps)"),
    SetCase(QWEN, "dataset.batch_size", "4", False, True, IGNORED + " (rl.yml's batch_size is copied over it)"),
    SetCase(LLAMA, "num_iterations", "2", False, True, IGNORED + " (train_rl reads rl.num_iterations)"),
    SetCase(LLAMA, "emb_dim", "1024", False, True, IGNORED + " (MaxTextConfig sets it from base_emb_dim)"),
    # 0.2.3 reads steps: it is the schedule length while learning_rate_schedule_steps is -1
    SetCase(LLAMA, "steps", "100", True, True, "0.2.3 sets learning_rate_schedule_steps = steps when it is -1"),
    # types, bounds and choices
    SetCase(QWEN, "learning_rate", "-1e-5", False, False, SCHEMA),  # NonNegativeFloat
    SetCase(QWEN, "learning_rate", "none", False, False, SCHEMA),  # pyconfig: top-level "none" -> None
    SetCase(QWEN, "rl.loss_algo", "ppo", False, False, SCHEMA),  # Literal['grpo', 'gspo-token']
    SetCase(QWEN, "dtype", "int8", False, False, SCHEMA),  # DType enum
    SetCase(QWEN, "enable_tunix_perf_metrics", "maybe", False, False, SCHEMA),  # bool
    # configs/models/qwen3-30b-a3b.yml sets enable_dropout: false, and pyconfig's
    # validate_no_keys_overridden_twice (0.2.4 configs/pyconfig.py L128-150, called at L486 unless
    # override_model_config is true) refuses another value: the real train command refuses it.
    SetCase(QWEN, "enable_dropout", "True", False, False, "the model's yml sets another value"),
    SetCase(QWEN, "enable_dropout", "False", True, True),
    SetCase(QWEN, "rl.num_iterations", "1.5", False, False, SCHEMA),  # int: pydantic refuses a fraction
    SetCase(QWEN, "rl", "{num_generations: 1}", False, True, GROUP),  # the config class takes the mapping
    # tunix RLTrainingConfig.__post_init__ (c4ec573d tunix/rl/rl_cluster.py L118-147): positive micro batches,
    # train_micro_batch_size dividing mini_batch_size = batch_size (train_rl.py 0.2.4 L507)
    SetCase(QWEN, "train_micro_batch_size", "0", False, True, TUNIX),
    SetCase(QWEN, "rollout_micro_batch_size", "0", False, True, TUNIX),
    SetCase(QWEN, "batch_size", "6", False, True, TUNIX),  # the recipe's train_micro_batch_size=8
    SetCase(QWEN, "train_micro_batch_size", "4", True, True),  # divides the recipe's batch_size=8
    SetCase(QWEN, "rollout_micro_batch_size", "-1", True, True),  # -1: train_rl passes None
    # pyconfig _coerce_to_list (0.2.4 pyconfig.py L286-287, 0.2.3 L264-265): a string becomes a list
    SetCase(QWEN, "adamw_mask", "bias", True, True),
    SetCase(LLAMA, "adamw_mask", "bias", True, True),
    SetCase(QWEN, "trainable_parameters_mask", "[decoder, embed]", True, True),
    # non-finite floats: YAML reads .inf and 1e999 as infinity, pydantic's lax mode reads 'inf' and
    # 'Infinity' as infinity; -inf is under learning_rate's ge=0, nan fails every bound
    SetCase(QWEN, "learning_rate", "inf", False, True, NONFINITE),
    SetCase(QWEN, "learning_rate", ".inf", False, True, NONFINITE),
    SetCase(QWEN, "learning_rate", "Infinity", False, True, NONFINITE),
    SetCase(QWEN, "learning_rate", "1e999", False, True, NONFINITE),
    SetCase(LLAMA, "learning_rate", ".inf", False, True, NONFINITE),
    SetCase(QWEN, "adam_b1", "inf", False, True, NONFINITE),  # a float without bounds
    SetCase(QWEN, "adam_b1", ".nan", False, True, NONFINITE),
    SetCase(QWEN, "learning_rate", "-inf", False, False, SCHEMA),
    SetCase(QWEN, "learning_rate", "nan", False, False, SCHEMA),
    # the sequence must be longer than the prompt (recipes/runs/maxtext_values.py LENGTH_DEFAULTS has the source)
    SetCase(QWEN, "max_target_length", "8", False, True, VLLM),  # the recipe's max_prefill_predict_length=256
    SetCase(QWEN, "max_target_length", "256", False, True, VLLM),
    SetCase(QWEN, "max_prefill_predict_length", "512", False, True, VLLM),
    SetCase(GEMMA, "max_target_length", "256", False, True, VLLM),  # rl.yml's max_prefill_predict_length: 256
    SetCase(LLAMA, "max_prefill_predict_length", "1024", False, True, VLLM),  # rl.yml's max_target_length: 1024
    SetCase(QWEN, "max_target_length", "257", True, True),
    # good values
    SetCase(QWEN, "learning_rate", "1e-5", True, True),
    SetCase(QWEN, "learning_rate", "0.00001", True, True),
    SetCase(LLAMA, "learning_rate", "3.0e-6", True, True),
    SetCase(QWEN, "rl.num_generations", "8", True, True),
    SetCase(LLAMA, "rl.num_generations", "8", True, True),
    SetCase(QWEN, "batch_size", "16", True, True),  # a multiple of the recipe's train_micro_batch_size=8 (tunix)
    SetCase(QWEN, "train_fraction", "0.5", True, True),
    SetCase(QWEN, "rl.loss_algo", "gspo-token", True, True),
    SetCase(QWEN, "enable_tunix_perf_metrics", "True", True, True),
    SetCase(QWEN, "rl.epsilon_high", "null", True, True),
    SetCase(GEMMA, "decode_sampling_temperature", "0.7", True, True),
]

# Equal values spelled differently: one run, one command line.
SAME_VALUE_CASES: list[tuple[str, str, tuple[str, ...]]] = [
    (QWEN, "learning_rate", ("2e-5", "2.0e-5", "0.00002", "2E-5")),
    (QWEN, "learning_rate", ("3e-5", "3.0e-5", "0.00003")),
    (QWEN, "enable_tunix_perf_metrics", ("True", "true", "yes")),
    (LLAMA, "learning_rate", ("1e-6", "1.0e-6", "0.000001")),
    (QWEN, "rl.num_generations", ("8", "8.0", "0x8")),
]
