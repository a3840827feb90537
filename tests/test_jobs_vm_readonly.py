"""The TPU VM's startup script declares its values readonly, sets variables of its own and exports the patches'
setting_env (and rl.env) into its own shell (jobs/vm_script/tpu_env.sh): a readonly name or one that is no shell
name ends the VM's boot there, one of the script's or of bash's changes the boot without a word. The recipe table
refuses such a name where it is read (recipes/catalog/facts.py), from the lists recipes/vm_script.py keeps, which
must be what the script declares and assigns."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from peers.settings import spec_of
from tpu_rl.jobs.vm import render_startup_script
from tpu_rl.jobs.vm_preamble import part
from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.vm_script import BASH_READONLY, BASH_VARIABLES, SCRIPT_ASSIGNED, SCRIPT_READONLY
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


def _refused_setting_env(name: str) -> str:
    """The one line the recipe table's loader says of the table's patch with `name` in its setting_env."""
    import copy

    from conftest import recipe_table
    from tpu_rl.recipes import UserError, build_recipes

    table = copy.deepcopy(recipe_table())
    table["patches"][PATCH]["setting_env"] = {name: "1"}
    with pytest.raises(UserError) as caught:
        build_recipes(table)
    line = str(caught.value)
    assert "\n" not in line
    return line


@pytest.mark.parametrize("name", ["RUN", "PROJECT", "ATTEMPT", "UID"])  # a value, a setting's, a part's, bash's
def test_the_recipe_table_refuses_a_setting_env_that_names_one_in_one_line(name):
    line = _refused_setting_env(name)
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
    assert str(caught.value).startswith(f"recipes.toml: recipes.{SCRIPT_RECIPE.name}: rl.env: RUN is a readonly "
                                        "variable of the TPU VM's startup script, which exports rl.env"), caught.value
    # a GKE recipe's rl.env goes into its container's spec, not into a shell of ours: the VM's names are its own
    table = copy.deepcopy(recipe_table())
    gke = next(name for name, entry in table["recipes"].items() if entry["platform"] == "gke")
    table["recipes"][gke]["rl"]["env"] = {"RUN": "1", "HOME": "/root"}
    assert build_recipes(table)[gke].rl.env == {"RUN": "1", "HOME": "/root"}


# A name bash assigns: NAME=, NAME+=, NAME[i]= at a word's start; the names `local`, `readonly`, `export` and
# `declare` list (not -f, which lists functions); a loop's variable; read's. Read from the code without its
# comments and quoted text (no assignment is in a string; a `$(...)` in quotes assigns in its own subshell).
_START = r"(?:^|(?<=[\s;&|({]))"
_ASSIGNMENT = re.compile(_START + r"([A-Za-z_]\w*)(?:\[[^]\s]*\])?\+?=")
_LISTED = re.compile(_START + r"(?:local|readonly|export|declare)((?:[ \t]+-\w+)*)((?:[ \t]+[A-Za-z_]\w*\b(?!\[|\+?=))*)")
_LOOP = re.compile(_START + r"for\s+([A-Za-z_]\w*)\s+in\b")
_READ = re.compile(_START + r"read((?:[ \t]+-\w+)*)((?:[ \t]+[A-Za-z_]\w*)+)")


def _unquoted_code(text: str) -> str:
    """`text` without comments and without what quotes hold (with the `$(...)` inside double quotes)."""
    out, stack, i = [], [], 0
    while i < len(text):
        char, quoted = text[i], '"' in stack
        if stack and stack[-1] == '"':
            if char == "\\":
                i += 1
            elif char == '"':
                stack.pop()
            elif text.startswith("$(", i):
                stack.append("(")
                i += 1
        elif char == "\\":
            i += 1
        elif char == "'":
            i = text.index("'", i + 1)
        elif char == '"':
            stack.append('"')
        elif char == "#" and (i == 0 or text[i - 1] in " \t\n;"):
            i = text.find("\n", i) - 1 if "\n" in text[i:] else len(text)
        elif char in "()":
            if char == "(":
                stack.append(char)
            elif stack:
                stack.pop()
            if not quoted:
                out.append(char)
        elif not quoted:
            out.append(char)
        i += 1
    return "".join(out)


def _assigned(text: str) -> set[str]:
    code = _unquoted_code(text)
    names = set(_ASSIGNMENT.findall(code)) | set(_LOOP.findall(code))
    for flags, listed in _LISTED.findall(code):
        if "f" not in flags:
            names |= set(listed.split())
    return names | {name for _, listed in _READ.findall(code) for name in listed.split()}


def test_the_reader_of_assignments_finds_each_form_and_none_in_strings_or_comments():
    text = '''A=1 B+=(x) C[k]=2 cmd --opt=3 "D=4" 'E=5' "$(F=6)"  # G=7
local h i=1; readonly J; export K L; export -f func; for m in 1; do read -r n _ < /dev/null; done
log "x=$(cat "$Y") z=1"; declare -rA O=([p]=1)'''
    assert _assigned(text) == {"A", "B", "C", "h", "i", "J", "K", "L", "m", "n", "_", "O"}


def test_the_tables_list_is_every_name_the_script_assigns():
    """The parts' assignments and the preamble's values: the steps' bodies between them assign nothing in bash
    (MaxText's commands take key=value arguments, jobs/maxtext.py; a patch is a Python heredoc, jobs/patches.py)."""
    parts = sorted((Path(__file__).parents[1] / "jobs" / "vm_script").glob("*.sh"))
    assigned = {name for path in parts for name in _assigned(path.read_text())} | set(_ASSIGNED.findall(example_script()))
    assert assigned == SCRIPT_ASSIGNED, (f"list in recipes/vm_script.py SCRIPT_ASSIGNED: {sorted(assigned - SCRIPT_ASSIGNED)}; "
                                         f"no longer assigned: {sorted(SCRIPT_ASSIGNED - assigned)}")
    assert BASH_READONLY <= BASH_VARIABLES and {"HOME", "PATH"} <= SCRIPT_ASSIGNED & BASH_VARIABLES


def _booting(script: str, probe: str, log: Path) -> subprocess.CompletedProcess:
    """The script's values (its log in `log`), then its parts up to the export of TPU_ENV as it renders them
    (without boot.sh's trap and gcloud wait and the install), then `probe`, in bash; the bucket retries at once."""
    values = "\n".join(line for line in script.splitlines() if _ASSIGNED.match(line))
    values = re.sub(r"^readonly LOG_FILE=.*$", f"readonly LOG_FILE={log}", values, flags=re.MULTILINE)
    text = "\n".join([values, *(part(name) for name in ("records", "bounded", "cancel", "power", "tpu_env")), probe])
    return subprocess.run(["bash", "-euo", "pipefail", "-c", text], capture_output=True, text=True,
                          env={**os.environ, "TPU_RL_GCS_RETRY_SECONDS": "0"})


FAILED_BOOT_POWERS_OFF = 'shutdown() { echo "shutdown $*"; }; power_after 1'  # the end of a boot whose step failed
FAILING_UPLOAD = 'gcloud() { return 1; }; echo record | put gs://bucket/record || echo "put failed"'


def test_bash_powers_a_failed_vm_off_at_once_on_a_setting_env_that_names_a_variable_of_the_script(tmp_path):
    """POWER_OFF is set by power.sh before the export: a setting of it turns the hour a failed VM stays up for
    a look into a power-off at once, as if every output were verified."""
    kept = _booting(_with_setting_env({"ONEHOT_MOE_PERMUTE_THRESHOLD": "1"}), FAILED_BOOT_POWERS_OFF, tmp_path / "a")
    assert kept.returncode == 0 and "shutdown -h +" in kept.stdout and "shutdown -h now" not in kept.stdout, kept
    changed = _booting(_with_setting_env({"POWER_OFF": "1"}), FAILED_BOOT_POWERS_OFF, tmp_path / "b")
    assert changed.returncode == 0 and changed.stdout.endswith("shutdown -h now\n"), changed


def test_bash_changes_the_boot_on_a_setting_env_that_names_one_of_its_own_variables(tmp_path):
    """PATH: tpu_env.sh's own next command is not found; IFS: the retries' `$(seq ...)` is one word, and the
    upload's first try ends the tries at an arithmetic error."""
    lost = _booting(_with_setting_env({"PATH": "/nowhere"}), "echo exported", tmp_path / "a")
    assert lost.returncode == 127 and "hostname: command not found" in lost.stdout, lost.stdout  # records.sh: 2>&1
    assert "exported" not in lost.stdout
    kept = _booting(_with_setting_env({"ONEHOT_MOE_PERMUTE_THRESHOLD": "1"}), FAILING_UPLOAD, tmp_path / "b")
    assert kept.stdout.count("failed (try ") == 5 and "syntax error" not in kept.stdout, kept.stdout
    split = _booting(_with_setting_env({"IFS": ","}), FAILING_UPLOAD, tmp_path / "c")
    assert split.stdout.count("failed (try ") == 1 and "syntax error in expression" in split.stdout, split.stdout


def test_bash_ends_the_boot_on_a_setting_env_name_that_is_no_shell_name():
    ended = _exporting(_with_setting_env({"1X": "1"}))
    assert ended.returncode != 0 and "exported" not in ended.stdout
    assert "`1X=1': not a valid identifier" in ended.stderr, ended.stderr


@pytest.mark.parametrize(("name", "rule"), [
    ("POWER_OFF", "is a variable the TPU VM's startup script sets itself, and it exports setting_env into its own "
                  "shell: the export would replace the script's own value"),
    ("step", "is a variable the TPU VM's startup script sets itself"),
    ("PATH", "is a variable bash itself reads or sets (bash manual, Shell Variables), and the TPU VM's startup "
             "script exports setting_env into its own shell: its boot would run with it changed"),
    ("IFS", "is a variable bash itself reads or sets"),
    ("1X", "is not a shell variable name (letters, digits and _, not first a digit), and the TPU VM's startup "
           "script exports setting_env into its own shell: its boot would stop at 'export: not a valid identifier'"),
    ("A-B", "is not a shell variable name"),
    ("A\nB", "is not a shell variable name"),  # still one line
])
def test_the_recipe_table_refuses_a_setting_env_name_the_export_would_break_in_one_line(name, rule):
    line = _refused_setting_env(name)
    assert line.startswith(f"recipes.toml: patches.{PATCH}.setting_env: "), line
    assert rule in line, line


def test_a_vm_recipes_rl_env_that_sets_a_name_tpu_rl_sets_is_refused_as_gke_refuses_it():
    """On GKE a name set twice in one container is refused (jobs/k8s.py env_list); the VM's script had let
    rl.env override the TPU runtime's own (TPU_TOPOLOGY: the slice JAX sees) without a word."""
    from tpu_rl.recipes import UserError

    recipe = SCRIPT_RECIPE.model_copy(update={"rl": SCRIPT_RECIPE.rl.model_copy(
        update={"env": {"TPU_TOPOLOGY": "2x2"}})})
    with pytest.raises(UserError) as caught:
        render_startup_script(spec_of(recipe), EXAMPLE_SETTINGS)
    assert str(caught.value) == ("environment variable TPU_TOPOLOGY is set twice on the TPU VM; tpu-rl sets it "
                                 "already, so remove it from rl.env in recipes.toml")
