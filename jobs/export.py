"""The `export` JobSet: the last RL checkpoint -> Hugging Face safetensors, one pod on the CPU pool."""

from __future__ import annotations

import shlex
from typing import Any

from tpu_rl.jobs.k8s import bash_script, cpu_step_jobset
from tpu_rl.jobs.maxtext import export_command
from tpu_rl.jobs.paths import ArtifactPaths

VISION_SHARD = "model-vision.safetensors"

# Runs in the MaxText image after to_huggingface: copies the tensors under the given prefixes, unchanged
# by training, from the model's own Hugging Face repo (the one --hf_model_path names) into the export:
# one more shard and then, last, the index (the object the export's output check reads first); an
# export in one model.safetensors (under 3 GB) is rewritten with them, as transformers reads that file
# before any index. Reads only the source shards that hold them; epath writes to gs:// as orbax does.
_CARRY_VISION = r'''
import json, os, sys, tempfile
from etils import epath
from huggingface_hub import hf_hub_download
from safetensors import safe_open
from safetensors.torch import save_file

source, out, prefixes, shard = sys.argv[1], epath.Path(sys.argv[2]), tuple(sys.argv[3].split(",")), sys.argv[4]
fetch = (lambda name: os.path.join(source, name)) if os.path.isdir(source) else (
    lambda name: hf_hub_download(source, name, token=os.environ.get("HF_TOKEN") or None))
wanted = {k: f for k, f in json.load(open(fetch("model.safetensors.index.json")))["weight_map"].items()
          if k.startswith(prefixes)}
if not wanted:
    sys.exit(f"no tensor under {prefixes} in {source}: nothing to carry over")
tensors = {}
for name in sorted(set(wanted.values())):
    with safe_open(fetch(name), framework="pt") as handle:
        tensors.update({k: handle.get_tensor(k) for k in handle.keys() if k in wanted})
index_path = out / "model.safetensors.index.json"
local = os.path.join(tempfile.mkdtemp(), shard)
if not index_path.exists():  # one model.safetensors (under 3 GB): rewrite it with the vision tensors
    single = out / "model.safetensors"
    with open(local, "wb") as handle:
        handle.write(single.read_bytes())
    with safe_open(local, framework="pt") as handle:
        tensors.update({k: handle.get_tensor(k) for k in handle.keys()})
    save_file(tensors, local, metadata={"format": "pt"})
    single.write_bytes(open(local, "rb").read())
else:  # shards and an index: one more shard, then the index, last
    index = json.loads(index_path.read_text())
    save_file(tensors, local, metadata={"format": "pt"})
    (out / shard).write_bytes(open(local, "rb").read())
    index["weight_map"].update({k: shard for k in tensors})
    index.setdefault("metadata", {})["total_size"] = index["metadata"].get("total_size", 0) + sum(
        t.numel() * t.element_size() for t in tensors.values())
    index_path.write_text(json.dumps(index, indent=2, sort_keys=True))
print(f"carried {len(wanted)} vision tensors from {source} into {out}")
'''


def carry_vision_script(source: str, export_dir: str, prefixes: tuple[str, ...]) -> str:
    """The shell step that adds the untrained vision tensors of `source` to the export in `export_dir`."""
    args = " ".join(shlex.quote(arg) for arg in (source, export_dir, ",".join(prefixes), VISION_SHARD))
    return (f"# carries the vision tower, which training does not touch, from {source} into the export\n"
            f"python3 - {args} <<'PY'{_CARRY_VISION}PY")


def export_jobset(paths: ArtifactPaths) -> dict[str, Any]:
    recipe = paths.recipe
    command = export_command(recipe, paths)
    steps = [f"# reads {paths.final_params}, writes {paths.hf_export}\n"]
    vision = recipe.model.vision_parts
    if vision and not recipe.model.use_multimodal:
        steps = [steps[0] + command.shell(), carry_vision_script(recipe.model.hf_repo, paths.hf_export, vision)]
    else:
        steps = [steps[0] + f"exec {command.shell()}"]
    return cpu_step_jobset(paths.spec, "export", bash_script(*steps))
