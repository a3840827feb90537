"""Write recipes/maxtext_keys/<version>.txt: every override key MaxText <version>'s train_rl accepts.

`tpu-rl run/render --set KEY=VALUE` checks KEY against this list before anything is submitted, so that a
typo fails in a second instead of after a TPU slice was provisioned (MaxText exits with "'<key>' not in
..." at start-up, or, for a dotted sub-key, drops it without a word). The list is read from the release's
wheel without importing it (tests/contracts/maxtext_schema.py: configs/types.py for the fields,
configs/pyconfig.py for the rule, train_rl.py for the config class); tests/test_run_identity.py checks
that each shipped list equals the one computed from its wheel.

    .venv/bin/python tools/generate_maxtext_keys.py 0.2.3 0.2.4

Run it when recipes.toml pins a new MaxText release. It lives outside the installed packages: the wheel
download and the ast reading are development tools, only the lists ship.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from contracts.maxtext_schema import MaxTextSchema, fetch_wheel  # noqa: E402
from jobs.maxtext import TRAIN_RL  # noqa: E402
from recipes.runs import KEY_LIST_DIR, key_list_text  # noqa: E402


def key_list(version: str) -> str:
    """The file's text for one release (downloads the wheel into .cache/maxtext once)."""
    wheel, reason = fetch_wheel(version)
    if wheel is None:
        raise SystemExit(reason)
    schema = MaxTextSchema(version, wheel)
    rule = ("fields of the config class and, recursively, of the models nested in it (pyconfig "
            "_check_for_invalid_keys)" if schema.accepts_nested_fields
            else "fields of the config class only (pyconfig _prepare_for_pydantic)")
    return key_list_text(version, wheel.name, schema.config_class(TRAIN_RL), rule, schema.override_keys(TRAIN_RL))


def main(versions: list[str]) -> None:
    if not versions:
        raise SystemExit("usage: tools/generate_maxtext_keys.py VERSION... (e.g. 0.2.3 0.2.4)")
    directory = REPO / "recipes" / KEY_LIST_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for version in versions:
        path = directory / f"{version}.txt"
        path.write_text(key_list(version))
        print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main(sys.argv[1:])
