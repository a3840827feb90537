"""The pipeline: convert, train and export, each step's output verified in GCS before the next starts.

- session.py: what both runners share: the Session of one command (settings, clients, console, clocks),
  the steps a user may name, checking a step's output and the rows of `tpu-rl status`.
- platforms.py: the Platform protocol every command calls, and `platform_for(recipe)`, the one lookup of
  the implementation of the recipe's platform (a package each, imported only when a command runs);
  answers.py: the neutral types the platforms answer in (Rendered, Idle).
- gke/: `run`, `eval`, `cancel`, `status` and `logs` on GKE: one JobSet per step, planned, submitted,
  waited for, followed and diagnosed (a module each).
- vm/: the same (but `eval`) on a single TPU VM, read back from its serial console (a module each).
- progress.py: how far training is, as `run` and `status` show it (the step, the pace, the time left).
- stall.py: the stall bound of a running step, one rule for both platforms; phases.py: where a GKE
  step's time went while `run` waited; saving.py: whether the trainer is saving a checkpoint.
- accuracy.py: `run` printing and recording the held-out evaluations, and reading them from Cloud
  Logging once the pods are gone.
- record.py: the run record, run.json, and the records of a recipe's runs.
- runs.py: `tpu-rl runs`: each run's record and last reward and step.
- run_state.py: what a run is now (its train step, each step's state, its queue place and ending),
  decided once for the screens that show a run (`status`, `runs`, and `down`'s queue places).
- manifests.py: rendered JobSets as one YAML stream (render --out -, run --dry-run).
- dry_run.py: `run --dry-run`: the plan and its price, compared with what is deployed when that can be read.
- preflight.py: `tpu-rl preflight`: capacity, bucket and token, checked before anything costs money.

What a run left behind (event files, tags, run.json, progress and evaluation lines) is read by
scripts/rundata/, below both this package and scripts/metrics/.

Nothing is imported here: each command imports the module it runs, and only when it runs.
"""
