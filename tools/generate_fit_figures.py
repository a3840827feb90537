"""Write recipes/fit/figures.json: each recipe's own plan compiled by XLA's TPU compiler for its
topology (scripts/fit), keyed by the digest of what it was compiled from.

`tpu-rl fit`, `run` and `preflight` read a recipe's own plan from this file, so judging it needs no
MaxText environment on the user's machine; a --set that changes memory is compiled there.
tests/test_fit_recipes.py compiles every recipe again and fails when a figure differs or a recipe
stops fitting, naming this tool.

    .venv/bin/python tools/generate_fit_figures.py

Run it after changing a recipe's memory settings, a release's constraints or the compile's code
(scripts/fit/maxtext_compile.py, maxtext_pieces.py). It compiles in the MaxText environments `make
install` builds (.venv-maxtext-<version>), about 15 minutes cold on two cores; results are cached.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tpu_rl.jobs.fit import compile_request  # noqa: E402
from tpu_rl.recipes import all_recipes, example_settings  # noqa: E402
from tpu_rl.recipes.runs.spec import RunSpec  # noqa: E402
from tpu_rl.scripts.fit.account import recipes_table  # noqa: E402
from tpu_rl.scripts.fit.check import recipe_fit  # noqa: E402
from tpu_rl.scripts.fit.compiler import compile_now, digest  # noqa: E402

FIGURES = REPO / "recipes" / "fit" / "figures.json"
DOC = REPO / "docs" / "fit.md"
TABLE_START, TABLE_END = "<!-- fit table:", "<!-- end of fit table -->"


def doc_with_table(doc: str, table: str) -> str:
    """docs/fit.md with its recipe table (between the two markers) replaced by `table`."""
    head, start, rest = doc.partition(TABLE_START)
    marker, newline, rest = rest.partition("\n")
    _, end, tail = rest.partition(TABLE_END)
    return f"{head}{start}{marker}{newline}{table}\n{end}{tail}"


def recipe_requests() -> dict[str, dict]:
    """Each recipe's own plan: no --set, the example settings (a plan's memory names no path)."""
    settings = example_settings()
    return {name: compile_request(RunSpec.of_catalog(recipe), settings) for name, recipe in all_recipes().items()}


def main(argv: list[str]) -> None:
    """With --cache, only fill the cache (`make test` does, one compile at a time, before the suite)."""
    os.environ.setdefault("TPU_RL_MAXTEXT_ENV", str(REPO / ".venv-maxtext-{version}"))
    figures = {}
    for name, request in recipe_requests().items():
        result = compile_now(request, say=lambda line, name=name: print(f"fit {name}: {line}", file=sys.stderr,
                                                                         flush=True))
        figures[digest(request)] = {**result, "recipe": name}
    if "--cache" in argv:
        return
    FIGURES.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    recipes = all_recipes()
    table = recipes_table({name: recipe_fit(figures[digest(request)], recipes[name])
                           for name, request in recipe_requests().items()})
    DOC.write_text(doc_with_table(DOC.read_text(), table))
    print(f"wrote {FIGURES.relative_to(REPO)} and the table of {DOC.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
