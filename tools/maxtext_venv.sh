#!/usr/bin/env bash
# Build (or reuse) the CPU venv of one MaxText release and link it as .venv-maxtext-<version>.
#   tools/maxtext_venv.sh VERSION PYTHON UV
# The venv lives in ${TPU_RL_CACHE:-~/.cache/tpu-rl}/maxtext-venv-<version>-<key>, where <key> hashes what
# decides its contents: the constraints, the package list, this script and the Python version. A clean
# clone on a machine that built it before reuses it; any change builds a new one. uv's cache keeps the
# downloads either way. The stamp .installed is written last, so a venv cut off while building is rebuilt.
set -euo pipefail
version=$1 python=$2 uv=$3
dir=tests/maxtext_cpu
constraints=$dir/constraints-$version.txt
key=$( { cat "$constraints" "$dir/packages.txt" "$0"; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-12)
cache=${TPU_RL_CACHE:-$HOME/.cache/tpu-rl}
venv=$cache/maxtext-venv-$version-$key
if [ ! -f "$venv/.installed" ]; then
  rm -rf "$venv"
  mkdir -p "$cache"
  "$uv" venv --quiet --python "$python" "$venv"
  # maxtext without its extra: that brings vLLM, tpu-inference and libtpu, which a CPU cannot run.
  "$uv" pip install --quiet --python "$venv/bin/python" --no-deps "maxtext==$version"
  "$uv" pip install --quiet --python "$venv/bin/python" -c "$constraints" -r "$dir/packages.txt"
  # As the image installs its GitHub dependencies: --no-deps (install_post_train_extra_deps.py).
  "$uv" pip install --quiet --python "$venv/bin/python" --no-deps -c "$constraints" google-tunix
  touch "$venv/.installed"
fi
rm -rf ".venv-maxtext-$version"
ln -s "$venv" ".venv-maxtext-$version"
echo "MaxText $version for CPU: .venv-maxtext-$version -> $venv"
