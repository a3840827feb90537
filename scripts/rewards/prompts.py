"""The sample rows and prompts `tpu-rl check-rewards` calls reward functions with, built as MaxText's
trainer builds them.

The prompt (maxtext 0.2.4 trainers/post_train/rl/utils_rl.py process_data, the same in 0.2.3): the row's
question in the data template's TEMPLATE with its SYSTEM_PROMPT (format_maxtext_messages), as one user message, through the tokenizer's own chat template:
`model_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`, where the
tokenizer is `AutoTokenizer.from_pretrained(tokenizer_path)` (train_rl.py _rl_train_impl; the recipe's
`chat_template`/`chat_template_path` only fill in a tokenizer that has none, train_rl.py
configure_tokenizer_chat_template). `answer` is json.dumps(process_answer(...)), which is [answer, answer]
for a non-MCQ row, after extract_hash_answer for openai/gsm8k (the text after "####").

Where the chat template comes from, without the hub: the tokenizer files AutoTokenizer reads, from
`--tokenizer DIR` (a download of the recipe's tokenizer repo, or an export of a run:
gs://<bucket>/<model>/hf-trained/<run>/ holds the tokenizer to_huggingface bundles from it), or else from
the local Hugging Face cache of the recipe's tokenizer repo (what `hf download REPO` or a transformers
load left in HF_HUB_CACHE). Without either, the prompt is the user message alone and the check says so.
chat_template.jinja wins over tokenizer_config.json's chat_template, as in transformers 5.12.1
tokenization_utils_base.py PreTrainedTokenizerBase._from_pretrained; the render is transformers'
(utils/chat_template_utils.py _cached_compile_jinja_template: a sandboxed jinja2 environment with trim_blocks, lstrip_blocks,
loopcontrols, its own tojson, raise_exception and strftime_now), with the tokenizer's named special tokens
as variables (apply_chat_template: `{**self.special_tokens_map, **kwargs}`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tpu_rl.recipes import UserError
from tpu_rl.recipes.user_text import read_text_file

# rl.yml (0.2.3 and 0.2.4) and examples/chat_templates/gsm8k_rl.json of the wheels.
TOKENS = {"reasoning_start_token": "<reasoning>", "reasoning_end_token": "</reasoning>",
          "solution_start_token": "<answer>", "solution_end_token": "</answer>"}
SYSTEM_PROMPT = ("You are given a problem. Think about the problem and provide your reasoning. Place it between "
                 "{reasoning_start_token} and {reasoning_end_token}. Then, provide the final answer (i.e., just one "
                 "numerical value) between {solution_start_token} and {solution_end_token}.")
TEMPLATE = "<start_of_turn>user\n{system_prompt}\n\n{question}<end_of_turn>\n<start_of_turn>model"
# The TEMPLATE of each data template json a recipe can name (maxtext 0.2.4 maxtext/examples/chat_templates/);
# both share SYSTEM_PROMPT. rl.yml's default is gsm8k_rl.json. 0.2.4 names the setting data_template_path,
# 0.2.3 chat_template_path (configs/post_train/rl.yml of each).
TEMPLATES = {"gsm8k_rl.json": TEMPLATE, "openmathinstruct2_rl.json": "{system_prompt}\n\n{question}"}
DATA_TEMPLATE_KEY = {"0.2.3": "chat_template_path"}  # other releases: data_template_path
DATASET = "openai/gsm8k"  # rl.yml's dataset_name; the sample rows are gsm8k's
# transformers 5.12.1 PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES (tokenization_utils_base.py; moved there
# from SpecialTokensMixin).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

# gsm8k rows as the dataset holds them (question; answer with its "#### N" line), and completions of each
# (right with the tags, wrong with the tags, right without them, right with tags and no reasoning).
SAMPLES = (
    ({"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
                  "May. How many clips did Natalia sell altogether in April and May?",
      "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
                "altogether in April and May.\n#### 72"},
     ("<reasoning>48 in April, 48 / 2 = 24 in May, 48 + 24 = 72.</reasoning><answer>72</answer>",
      "<reasoning>48 + 48 = 96.</reasoning><answer>96</answer>",
      "She sold 48 + 24 = 72 clips.",
      "<reasoning></reasoning><answer>72</answer>")),
    ({"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
                  "How much did she earn?",
      "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = "
                "$<<0.2*50=10>>10.\n#### 10"},
     ("<reasoning>12 / 60 = 0.2 per minute, 0.2 * 50 = 10.</reasoning><answer>10</answer>",
      "<reasoning>12 * 50 = 600.</reasoning><answer>600</answer>",
      "She earned 0.2 * 50 = 10 dollars.",
      "<reasoning></reasoning><answer>10</answer>")),
)


@dataclass(frozen=True)
class ChatTemplate:
    text: str
    tokens: dict  # the tokenizer's named special tokens, the template's variables
    source: str  # where it was read, for the check's output


def data_template(overrides: tuple[str, ...] = (), release: str = "0.2.4") -> str:
    """The TEMPLATE the recipe's data template setting names (the last one), gsm8k_rl.json's without one."""
    key = DATA_TEMPLATE_KEY.get(release, "data_template_path")
    paths = [item.partition("=")[2] for item in overrides if item.partition("=")[0] == key]
    return TEMPLATES.get(paths[-1].rpartition("/")[2], TEMPLATE) if paths else TEMPLATE


def _token(value) -> str | None:
    if isinstance(value, dict):  # an AddedToken as saved: {"content": ..., "lstrip": ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


# A tokenizer's configuration files with their chat template: a few KiB to a few MiB (a large added-token
# table); the bound only keeps a wrong file from being read whole (recipes/user_text.py).
TOKENIZER_FILE_MAX_BYTES = 64 * 1024 * 1024


def read_tokenizer_dir(directory: Path, option: str = "--tokenizer") -> ChatTemplate | None:
    """The chat template and special tokens of a tokenizer directory, or None when it has no template;
    UserError naming `option` for a file there that is no text or no JSON."""
    config_file, jinja_file = directory / "tokenizer_config.json", directory / "chat_template.jinja"
    legacy_file = directory / "special_tokens_map.json"
    fix = "pass a tokenizer directory as save_pretrained writes it"

    def read(file: Path) -> str | None:
        return read_text_file(file, option, fix, TOKENIZER_FILE_MAX_BYTES) if file.exists() else None

    def json_of(file: Path) -> dict:
        text = read(file)
        try:
            return json.loads(text) if text is not None else {}
        except ValueError as error:
            raise UserError(f"{option} {file} is not JSON ({error}): {fix}") from None

    config, legacy = json_of(config_file), json_of(legacy_file)
    text = read(jinja_file) if jinja_file.exists() else config.get("chat_template")
    if isinstance(text, list):  # several named templates: transformers uses "default"
        text = next((entry.get("template") for entry in text if entry.get("name") == "default"), None)
    if not isinstance(text, str) or not text:
        return None
    tokens = {}
    for name in SPECIAL_TOKENS:
        value = _token(config.get(name)) or _token(legacy.get(name))
        if value is not None:
            tokens[name] = value
    where = jinja_file if jinja_file.is_file() else config_file
    return ChatTemplate(text, tokens, str(where))


def hub_cache() -> Path:
    """huggingface_hub's cache: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def cached_tokenizer(repo: str) -> Path | None:
    """The snapshot of `repo` in the local Hugging Face cache (models--ORG--NAME/snapshots/<refs/main>,
    else the newest snapshot), or None."""
    root = hub_cache() / f"models--{repo.replace('/', '--')}"
    main = root / "refs" / "main"
    if main.is_file() and (root / "snapshots" / main.read_text().strip()).is_dir():
        return root / "snapshots" / main.read_text().strip()
    snapshots = sorted((root / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime) if root.is_dir() else []
    return snapshots[-1] if snapshots else None


def find_chat_template(repo: str | None, directory: Path | None = None) -> ChatTemplate | None:
    """--tokenizer DIR first, else the cached snapshot of the recipe's tokenizer repo."""
    if directory is not None:
        return read_tokenizer_dir(directory)
    cached = cached_tokenizer(repo) if repo else None
    return read_tokenizer_dir(cached, f"the cached tokenizer of {repo}") if cached else None


def render_chat(template_text: str, tokens: dict, messages: list, add_generation_prompt: bool = True) -> str:
    """transformers' apply_chat_template(tokenize=False) render (module docstring has the source). Also
    run inside the check's subprocess (check.py sends it there with inspect.getsource)."""
    import datetime
    import json as _json

    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return _json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class Generation(jinja2.ext.Extension):  # transformers' AssistantTracker, not tracking: the body as is
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(template_text).render(messages=messages, tools=None, documents=None,
                                                 add_generation_prompt=add_generation_prompt, **tokens)


def user_message(question: str, template: str, tokens: dict) -> list[dict]:
    """format_maxtext_messages of one question: the TEMPLATE around it, as the one user message."""
    system = SYSTEM_PROMPT.format(**{key: tokens[key] for key in TOKENS})
    return [{"role": "user", "content": template.format(system_prompt=system, question=question)}]


def builtin_row(row: dict, template: str, chat: ChatTemplate | None, tokens: dict) -> dict:
    """utils_rl.process_data of a gsm8k row (non-MCQ): prompts, question, answer=[answer, answer]."""
    messages = user_message(row["question"], template, tokens)
    final = row["answer"].split("####")[1].strip()
    prompts = render_chat(chat.text, chat.tokens, messages) if chat else messages[0]["content"]
    return {"prompts": prompts, "question": row["question"], "answer": json.dumps([final, final])}


def completions_of(index: int, generations: int) -> list[str]:
    """The sample's `generations` completions (its candidates in turn)."""
    candidates = SAMPLES[index][1]
    return [candidates[g % len(candidates)] for g in range(generations)]
