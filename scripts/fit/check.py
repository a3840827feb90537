"""A run's fit: its memory shape compiled for its topology (or known), the account made, a plan that
cannot fit refused in one line before anything is created or submitted."""

from __future__ import annotations

from tpu_rl.jobs.fit import compile_request
from tpu_rl.recipes import Recipe, Settings, UserError
from tpu_rl.recipes.runs.spec import RunSpec, run_name
from tpu_rl.scripts.fit.account import Fit, laid_out
from tpu_rl.scripts.fit.compiler import compiled, digest, known


def recipe_fit(result: dict, recipe: Recipe) -> Fit:
    """The account of a compile result with the recipe's margin (and its reason, where it keeps less)."""
    return Fit(result, recipe.fit_margin, recipe.fit_margin_why, recipe.rl.xla_flags)


def fit_of(spec: RunSpec, settings: Settings, say=lambda line: None) -> Fit:
    """The run's fit; UserError when its parallelism cannot be laid out on its chips at all."""
    result = compiled(compile_request(spec, settings), say)
    laid_out(result, spec.recipe.name)
    return recipe_fit(result, spec.recipe)


def require_fit(spec: RunSpec, settings: Settings, say=lambda line: None) -> Fit:
    """The run's fit; UserError (nothing submitted) when the compiler or the account says it cannot fit."""
    fit = fit_of(spec, settings, say)
    if not fit.fits:
        raise UserError(fit.refusal(spec.recipe.name))
    return fit


def require_fits(specs: list[RunSpec], settings: Settings, say=lambda line: None) -> dict[str, Fit]:
    """Each run's fit, each memory shape compiled once (runs that differ only in what changes no buffer
    share one: recipes/fit NEUTRAL); UserError naming the first run that cannot fit."""
    by_shape: dict[str, Fit] = {}
    fits: dict[str, Fit] = {}
    for spec in specs:
        request = compile_request(spec, settings)
        key, sets = digest(request), ", ".join(spec.sets) or "no --set"
        if key not in by_shape:
            result = compiled(request, say)
            try:
                laid_out(result, spec.recipe.name)
            except UserError as error:
                raise UserError(f"run {run_name(spec)} ({sets}): {error}") from None
            by_shape[key] = recipe_fit(result, spec.recipe)
        fits[run_name(spec)] = by_shape[key]
        if not by_shape[key].fits:
            raise UserError(f"run {run_name(spec)} ({sets}): {by_shape[key].refusal(spec.recipe.name)}")
    return fits


def shipped_fit(spec: RunSpec, settings: Settings) -> Fit | None:
    """The run's fit when it is known without compiling (shipped or cached); None otherwise."""
    found = known(compile_request(spec, settings))
    return recipe_fit(found, spec.recipe) if found is not None else None
