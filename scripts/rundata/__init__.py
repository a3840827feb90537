"""Run data: what a run left behind, read the same way by the pipeline (`run`, `status`, `runs`) and by
`tpu-rl metrics`. It imports neither of them: both import it.

- events.py: the TensorBoard event files, from a local directory or a gs:// prefix, and the runs under
  a recipe's trained/ prefix;
- tags.py: the tags train_rl writes, with their upstream source, and which way is better for each;
- progress.py: the trainer's train step line and the latest mean reward, as a step runs;
- evaluation.py: MaxText's held-out evaluation lines, parsed, merged and summed up (the accuracy);
- records.py: what a run's record (run.json) says changed from its recipe.

Nothing is imported here: each reader is imported by the module that uses it.
"""
