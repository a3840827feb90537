"""`tpu-rl plan-review`: what a change does to the cloud and what it costs, without a cloud account.

Two sides are built from the same example settings: REF (default: the merge base with main) and the
working tree. Each side lives in a temporary `git worktree` (always removed; the checkout is never
touched) and is built by its own code, in one process: its app, run as `python -m tpu_rl.stacks.app`
runs it, synthesizes its stacks, a small collector renders every recipe's manifests with that side's
`jobs`, and the app runs again with CAPACITY set to every capacity mode, so that the pools of modes a
recipe does not use by default (but a deployment's CAPACITY may) are compared too. The differences are
printed as Markdown: resources per stack (and, apart, what only the other capacity modes' build shows),
manifest fields per recipe and step, and the cost estimate per stack.

- diff.py: what differs, field by field (pure).
- report.py: the Markdown, and the cost estimates it shows.
- worktrees.py: building each side in its own temporary worktree (and caching sides by tree hash).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tpu_rl.scripts.plan_review.diff import beyond, diff_manifests, diff_stacks
from tpu_rl.scripts.plan_review.report import (
    cost_signature,
    render_costs,
    render_manifests,
    render_other_capacity,
    render_stacks,
)
from tpu_rl.scripts.plan_review.worktrees import Side, build_sides


@dataclass(frozen=True)
class Review:
    markdown: str
    changed_stacks: tuple[str, ...]  # stacks whose synthesized configuration differs (for `terraform plan`)
    before: Side
    after: Side


def compare(before: Side, after: Side, base_label: str) -> str:
    """The review as Markdown, or one line when nothing differs."""
    return compare_sides(before, after, base_label).markdown


def compare_sides(before: Side, after: Side, base_label: str) -> Review:
    stack_diffs = diff_stacks(before.stacks, after.stacks)
    # Every capacity mode's pools, when both sides could build them: a stack deployed with another
    # CAPACITY than its recipe's own must be planned when only those pools change.
    capacity_diffs = (beyond(diff_stacks(before.all_capacity, after.all_capacity), stack_diffs)
                      if before.all_capacity and after.all_capacity else [])
    changed_stacks = tuple(sorted({diff.name for diff in [*stack_diffs, *capacity_diffs] if diff.status != "removed"}))
    step_diffs = diff_manifests(before.manifests, after.manifests)
    stacks = sorted(before.stacks.keys() | after.stacks.keys())
    costs_differ = cost_signature(before.costs) != cost_signature(after.costs)
    if not stack_diffs and not capacity_diffs and not step_diffs and not costs_differ:
        return Review(f"No changes: the stacks, manifests and cost estimates at {base_label} and in the working tree "
                      "are the same.\n", (), before, after)
    lines = [f"## Plan review: {base_label} → working tree", "",
             "Both sides built with the example settings, each by its own code.", ""]
    lines += render_stacks(stack_diffs)
    lines += render_other_capacity(capacity_diffs, after.all_capacity_setting)
    lines += render_manifests(step_diffs)
    lines += render_costs(stacks, before.costs, after.costs)
    return Review("\n".join(lines).rstrip() + "\n", changed_stacks, before, after)


def review(base: str | None = None, repo: Path | None = None) -> Review:
    """REF vs the working tree of `repo` (default: the current directory), and the stacks that changed.

    Raises UserError (one line) for an unknown ref, a directory that is not a git repository, or a
    synth or render that fails on either side.
    """
    before, after, base_label = build_sides(base, repo)
    return compare_sides(before, after, base_label)
