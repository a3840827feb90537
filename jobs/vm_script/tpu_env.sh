# shellcheck shell=bash
# --- TPU runtime environment of a single-host slice (seed 002), with the patches' variables (TPU_ENV)
# Each name is one the script neither sets nor bash reads, and a valid one: the recipe table refuses any other
# (recipes/vm_script.py), as the export would end the boot or change it.
for name in "${!TPU_ENV[@]}"; do export "$name=${TPU_ENV[$name]}"; done
TPU_NAME="$(hostname)"
export TPU_NAME
