"""`tpu-rl check-rewards FILE.py:fn1,fn2`: import the file in a clean subprocess (`python -I -B`: no user
site, no PYTHONPATH, no current directory on sys.path, no __pycache__ left behind) the way MaxText does,
and call each function the way its trainer will, refusing in one line a function that is missing, raises,
or returns the wrong number or type of values.

How MaxText 0.2.4 loads and calls them (maxtext/trainers/post_train/rl/ in the wheel):
- utils_rl.load_custom_callable(module_path, name): the file must exist (os.path.isfile), is loaded with
  importlib.util.spec_from_file_location as a fresh module (not on sys.path) and `getattr(module, name)`;
- train_rl.build_reward_fns: `reward_functions` is split at commas and stripped; the functions REPLACE the
  built-in three (match_format_exactly, match_format_approximately, check_numbers);
- train_rl.make_reward_fn wraps each as `fn(tmvp_config=trainer_config, **kwargs)` under functools.wraps,
  so tunix inspects the user's own signature. Training (tunix c4ec573d tunix/rl/rl_learner.py
  _compute_rewards, L213-214) adds mode=str(Mode.TRAIN) == "train" (rl_cluster.py L64-71) to every call;
  reward_manager.py _compute_rewards (L131-148) then adds, by parameter name, any algo_config (GRPOConfig)
  field the function names, and calls reward_fn(prompts=, completions=, **kwargs) with the batch's other
  columns, here `question` and `answer` (utils_rl.process_data: `answer` is the JSON list of acceptable
  answers, json.dumps'd); tunix keeps np.array(r) of the result and sums with np.nansum (L150-163), so
  a numpy array and nan are fine. Evaluation (evaluate_rl._compute_row_reward L212) calls it once per
  response another way: prompts=[prompt], completions=[response], answer=[answer], question=question (a str),
  no mode. The check makes both calls.
The sample batch: gsm8k questions in the recipe's prompt template (maxtext/examples/chat_templates/
gsm8k_rl.json, rl.yml's default data_template_path: TEMPLATE with SYSTEM_PROMPT and rl.yml's tokens
<reasoning>, </reasoning>, <answer>, </answer>), completions in that format, one of them wrong and one
without the tags. The recipe's data_template_path picks the TEMPLATE (qwen3-v6e32: openmathinstruct2_rl.json). Not done:
the tokenizer's own chat template, which 0.2.4 utils_rl.process_data applies around it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from recipes import UserError

TIMEOUT_SECONDS = 60  # every wait has an end: importing and calling the functions on 4 completions

# rl.yml (0.2.3 and 0.2.4) and examples/chat_templates/gsm8k_rl.json of the wheels.
TOKENS = {"reasoning_start_token": "<reasoning>", "reasoning_end_token": "</reasoning>",
          "solution_start_token": "<answer>", "solution_end_token": "</answer>"}
# The stand-in tmvp_config: the tokens and rl.yml's reward weights (maxtext 0.2.4
# maxtext/configs/post_train/rl.yml L191-198), which utils_rl's built-in rewards read.
CONFIG = {**TOKENS, "reward_exact_answer": 1.0, "reward_white_space_format_match": 1.0,
          "reward_exact_format_match": 0.1, "reward_partial_format_match": 0.0,
          "reward_ratio_guess_to_answer_high": 0.0, "reward_ratio_guess_to_answer_low": 0.0,
          "penalty_incorrect_format": 0.0, "penalty_incorrect_answer": 0.0}
# GRPOConfig fields a reward may name as parameters (tunix c4ec573d tunix/rl/grpo/grpo_learner.py
# GRPOConfig); reward_manager passes them by name. Values: maxtext 0.2.4 rl.yml L39 and L43.
ALGO_CONFIG = {"num_generations": 2, "num_iterations": 1}
TRAIN_MODE = "train"  # str(rl_cluster.Mode.TRAIN), tunix c4ec573d tunix/rl/rl_cluster.py L64-71
SYSTEM_PROMPT = ("You are given a problem. Think about the problem and provide your reasoning. Place it between "
                 "{reasoning_start_token} and {reasoning_end_token}. Then, provide the final answer (i.e., just one "
                 "numerical value) between {solution_start_token} and {solution_end_token}.")
TEMPLATE = "<start_of_turn>user\n{system_prompt}\n\n{question}<end_of_turn>\n<start_of_turn>model"
# The TEMPLATE of each chat template json a recipe can name with data_template_path (maxtext 0.2.4
# maxtext/examples/chat_templates/); both share SYSTEM_PROMPT. rl.yml's default is gsm8k_rl.json.
TEMPLATES = {"gsm8k_rl.json": TEMPLATE, "openmathinstruct2_rl.json": "{system_prompt}\n\n{question}"}


def template_of(overrides: tuple[str, ...] = ()) -> str:
    """The TEMPLATE the recipe's data_template_path names (the last one), gsm8k_rl.json's without one."""
    paths = [item.partition("=")[2] for item in overrides if item.partition("=")[0] == "data_template_path"]
    return TEMPLATES.get(paths[-1].rpartition("/")[2], TEMPLATE) if paths else TEMPLATE


SAMPLES = (  # (question, acceptable answers, completion)
    ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
     "clips did Natalia sell altogether in April and May?", ["72"],
     "<reasoning>48 in April, 48 / 2 = 24 in May, 48 + 24 = 72.</reasoning><answer>72</answer>"),
    ("Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did "
     "she earn?", ["10"], "<reasoning>12 / 60 = 0.2 per minute, 0.2 * 50 = 10.</reasoning><answer>10</answer>"),
    ("Betty needs $100 for a wallet. She has half of it, her parents give $15 and her grandparents twice as "
     "much as her parents. How much more does she need?", ["5"],
     "<reasoning>50 + 15 + 30 = 95.</reasoning><answer>95</answer>"),
    ("James writes a 3-page letter to 2 different friends twice a week. How many pages does he write a year?",
     ["624"], "He writes 3 * 2 * 2 = 12 pages a week, so 624 a year."),
)


def sample_batch(template: str = TEMPLATE) -> dict:
    system = SYSTEM_PROMPT.format(**TOKENS)
    return {"prompts": [template.format(system_prompt=system, question=q) for q, _, _ in SAMPLES],
            "completions": [c for _, _, c in SAMPLES], "question": [q for q, _, _ in SAMPLES],
            "answer": [json.dumps(a) for _, a, _ in SAMPLES]}


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
    path = Path(path_text)
    if not path.is_file():
        raise UserError(f"{option}: no file {path_text}: pass the path of the Python file that defines "
                        f"{', '.join(functions)}")
    return RewardsOption(path, functions)


# What both checks run first in the subprocess: argv[1] is the file, loaded as load_custom_callable does
# (spec_from_file_location, a fresh module); `fail` prints the one JSON object of a refusal.
_PRELUDE = r'''
import importlib.util, json, math, sys
path = sys.argv[1]
class Config:
    def __init__(self, values): self.__dict__.update(values)
    def __getattr__(self, name): raise AttributeError(f"the check's tmvp_config has no {name!r}")
def fail(text): print(json.dumps({"error": text})); sys.exit(0)
try:
    spec = importlib.util.spec_from_file_location("_user_module_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
except BaseException as error:
    fail(f"importing it raised {type(error).__name__}: {error}")
'''
# Runs in the subprocess: argv = [file, names, batch, config, algo config (JSON)]; prints one JSON object.
_RUNNER = _PRELUDE + r'''
import inspect, numbers
names, batch = json.loads(sys.argv[2]), json.loads(sys.argv[3])
config, algo = Config(json.loads(sys.argv[4])), json.loads(sys.argv[5])
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
    if params and not takes_all and "mode" not in params:
        fail(f"{name} takes no mode and no **kwargs, but tunix calls every reward with mode=...: add **kwargs")
    train = {**batch, "mode": "train"}
    train.update({k: v for k, v in algo.items() if k in params and k not in train})
    try:
        scores = fn(tmvp_config=config, **train)
    except BaseException as error:
        fail(f"{name} raised {type(error).__name__}: {error}")
    result[name] = scores_of(name, scores, len(batch["completions"]), "in training")
    for i, completion in enumerate(batch["completions"]):
        try:
            one = fn(tmvp_config=config, prompts=[batch["prompts"][i]], completions=[completion],
                     answer=[batch["answer"][i]], question=batch["question"][i])
        except BaseException as error:
            fail(f"{name} raised {type(error).__name__}: {error} in evaluation (one completion, question a "
                 "str, answer=[answer], no mode)")
        scores_of(name, one, 1, "in evaluation")
print(json.dumps({"scores": result}))
'''


def check_rewards(option: RewardsOption, template: str = TEMPLATE) -> dict[str, list[float]]:
    """Each function's scores on the sample batch in `template` (template_of the recipe's overrides), or
    one UserError line saying what is wrong."""
    answer = _run(f"--rewards {option.text}", _RUNNER, option.path,
                  [json.dumps(list(option.functions)), json.dumps(sample_batch(template)), json.dumps(CONFIG),
                   json.dumps(ALGO_CONFIG)])
    return answer["scores"]


# The data processor: train_rl.prepare_datasets (0.2.3 and 0.2.4) loads `process_data` with
# load_custom_callable and maps every dataset row x through
# process_data(dataset_name, model_tokenizer, template_config, tmvp_config, x); the built-in
# (utils_rl.process_data) returns {"prompts", "question", "answer"} strings, which the trainer batches.
# The check calls it on a gsm8k row ({"question", "answer"} with the "#### 72" final line) with the
# recipe's template and a stand-in tokenizer whose apply_chat_template joins the messages' contents.
PROCESSOR_KEYS = ("prompts", "question", "answer")
_PROCESSOR_RUNNER = _PRELUDE + r'''
template, tokens = json.loads(sys.argv[2]), json.loads(sys.argv[3])
class Tokenizer:
    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kwargs):
        return "".join(m["content"] for m in messages)
fn = getattr(module, "process_data", None)
if not callable(fn):
    fail("it defines no function 'process_data'")
row = {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                   "How many clips did Natalia sell altogether in April and May?",
       "answer": "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72"}
try:
    out = fn("openai/gsm8k", Tokenizer(), template, Config(tokens), row)
except BaseException as error:
    fail(f"process_data raised {type(error).__name__}: {error}")
if not isinstance(out, dict):
    fail(f"process_data returned a {type(out).__name__}: return a dict with prompts, question and answer")
missing = [key for key in ("prompts", "question", "answer") if not isinstance(out.get(key), str)]
if missing:
    fail(f"process_data's result has no string {', '.join(missing)}: the trainer batches prompts, question, answer")
print(json.dumps({"row": {key: out[key] for key in ("prompts", "question", "answer")}}))
'''


def check_processor(path: Path) -> dict[str, str]:
    """What process_data makes of a gsm8k row, or one UserError line saying what is wrong."""
    template = {"SYSTEM_PROMPT": SYSTEM_PROMPT, "TEMPLATE": TEMPLATE}
    answer = _run(f"--data-processor {path}", _PROCESSOR_RUNNER, path, [json.dumps(template), json.dumps(CONFIG)])
    return answer["row"]


def _run(where: str, runner: str, path: Path, args: list[str]) -> dict:
    """Run a check's script on the file in a clean interpreter (at most TIMEOUT_SECONDS); its one JSON line
    of answer, or the UserError line of its refusal or of how it ended."""
    try:
        result = subprocess.run([sys.executable, "-I", "-B", "-c", runner, str(path.resolve()), *args],
                                capture_output=True, text=True, timeout=TIMEOUT_SECONDS, cwd=path.parent)
    except subprocess.TimeoutExpired:
        raise UserError(f"{where}: importing and calling it took over {TIMEOUT_SECONDS} s") from None
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{where}: the check's subprocess ended with code {result.returncode}: {last[:200]}") from None
    if "error" in answer:
        raise UserError(f"{where}: {' '.join(answer['error'].split())[:300]}")
    return answer
