"""The one error type that reaches a person.

Everything that rejects input raises :class:`UserError` with a single line that names the field or
setting, the rule it broke and how to fix it. Entry points (synth, the CLI) print that line and exit
non-zero, without a traceback.
"""


class UserError(Exception):
    """Bad input, explained in one line: what is wrong and how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    @property
    def message(self) -> str:
        return str(self)


class NotDeployed(UserError):
    """Something a cloud command reads is not there (yet): Google credentials, the bucket, the cluster in the
    kubeconfig, the TPU VM. Refused like any bad input; `run --dry-run` prices the run without it."""
