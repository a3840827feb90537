"""Write a text-only export of a tiny multimodal model in shards, as MaxText's to_huggingface writes a big one.

    python tests/maxtext_cpu/sharded_export.py ORIGINAL_DIR OUT_DIR PREFIXES MAX_SHARD_BYTES

Runs in a MaxText test venv. The real 26B export is over to_huggingface's 3 GB shard size
(checkpoint_conversion/utils/utils.py DEFAULT_MAX_SHARD_SIZE, 0.2.4), so it is written as
model-0000i-of-0000N.safetensors with a model.safetensors.index.json; the tiny one fits one file. So
this calls the release's own save path, utils.save_model_files (config.json, the tokenizer, the shards
and last the index), with only the shard size lowered (shard_checkpoint's max_shard_size), on what the
tiny model's export holds: its config and tokenizer (to_huggingface writes HF_MODEL_CONFIGS' config,
which the chain points at the tiny one) and its text tensors, every tensor not under PREFIXES (the
vision tower, which use_multimodal=False leaves out; tests/test_maxtext_real.py shows the real export
of the text tensors equals the original's). Prints one JSON line: the shards and the index written.
"""

from __future__ import annotations

import functools
import json
import os
import sys


def main(original_dir: str, out_dir: str, prefixes: tuple[str, ...], max_shard_bytes: int) -> None:
    import transformers
    from maxtext.checkpoint_conversion.utils import utils
    from safetensors import safe_open

    index = json.load(open(os.path.join(original_dir, "model.safetensors.index.json")))
    weights = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(os.path.join(original_dir, shard), framework="flax") as handle:
            weights.update({k: handle.get_tensor(k) for k in handle.keys() if not k.startswith(prefixes)})
    utils.shard_checkpoint = functools.partial(utils.shard_checkpoint, max_shard_size=max_shard_bytes)
    utils.save_model_files(weights, transformers.AutoConfig.from_pretrained(original_dir),
                           transformers.AutoTokenizer.from_pretrained(original_dir), None, out_dir)
    written = json.load(open(os.path.join(out_dir, "model.safetensors.index.json")))
    print(json.dumps({"shards": sorted(set(written["weight_map"].values())), "index": written}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(",")), int(sys.argv[4]))
