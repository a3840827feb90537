# shellcheck shell=bash
# --- TPU runtime environment of a single-host slice (seed 002), with the patches' variables (TPU_ENV)
for name in "${!TPU_ENV[@]}"; do export "$name=${TPU_ENV[$name]}"; done
TPU_NAME="$(hostname)"
export TPU_NAME
