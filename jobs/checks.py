"""Checks a step's container runs before anything else, each ending in one `tpu-rl check failed:` line."""

from __future__ import annotations

from tpu_rl.recipes import Recipe
from tpu_rl.recipes.conventions import CHECK_FAILED_PREFIX

# The exit code of a check in a step's script that refuses to go on (EX_CONFIG of sysexits.h: the
# configuration is wrong). Distinct from train_rl's own failures, so that a restartable train JobSet fails
# at once on it instead of repeating the same refusal (see tpu_rl.jobs.train.train_failure_policy).
CHECK_FAILED_EXIT_CODE = 78


def bash_check_failed(message: str) -> list[str]:
    """The end of a bash check that refuses: the one line `tpu-rl run` reports, then CHECK_FAILED_EXIT_CODE.
    `message` goes inside double quotes (it may expand variables)."""
    return [f'echo "{CHECK_FAILED_PREFIX}{message}" >&2', f"exit {CHECK_FAILED_EXIT_CODE}"]


def python_check_failed() -> str:
    """`check_failed(reason)` for a script's inline Python program (it needs `import sys`): the same line and
    exit code as bash_check_failed, for a check that no retry can pass (the image is the same every time)."""
    return "\n".join([
        "def check_failed(reason):",
        f"    print({CHECK_FAILED_PREFIX!r} + reason, file=sys.stderr, flush=True)",
        f"    sys.exit({CHECK_FAILED_EXIT_CODE})",
    ])


def jax_pairing_check(recipe: Recipe) -> str:
    """Stop in seconds when the image's JAX is not the one the Pathways images are tagged for.

    The IFRT proxy accepts only a narrow window of client versions, so a mismatch otherwise shows up as
    a failed handshake once the whole slice is up. Convert runs the same check in the same image on the
    CPU pool, so a mismatch is found there, before any TPU is requested. The installed distribution's
    version is what jax.__version__ reports, read without importing jax (which would start a backend).
    Versions are plain release numbers (checked where the recipe table is loaded): no quoting needed."""
    images, version = recipe.pathways_images, recipe.maxtext_version
    message = (f'the image has jax ${{image_jax}} but the Pathways images are tagged '
               f'{images.tag} (jax {images.jax}): set jax and a pathways_tag built for jax ${{image_jax}} under '
               f'[maxtext.\\"{version}\\"] in recipes/recipes.toml')
    return "\n".join([
        f"# the Pathways images ({images.tag}) must serve this image's JAX: check before anything else",
        # `|| echo unknown`: an image whose Python cannot even say so still ends in the one line below.
        'image_jax="$(python3 -c \'import importlib.metadata as m; print(m.version("jax"))\' 2>/dev/null '
        '|| echo unknown)"',
        f'if [[ "${{image_jax}}" != "{images.jax}" ]]; then',
        *(f"  {line}" for line in bash_check_failed(message)),
        "fi",
    ])
