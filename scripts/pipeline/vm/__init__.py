"""`tpu-rl run`, `cancel`, `status` and `logs` on one TPU VM, whose startup script (jobs/vm.py) runs the steps
and reports through its serial console, guest attributes and the bucket.

- platform.py: PLATFORM, the TPU VM's implementation of the Platform protocol.
- run.py: `run` and `cancel`: the deployed script checked, the console followed, each step's output verified.
- state.py: the script's markers, attempt and failure records, parsed from the console.
- checks.py: the instance and the deployed script and run checked against the recipe; maintenance, or a power-off.
- watch.py: the console buffer and the stall bound of a running step.
- phase_watch.py: the bounds of the phases outside the steps (install, checks, token, uploads).
- views.py: `status` and `logs`.
- after_run.py: what the VM does once its run ends (stops itself, or stays up) and how the next run starts.
- cancelled.py: what `cancel`, `status` and `run` say of a cancelled run (from the VM's script): how to go on.

Nothing is imported here: each command imports the module it runs, and only when it runs.
"""
