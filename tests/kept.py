"""What a pure question to a tool answered, kept on disk by the digest of everything the answer depends on.

A question whose answer is a function of its inputs (a MaxText release's config judge on a list of train
commands, checkov on a directory of files) is asked once per set of inputs, not once per test run: the
answer lies under the cache beside MaxText's venvs (~/.cache/tpu-rl/<kind>/, TPU_RL_CACHE; as the fit
check's compiles do, scripts/fit/compiler.py), named after a digest of the inputs the caller names (the
question itself, the scripts that ask it) and of the tool's venv: the name and version of every
distribution installed in it. Any change to one of them asks again; a clean clone on a machine that asked
before reads the answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from tpu_rl.scripts.fit.environment import cache_root


def installed(venv: Path) -> list[str]:
    """The distributions installed in a venv, as their dist-info folders name them."""
    return sorted(path.name for path in venv.resolve().glob("lib/python*/site-packages/*.dist-info"))


def files_of(directory: Path) -> list[str | bytes]:
    """Every file under `directory`: its path there, then its bytes."""
    return [part for path in sorted(p for p in directory.rglob("*") if p.is_file())
            for part in (str(path.relative_to(directory)), path.read_bytes())]


def digest(inputs: list[str | bytes]) -> str:
    hashed = hashlib.sha256()
    for part in inputs:
        data = part.encode() if isinstance(part, str) else part
        hashed.update(len(data).to_bytes(8, "big") + data)  # the length first: no two splits hash alike
    return hashed.hexdigest()[:16]


def kept(kind: str, venv: Path, inputs: list[str | bytes], ask: Callable[[], dict | list]) -> dict | list:
    """`ask()`'s answer for these inputs with the tool of `venv`: read from the cache, or asked now and kept."""
    key = digest(["\n".join(installed(venv)), *inputs])
    path = cache_root() / kind / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    answer = ask()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".partial") as partial:
        json.dump(answer, partial, sort_keys=True)
    os.replace(partial.name, path)  # whole or not at all: two workers asking at once both write the same
    return answer
