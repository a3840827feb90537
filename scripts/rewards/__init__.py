"""Bringing your own reward functions and data processor into a run (`--rewards`, `--data-processor`) and
checking them before any TPU is paid for (`tpu-rl check-rewards`).

- check.py: import the file in a clean subprocess and call each function as MaxText's make_reward_fn does.
"""
