"""The cdktf app: one stack for the shared artifacts plus one per recipe in recipes.toml.

`python -m tpu_rl.stacks.app` is the app command in cdktf.json. A recipe's platform picks its composition
(stacks/compositions.py); adding a recipe is a data change only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from tpu_rl.recipes import Recipe, Settings, UserError, all_recipes, load_settings
from tpu_rl.recipes.settings.load import EXAMPLE_NOTICE, deploy_settings

if TYPE_CHECKING:
    from cdktf import App


def build_app(outdir: str | Path | None = None, *, recipes: Mapping[str, Recipe] | None = None,
              settings: Settings | None = None) -> App:
    """Compose every stack. Without arguments: the recipe table and the current settings (or example)."""
    recipes = all_recipes() if recipes is None else recipes
    settings = load_settings(allow_example=True) if settings is None else settings
    # Each recipe as the settings run it (CAPACITY), every rule checked before anything is written; a
    # recipe CAPACITY leaves nothing to run on is written with a plan that fails, saying why.
    deployable = {name: settings.deployable(recipe) for name, recipe in recipes.items()}
    # Imported only now: cdktf and the provider bindings start node and take seconds to load, and a
    # bad setting should fail in a fraction of one. It also puts the provider's own UserError (a bad
    # TPU_RL_PROVIDER_IMPORT) inside main()'s handler instead of a traceback at import time.
    from cdktf import App

    from tpu_rl.stacks.artifacts import ArtifactsStack
    from tpu_rl.stacks.compositions import composition_for

    app = App(outdir=str(outdir)) if outdir is not None else App()
    ArtifactsStack(app, settings)
    for recipe, blocked in deployable.values():
        composition_for(recipe.platform)(app, recipe, settings, blocked=blocked)
    return app


def synth(outdir: str | Path | None = None, **kwargs) -> None:
    """Write cdk.tf.json for every stack to <outdir>/stacks/<stack>/."""
    build_app(outdir, **kwargs).synth()


def main(argv: list[str] | None = None) -> int:
    """Synthesize every stack; with --check only check the settings (`make synth` runs that first, so a
    refusal is printed once, as one line, not inside cdktf-cli's spinner and `[ERROR]` prefixes)."""
    check_only = (sys.argv[1:] if argv is None else argv) == ["--check"]
    try:
        recipes = all_recipes()
        settings = deploy_settings(recipes.values())  # every missing setting in one line
        if check_only:
            if settings.is_example:
                print(EXAMPLE_NOTICE.format(project=settings.project), file=sys.stderr)
            return 0
        for warning in settings.warnings:
            print(warning, file=sys.stderr)
        synth(recipes=recipes, settings=settings)  # cdktf-cli passes the output directory in CDKTF_OUTDIR
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
