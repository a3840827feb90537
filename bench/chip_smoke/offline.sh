#!/usr/bin/env bash
# MaxText 0.2.3's environment on a TPU machine without network, beside the JAX, jaxlib and libtpu it
# has (those win: docs/development.md, "The real-chip smoke"):
#   bash bench/chip_smoke/offline.sh download DIR        # on a machine with PyPI: the wheels to carry
#   bash bench/chip_smoke/offline.sh install DIR SITE [INDEX [TORCH_DIR]]
# Pure-Python wheels are carried, at the versions recipes/environments/constraints-0.2.3.txt pins;
# compiled ones come from the machine's own package index (INDEX, a file:// URL), whose versions win;
# torch (CPU) from TORCH_DIR. All go into SITE with --no-deps, to be appended to PYTHONPATH.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CONSTRAINTS=$HERE/../../recipes/environments/constraints-0.2.3.txt
PY=${PY:-python3}
# What MaxText's conversion, train_rl, tunix and the smoke import beyond the machine's own packages.
CARRIED="absl-py aiofiles aiohappyeyeballs aiosignal annotated-doc anyio aqtp array-record chex clu datasets
dill drjax einshape etils fastapi filelock flax fsspec google-metrax google-tunix grain h11 httpcore httpx
huggingface-hub humanize immutabledict jaxtyping latex2sympy2-extended markdown-it-py math-verify mdurl
ml-collections multiprocess omegaconf optax orbax-checkpoint orbax-export pathwaysutils perfetto portpicker
prometheus-client protobuf qwix rich shellingham simplejson starlette tensorboardx tokamax toolz tqdm
transformers treescope typeguard typer uvicorn wadler-lindig zipp"
# omegaconf's parser runtime is on PyPI as a source distribution only: built into a wheel here.
BUILT="antlr4-python3-runtime"
COMPILED="pyarrow tensorstore tokenizers safetensors sentencepiece tiktoken msgpack xxhash pandas pillow psutil
aiohttp multidict yarl frozenlist propcache hf-xet"
TORCH=${TORCH:-torch==2.13.0+cpu}
MAXTEXT=maxtext==0.2.3

pin() { grep -i "^$1==" "$CONSTRAINTS" | cut -d';' -f1; }
case ${1:-} in
  download)
    dir=$2; mkdir -p "$dir"
    specs=$(for name in $CARRIED; do pin "$name"; done)
    # shellcheck disable=SC2086
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" $specs
    # MaxText 0.2.3 says Python >= 3.12; its wheel is pure Python and is installed on 3.11 regardless
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$dir" "$MAXTEXT"
    $PY -m pip wheel -q --no-deps -w "$dir" "$(pin $BUILT)"
    du -sh "$dir";;
  install)
    dir=$2; site=$3; index=${4:-file:///opt/pypi/simple}; torch_dir=${5:-/opt/wheels}
    pipi() { PIP_CONFIG_FILE=/dev/null $PY -m pip install --isolated -q --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$site" "$@"; }
    pipi --no-index --ignore-requires-python "$dir"/*.whl
    # the constraints' version where the index has it (transformers refuses tokenizers past its range),
    # else the index's own
    has() { grep -qs -- "[-_]$2-" "${index#file://}/$1/index.html" || compgen -G "${index#file://}/$1/*[-_]$2-*" > /dev/null; }
    specs=$(for name in $COMPILED; do spec=$(pin "$name"); if has "$name" "${spec#*==}"; then echo "$spec"; else echo "$name"; fi
    done)
    echo "from the index: ${specs//$'\n'/ }"
    # shellcheck disable=SC2086
    pipi --index-url "$index" --only-binary=:all: $specs
    $PY -c 'import pydantic, yaml' 2>/dev/null || pipi --index-url "$index" --only-binary=:all: pydantic \
      pydantic-core pyyaml typing-inspection annotated-types
    pipi --no-index --find-links "$torch_dir" "$TORCH"
    du -sh "$site";;
  *) echo "usage: offline.sh download DIR | install DIR SITE [INDEX [TORCH_DIR]]" >&2; exit 2;;
esac
