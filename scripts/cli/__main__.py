"""`python -m scripts.cli`, the same as the `tpu-rl` console script."""

from scripts.cli import main

if __name__ == "__main__":
    main()
