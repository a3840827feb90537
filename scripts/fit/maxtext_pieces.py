"""What the fit's compile (maxtext_compile.py) needs around MaxText, JAX and tunix: the topology's
devices, the chip's limit, the compiler's refusals read, train_rl's configs and patched utils_rl, the
optimizer's layout and vLLM's weights. Like maxtext_compile.py it runs inside MaxText's environment and
imports nothing of tpu-rl."""

from __future__ import annotations

import os
import re
import sys
import time

GIB, MIB = 1 << 30, 1 << 20
# XLA's refusals, in the words of each libtpu (sizes in powers of 1024). A program: "Ran out of memory
# on HBM, the total memory required for HLO temporaries (32.00G) exceeds available HBM (31.24G)."
# (0.0.44) or "Ran out of memory in memory space hbm. Used 33.15G of 31.25G hbm." (0.0.41); one buffer
# larger than the chip: "Allocation (size=1099511627776) would exceed memory (size=33822867456)"
# (0.0.41, which names the chip's whole HBM there, not what a program may use).
_SIZE = r"[\d.]+[KMGT]?"
_REFUSALS = (
    re.compile(rf"required for HLO temporaries \((?P<need>{_SIZE})\) exceeds available HBM \((?P<limit>{_SIZE})\)"),
    re.compile(rf"Used (?P<need>{_SIZE}) of (?P<limit>{_SIZE}) hbm"),
    re.compile(r"Allocation \(size=(?P<need>\d+)\) would exceed memory \(size=(?P<whole>\d+)\)"),
)


def size(text: str) -> int:
    """'31.24G' -> bytes (XLA's units are powers of 1024); a bare number is bytes."""
    scale = 1 << (10 * " KMGT".index(text[-1])) if text[-1] in "KMGT" else 1
    return round(float(text.rstrip("KMGT")) * scale)




def say(message: str) -> None:
    """A progress line on stderr, which the caller shows while it waits."""
    print(message, file=sys.stderr, flush=True)


def refusal(error: Exception) -> dict | None:
    """The compiler's refusal for want of HBM, with the figures it names; None for any other error."""
    text = str(error)
    if "RESOURCE_EXHAUSTED" not in text or "hbm" not in text.lower():
        return None
    for pattern in _REFUSALS:
        found = pattern.search(text)
        if found:
            figures = {name: size(value) for name, value in found.groupdict().items()}
            return {"refused": " ".join(text.split())[:400], "need_bytes": figures["need"],
                    "limit_bytes": figures.get("limit"), "whole_bytes": figures.get("whole")}
    return {"refused": " ".join(text.split())[:400], "need_bytes": None, "limit_bytes": None}


def topology(accelerator: str, slices: int):
    from jax.experimental import topologies
    from maxtext.utils import accelerator_to_spec_map

    spec = accelerator_to_spec_map.get_system_characteristics(accelerator)
    return topologies.get_topology_desc(platform=spec.platform, topology_name=spec.topology_name,
                                        chip_config_name=spec.chip_config_name,
                                        chips_per_host_bounds=spec.chips_per_host_bounds,
                                        num_slices=slices, wrap=spec.wrap).devices


def ballast(mesh, per_chip: int):
    """An argument of `per_chip` bytes on every chip of `mesh`."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    rows = -(-max(per_chip, 1) // MIB)  # whole MiB: no dimension past 2**32, which libtpu refuses
    return jax.ShapeDtypeStruct((mesh.devices.size, rows, MIB), jnp.int8,
                                sharding=NamedSharding(mesh, PartitionSpec(mesh.axis_names)))


def chip_limit(device) -> int:
    """The HBM a program may use on one chip, in the compiler's own words: it refuses an argument larger
    than the chip, and libtpu 0.0.44 names what is available then; 0.0.41 names the whole HBM instead,
    and a program of two arguments that each fit but not together gets the usable figure."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    mesh = Mesh(np.array([device]), ("chip",))

    def refused(*sizes: int) -> dict:
        try:
            jax.jit(lambda *b: b[0][0, 0, 0], keep_unused=True).lower(*(ballast(mesh, size) for size in sizes)).compile()
        except Exception as error:  # noqa: BLE001  XlaRuntimeError, named differently across jaxlib releases
            found = refusal(error)
            if found:
                return found
            raise
        raise SystemExit(f"the compiler accepted {sum(sizes)} bytes on one chip; it is not judging HBM")

    found = refused(1 << 40)
    if not found.get("limit_bytes") and found.get("whole_bytes"):
        part = found["whole_bytes"] * 3 // 5
        found = refused(part, part)
    if not found.get("limit_bytes"):
        raise SystemExit(f"the compiler's refusal names no limit: {found['refused']}")
    return found["limit_bytes"]


def per_chip(tree) -> int:
    import jax
    import numpy as np

    return int(sum(np.prod(leaf.sharding.shard_shape(leaf.shape) if leaf.sharding else leaf.shape) * leaf.dtype.itemsize
                   for leaf in jax.tree.leaves(tree) if hasattr(leaf, "sharding")))


def patched_utils_rl(patches: list[dict], source_root: str):
    """utils_rl with the recipe's source patches run on a copy, as the train container runs them."""
    import importlib
    import importlib.util
    import shutil
    import subprocess
    import sysconfig
    import tempfile

    module_name = "maxtext.trainers.post_train.rl.utils_rl"
    site = sysconfig.get_paths()["purelib"]
    scratch = tempfile.mkdtemp(prefix="tpu-rl-fit-")
    for patch in patches:
        target = os.path.join(scratch, patch["file"])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(os.path.join(site, patch["file"]), target)
        script = patch["script"].replace(source_root, scratch + "/")
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:"
                                                                     f"{os.environ.get('PATH', '/usr/bin:/bin')}"})
        if done.returncode != 0:
            raise SystemExit(f"the recipe's patch of {patch['file']} failed: {done.stdout}{done.stderr}")
        if patch["file"].replace("/", ".").removesuffix(".py") == module_name:
            spec = importlib.util.spec_from_file_location(module_name, target)
            if spec is None or spec.loader is None:
                raise SystemExit(f"the recipe's patch of {patch['file']} left no module to load at {target}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
    return importlib.import_module(module_name)


def module_file(name: str) -> str:
    """The source file of an importable module of MaxText's environment."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{name} is not in MaxText's environment ({sys.executable})")
    return spec.origin


def configs_and_devices(argv: list[str], devices):
    """train_rl's configs and its trainer/sampler split, by MaxText's own function with the topology's
    devices in place of jax.devices()."""
    import inspect

    import jax
    from maxtext.configs import types
    from maxtext.utils import model_creation_utils

    setup = model_creation_utils.setup_configs_and_devices
    kwargs = {"config_class": types.RLConfig} if "config_class" in inspect.signature(setup).parameters else {}
    real = jax.devices
    jax.devices = lambda *args, **kw: list(devices)
    try:
        return setup(argv, {}, **kwargs)
    finally:
        jax.devices = real


def train_rl_function(name: str):
    """A function of train_rl.py from its own source, without importing the module (which imports vLLM's
    TPU adapter); only for functions that use nothing but their arguments."""
    import ast

    path = module_file("maxtext.trainers.post_train.rl.train_rl")
    node = next(n for n in ast.parse(open(path).read(), path).body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict = {}
    exec(compile(ast.Module([node], []), path, "exec"), namespace)  # noqa: S102  MaxText's own code
    return namespace[name]


def compile_program(name: str, jitted, args, beside: int, options: dict[str, str]) -> dict:
    """One program compiled as the chip compiles it, with its own arguments only: its memory analysis, or
    the compiler's refusal of the program alone. `beside`: what else the chip holds meanwhile, bytes;
    `options`: the run's compiler flags (a lower HBM limit makes the compiler fit the program under it)."""
    start = time.monotonic()
    say(f"compiling {name} ...")
    try:
        compiled = jitted.lower(*args).compile(compiler_options=options or None)
    except Exception as error:  # noqa: BLE001  the compiler's refusal is a verdict, anything else is not
        found = refusal(error)
        if found is None:
            raise
        say(f"{name}: refused by the compiler ({time.monotonic() - start:.0f} s)")
        return {**found, "beside_bytes": beside, "seconds": round(time.monotonic() - start, 1)}
    stats = compiled.memory_analysis()
    say(f"{name}: compiled in {time.monotonic() - start:.0f} s")
    return {"argument_bytes": stats.argument_size_in_bytes, "output_bytes": stats.output_size_in_bytes,
            "alias_bytes": stats.alias_size_in_bytes, "temp_bytes": stats.temp_size_in_bytes,
            "code_bytes": stats.generated_code_size_in_bytes, "beside_bytes": beside,
            "seconds": round(time.monotonic() - start, 1)}


# How the tunix of each release's image lays out the optimizer state and accumulates gradients, by the
# commit its image installs (docs/provenance.md, "The image's tunix in the fit check").
IMAGE_TUNIX = {
    "683256db1a0919b5cfd46cee52cebc96331494fb": {"layout": "constrained", "accumulator": "multisteps"},
    "c4ec573d29e4c3a3955b348256d464b119c8a6d1": {"layout": "placed", "accumulator": "float32_past_one"},
}


def image_tunix() -> tuple[str, dict]:
    """The tunix commit the release's image installs, from the installed wheel, and how it trains."""
    import sysconfig

    deps = os.path.join(sysconfig.get_paths()["purelib"], "dependencies", "extra_deps", "post_train_github_deps.txt")
    found = re.search(r"google-tunix @ \S+/archive/([0-9a-f]{40})", open(deps).read())
    if not found or found[1] not in IMAGE_TUNIX:
        raise SystemExit(f"the image's tunix ({found[1] if found else 'none in ' + deps}) is not one the fit "
                         "knows: read its tunix/sft/peft_trainer.py and add it to IMAGE_TUNIX")
    return found[1], IMAGE_TUNIX[found[1]]


def shaped(shape, dtype):
    """An ndarray of `shape` that holds one element: what tunix's get_sharding looks at (ndim, shape)."""
    import numpy as np

    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))


def laid_out(state, specs, mesh, layout: str):
    """`state` (ShapeDtypeStructs) laid out as the image's tunix lays out the optimizer state."""
    import jax
    from jax.sharding import NamedSharding
    from tunix.sft import sharding_utils

    def place(leaf, spec):
        if layout == "constrained":
            sharding = NamedSharding(mesh, spec)
            sharding.shard_shape(leaf.shape)  # with_sharding_constraint refuses what this refuses
        else:
            sharding = sharding_utils.get_sharding(shaped(leaf.shape, leaf.dtype), mesh, spec)
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

    return jax.tree.map(place, state, specs)


def vllm_weights_per_chip(state, rollout: dict, rules) -> int:
    """vLLM's weights on one sampler chip. With MaxText's model in vLLM (`rules`: configs/inference/vllm.yml's
    logical_axis_rules, as train_rl reads them), each weight is split over the mesh axes its logical names
    map to, on tpu-inference's mesh (layers/common/sharding.py build_mesh: data, expert and model are the
    rollout's data, expert and tensor parallelism). Without (`rules` None: tpu-inference's own model, llama),
    every weight is split over the tensor parallelism and an expert weight (MaxText's 'exp') over both."""
    import jax
    import numpy as np
    from flax import linen as nn
    from flax import nnx

    sizes = {"data": rollout["data_parallel_size"], "model": rollout["tensor_parallel_size"],
             "expert": rollout["expert_parallel_size"]}
    total = 0
    for variable in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable)):
        metadata = variable.get_metadata()
        names = tuple(metadata.get("out_sharding") or metadata.get("sharding") or ())
        value = variable.get_value() if hasattr(variable, "get_value") else variable.value
        if rules is None:
            split = sizes["model"] * (sizes["expert"] if "exp" in names else 1)
        else:
            spec = nn.logical_to_mesh_axes(names, rules) if names else ()
            axes = [axis for entry in spec if entry for axis in ((entry,) if isinstance(entry, str) else entry)]
            split = int(np.prod([sizes.get(axis, 1) for axis in axes]))
        total += -(-int(np.prod(value.shape)) * value.dtype.itemsize // split)
    return total


def vllm_rules(config):
    """configs/inference/vllm.yml's logical axis rules, read as train_rl reads them (create_rl_components);
    None where vLLM runs tpu-inference's own model (vllm_hf_overrides names no MaxText architecture)."""
    from maxtext.configs import pyconfig, types

    if "MaxText" not in str((config.vllm_hf_overrides or {}).get("architectures", [])):
        return None
    configs = os.path.dirname(module_file("maxtext.configs"))
    argv = ["", os.path.join(configs, "inference", "vllm.yml"), "log_config=False"]
    kwargs = {"config_class": types.RLConfig} if hasattr(types, "RLConfig") else {}
    return pyconfig.initialize(argv, **kwargs).logical_axis_rules
