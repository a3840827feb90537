"""The fit account of the smoke's own run on one v5e chip: where its batch size stops fitting.

    TPU_RL_MAXTEXT_ENV=ENV .venv/bin/python bench/chip_smoke/fit.py [--margin 0] [--batch N ...]

Runs in the project's environment. For each batch size (plan.py boundary_sets: batch_size N and what
a boundary run on the chip sets besides; train_micro_batch_size stays rl.yml's -1, one micro-batch a
step: setting it, even to N, makes tunix 0.1.7 wrap the optimizer in optax.MultiSteps, a params-sized
accumulator more), the smoke's train arguments as the chip runs them
(plan.py, the chip's model) go to the fit check's compiler (scripts/fit/compiler.py, which runs
maxtext_compile.py in ENV: MaxText 0.2.3 with the chip's JAX, jaxlib and libtpu) for accelerator
v5e-1, with the sampler "actor" (nothing beside the trainer: the actor samples); the account keeps the
given margin free (0: the chip's own limit, for comparing with the chip). Prints the account's rows per size and the
boundary: the largest size that fits and the next that cannot. Nothing is converted: only the batch
changes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from plan import Plan, boundary_sets  # noqa: E402
from tpu_rl.jobs.fit import compile_request  # noqa: E402
from tpu_rl.recipes import example_settings  # noqa: E402
from tpu_rl.recipes.fit import memory_items  # noqa: E402
from tpu_rl.scripts.fit.account import Fit  # noqa: E402
from tpu_rl.scripts.fit.compiler import compiled  # noqa: E402

ACCELERATOR = "v5e-1"  # the lent chip: tpu:v5e:1x1 (MaxText's accelerator table names it v5e-1)


def request(batch: int, work: Path) -> dict:
    plan = Plan("chip", work, work / "model", boundary_sets(batch))
    out = compile_request(plan.spec(), example_settings())
    return {**out, "accelerator": ACCELERATOR, "slices": 1, "sampler": "actor",
            "argv": list(memory_items(tuple(plan.argv("train"))))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--margin", type=float, default=0.0)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 64, 96])
    parser.add_argument("--bisect", type=int, nargs=2, metavar=("FITS", "REFUSED"),
                        help="then halve the interval between two sizes until they are neighbours")
    parser.add_argument("--work", type=Path, default=Path("/tmp/chip-smoke"), help="as smoke.py's --work")
    parser.add_argument("--json", type=Path, help="write each size's compile result here")
    args = parser.parse_args()
    results, verdicts = {}, {}

    def judge(batch: int) -> bool:
        result = compiled(request(batch, args.work), say=lambda line: print(f"  {line}", file=sys.stderr))
        fit = Fit(result, args.margin)
        results[batch], verdicts[batch] = result, fit.fits
        print(f"batch {batch} ({result['rows']} rows of {result['prompt'] + result['completion']} tokens): "
              f"{'fits' if fit.fits else 'does not fit'}", flush=True)
        for name, text in fit.rows():
            print(f"  {name}: {text}", flush=True)
        return fit.fits

    for batch in args.batch:
        judge(batch)
    if args.bisect:
        low, high = args.bisect
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if judge(middle) else (low, middle)
    fitting = [batch for batch, fits in verdicts.items() if fits]
    refused = [batch for batch, fits in verdicts.items() if not fits and (not fitting or batch > max(fitting))]
    print(f"boundary: largest that fits {max(fitting) if fitting else None}, next that cannot "
          f"{min(refused) if refused else None}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
