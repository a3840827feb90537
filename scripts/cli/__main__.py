"""`python -m tpu_rl.scripts.cli`, the same as the `tpu-rl` console script."""

from tpu_rl.scripts.cli import main

if __name__ == "__main__":
    main()
