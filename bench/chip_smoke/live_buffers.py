"""Does XLA's TPU compiler see the buffers already live on the chip when it compiles a program?

    python3 bench/chip_smoke/live_buffers.py OUT.json        # on a TPU machine (the lent v5e chip)

The fit check (scripts/fit) compiles each of train_rl's programs alone and adds what sits beside it on
the chip (the reference model, vLLM's share). That is right only if the chip's own compile ignores
those live buffers: if it saw them, it would fit a program near the limit into what is left, as it does
with a program's own arguments (its temporaries shrink), and the true peak would be lower.

Each case runs in a fresh process: a buffer of LIVE GiB is put on the chip and kept, then a train step
(an MLP stack with Adam; its own temporaries are several GiB when nothing presses it) is compiled and
run. The compiler's memory analysis with and without the live buffer answers the question: the same
temporaries mean it does not see them; smaller ones mean it does. Whether each runs shows what the
runtime does when the sum passes the chip.

The cases with a cap run with LIBTPU_INIT_ARGS=--xla_tpu_max_hbm_size_mib=CAP, as a recipe's xla_flags
reach a VM's steps (jobs/vm.py): does the chip's compiler then fit the program under the cap, so that it
runs beside a live buffer it would not fit beside otherwise? `--aot CAP` compiles the same step on a CPU
for the chip's topology (v5e:1x1) with the cap as a compile option, as the fit check does
(scripts/fit/maxtext_pieces.py compile_program), to compare its memory analysis with the chip's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

LAYERS, WIDTH, HIDDEN, BATCH, LENGTH = 24, 2048, 8192, 8, 1024
# (GiB kept live before the compile, the compiler's HBM cap in MiB or 0): none, some, and past what the
# program alone leaves free; then the same capped at what the chip leaves beside 3.5 GiB
CAP_MIB = 12 * 1024
TIMED_STEPS = 5  # after the first, which the median of these leaves out anyway
CASES = ((0.0, 0), (2.0, 0), (3.5, 0), (0.0, CAP_MIB), (3.5, CAP_MIB))


def arrays():
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(0), 2 * LAYERS)
    params = [(jax.random.normal(keys[2 * i], (WIDTH, HIDDEN), jnp.float32) * 0.01,
               jax.random.normal(keys[2 * i + 1], (HIDDEN, WIDTH), jnp.float32) * 0.01) for i in range(LAYERS)]
    moments = jax.tree.map(jnp.zeros_like, (params, params))
    return params, moments, jnp.ones((BATCH, LENGTH, WIDTH), jnp.bfloat16)


def train_step():
    import jax
    import jax.numpy as jnp

    def loss(params, x):
        for up, down in params:
            x = jax.nn.relu(x @ up.astype(jnp.bfloat16)) @ down.astype(jnp.bfloat16)
        return jnp.mean(x.astype(jnp.float32) ** 2)

    def step(params, moments, x):
        grads = jax.grad(loss)(params, x)
        mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, moments[0], grads)
        nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, moments[1], grads)
        params = jax.tree.map(lambda p, m, v: p - 1e-4 * m / (jnp.sqrt(v) + 1e-8), params, mu, nu)
        return params, (mu, nu)

    return jax.jit(step, donate_argnums=(0, 1))


def analysed(compiled) -> dict:
    analysis = compiled.memory_analysis()
    return {"argument_bytes": analysis.argument_size_in_bytes, "output_bytes": analysis.output_size_in_bytes,
            "alias_bytes": analysis.alias_size_in_bytes, "temp_bytes": analysis.temp_size_in_bytes}


def case(live_gib: float, cap_mib: int) -> dict:
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    live = jax.device_put(jnp.ones((int(live_gib * 2**30) // 4,), jnp.float32)) if live_gib else None
    if live is not None:
        live.block_until_ready()
    params, moments, batch = arrays()
    jitted = train_step()
    before = device.memory_stats() or {}
    started = time.monotonic()
    compiled = jitted.lower(params, moments, batch).compile()
    out = {"live_gib": live_gib, "cap_mib": cap_mib, "compile_seconds": round(time.monotonic() - started, 1),
           "bytes_in_use_before_compile": before.get("bytes_in_use"), "bytes_limit": before.get("bytes_limit"),
           **analysed(compiled)}
    try:
        params, moments = compiled(params, moments, batch)
        jax.block_until_ready(params)
        out["ran"] = True
        times = []
        for _ in range(TIMED_STEPS):  # what a cap costs: the recomputation it makes the compiler add
            started = time.monotonic()
            params, moments = compiled(params, moments, batch)
            jax.block_until_ready(params)
            times.append(time.monotonic() - started)
        out["step_seconds"] = round(sorted(times)[len(times) // 2], 4)
    except Exception as error:  # the runtime's own refusal is the finding
        out["ran"], out["error"] = False, str(error).splitlines()[0][:400]
    out["peak_bytes_in_use"] = (device.memory_stats() or {}).get("peak_bytes_in_use")
    return out


def ahead_of_time(cap_mib: int) -> dict:
    """The step compiled on a CPU for the chip's topology, the cap as a compile option (no TPU needed)."""
    import jax
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    device = topologies.get_topology_desc(platform="tpu", topology_name="v5e:1x1", chip_config_name="default",
                                         chips_per_host_bounds=(1, 1, 1), num_slices=1).devices[0]
    shaped = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=SingleDeviceSharding(device)),
                          jax.eval_shape(arrays))
    options = {"xla_tpu_max_hbm_size_mib": str(cap_mib)} if cap_mib else None
    return {"cap_mib": cap_mib, "versions": {"jax": jax.__version__},
            **analysed(train_step().lower(*shaped).compile(compiler_options=options))}


def main(argv: list[str]) -> None:
    if argv[:1] == ["--case"]:
        print(json.dumps(case(float(argv[1]), int(argv[2]))), flush=True)
        return
    if argv[:1] == ["--aot"]:
        print(json.dumps(ahead_of_time(int(argv[1]))), flush=True)
        return
    results = []
    for live, cap in CASES:
        env = {**os.environ, **({"LIBTPU_INIT_ARGS": f"--xla_tpu_max_hbm_size_mib={cap}"} if cap else {})}
        done = subprocess.run([sys.executable, __file__, "--case", str(live), str(cap)], capture_output=True,
                              text=True, timeout=240, env=env)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        results.append(json.loads(lines[-1]) if lines else {"live_gib": live, "cap_mib": cap, "exit": done.returncode,
                                                              "stderr_tail": done.stderr[-1500:]})
        print(json.dumps(results[-1]), flush=True)
    with open(argv[0], "w") as out:
        json.dump({"layers": LAYERS, "width": WIDTH, "hidden": HIDDEN, "batch": [BATCH, LENGTH],
                   "cases": results}, out, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
