"""What a MaxText venv answered, kept on disk by the digest of everything the answer depends on.

A pure question to a release's real code (the config judge's verdicts on a list of train commands) is
asked once per set of inputs, not once per test run: the answer lies under the cache beside the venvs
(chain.CACHE, ~/.cache/tpu-rl, as the fit check's compiles do, scripts/fit/compiler.py), named after a
digest of the inputs the caller names (the question itself, the scripts that ask it) and of the venv: the
name and version of every distribution installed in it. Any change to one of them asks again; a clean
clone on a machine that asked before reads the answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Callable

from maxtext_cpu.chain import CACHE, venv_python


def installed(version: str) -> list[str]:
    """The distributions installed in the release's venv, as their dist-info folders name them."""
    venv = venv_python(version).parents[1].resolve()
    return sorted(path.name for path in venv.glob("lib/python*/site-packages/*.dist-info"))


def digest(version: str, inputs: list[str | bytes]) -> str:
    hashed = hashlib.sha256()
    for part in [version, "\n".join(installed(version)), *inputs]:
        data = part.encode() if isinstance(part, str) else part
        hashed.update(len(data).to_bytes(8, "big") + data)  # the length first: no two splits hash alike
    return hashed.hexdigest()[:16]


def kept(kind: str, version: str, inputs: list[str | bytes], ask: Callable[[], dict]) -> dict:
    """`ask()`'s answer for these inputs in the release's venv: read from the cache, or asked now and kept."""
    path = CACHE / kind / version / f"{digest(version, inputs)}.json"
    if path.is_file():
        return json.loads(path.read_text())
    answer = ask()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".partial") as partial:
        json.dump(answer, partial, sort_keys=True)
    os.replace(partial.name, path)  # whole or not at all: two workers asking at once both write the same
    return answer
