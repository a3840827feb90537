"""`tpu-rl check-rewards FILE.py:fn1,fn2 [--recipe R] [--data-processor FILE.py] [--tokenizer DIR]`: import
the files in a clean subprocess (`python -I -B`: no user site, no PYTHONPATH, no current directory on
sys.path, no __pycache__ left behind) the way MaxText does, and call each function with what the trainer
will give it, refusing in one line a function that is missing, raises, or returns the wrong number or type
of values.

How MaxText 0.2.4 loads and calls them (maxtext/trainers/post_train/rl/ in the wheel):
- utils_rl.load_custom_callable(module_path, name): the file must exist (os.path.isfile), is loaded with
  importlib.util.spec_from_file_location as a fresh module (not on sys.path) and `getattr(module, name)`;
- train_rl.build_reward_fns: `reward_functions` is split at commas and stripped; the functions REPLACE the
  built-in three (match_format_exactly, match_format_approximately, check_numbers);
- train_rl.make_reward_fn wraps each as `fn(tmvp_config=trainer_config, **kwargs)` under functools.wraps,
  so tunix inspects the user's own signature.
The rows: what process_data (utils_rl's, or the --data-processor file's) makes of gsm8k rows
(scripts/rewards/prompts.py: the prompt in the data template and the tokenizer's chat template; answer =
json.dumps([answer, answer])). train_rl.prepare_datasets batches them with grain (`.batch(batch_size)`:
each column a numpy array of str). Training (tunix c4ec573d) calls each function on a batch of
num_generations copies of each row, with `trajectory_ids` and mode="train" added; evaluation (maxtext 0.2.4
evaluate_rl.py _compute_row_reward) with one response at a time, prompts=[prompt], completions=[response],
answer=[answer], question=question (numpy str), no mode (docs/provenance.md#what-reward-functions-are-given).
The check makes both calls, with the recipe's num_generations.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path

from tpu_rl.recipes import UserError
from tpu_rl.recipes.runs.maxtext_values import config_values
from tpu_rl.recipes.runs.reward_names import check_reward_names
from tpu_rl.recipes.runs.user_files import FIRST_RELEASE
from tpu_rl.scripts.rewards import prompts as sample
from tpu_rl.scripts.rewards.prompts import ChatTemplate
from tpu_rl.scripts.rewards.subprocess_run import _PRELUDE, UNCHECKED_HINT, UncheckedImport, run_check as _run

__all__ = ["UNCHECKED_HINT", "UncheckedImport"]


# tmvp_config: train_rl's config as the recipe's release fills it (tpu_rl.recipes.runs.maxtext_values.config_values);
# GRPOConfig's fields, which tunix's reward_manager passes by parameter name: (the MaxText key that sets it,
# or None for tunix's default; the value) (tunix c4ec573d tunix/rl/grpo/grpo_learner.py GRPOConfig;
# docs/provenance.md#what-reward-functions-are-given).
GRPO_FIELDS = {
    "num_generations": ("rl.num_generations", 2), "num_iterations": ("rl.num_iterations", 1),
    "beta": ("rl.grpo_beta", 0.08), "epsilon": ("rl.grpo_epsilon", 0.2), "loss_algo": ("rl.loss_algo", "grpo"),
    "loss_agg_mode": ("rl.loss_agg_mode", "sequence-mean-token-mean"),
    "algo_variant": (None, "grpo"), "advantage_estimator": (None, "grpo"), "policy_loss_fn": (None, "grpo"),
    "reward_manager": (None, "sequence-level"), "kl_clamp_value": (None, None), "kl_loss_mode": (None, "kl"),
    "use_rollout_logps": (None, True), "sampler_is": (None, None), "sampler_is_threshold": (None, 2.0),
}
TRAIN_MODE = "train"  # str(rl_cluster.Mode.TRAIN), tunix c4ec573d tunix/rl/rl_cluster.py Mode


def _typed(text: str, like):
    """A recipe override's text as the type of rl.yml's value."""
    if isinstance(like, bool):
        return text.strip().lower() == "true"
    if isinstance(like, int):
        return int(float(text))
    if isinstance(like, float):
        return float(text)
    return text


@dataclass(frozen=True)
class CheckInputs:
    """What the check calls with: the data TEMPLATE, the tokenizer's chat template (None: not found),
    the stand-in tmvp_config and GRPOConfig, and where the tokenizer was looked for."""
    template: str = sample.TEMPLATE
    chat: ChatTemplate | None = None
    config: dict = field(default_factory=lambda: _config(None, ()))
    algo: dict = field(default_factory=lambda: {name: value for name, (_, value) in GRPO_FIELDS.items()})
    tokenizer: str | None = None  # the recipe's tokenizer repo
    release: str = ""  # the MaxText release whose config it is
    tokenizer_dir: str | None = None  # where the tokenizer's files are (--tokenizer DIR or the cache)

    @property
    def generations(self) -> int:
        return int(self.algo["num_generations"])

    def describe(self) -> str:
        """One line: the prompts' chat template, or why there is none."""
        if self.chat is not None:
            return f"prompts in the chat template of {self.chat.source}"
        if self.tokenizer:
            return (f"prompts WITHOUT the tokenizer's chat template: none in the Hugging Face cache of "
                    f"{self.tokenizer}; pass --tokenizer DIR (`hf download {self.tokenizer} "
                    "tokenizer_config.json chat_template.jinja`)")
        return "prompts WITHOUT a chat template: pass --recipe (its cached tokenizer) or --tokenizer DIR"


def _config(recipe, items: tuple[str, ...]) -> dict:
    if recipe is None:
        return config_values(FIRST_RELEASE["rewards"], None, ())
    return config_values(recipe.maxtext_version, recipe.model.maxtext_name,
                         items or (f"model_name={recipe.model.maxtext_name}", *recipe.rl.overrides))


def check_inputs(recipe=None, tokenizer: Path | None = None, items: tuple[str, ...] = ()) -> CheckInputs:
    """The recipe's data template, train_rl's config (the train command's `items`, else the recipe's
    overrides) and GRPO settings (the newest release's defaults without a recipe), and the chat template
    of --tokenizer DIR or else of the recipe's cached tokenizer."""
    if tokenizer is not None and not tokenizer.is_dir():
        raise UserError(f"--tokenizer {tokenizer}: no such directory: pass a tokenizer directory (with "
                        "tokenizer_config.json or chat_template.jinja)")
    repo = recipe.model.tokenizer if recipe is not None else None
    chat = sample.find_chat_template(repo, tokenizer)
    if tokenizer is not None and chat is None:
        raise UserError(f"--tokenizer {tokenizer}: it has no chat template (chat_template.jinja, or chat_template "
                        "in tokenizer_config.json)")
    where = str(Path(chat.source).parent) if chat is not None else str(tokenizer) if tokenizer else None
    if recipe is None:
        return CheckInputs(chat=chat, release=FIRST_RELEASE["rewards"], tokenizer_dir=where)
    config = _config(recipe, tuple(items))
    algo = {name: _typed(str(config[key]), value) if key and config.get(key) is not None else value
            for name, (key, value) in GRPO_FIELDS.items()}
    return CheckInputs(sample.data_template(recipe.rl.overrides, recipe.maxtext_version), chat, config, algo, repo,
                       recipe.maxtext_version, where)


@dataclass(frozen=True)
class RewardsOption:
    path: Path
    functions: tuple[str, ...]

    @property
    def text(self) -> str:
        return f"{self.path}:{','.join(self.functions)}"


def parse_rewards(value: str, option: str = "--rewards") -> RewardsOption:
    """FILE.py:fn1,fn2 -> the file (which must exist) and the names, split and stripped as MaxText does."""
    path_text, sep, names = value.rpartition(":")
    functions = tuple(name.strip() for name in names.split(",") if name.strip())
    if not sep or not path_text.endswith(".py") or not functions:
        raise UserError(f"{option} '{value}' is not FILE.py:fn1,fn2: name a Python file and its reward functions, "
                        "e.g. --rewards rewards.py:short_answer")
    bad = [name for name in functions if not name.isidentifier()]
    if bad:
        raise UserError(f"{option}: '{bad[0]}' is not a Python function name")
    check_reward_names(functions, f"--rewards {value}")
    path = Path(path_text)
    if not path.is_file():
        raise UserError(f"{option}: no file {path_text}: pass the path of the Python file that defines "
                        f"{', '.join(functions)}")
    return RewardsOption(path, functions)


def parse_data_processor(value: str) -> Path:
    """--data-processor FILE.py: the Python file (which must exist) that defines process_data."""
    path = Path(value)
    if path.suffix != ".py" or not path.is_file():
        raise UserError(f"--data-processor {value}: no such Python file: pass the file that defines "
                        "process_data(dataset_name, model_tokenizer, template_config, tmvp_config, x)")
    return path


# Runs in the subprocess: argv = [file, names, rows, completions per row, config, algo config (JSON)];
# prints one JSON object.
_RUNNER = _PRELUDE + r"""
import inspect, numbers
import numpy as np
names, rows, completions = json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
config, algo = Config(json.loads(sys.argv[5])), json.loads(sys.argv[6])
G = algo["num_generations"]
# grain's batch (a numpy array per column), then tunix's repeat [B] -> [B*G] and its list of prompts.
batch = {key: np.repeat(np.array([row[key] for row in rows]), G, axis=0) for key in rows[0]}
prompts = list(batch.pop("prompts"))
flat = [c for each in completions for c in each]
trajectory_ids = [f"{r}_{g}" for r in range(len(rows)) for g in range(G)]
def scores_of(name, scores, n, how):
    try:
        values = list(scores)
    except TypeError:
        values = None
    if values is None or len(values) != n:
        got = f"{len(values)} values" if values is not None else f"a {type(scores).__name__}"
        fail(f"{name} returned {got} for {n} completions {how}: return a list of {n} floats, one per completion")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isinf(float(value)):
            fail(f"{name} returned {value!r} ({type(value).__name__}) {how}: "
                 "each score must be a float (nan is skipped)")
    return [float(v) for v in values]
result = {}
for name in names:
    fn = getattr(module, name, None)
    if fn is None:
        fail(f"it defines no function {name!r}")
    if not callable(fn):
        fail(f"{name} is a {type(fn).__name__}, not a function")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    train = {**batch, "trajectory_ids": trajectory_ids, "mode": "train"}
    missing = [key for key in train if key not in params]
    if params and not takes_all and missing:
        fail(f"{name} takes no **kwargs, but tunix also passes {', '.join(missing)}: add **kwargs")
    train.update({k: v for k, v in algo.items() if k in params and k not in train
                  and k not in ("self", "prompts", "completions", "kwargs")})
    try:
        scores = fn(tmvp_config=config, prompts=prompts, completions=flat, **train)
    except BaseException as error:
        raised(error, name)
    result[name] = scores_of(name, scores, len(flat), "in training")
    for row, each in zip(rows, completions):
        for completion in each:
            try:
                one = fn(tmvp_config=config, prompts=[np.str_(row["prompts"])], completions=[completion],
                         answer=[np.str_(row["answer"])], question=np.str_(row["question"]))
            except BaseException as error:
                raised(error, name, " in evaluation (one completion, question a str, answer=[answer], no mode)")
            scores_of(name, one, 1, "in evaluation")
print(json.dumps({"scores": result}))
"""


def sample_rows(inputs: CheckInputs, processor: Path | None = None) -> list[dict]:
    """What process_data makes of the sample gsm8k rows: utils_rl's, or the --data-processor file's."""
    if processor is not None:
        return check_processor(processor, inputs)
    return [sample.builtin_row(row, inputs.template, inputs.chat, inputs.config) for row, _ in sample.SAMPLES]


def sample_completions(inputs: CheckInputs) -> list[list[str]]:
    return [sample.completions_of(i, inputs.generations) for i in range(len(sample.SAMPLES))]


def check_rewards(option: RewardsOption, inputs: CheckInputs | None = None,
                  rows: list[dict] | None = None) -> dict[str, list[float]]:
    """Each function's scores on the training batch (B rows x num_generations completions, in that order),
    or one UserError line saying what is wrong. `rows`: check_processor's (default: utils_rl's)."""
    inputs = inputs or CheckInputs()
    rows = rows if rows is not None else sample_rows(inputs)
    answer = _run(f"--rewards {option.text}", _RUNNER, option.path,
                  [json.dumps(list(option.functions)), json.dumps(rows), json.dumps(sample_completions(inputs)),
                   json.dumps({"release": inputs.release, "values": inputs.config}), json.dumps(inputs.algo)])
    return answer["scores"]


# The data processor: train_rl.prepare_datasets (0.2.3 and 0.2.4) maps every row through process_data, whose
# built-in (utils_rl.process_data) returns these keys; the check calls it on the sample gsm8k rows with a
# tokenizer stand-in whose apply_chat_template is the real chat template's render (docs/provenance.md#the-data-processor).
PROCESSOR_KEYS = ("prompts", "question", "answer")
_PROCESSOR_RUNNER = _PRELUDE + r"""
template, config, rows, dataset = (json.loads(arg) for arg in sys.argv[2:6])
chat, tokenizer_file = json.loads(sys.argv[6]), json.loads(sys.argv[7])
RENDER
try:
    import tokenizers
    real = tokenizers.Tokenizer.from_file(tokenizer_file) if tokenizer_file else None
except ImportError:
    real = None
class Tokenizer:
    chat_template = chat["text"] if chat else None
    def __init__(self):
        for name, value in (chat["tokens"] if chat else {}).items():
            setattr(self, name, value)
    def _real(self, what):
        if real is None:
            fail(f"process_data called model_tokenizer.{what}, and the check has no tokenizer to give it: pass "
                 "--tokenizer DIR (with tokenizer.json), or --recipe with its tokenizer in the Hugging Face cache")
        return real
    def encode(self, text, add_special_tokens=True, **kwargs):
        return self._real("encode").encode(text, add_special_tokens=add_special_tokens).ids
    def tokenize(self, text, **kwargs):
        return self._real("tokenize").encode(text, add_special_tokens=False).tokens
    def decode(self, ids, skip_special_tokens=False, **kwargs):
        return self._real("decode").decode(list(ids), skip_special_tokens=skip_special_tokens)
    def __call__(self, text, **kwargs):
        return {"input_ids": self.encode(text)}
    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, **kwargs):
        if tokenize:
            fail("process_data asked apply_chat_template to tokenize: the trainer batches prompts as text")
        if not chat:
            return "".join(m["content"] for m in messages)
        return render_chat(chat["text"], chat["tokens"], messages, add_generation_prompt)
fn = getattr(module, "process_data", None)
if not callable(fn):
    fail("it defines no function 'process_data'")
out_rows = []
for row in rows:
    try:
        out = fn(dataset, Tokenizer(), template, Config(config), row)
    except BaseException as error:
        raised(error, "process_data")
    if not isinstance(out, dict):
        fail(f"process_data returned a {type(out).__name__}: return a dict with prompts, question and answer")
    missing = [key for key in ("prompts", "question", "answer") if not isinstance(out.get(key), str)]
    if missing:
        fail(f"process_data's result has no string {', '.join(missing)}: the trainer batches prompts, question, answer")
    try:
        accepted = json.loads(out["answer"])
    except ValueError:
        accepted = None
    if not isinstance(accepted, list):
        fail(f"process_data's answer {out['answer'][:40]!r} is not a JSON list: MaxText's evaluation reads it as "
             "the list of accepted answers (utils_rl's is json.dumps([answer, answer]))")
    try:
        json.dumps(out)
    except (TypeError, ValueError):
        fail("process_data's result holds a value that is not text or a number: the trainer batches every key")
    out_rows.append(out)
if len({tuple(sorted(out)) for out in out_rows}) > 1:
    fail("process_data returns different keys for different rows: grain's batch needs the same keys in each")
print(json.dumps({"rows": out_rows}))
"""


def check_processor(path: Path, inputs: CheckInputs | None = None) -> list[dict]:
    """What process_data makes of the sample gsm8k rows, or one UserError line saying what is wrong."""
    inputs = inputs or CheckInputs()
    template = {"SYSTEM_PROMPT": sample.SYSTEM_PROMPT, "TEMPLATE": inputs.template}
    chat = {"text": inputs.chat.text, "tokens": inputs.chat.tokens} if inputs.chat else None
    runner = _PROCESSOR_RUNNER.replace("RENDER", inspect.getsource(sample.render_chat))
    tokenizer_file = Path(inputs.tokenizer_dir) / "tokenizer.json" if inputs.tokenizer_dir else None
    answer = _run(f"--data-processor {path}", runner, path,
                  [json.dumps(template), json.dumps({"release": inputs.release, "values": inputs.config}),
                   json.dumps([row for row, _ in sample.SAMPLES]), json.dumps(sample.DATASET), json.dumps(chat),
                   json.dumps(str(tokenizer_file) if tokenizer_file and tokenizer_file.is_file() else None)])
    return answer["rows"]
