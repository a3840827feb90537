"""Whether the trainer is saving a checkpoint, from the head's log: orbax's own lines around a save, as
MaxText's RL trainer (tunix's CheckpointManager over orbax's) writes them, with absl's prefix.

orbax-checkpoint's CheckpointManager (orbax/checkpoint/checkpoint_manager.py, 0.12.2 in the MaxText 0.2.4
wheel's environment and 0.12.0 in 0.2.3's; tests/contracts/orbax_log.py has the call lines), at absl
INFO, `%s` the process index, thread name or step:
- save() starts: '[process=%s] Saving checkpoint at step %d' (or '... due to preemption.'), after it has
  waited for the previous save's finalize thread (wait_until_finished, below);
- the training thread goes on once the save is handed to the background (async, orbax's default,
  CheckpointManagerOptions.enable_async_checkpointing, which MaxText's train_rl.py leaves on):
  '[process=%s][thread=%s][step=%s] Starting CheckpointManager Save Finalize thread=%s', or, written
  synchronously, '[process=%s][thread=%s][step=%s] Finished synchronous save.';
- wait_until_finished(), at the next save and when the trainer closes the manager at the end:
  '[process=%s][thread=%s][step=%s][wait_until_finished] Waiting for Save Finalize thread (%s) to
  complete.' until '... Done waiting for Save Finalize thread (%s) running at step=%d.', or at once
  '[process=%s][thread=%s][wait_until_finished] No Save Finalize thread to wait for. Returning.'
So the trainer is saving, and its TPUs do no training, from a start line until the next end line. The
background write that follows an async hand-off overlaps training and is not counted."""

from __future__ import annotations

import re

_ANY = r"[^\]]*"
SAVE_LINE = re.compile(
    rf"\[process={_ANY}\] (?P<start>Saving checkpoint at step \d+)"
    rf"|\[process={_ANY}\]\[thread={_ANY}\]\[step={_ANY}\]\[wait_until_finished\] (?P<wait>Waiting for Save Finalize thread )"
    rf"|\[process={_ANY}\]\[thread={_ANY}\]\[step={_ANY}\] (?P<handed>Starting CheckpointManager Save Finalize thread=)"
    rf"|\[process={_ANY}\]\[thread={_ANY}\]\[step={_ANY}\] (?P<sync>Finished synchronous save\.)"
    rf"|\[process={_ANY}\]\[thread={_ANY}\]\[step={_ANY}\]\[wait_until_finished\] (?P<done>Done waiting for Save Finalize thread )"
    rf"|\[process={_ANY}\]\[thread={_ANY}\]\[wait_until_finished\] (?P<none>No Save Finalize thread to wait for\.)")
_STARTS = ("start", "wait")


def saving_in(log_text: str) -> bool | None:
    """Whether the last save line of the log starts a save (True) or ends one (False); None without any."""
    last = None
    for last in SAVE_LINE.finditer(log_text):
        pass
    return None if last is None else last.lastgroup in _STARTS


class SaveWatch:
    """Whether the current attempt is saving, from windows of its log (the head's last lines at each
    poll): a window without a save line keeps what the last one said; a new attempt starts afresh."""

    def __init__(self) -> None:
        self.attempt: object = None
        self.saving = False

    def update(self, attempt: object, log_text: str) -> bool:
        if attempt != self.attempt:
            self.attempt, self.saving = attempt, False
        found = saving_in(log_text)
        if found is not None:
            self.saving = found
        return self.saving
