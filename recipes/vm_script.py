"""The names the TPU VM's startup script takes for itself, which the recipe table must not give its environment.

The script declares its values readonly: the run's values its preamble renders (jobs/vm.py, jobs/vm_install.py,
jobs/vm_outputs.py) and the three its parts fix at boot (jobs/vm_script/*.sh), beside bash's own (`bash -c
'readonly -p'`). It exports the patches' setting_env into its own shell (tpu_env.sh), where one of these names
ends the boot ("readonly variable"), so the recipe table refuses them (recipes/catalog/facts.py);
tests/test_jobs_vm_readonly.py keeps this list and the script's declarations equal.

The export comes after the script has set its own variables (PHASE, POWER_OFF, RAN, ...) and records.sh has set
HOME and PATH: a setting of one of those, or of a variable bash itself reads (IFS, PATH), would change the boot
without a word, so the table refuses every name the script assigns (SCRIPT_ASSIGNED, kept equal to the parts by
the same test) and bash's own (BASH_VARIABLES), and a name that is not one at all (`export` fails on it).
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
# Every name the script assigns: its readonly values, and what its parts assign (jobs/vm_script/*.sh: NAME=,
# local, export, for, read), locals too.
SCRIPT_ASSIGNED = frozenset({
    "COMMAND_FIELDS", "DEBIAN_FRONTEND", "ENDED", "EXPORT_STEP", "GCLOUD_READY", "HF_TOKEN", "HOME", "INSTANCE_ID",
    "LAST_LINE", "MISSING", "NAP", "PATH", "PHASE", "PHASE_START", "POWER_OFF", "POWER_OFF_LATER", "RAN",
    "TOKEN_CODE", "TOKEN_FIX", "TOKEN_START", "TPU_NAME", "UV_TORCH_BACKEND",
    "_", "body", "code", "committed", "err", "found", "index", "listed", "minutes", "name", "out", "record", "resume",
    "seconds", "shard", "start", "state", "step", "text", "try", "up", "url", "why",
}) | (SCRIPT_READONLY - BASH_READONLY)
# The names bash gives a meaning of its own, which it reads (PATH: its command search, IFS: word splitting, HOME:
# tilde expansion and gcloud's config, TMPDIR: mktemp's, FUNCNEST: a limit on nested calls, LC_*: the locale of
# grep and sort, BASH_ENV: a file every bash it starts reads first) or sets: the bash manual's 5.1 Bourne Shell
# Variables and 5.2 Bash Variables (https://www.gnu.org/software/bash/manual/html_node/Bourne-Shell-Variables.html,
# .../Bash-Variables.html).
BASH_VARIABLES = frozenset({
    "CDPATH", "HOME", "IFS", "MAIL", "MAILPATH", "OPTARG", "OPTIND", "PATH", "PS1", "PS2",
    "_", "BASH", "BASHOPTS", "BASHPID", "BASH_ALIASES", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0", "BASH_CMDS",
    "BASH_COMMAND", "BASH_COMPAT", "BASH_ENV", "BASH_EXECUTION_STRING", "BASH_LINENO", "BASH_LOADABLES_PATH",
    "BASH_MONOSECONDS", "BASH_REMATCH", "BASH_SOURCE", "BASH_SUBSHELL", "BASH_TRAPSIG", "BASH_VERSINFO",
    "BASH_VERSION", "BASH_XTRACEFD", "CHILD_MAX", "COLUMNS", "COMP_CWORD", "COMP_KEY", "COMP_LINE", "COMP_POINT",
    "COMP_TYPE", "COMP_WORDBREAKS", "COMP_WORDS", "COMPREPLY", "COPROC", "DIRSTACK", "EMACS", "ENV",
    "EPOCHREALTIME", "EPOCHSECONDS", "EUID", "EXECIGNORE", "FCEDIT", "FIGNORE", "FUNCNAME", "FUNCNEST",
    "GLOBIGNORE", "GLOBSORT", "GROUPS", "histchars", "HISTCMD", "HISTCONTROL", "HISTFILE", "HISTFILESIZE",
    "HISTIGNORE", "HISTSIZE", "HISTTIMEFORMAT", "HOSTFILE", "HOSTNAME", "HOSTTYPE", "IGNOREEOF", "INPUTRC",
    "INSIDE_EMACS", "LANG", "LC_ALL", "LC_COLLATE", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "LINENO",
    "LINES", "MACHTYPE", "MAILCHECK", "MAPFILE", "OLDPWD", "OPTERR", "OSTYPE", "PIPESTATUS", "POSIXLY_CORRECT",
    "PPID", "PROMPT_COMMAND", "PROMPT_DIRTRIM", "PS0", "PS3", "PS4", "PWD", "RANDOM", "READLINE_ARGUMENT",
    "READLINE_LINE", "READLINE_MARK", "READLINE_POINT", "REPLY", "SECONDS", "SHELL", "SHELLOPTS", "SHLVL",
    "SRANDOM", "TIMEFORMAT", "TMOUT", "TMPDIR", "UID",
}) | BASH_READONLY
