"""How check-rewards runs a user's file (scripts/rewards/check.py): a clean interpreter (`python -I -B`: no
user site, no PYTHONPATH, no current directory on sys.path, no __pycache__ left behind) that loads it as
MaxText's utils_rl.load_custom_callable does and prints one JSON answer, bounded in time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tpu_rl.recipes import UserError
from tpu_rl.recipes.settings.tuning import CHECK  # every wait has an end; a slow machine may be given more
NOTICE_SECONDS = 2  # a check still running after this says what it waits for, and for how long at most

# What both checks run first in the subprocess: argv[1] is the file, loaded as load_custom_callable does
# (spec_from_file_location, a fresh module); `fail` prints the one JSON object of a refusal.
_PRELUDE = r"""
import importlib.util, json, math, sys
path = sys.argv[1]
class Config:
    # train_rl's config: {"release", "values"}, a dotted key a nested model's field
    def __init__(self, config, prefix=""):
        nested = {}
        for key, value in config["values"].items():
            head, dot, rest = key.partition(".")
            if dot:
                nested.setdefault(head, {})[rest] = value
            else:
                self.__dict__[key] = value
        for head, inner in nested.items():
            self.__dict__[head] = Config({"release": config["release"], "values": inner}, f"{prefix}{head}.")
        self.__dict__["_where"] = (config["release"], prefix)
    def __getattr__(self, name):
        release, prefix = self.__dict__["_where"]
        raise AttributeError(f"MaxText {release}'s config has no {prefix}{name}")
def fail(text, **more):
    fail.done = True  # a refusal from inside a call (the tokenizer stand-in's) is the answer
    print(json.dumps({"error": text, **more})); sys.exit(0)
def raised(error, what, how=""):
    if getattr(fail, "done", False):
        sys.exit(0)
    if isinstance(error, ModuleNotFoundError) and error.name:
        fail(f"{what} imports {error.name}, which is not installed where the check runs, so it cannot be "
             "checked here", missing_module=error.name)
    fail(f"{what} raised {type(error).__name__}: {error}{how}")
try:
    spec = importlib.util.spec_from_file_location("_user_module_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
except BaseException as error:
    raised(error, "it")
"""
def run_check(where: str, runner: str, path: Path, args: list[str]) -> dict:
    """Run a check's script on the file in a clean interpreter (at most CHECK's seconds); its one JSON line
    of answer, or the UserError line of its refusal or of how it ended."""
    bound = CHECK.seconds()
    process = subprocess.Popen([sys.executable, "-I", "-B", "-c", runner, str(path.resolve()), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=path.parent)
    try:
        try:
            stdout, stderr = process.communicate(timeout=min(NOTICE_SECONDS, bound))
        except subprocess.TimeoutExpired:  # stderr: check-rewards' stdout is the scores
            print(f"{where}: waiting for a clean Python to import {path.name} and call it on sample rows, at "
                  f"most {bound:g} s", file=sys.stderr, flush=True)
            stdout, stderr = process.communicate(timeout=max(0.0, bound - NOTICE_SECONDS))
    except subprocess.TimeoutExpired:
        raise UserError(f"{where}: importing and calling it took over {bound:g} s ({CHECK.env}): make it return "
                        "within seconds (a loop that never ends, or a wait on the network?)") from None
    finally:  # the timeout, Ctrl-C: the check's interpreter never outlives the command
        if process.poll() is None:
            process.kill()
            process.wait()
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{where}: the check's subprocess ended with code {process.returncode}: {last[:200]}") from None
    if "error" in answer:
        text = f"{where}: {' '.join(answer['error'].split())[:300]}"
        if answer.get("missing_module"):
            raise UncheckedImport(f"{text}: {UNCHECKED_HINT}", answer["missing_module"])
        raise UserError(text)
    return answer


# A module the trainer's image has and this Python lacks (maxtext, tunix, jax, ...): the check cannot run
# the file here. `run --unchecked-imports` submits it unchecked, and run.json says so; chosen over running
# the check in a MaxText CPU install, which a workstation seldom has (jax, tunix, vllm: gigabytes), and
# whose discovery by a path convention would be a hidden input to what `run` accepts.
UNCHECKED_HINT = "run with --unchecked-imports to submit it unchecked (run.json records it)"


class UncheckedImport(UserError):
    def __init__(self, message: str, module: str) -> None:
        super().__init__(message)
        self.module = module
