"""`tpu-rl`: the operator CLI. Thin on purpose: parse, call scripts/* and recipes/*, print.

- core.py: the Typer app, and how every command ends (one line on stderr, one exit code per outcome).
- offline.py: `recipes` and `render`, which need no cloud.
- cloud.py: `preflight`, `secret set`, `run`, `eval`, `check-rewards`, `cancel`, `status`, `runs` and `logs`;
  views.py lays out their reports; run_input.py builds a run's recipe (--set, --run, the user files).
- sweep.py: `sweep`, several runs checked whole, then each started detached.
- reports.py: `metrics` and `plan-review`.
- drive.py: `drive` (hidden), what the run's driver runs in the cluster.

Start-up is what the offline commands cost (`make bench-cli`), so the kubernetes and Google clients,
rich and the retry machinery are imported inside the commands that use them, never at module level.
"""

from __future__ import annotations

# Importing a module registers its commands, and `tpu-rl --help` lists them in the order they were
# registered: keep these imports in this order.
from tpu_rl.scripts.cli import offline  # noqa: F401
from tpu_rl.scripts.cli import cloud  # noqa: F401
from tpu_rl.scripts.cli import sweep  # noqa: F401
from tpu_rl.scripts.cli import reports  # noqa: F401
from tpu_rl.scripts.cli import drive  # noqa: F401  (hidden: what the run's driver runs in the cluster)
from tpu_rl.scripts.cli.core import app

__all__ = ["app", "main"]


def _first_interrupt_only(signum, frame) -> None:
    """SIGINT: a KeyboardInterrupt the first time, ignored after. A person who presses Ctrl-C again while
    the first is being reported (the line, the exit 130) must not kill the process mid-exit, which
    CPython would end as a death by SIGINT (exit -2) with no line."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> None:
    import signal

    signal.signal(signal.SIGINT, _first_interrupt_only)
    app()
