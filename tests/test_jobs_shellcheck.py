"""shellcheck reads every shell script jobs/ generates: each container's `bash -c` script of every recipe's
JobSets (the checks, the patches' steps, the commands, the export's vision carry), each VM recipe's startup
script, and the scripts the startup script hands to `bash -c` inside it (which shellcheck does not read as
part of the script: they are single-quoted strings there). The scripts are collected from what is rendered,
so a new one is read without being listed here; the Kueue webhook probe (infra/) has its own check
(tests/test_kueue_webhook_probe.py). The startup script's parts (jobs/vm_script/*.sh) are read both ways:
each file whole, as a reader opens it, and as parts of every rendered script."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Any

from peers.settings import spec_of
from tpu_rl import jobs
from tpu_rl.jobs.driver_runtime import DriverRuntime, driver_container
from tpu_rl.recipes import all_recipes, example_settings
from tpu_rl.recipes.driver.runtime import BASE_IMAGE
from tpu_rl.recipes.settings.specs import VM_STAYS

SETTINGS = example_settings()
SHELLS = {"bash", "sh"}
ROOT = Path(__file__).parents[1]
# A shell started with a script as its argument, in Python source: ["bash", "-c", ...] or "bash -c '...'".
INLINE_SHELL = re.compile(r"""["'](?:/bin/)?(?:ba)?sh["'],\s*["']-c["']|\b(?:ba)?sh -c ['"]""")
# The inner `bash -c '...'` scripts of the startup script (none of them holds a single quote).
INNER_BASH = re.compile(r"\bbash -c '([^']*)'")


def _container_scripts(tree: Any, where: str) -> dict[str, tuple[str, str]]:
    """Every container in a manifest whose command (and args) run a shell with -c: (shell, script)."""
    found: dict[str, tuple[str, str]] = {}
    if isinstance(tree, dict):
        argv = [*tree.get("command", []), *tree.get("args", [])] if "image" in tree else []
        if argv and Path(argv[0]).name in SHELLS and "-c" in argv:
            found[f"{where} container {tree['name']}"] = (Path(argv[0]).name, argv[argv.index("-c") + 1])
        for value in tree.values():
            found.update(_container_scripts(value, where))
    elif isinstance(tree, list):
        for item in tree:
            found.update(_container_scripts(item, where))
    return found


def inline_scripts() -> dict[str, tuple[str, str]]:
    """Every generated shell script, by where it is: (shell, script)."""
    found: dict[str, tuple[str, str]] = {}
    for name, recipe in all_recipes().items():
        if recipe.platform == "gke":
            for step, manifest in jobs.render_manifests(spec_of(recipe), SETTINGS).items():
                found.update(_container_scripts(manifest, f"{name} {step}"))
        else:
            text = jobs.render_startup_script(spec_of(recipe), SETTINGS)
            found[f"{name} startup script"] = ("bash", text)
            # the opt-out renders the same script with another value (jobs/vm_outputs.py)
            kept = dataclasses.replace(SETTINGS, vm_after_run=VM_STAYS)
            found[f"{name} startup script ({VM_STAYS})"] = ("bash", jobs.render_startup_script(spec_of(recipe), kept))
            for index, inner in enumerate(INNER_BASH.findall(text)):
                found[f"{name} startup script, bash -c #{index + 1}"] = ("bash", inner)
    runtime = DriverRuntime(BASE_IMAGE, "0.1.0+0123456789ab", SETTINGS.gcs_bucket, "runtimes/r/requirements.txt",
                             "0" * 64)
    found.update(_container_scripts(driver_container(runtime, ["drive", "qwen3-v6e32"]), "run driver"))
    return found


# Off by default (shellcheck wiki SC2154): an upper-case name read but set nowhere, as a mistyped one of the run's
# values would be, found at boot only (set -u). Only the whole startup script sets every name it reads; the others
# read their container's environment (jobs/k8s.py), the startup script's inner `bash -c` its exports.
WHOLE_SCRIPT_CHECKS = "--enable=check-unassigned-uppercase"


def _whole_startup_script(where: str) -> bool:
    return where.endswith(("startup script", f"startup script ({VM_STAYS})"))


def test_shellcheck_reads_every_generated_shell_script_clean(shellcheck):
    scripts = inline_scripts()
    findings = []
    for where, (shell, script) in scripts.items():
        checks = [WHOLE_SCRIPT_CHECKS] if _whole_startup_script(where) else []
        result = subprocess.run([shellcheck, f"--shell={shell}", "--severity=style", *checks, "-"], input=script,
                                capture_output=True, text=True)
        if result.returncode != 0:
            findings.append(f"{where}:\n{result.stdout}{result.stderr}")
    assert not findings, "\n".join(findings)


def test_shellcheck_finds_a_mistyped_name_of_the_run_in_the_whole_startup_script(shellcheck):
    where, (shell, script) = next(item for item in inline_scripts().items() if _whole_startup_script(item[0]))
    mistyped = script + 'log "run $RUNN"\n'
    result = subprocess.run([shellcheck, f"--shell={shell}", "--severity=style", WHOLE_SCRIPT_CHECKS, "-"],
                            input=mistyped, capture_output=True, text=True)
    assert result.returncode != 0 and "SC2154" in result.stdout and "RUNN is referenced but not assigned" in (
        result.stdout), f"{where}: {result.stdout}"


# What only the whole script can judge, left to the rendered one: a variable another part reads (SC2034) and
# a function's arguments given in another part (SC2119, SC2120).
ACROSS_PARTS = ("SC2034", "SC2119", "SC2120")


def test_shellcheck_reads_each_part_of_the_startup_script_whole_and_clean(shellcheck):
    parts = sorted((ROOT / "jobs" / "vm_script").glob("*.sh"))
    assert {path.stem for path in parts} >= {"records", "boot", "install", "token", "steps", "after_run"}
    findings = []
    for path in parts:
        # no --shell: each file says it is bash (its `# shellcheck shell=bash` line), as a reader's shellcheck sees
        result = subprocess.run([shellcheck, "--severity=style", f"--exclude={','.join(ACROSS_PARTS)}", str(path)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            findings.append(f"{path.relative_to(ROOT)}:\n{result.stdout}{result.stderr}")
    assert not findings, "\n".join(findings)


def test_the_collection_holds_each_kind_of_generated_script():
    scripts = inline_scripts()
    gke = [name for name, recipe in all_recipes().items() if recipe.platform == "gke"]
    for name in gke:
        for step in ("convert", "train", "export"):
            assert f"{name} {step} container {jobs.MAIN_CONTAINER}" in scripts, (name, step)
    texts = [script for _, script in scripts.values()]
    for recipe in all_recipes().values():  # each recipe's patches, as steps of its train script
        for patch in recipe.patches:
            assert any(f"# source patch '{patch.name}'" in text for text in texts), patch.name
    assert any(recipe.model.vision_parts for recipe in all_recipes().values())
    assert any("# carries the vision tower" in text for text in texts)  # the export's second step
    assert any(text.startswith("lock_retry ") for text in texts)  # the startup script's inner bash -c
    assert any(text.startswith("set -o pipefail; curl ") and text.endswith("| sh") for text in texts)  # uv's installer
    assert "run driver container driver" in scripts  # jobs/driver_runtime.py's install, then `tpu-rl`
    whole = [where for where in scripts if _whole_startup_script(where)]
    assert len(whole) == 2 * sum(recipe.platform != "gke" for recipe in all_recipes().values()), whole


def test_every_source_that_starts_a_shell_with_a_script_is_one_whose_output_is_collected():
    # jobs/k8s.py builds the containers' `bash -c`; jobs/vm_script/install.sh has the startup script's inner
    # ones; jobs/driver_runtime.py the run driver's.
    sources = {str(path.relative_to(ROOT)) for pattern in ("*.py", "*.sh")
               for path in sorted((ROOT / "jobs").rglob(pattern)) if INLINE_SHELL.search(path.read_text())}
    assert sources == {"jobs/k8s.py", "jobs/vm_script/install.sh", "jobs/driver_runtime.py"}, (
        "a new place starts a shell with a script: make sure inline_scripts() collects what it renders")
