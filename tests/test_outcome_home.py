"""Exit codes, outcomes, transient-or-final and the retry policy have one home, recipes/outcome.py (issue 38,
item 2): the driver's Job contract is derived from it, never restated, and so are the VM startup script's retry
rules; failures are classified by their type, never by their text (tests/test_driver_endings.py: `drive`'s table
of endings)."""

from __future__ import annotations

import ast

import pytest

from import_graph import ROOT
from tpu_rl.recipes.outcome import DRIVER_RETRY, VM_SCRIPT_RETRIES as RETRIES, ExitCode

# Where the driver's side of the contract lives: its Job, its container's install, and `drive` itself.
DRIVER_MODULES = ("jobs/driver.py", "jobs/driver_runtime.py", "scripts/cli/drive.py")


def _restated(path, root=ROOT) -> list[str]:
    """Integer literals that are exit codes, where a code would be restated: a module-level constant, or an
    element of a tuple, list or set literal anywhere."""
    codes = {int(code) for code in ExitCode if code != ExitCode.OK} | {DRIVER_RETRY}
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        literals = []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            literals = node.elts
        elif isinstance(node, ast.Assign) and node in tree.body:
            literals = [node.value]
        found += [f"{path.relative_to(root)}:{literal.lineno}: {literal.value}" for literal in literals
                  if isinstance(literal, ast.Constant) and type(literal.value) is int and literal.value in codes]
    return found


@pytest.mark.parametrize("module", DRIVER_MODULES)
def test_the_driver_restates_no_exit_code(module):
    assert not _restated(ROOT / module), "take the codes from tpu_rl.recipes.outcome, never restate them"


def test_the_restatement_check_sees_the_old_tuple_and_constants(tmp_path):
    """It would have caught what jobs/driver.py and jobs/driver_runtime.py wrote before issue 38."""
    old = tmp_path / "old.py"
    old.write_text("OUTCOME_EXIT_CODES = (1, 2, 3, 4, 130)\nINSTALL_RETRY = 75\nSTAGED_FILE_CHANGED = 2\n"
                   "DRIVER_BACKOFF_LIMIT = 8\n")
    found = sorted(int(line.split(": ")[1]) for line in _restated(old, tmp_path))
    assert found == [1, 2, 2, 3, 4, 75, 130]


def test_the_drivers_job_fails_on_the_runs_own_endings_and_retries_the_rest():
    """The numbers as docs/pipeline.md's "Exit codes" and the Job's rules state them."""
    from tpu_rl.jobs.driver import OUTCOME_EXIT_CODES, RETRY_EXIT_CODE
    from tpu_rl.jobs.driver_runtime import INSTALL_RETRY, STAGED_FILE_CHANGED

    assert OUTCOME_EXIT_CODES == (1, 2, 3, 4, 130)
    assert RETRY_EXIT_CODE == INSTALL_RETRY == 75  # EX_TEMPFAIL of sysexits.h
    assert STAGED_FILE_CHANGED == 2  # bad input, never retried


def test_every_exit_code_is_in_the_docs_table_and_the_help():
    from tpu_rl.recipes.outcome import EXIT_CODES_HELP

    rows = [line for line in (ROOT / "docs" / "pipeline.md").read_text().split("## Exit codes")[1]
            .split("\n## ")[0].splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(row.split("|")[1]) for row in rows] == [int(code) for code in ExitCode]
    assert EXIT_CODES_HELP == (
        "Exit codes: 0 success, 1 a step failed, 2 bad input (nothing submitted), 3 a step's output is missing "
        "in GCS, 4 cloud/cluster API error after retries, 5 preflight check failed, 130 interrupted (jobs keep "
        "running).")


# --- transient or final, by HTTP status (RFC 9110 section 15; 429: RFC 6585 section 4) -----------------------
@pytest.mark.parametrize("status, transient, refused", [
    (0, True, False),  # no answer at all (the Kubernetes client's status)
    (400, False, True), (403, False, True), (404, False, True), (422, False, True),
    (401, False, False), (408, False, False), (409, False, False),  # no refusal of the request itself
    (429, True, False), (500, True, False), (502, True, False), (503, True, False), (504, True, False),
])
def test_an_answer_is_transient_or_refused_by_its_status(status, transient, refused):
    from tpu_rl.recipes.outcome import refused_for_good, transient_status

    assert (transient_status(status), refused_for_good(status)) == (transient, refused)


# --- classified by type ---------------------------------------------------------------------------------
def test_no_google_credentials_is_a_credentials_failure_by_type():
    from google.auth.exceptions import DefaultCredentialsError

    from tpu_rl.recipes.errors import NotDeployed
    from tpu_rl.recipes.outcome import CredentialsFailure
    from tpu_rl.recipes.settings.load import example_settings
    from tpu_rl.scripts.cloud.clients import Clients

    def build():
        raise DefaultCredentialsError("Your default credentials were not found.")

    with pytest.raises(CredentialsFailure) as raised:
        Clients(example_settings())._get("storage", build)
    assert isinstance(raised.value, NotDeployed)
    assert raised.value.cause == "no Google credentials (DefaultCredentialsError)"


def test_a_refused_login_is_a_transient_credentials_failure_whose_cause_has_no_fix():
    from google.auth.exceptions import RefreshError

    from tpu_rl.recipes.outcome import CredentialsFailure, ExitCode
    from tpu_rl.scripts.cloud.foreign import foreign_outcome

    outcome = foreign_outcome(RefreshError("Reauthentication is needed. Please run `gcloud auth application-default "
                                           "login` to reauthenticate."))
    assert isinstance(outcome, CredentialsFailure) and outcome.code == ExitCode.API_ERROR and outcome.transient
    assert str(outcome).endswith("run `gcloud auth application-default login`")
    assert outcome.cause == "Google did not accept your credentials (RefreshError)"


# --- the VM startup script's retries ----------------------------------------------------------------------
def test_the_vm_script_takes_its_retries_from_the_table():
    from vm_helpers import example_script

    lines = example_script().splitlines()
    knobs = {"GCS_RETRY_SECONDS": RETRIES.bucket.pause, "LOCK_RETRY_SECONDS": RETRIES.lock.pause,
             "LOCK_WAIT_SECONDS": RETRIES.lock.within, "GCLOUD_WAIT_SECONDS": RETRIES.gcloud_wait}
    for name, seconds in knobs.items():
        assert f'readonly {name}="${{{seconds.env}:-{seconds.seconds}}}"' in lines
    counts = {"GCS_TRIES": RETRIES.bucket.tries, "APT_TRIES": RETRIES.apt_update.tries,
              "APT_LOCK_SECONDS": RETRIES.lock.within.seconds}
    for name, count in counts.items():
        assert f"readonly {name}={count}" in lines
    # the defaults docs/settings.md and docs/pipeline.md state
    assert (RETRIES.bucket.tries, RETRIES.bucket.pause.seconds, RETRIES.apt_update.tries) == (5, 10, 3)
    assert (RETRIES.lock.pause.seconds, RETRIES.lock.within.seconds, RETRIES.gcloud_wait.seconds) == (10, 600, 300)


def test_no_vm_module_restates_a_retry_rule():
    """The renderer and `run`'s phase bounds read the table: none of them assigns a retry's env name or count."""
    envs = {RETRIES.bucket.pause.env, RETRIES.lock.pause.env, RETRIES.lock.within.env, RETRIES.gcloud_wait.env}
    found = []
    for path in [*sorted((ROOT / "jobs").glob("vm*.py")), ROOT / "scripts" / "pipeline" / "vm" / "phase_watch.py"]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in envs:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and any(
                    isinstance(target, ast.Name) and ("TRIES" in target.id or "RETRY" in target.id)
                    for target in node.targets):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "take the VM script's retry rules from tpu_rl.recipes.outcome.VM_SCRIPT_RETRIES"


def test_apt_get_update_pauses_as_the_bucket_retries_do():
    """install.sh's apt_update sleeps GCS_RETRY_SECONDS times the try: a pause of its own would render nowhere."""
    from dataclasses import replace

    from tpu_rl.recipes.outcome import ScriptSeconds

    with pytest.raises(ValueError, match="GCS_RETRY_SECONDS"):
        replace(RETRIES, apt_update=replace(RETRIES.apt_update, pause=ScriptSeconds(5, "TPU_RL_APT_RETRY_SECONDS")))
