"""The TPU VM's startup script declares its values readonly and exports the patches' setting_env into its own
shell (jobs/vm_script/tpu_env.sh): a name of both would end the VM's boot. The recipe table refuses such a name
where it is read (recipes/catalog/facts.py), from the list recipes/vm_script.py keeps, which must be what the
script declares."""

from __future__ import annotations

import re
import subprocess

import pytest

from peers.settings import spec_of
from tpu_rl.jobs.vm import render_startup_script
from tpu_rl.jobs.vm_preamble import part
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.vm_script import BASH_READONLY, SCRIPT_READONLY
from vm_helpers import EXAMPLE_SETTINGS, SCRIPT_RECIPE, example_script

PATCH = "fused-moe-onehot-threshold"  # the recipe table's patch with a setting_env (recipes.toml)
# The preamble's `readonly NAME=...`, `declare -ra NAME=(...)` and `declare -rA NAME=(...)`; a part's `readonly A B`
_ASSIGNED = re.compile(r"^(?:readonly|declare -r[aA]?) ([A-Z][A-Z0-9_]*)=", re.MULTILINE)
_FIXED = re.compile(r"^\s*readonly ((?:[A-Z][A-Z0-9_]* ?)+)$", re.MULTILINE)


def _with_setting_env(env: dict[str, str]) -> str:
    """The VM recipe's script with the table's patch applied as the setting `env` (unchecked: model_copy does
    not validate, as a table the old code loaded did not)."""
    patch = next(p for p in get_recipe("gemma4-v6e64").patches if p.name == PATCH)
    patch = patch.model_copy(update={"setting_from": SCRIPT_RECIPE.maxtext_version, "setting_env": env})
    return render_startup_script(spec_of(SCRIPT_RECIPE.model_copy(update={"patches": (patch,)})), EXAMPLE_SETTINGS)


def _exporting(script: str) -> subprocess.CompletedProcess:
    """The script's declarations, then its export of TPU_ENV (tpu_env.sh), in bash."""
    declarations = "\n".join(line for line in script.splitlines() if line.startswith(("readonly ", "declare -r")))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", f"{declarations}\n{part('tpu_env')}\necho exported"],
                          capture_output=True, text=True)


def test_bash_ends_the_boot_on_a_setting_env_that_names_a_readonly_variable():
    """The failure the table's rule prevents, as bash has it today; a name of its own is exported."""
    kept = _exporting(_with_setting_env({"ONEHOT_MOE_PERMUTE_THRESHOLD": "100000"}))
    assert kept.returncode == 0 and kept.stdout == "exported\n", kept.stderr
    ended = _exporting(_with_setting_env({"RUN": "1"}))
    assert ended.returncode != 0 and "exported" not in ended.stdout
    assert "RUN: readonly variable" in ended.stderr, ended.stderr


def test_the_tables_list_is_every_name_the_script_declares_readonly():
    script = example_script()
    declared = set(_ASSIGNED.findall(script)) | {name for names in _FIXED.findall(script) for name in names.split()}
    assert declared == SCRIPT_READONLY - BASH_READONLY, (
        f"list in recipes/vm_script.py SCRIPT_READONLY: {sorted(declared - SCRIPT_READONLY)}; no longer declared: "
        f"{sorted(SCRIPT_READONLY - BASH_READONLY - declared)}")
    own = subprocess.run(["bash", "-c", "readonly -p"], capture_output=True, text=True, check=True).stdout
    assert set(re.findall(r"^declare -\w+ (\w+)", own, re.MULTILINE)) == BASH_READONLY


@pytest.mark.parametrize("name", ["RUN", "PROJECT", "ATTEMPT", "UID"])  # a value, a setting's, a part's, bash's
def test_the_recipe_table_refuses_a_setting_env_that_names_one_in_one_line(name):
    import copy

    from conftest import recipe_table
    from tpu_rl.recipes import UserError, build_recipes

    table = copy.deepcopy(recipe_table())
    table["patches"][PATCH]["setting_env"] = {name: "1"}
    with pytest.raises(UserError) as caught:
        build_recipes(table)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(f"recipes.toml: patches.{PATCH}.setting_env: {name} is a readonly variable of the TPU "
                           "VM's startup script"), line
    assert f"'{name}: readonly variable'" in line and "use another name" in line, line


def test_a_vm_recipes_rl_env_is_exported_with_the_run_and_its_readonly_names_refused():
    """rl.env reaches the VM's steps as it reaches the GKE train container (jobs/train.py): the script's
    TPU_ENV, exported by tpu_env.sh; it was left out of the VM's script. A readonly name is refused at load."""
    import copy

    from conftest import recipe_table
    from tpu_rl.recipes import UserError, build_recipes

    recipe = SCRIPT_RECIPE.model_copy(update={"rl": SCRIPT_RECIPE.rl.model_copy(update={"env": {"XLA_FLAGS": "--x"}})})
    script = render_startup_script(spec_of(recipe), EXAMPLE_SETTINGS)
    declarations = "\n".join(line for line in script.splitlines() if line.startswith(("readonly ", "declare -r")))
    shown = subprocess.run(["bash", "-euo", "pipefail", "-c", f"{declarations}\n{part('tpu_env')}\nprintenv XLA_FLAGS"],
                           capture_output=True, text=True)
    assert shown.returncode == 0 and shown.stdout == "--x\n", shown.stderr
    table = copy.deepcopy(recipe_table())
    table["recipes"][SCRIPT_RECIPE.name]["rl"]["env"] = {"RUN": "1"}
    with pytest.raises(UserError) as caught:
        build_recipes(table)
    assert str(caught.value).startswith(f"recipes.toml: recipes.{SCRIPT_RECIPE.name}.rl.env: RUN is a readonly "
                                        "variable of the TPU VM's startup script, which exports rl.env"), caught.value
