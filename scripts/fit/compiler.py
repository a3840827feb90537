"""Run the fit's compile (maxtext_compile.py) in MaxText's environment, once per memory shape.

A result is kept by the digest of everything it was compiled from: the request (jobs/fit.py), the
release's environment (its constraints pin MaxText, JAX, tunix and libtpu) and the compile's own code.
It is looked up in the shipped figures (recipes/fit), then in the cache beside MaxText's environments
(~/.cache/tpu-rl/fit/), and compiled only when neither has it: seconds to minutes on a CPU, while
`say` tells what it waits for, and at most COMPILE_SECONDS.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tpu_rl.recipes import UserError, all_recipes
from tpu_rl.recipes.fit import figures
from tpu_rl.scripts.fit import environment

HERE = Path(__file__).resolve().parent
SOURCES = ("maxtext_compile.py", "maxtext_pieces.py")
# The longest compile measured: gemma4-v6e64's, 13 min alone on a 2-core machine, 26 min beside other work.
COMPILE_SECONDS = 60 * 60
PROGRESS_SECONDS = 30


def digest(request: dict) -> str:
    """What a result depends on: the request, the versions of the environment that compiles it (its
    compiler, trainer and model code) and the compile's own code (its syntax tree without docstrings, so
    that a comment or a docstring changes no result)."""
    parts = [json.dumps(request, sort_keys=True), json.dumps(versions_for(request["maxtext_version"]))]
    parts += [code_of(HERE / name) for name in SOURCES]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def versions_for(version: str) -> dict[str, str]:
    """The versions of the environment a compile of the release runs in: one named by TPU_RL_MAXTEXT_ENV
    as installed, else the release's own as pinned."""
    given = given_environment(version)
    return given.versions() if given else environment.pinned_versions(version)


def given_environment(version: str) -> environment.Environment | None:
    given = os.environ.get("TPU_RL_MAXTEXT_ENV", "").replace("{version}", version)
    return environment.Environment(version, Path(given).resolve()) if given else None


def code_of(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)  # a module's, a class's or a function's statements (not a lambda's)
        if not isinstance(body, list) or not body:
            continue
        first = body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            setattr(node, "body", body[1:] or [ast.Pass()])
    return ast.dump(tree)


def cache_dir() -> Path:
    return environment.cache_root() / "fit"


def known(request: dict) -> dict | None:
    """The result of a request compiled before, shipped or cached; None when it must be compiled."""
    key = digest(request)
    if key in figures():
        return figures()[key]
    path = cache_dir() / f"{key}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def compiled(request: dict, say=lambda line: None) -> dict:
    """The compile's result for `request`: known, or compiled now in MaxText's environment."""
    found = known(request)
    return found if found is not None else compile_now(request, say)


def compile_now(request: dict, say=lambda line: None) -> dict:
    """The compile's result, from the cache or the compiler itself, never from the shipped figures."""
    path = cache_dir() / f"{digest(request)}.json"
    if path.is_file():
        return json.loads(path.read_text())
    env = ready_environment(request["maxtext_version"], say)
    result = _run(env, request, say)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".partial") as partial:
        json.dump(result, partial, sort_keys=True)
    os.replace(partial.name, path)
    return result


def ready_environment(version: str, say) -> environment.Environment:
    """MaxText's environment of the release: TPU_RL_MAXTEXT_ENV (a venv, the tests' own), one built
    before, or one built now (minutes, a few GB, once)."""
    env = given_environment(version)
    if env is not None:
        if not env.python.exists():
            raise UserError(f"TPU_RL_MAXTEXT_ENV names {env.path}, which has no bin/python: unset it or build it "
                            f"with `make install`")
        return env
    found = environment.existing(version)
    if found is not None:
        return found
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        raise UserError("the fit check compiles with libtpu, which PyPI has for Linux x86-64 only: run `tpu-rl fit` "
                        "on such a machine, or pass --skip-fit-check to submit the plan unjudged")
    uv = environment.find_uv()
    python = environment.find_python(uv, release_python(version), say)
    return environment.build(version, python, uv, torch=False, say=say)


def release_python(version: str) -> str:
    """The Python the release's images run (recipes.toml, [maxtext."<version>"] python)."""
    return next(recipe.maxtext.python for recipe in all_recipes().values() if recipe.maxtext_version == version)


def _run(env: environment.Environment, request: dict, say) -> dict:
    """The compile as a process of its own, its progress lines passed on, at most COMPILE_SECONDS."""
    if not (env.libtpu / "libtpu").is_dir():
        raise UserError(f"libtpu, XLA's TPU compiler, is missing from {env.path}/{environment.LIBTPU_DIR}: "
                        "`make install` (or deleting that environment, which `tpu-rl fit` then builds) installs it")
    what = f"{request['accelerator']}'s compiler (MaxText {request['maxtext_version']})"
    path = os.pathsep.join(filter(None, [str(HERE), str(env.libtpu), os.environ.get("PYTHONPATH", "")]))
    process = subprocess.Popen([str(env.python), str(HERE / "maxtext_compile.py")], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"})
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    assert stdin and stdout and stderr  # PIPE opens each
    started = time.monotonic()
    errors: list[str] = []

    def relay() -> None:  # our own progress lines; libtpu's and absl's go to the tail kept for errors
        for line in stderr:
            errors.append(line)
            del errors[:-40]
            if line.startswith(("compiling ", "imported ", "train_step:", "reference_logps:")):
                say(line.strip())

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    stdin.write(json.dumps(request))
    stdin.close()
    shown = started
    while process.poll() is None:
        now = time.monotonic()
        if now - started > COMPILE_SECONDS:
            process.kill()
            raise UserError(f"{what} did not finish in {COMPILE_SECONDS // 60} min; nothing was submitted")
        if now - shown >= PROGRESS_SECONDS:
            shown = now
            say(f"waiting for {what}: {(now - started) / 60:.1f} min (at most {COMPILE_SECONDS // 60})")
        time.sleep(0.5)
    reader.join(timeout=5)
    lines = [line for line in stdout.read().splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": "".join(errors[-5:]).strip() or "no result"}
    if "error" in result:
        raise UserError(f"{what} could not judge the plan, so nothing was submitted: {result['error']}"
                        f"{failed_at(result, request)}")
    return result


FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def failed_at(result: dict, request: dict) -> str:
    """Where in MaxText's or tunix's code the compile stopped (its innermost frame), and the file its whole
    traceback is kept in: a raw KeyError alone does not say what the plan asked that the code cannot do."""
    trace = result.get("traceback")
    if not trace:
        return ""
    path = cache_dir() / "errors" / f"{digest(request)}.txt"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(trace)
        kept = f"; the traceback: {path}"
    except OSError:  # a cache that cannot be written still gets the one line
        kept = ""
    frames = FRAME.findall(trace)
    where = ""
    if frames:
        file, line, function = frames[-1]
        site = file.split("site-packages/")[-1]
        where = f" in {site}:{line} {function}"
    return f" (stopped{where}{kept})"


if __name__ == "__main__":  # the request on stdin, the result on stdout: for tools/ and by hand
    print(json.dumps(compiled(json.load(sys.stdin), say=lambda line: print(line, file=sys.stderr))))
