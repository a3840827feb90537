"""The names the TPU VM's startup script takes for itself, which the recipe table must not give its environment.

The script declares its values readonly: the run's values its preamble renders (jobs/vm.py, jobs/vm_install.py,
jobs/vm_outputs.py) and the three its parts fix at boot (jobs/vm_script/*.sh), beside bash's own (`bash -c
'readonly -p'`). It exports the patches' setting_env into its own shell (tpu_env.sh), where one of these names
ends the boot ("readonly variable"), so the recipe table refuses them (recipes/catalog/facts.py);
tests/test_jobs_vm_readonly.py keeps this list and the script's declarations equal.
"""

BASH_READONLY = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"})
SCRIPT_READONLY = frozenset({
    # records.sh, bounded.sh, cancel.sh, power.sh, boot.sh, steps.sh
    "RUN", "LOG_FILE", "SCRIPT_PATH", "LOG_TAG", "ATTEMPT_RECORD", "FAILURE_RECORD", "HEARTBEAT", "CANCEL_MARKER",
    "STEP_MARKERS", "STEP_LOGS", "ACTOR_CHECKPOINTS", "LAST_STEP", "TPU_ENV", "BOOT", "CHECKING", "STARTING", "DONE",
    "FAILED", "CANCELLED", "GCLOUD_WAIT_SECONDS", "GCS_TRIES", "GCS_RETRY_SECONDS", "GCS_NO_MATCH",
    "FAILURE_TAIL_LINES", "CANCEL_POLL_SECONDS", "HEARTBEAT_SECONDS", "HEARTBEAT_UPLOAD_SECONDS", "MAXTEXT_PROCESS",
    "ATTEMPT", "CANCEL_WATCHER", "HEARTBEAT_WATCHER",
    # install.sh, token.sh
    "INSTALL", "INSTALL_DIR", "VENV", "INSTALL_MARKER", "MAXTEXT_PIP", "PYTHON_VERSION", "UV_INSTALLER_URL",
    "SYSTEM_PACKAGES", "APT_TRIES", "APT_LOCK_SECONDS", "APT_LOCKED", "DPKG_LOCKED", "LOCK_WAIT_SECONDS",
    "LOCK_RETRY_SECONDS", "KILL_AFTER_SECONDS", "INSTALL_BOUNDS", "TOKEN", "TOKEN_BOUND", "HF_TOKEN_SECRET", "PROJECT",
    # after_run.sh
    "AFTER_RUN", "STOP_RECORD", "POWER_OFF_AFTER_CANCEL_MINUTES", "AFTER_RUN_ENV", "VM_STOPS", "VM_STAYS",
    "INSTANCE_ID_URL", "UNKNOWN_INSTANCE", "STOP_COMMAND", "FAILURE_STAY_MINUTES", "KEEP_UP_WITHIN_MINUTES",
    "DONE_PHASE", "VERIFYING", "STOPPED", "ORBAX_COMMIT_MARKER", "CONVERT_OUTPUTS", "HF_EXPORT", "HF_NAMED_FILES",
    "HF_WEIGHTS_INDEX", "HF_SINGLE_WEIGHTS", "ACCELERATOR_TYPE", "DEPLOY_COMMAND", "DESTROY_COMMAND",
}) | BASH_READONLY
