"""Will a run fit its TPU chips: XLA's TPU compiler judges every plan before any TPU is asked for.

- check.py: a run's fit, and the refusal of one that cannot fit (what `fit`, `run`, `sweep` and
  `preflight` call);
- account.py: what one chip holds at the peak, from the compiled programs and vLLM's share;
- compiler.py: the compile run once per memory shape, shipped, cached or compiled now;
- environment.py: MaxText's environment of a release (MaxText, JAX, tunix, libtpu), built once;
- maxtext_compile.py, maxtext_pieces.py: the compile itself, run inside that environment: they import
  nothing of tpu-rl.
"""
