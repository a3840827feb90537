"""`tpu-rl plan-review` end to end on fixture git repositories, two commits each.

Each fixture is a fresh repository holding a copy of this project; the second commit changes the recipe
table. The review synthesizes both sides with their own code, so it is slow (a synth of all stacks per
side): every distinct tree is built once per session (tpu_rl.scripts.plan_review.worktrees caches sides by tree hash)
and the cases share trees where they can (the removed slice is the added slice, reversed).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tpu_rl.recipes import conventions
from tpu_rl.recipes.errors import UserError
from tpu_rl.scripts import plan_review as pr
from tpu_rl.scripts.plan_review.worktrees import Side

ROOT = Path(__file__).resolve().parents[1]
RECIPES = "recipes/recipes.toml"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _project_files() -> list[str]:
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    return [name for name in listed if name and (ROOT / name).is_file()]


def _replace_in_recipe(text: str, recipe: str, old: str, new: str) -> str:
    """Replace `old` once inside the tables of one recipe ([recipes.<recipe>] and its sub-tables)."""
    start = text.index(f"[recipes.{recipe}]")
    end = text.find("\n[recipes.", text.find("\n# ----", start))
    end = len(text) if end == -1 else end
    section = text[start:end]
    assert section.count(old) == 1, f"{old!r} is not unique in recipe {recipe}"
    return text[:start] + section.replace(old, new) + text[end:]


def _edit(repo: Path, recipe: str, old: str, new: str) -> None:
    path = repo / RECIPES
    path.write_text(_replace_in_recipe(path.read_text(), recipe, old, new))


class Fixtures:
    """Fixture repos made from one snapshot of the project (the checkout may change while tests run)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.snapshot = base / "snapshot"
        for file in _project_files():
            target = self.snapshot / file
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copy2(ROOT / file, target)
            except FileNotFoundError:  # removed from the checkout since it was listed
                continue

    def repo(self, name: str, before=None, after=None) -> Path:
        """A repo with two commits: the project (+ `before`), then `after` (default: a README edit)."""
        repo = self.base / name
        shutil.copytree(self.snapshot, repo)
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "config", "user.email", "review@example.invalid")
        _git(repo, "config", "user.name", "plan review test")
        _git(repo, "config", "commit.gpgsign", "false")
        if before:
            before(repo)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "base")
        if after:
            after(repo)
        else:
            (repo / "README.md").write_text((repo / "README.md").read_text() + "\nA documentation change.\n")
        _git(repo, "commit", "-q", "-am", "change")
        return repo


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> Fixtures:
    if not (ROOT / "stacks" / "app.py").is_file():
        pytest.fail("stacks/app.py is missing: the plan review synthesizes the stacks")
    return Fixtures(tmp_path_factory.mktemp("plan-review"))


def _topology(repo: Path) -> None:
    _edit(repo, "qwen3-v6e32", 'topology = "4x8"', 'topology = "8x8"')


def _two_slices(repo: Path) -> None:
    _edit(repo, "qwen3-v6e32", "slices = 1", "slices = 2")


def _one_slice(repo: Path) -> None:
    _edit(repo, "qwen3-v6e32", "slices = 2", "slices = 1")


def _topology_and_spot(repo: Path) -> None:
    """One change in each GKE recipe, so that one tree (two synths) serves both cases: qwen3-v6e32's slice
    shape, gemma4-v6e64's capacity."""
    _topology(repo)
    _edit(repo, "gemma4-v6e64", 'capacity = "reservation"', 'capacity = "spot"')


def _flex_start_hours_and_learning_rate(repo: Path) -> None:
    """Two changes the default build's resources do not show, one in each GKE recipe, so that one tree (two
    synths) serves both cases. gemma4-v6e64's flex-start hours: only flex-start pools (and the queue's
    ProvisioningRequest) use them; the recipe runs on its reservation unless CAPACITY says flex-start.
    qwen3-v6e32's learning rate: its training command only."""
    _edit(repo, "gemma4-v6e64", "flex_start_max_run_hours = 24", "flex_start_max_run_hours = 12")
    _edit(repo, "qwen3-v6e32", '"learning_rate=2e-5"', '"learning_rate=1e-5"')


CASES = {
    "topology and spot": (None, _topology_and_spot),
    "added slice": (None, _two_slices),
    "removed slice": (_two_slices, _one_slice),  # the same two trees as "added slice": built once
    "flex-start hours and rl argument": (None, _flex_start_hours_and_learning_rate),
    "no change": (None, None),
}


@pytest.fixture(scope="module")
def repos(fixtures: Fixtures) -> dict[str, Path]:
    return {name: fixtures.repo(name.replace(" ", "-"), *edits) for name, edits in CASES.items()}


@pytest.fixture(scope="module")
def reviews(repos: dict[str, Path]) -> dict[str, pr.Review]:
    return {name: pr.review("HEAD~1", repo) for name, repo in repos.items()}


def _section(markdown: str, heading: str) -> list[str]:
    lines = markdown.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("### ")), len(lines))
    return [line for line in lines[start:end] if line]


def _address(stack: dict, kind: str, predicate) -> str:
    """The resource address (type.id) of the one `kind` resource whose body satisfies `predicate`."""
    (name,) = [name for name, body in stack["resource"][kind].items() if predicate(body)]
    return f"{kind}.{name}"


def _tpu_pool(side: Side, slice_index: int, recipe: str = "qwen3-v6e32") -> str:
    return _address(side.stacks[recipe], "google_container_node_pool",
                    lambda body: body["name"] == conventions.tpu_pool_name(slice_index))


def _queues(side: Side, recipe: str = "qwen3-v6e32") -> str:
    return _address(side.stacks[recipe], "helm_release", lambda body: "ClusterQueue" in json.dumps(body))


def _recipe_part(lines: list[str], recipe: str) -> list[str]:
    """The lines under one recipe's #### headings (its stack, or its steps' manifests), headings included."""
    part, mine = [], False
    for line in lines:
        if line.startswith("#### "):
            mine = line.startswith(f"#### `{recipe}`")
        if mine:
            part.append(line)
    return part


QUOTA = "values.0.manifests[ClusterQueue/tpu-rl].spec.resourceGroups.0.flavors[tpu].resources"
HEAD = "spec.replicatedJobs[pathways-head].template.spec.template.spec"
WORKER = "spec.replicatedJobs[worker].template.spec"


# Cost cells worked out by hand from recipes/costs/prices.toml (us-east5) and the recipe table, never by
# tpu_rl.recipes.costs.run: v6e chip-hour $1.89 reserved, $1.35 spot; n4-standard-64 $3.03, c4d-standard-96 $4.65,
# system pool e2-standard-4 $0.134, GKE fee $0.10; Cloud NAT $0.0014 per node + $0.005 for its IP.
# A GKE run is 40 + 90 + 40 = 170 minutes, the VM's 5 + 10 + 5 = 20 minutes.
#
# qwen3-v6e32 as committed, one 4x8 slice: 32 chips on 8 hosts, reservation:
#   32 x $1.89 = $60.48, + $3.03 + $0.134 + $0.10, + NAT for 8 + 1 CPU + 1 system = 10 nodes
#   (10 x $0.0014 + $0.005 = $0.019) = $63.763/h; x 170/60 = $180.66
QWEN_4X8 = ("$63.76/h (TPU reserved)", "$180.66 for 170 min (TPU reserved)")
# qwen3-v6e32 on 64 chips and 16 hosts (one 8x8 slice, or two 4x8 slices):
#   64 x $1.89 = $120.96, + $3.03 + $0.134 + $0.10, + NAT for 18 nodes ($0.0302) = $124.2542/h;
#   x 170/60 = $352.05; the change is $124.2542 - $63.763 = $60.49/h
QWEN_64_CHIPS = ("$124.25/h (TPU reserved)", "$352.05 for 170 min (TPU reserved)")
# gemma4-v6e64, one 8x8 slice: 64 x $1.89 = $120.96, + CPU pool c4d-standard-96 $4.65 + $0.134 + $0.10,
# + NAT for 16 + 1 + 1 = 18 nodes ($0.0302) = $125.8742/h; x 170/60 = $356.64
GEMMA_8X8 = ("$125.87/h (TPU reserved)", "$356.64 for 170 min (TPU reserved)")
# gemma4-v6e64 on spot, whose slice scales from zero and so exists only in train: while training
#   64 x $1.35 = $86.40 + $4.65 + $0.134 + $0.10 + NAT for 18 nodes ($0.0302) = $91.3142/h (change
#   -$34.56/h); in convert and export $4.65 + $0.134 + $0.10 + NAT for the CPU and system nodes
#   (2 x $0.0014 + $0.005 = $0.0078) = $4.8918/h. The run: $91.3142 x 90/60 + 2 x $4.8918 x 40/60 =
#   $136.9713 + $6.5224 = $143.49; 64 x 90/60 = 96.0 chip-hours billed, 64 x 80/60 = 85.3 avoided.
GEMMA_SPOT = ("$91.31/h in train, $4.89/h in convert/export",
              "$143.49 for 170 min (TPU only in train: 96.0 chip-hours billed, 85.3 avoided)")


def _cost_row(stack: str, before: tuple[str, str], after: tuple[str, str], change: str) -> str:
    """A row of the cost table from its hand-computed cells: hourly and one run, before and after."""
    return f"| `{stack}` | {before[0]} | {after[0]} | {change} | {before[1]} | {after[1]} |"


def test_no_change_is_one_line(reviews):
    review = reviews["no change"]
    assert review.markdown.startswith("No changes: the stacks, manifests and cost estimates at HEAD~1 (")
    assert review.markdown.endswith(") and in the working tree are the same.\n")
    assert review.changed_stacks == ()


def test_review_has_a_title_and_the_three_sections_in_order(reviews):
    lines = reviews["topology and spot"].markdown.splitlines()
    assert lines[0].startswith("## Plan review: HEAD~1 (") and lines[0].endswith(") → working tree")
    headings = [line for line in lines if line.startswith("### ")]
    assert headings == ["### Stacks", "### Other capacity modes", "### Manifests", "### Cost (estimates)"]


def test_a_change_to_flex_start_pools_alone_is_reviewed_and_planned(reviews):
    """A stack deployed with CAPACITY=flex-start has these pools; the default build does not."""
    review = reviews["flex-start hours and rl argument"]  # gemma4-v6e64's hours
    assert _section(review.markdown, "### Stacks") == ["No resource changes."]
    other = _section(review.markdown, "### Other capacity modes")
    assert other[0] == ("Built again with CAPACITY=reservation,flex-start,spot,on-demand, so that the pools of "
                        "every capacity mode are compared; what differs there and not above:")
    assert other[1] == "#### `gemma4-v6e64`"
    # The slice's run time lives in the ProvisioningRequestConfig only (the flex-start pool sets no node
    # max_run_duration, as Cluster Toolkit's queued-provisioning blueprint): 24 h → 12 h.
    assert any("ProvisioningRequestConfig/flex-start-slice].spec.parameters.maxRunDurationSeconds 86400 → 43200"
               in line for line in other[2:]), other
    assert all("spot" not in line and "on-demand" not in line for line in other[2:]), other
    assert not any(line.startswith("#### ") for line in other[2:]), other  # qwen3-v6e32's change is no pool's
    assert review.changed_stacks == ("gemma4-v6e64",)


def _run_line(review, step: str) -> str:
    """The one line that says a change trains a new run, with the two sides' run names."""
    names = [side.manifests["qwen3-v6e32"][step]["metadata"]["labels"]["tpu-rl/run"]
             for side in (review.before, review.after)]
    assert names[0] != names[1] and all(name.startswith("qwen3-v6e32-") for name in names)
    return f"- run {names[0]} → {names[1]} (nothing of the old run is reused)"


def test_topology_change_shows_pool_quota_manifest_and_cost(reviews):
    review = reviews["topology and spot"]  # qwen3-v6e32's topology
    assert _recipe_part(_section(review.markdown, "### Stacks"), "qwen3-v6e32") == [
        "#### `qwen3-v6e32`",
        f"- changed `{_tpu_pool(review.after, 0)}`: node_count 8 → 16, placement_policy.tpu_topology 4x8 → 8x8",
        f"- changed `{_queues(review.after)}`: {QUOTA}[cpu].nominalQuota 1440 → 2880, "
        f"{QUOTA}[google.com/tpu].nominalQuota 32 → 64, {QUOTA}[memory].nominalQuota 5760Gi → 11520Gi, "
        "values.0.manifests[ResourceFlavor/tpu].spec.nodeLabels.cloud.google.com/gke-tpu-topology 4x8 → 8x8",
    ]
    # Another shape trains other weights: a new run (its name hashes the shape), shown once per step
    # instead of in every path and label that carries it.
    new_run = _run_line(review, "train")
    assert _recipe_part(_section(review.markdown, "### Manifests"), "qwen3-v6e32") == [
        "#### `qwen3-v6e32` train",
        new_run,
        f"- `{HEAD}.initContainers[pathways-rm].args`: --instance_type tpuv6e:4x8 → tpuv6e:8x8",
        f"- `{WORKER}.backoffLimit`: 32 → 64",
        f"- `{WORKER}.completions`: 8 → 16",
        f"- `{WORKER}.parallelism`: 8 → 16",
        f"- `{WORKER}.template.spec.nodeSelector.cloud.google.com/gke-tpu-topology`: 4x8 → 8x8",
        "#### `qwen3-v6e32` export",
        new_run,
    ]
    row = _cost_row("qwen3-v6e32", QWEN_4X8, QWEN_64_CHIPS, "+$60.49/h")
    assert row in _section(review.markdown, "### Cost (estimates)")
    assert review.changed_stacks == ("gemma4-v6e64", "qwen3-v6e32")  # gemma4-v6e64's capacity too


def test_added_slice_adds_a_tpu_pool_and_a_pathways_slice(reviews):
    review = reviews["added slice"]
    assert _section(review.markdown, "### Stacks") == [
        "#### `qwen3-v6e32`",
        f"- changed `{_queues(review.after)}`: {QUOTA}[cpu].nominalQuota 1440 → 2880, "
        f"{QUOTA}[google.com/tpu].nominalQuota 32 → 64, {QUOTA}[memory].nominalQuota 5760Gi → 11520Gi",
        f"- added `{_tpu_pool(review.after, 1)}`",
    ]
    new_run = _run_line(review, "train")
    assert _section(review.markdown, "### Manifests") == [
        "#### `qwen3-v6e32` train",
        new_run,
        f"- `{HEAD}.initContainers[pathways-rm].args`: --instance_count 1 → 2",
        "- `spec.replicatedJobs[worker].replicas`: 1 → 2",
        f"- `{WORKER}.template.spec.containers[pathways-worker].env[MEGASCALE_NUM_SLICES].value`: 1 → 2",
        "#### `qwen3-v6e32` export",
        new_run,
    ]
    row = _cost_row("qwen3-v6e32", QWEN_4X8, QWEN_64_CHIPS, "+$60.49/h")
    assert row in _section(review.markdown, "### Cost (estimates)")


def test_removed_slice_removes_the_second_tpu_pool(reviews):
    review = reviews["removed slice"]
    stacks = _section(review.markdown, "### Stacks")
    assert stacks[0] == "#### `qwen3-v6e32`"
    assert stacks[-1] == f"- removed `{_tpu_pool(review.before, 1)}`"
    assert f"{QUOTA}[google.com/tpu].nominalQuota 64 → 32" in stacks[1]
    row = _cost_row("qwen3-v6e32", QWEN_64_CHIPS, QWEN_4X8, "−$60.49/h")
    assert row in _section(review.markdown, "### Cost (estimates)")


def test_capacity_switch_to_spot_replaces_the_reservation_pool_and_drops_the_reserved_mark(reviews):
    review = reviews["topology and spot"]  # gemma4-v6e64's capacity
    recipe = "gemma4-v6e64"
    stacks = _recipe_part(_section(review.markdown, "### Stacks"), recipe)
    spot_pool = _address(review.after.stacks[recipe], "google_container_node_pool",
                         lambda body: body["name"] == "tpu-np-spot-0")
    # A spot pool scales from zero, a reservation pool holds every host: one replaces the other, and
    # the queue's TPU flavor follows (tpu -> tpu-spot).
    assert stacks[0] == f"#### `{recipe}`"
    assert stacks[2:] == [f"- added `{spot_pool}`", f"- removed `{_tpu_pool(review.before, 0, recipe)}`"]
    assert stacks[1].startswith(f"- changed `{_queues(review.after, recipe)}`: ")
    assert "flavors[tpu-spot].resources[google.com/tpu].nominalQuota (none) → 64" in stacks[1]
    assert "flavors[tpu].resources[google.com/tpu].nominalQuota 64 → (none)" in stacks[1]
    # Capacity does not change what trains (same run), but spot restarts train after a preemption, at most
    # 3 times, and a refused head check (exit 78) fails the JobSet at once.
    assert _recipe_part(_section(review.markdown, "### Manifests"), recipe) == [
        f"#### `{recipe}` train",
        "- `spec.failurePolicy.maxRestarts`: 0 → 3",
        "- `spec.failurePolicy.restartStrategy`: Recreate → BlockingRecreate",
        "- `spec.failurePolicy.rules[headCheckFailed].action`: (none) → FailJobSet",
        "- `spec.failurePolicy.rules[headCheckFailed].name`: (none) → headCheckFailed",
        '- `spec.failurePolicy.rules[headCheckFailed].onJobFailureReasons`: (none) → ["PodFailurePolicy"]',
        '- `spec.failurePolicy.rules[headCheckFailed].targetReplicatedJobs`: (none) → ["pathways-head"]',
        "- `spec.replicatedJobs[pathways-head].template.spec.podFailurePolicy.rules.0.action`: (none) → FailJob",
        "- `spec.replicatedJobs[pathways-head].template.spec.podFailurePolicy.rules.0.onExitCodes.containerName`: "
        "(none) → workload-container",
        "- `spec.replicatedJobs[pathways-head].template.spec.podFailurePolicy.rules.0.onExitCodes.operator`: "
        "(none) → In",
        "- `spec.replicatedJobs[pathways-head].template.spec.podFailurePolicy.rules.0.onExitCodes.values`: "
        "(none) → [78]",
    ]
    row = _cost_row(recipe, GEMMA_8X8, GEMMA_SPOT, "−$34.56/h")
    assert row in _section(review.markdown, "### Cost (estimates)")


def test_changed_rl_argument_shows_only_that_key_in_the_training_command(reviews):
    review = reviews["flex-start hours and rl argument"]  # qwen3-v6e32's learning rate
    assert _section(review.markdown, "### Stacks") == ["No resource changes."]
    new_run = _run_line(review, "train")
    assert _section(review.markdown, "### Manifests") == [
        "#### `qwen3-v6e32` train",
        new_run,
        f"- `{HEAD}.containers[workload-container].command`: learning_rate 2e-5 → 1e-5",
        "#### `qwen3-v6e32` export",
        new_run,
    ]
    assert "| `qwen3-v6e32` |" in review.markdown and "+$" not in review.markdown and "−$" not in review.markdown
    assert "qwen3-v6e32" not in review.changed_stacks  # gemma4-v6e64's flex-start pools changed, not this stack


def test_every_stack_has_a_cost_row_labelled_as_an_estimate(reviews):
    cost = _section(reviews["added slice"].markdown, "### Cost (estimates)")  # changes qwen3-v6e32 only
    assert cost[0].startswith("Estimates from list prices in recipes/costs/prices.toml (") and "not a quote" in cost[0]
    # llama31-v6e8, one VM of 8 chips: 8 x $1.89 = $15.12, + NAT for 1 VM ($0.0014 + $0.005) = $15.1264/h;
    # x 20/60 = $5.04
    llama = ("$15.13/h (TPU reserved)", "$5.04 for 20 min (TPU reserved)")
    assert _cost_row("gemma4-v6e64", GEMMA_8X8, GEMMA_8X8, "no change") in cost
    assert _cost_row("llama31-v6e8", llama, llama, "no change") in cost
    assert "| `artifacts` | negligible | negligible | no change | — | — |" in cost


def test_the_checkout_is_left_untouched(repos):
    for repo in repos.values():
        assert _git(repo, "status", "--porcelain") == ""
        assert len(_git(repo, "worktree", "list").splitlines()) == 1


def test_uncommitted_changes_are_part_of_the_working_tree_side(fixtures):
    repo = fixtures.repo("uncommitted", None, _flex_start_hours_and_learning_rate)  # trees built already
    _git(repo, "reset", "-q", "--soft", "HEAD~1")  # the edit is now staged, not committed
    review = pr.review("HEAD", repo)
    assert "learning_rate 2e-5 → 1e-5" in review.markdown
    assert _git(repo, "status", "--porcelain") == f"M  {RECIPES}"


def test_system_pool_in_the_stacks_is_what_the_cost_estimate_prices(reviews):
    stack = reviews["no change"].after.stacks["qwen3-v6e32"]
    (system,) = [body for body in stack["resource"]["google_container_node_pool"].values()
                 if body["name"] == "system-np"]
    assert system["node_config"]["machine_type"] == conventions.SYSTEM_POOL_MACHINE_TYPE
    assert system["initial_node_count"] == conventions.SYSTEM_POOL_NODES


# Bad input: one clear line (UserError), nothing left behind.

def test_unknown_ref_is_one_line(repos):
    with pytest.raises(UserError, match=r"^unknown ref 'no-such-branch': pass a branch, tag or commit"):
        pr.review("no-such-branch", repos["no change"])


def test_not_a_git_repository_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"is not a git repository"):
        pr.review(None, tmp_path)


def test_default_base_without_main_asks_for_a_ref(fixtures):
    repo = fixtures.repo("no-main")
    _git(repo, "branch", "-m", "main", "work")
    with pytest.raises(UserError, match=r"no branch main or origin/main .*--base REF"):
        pr.review(None, repo)


def test_synth_failing_at_one_side_is_one_line_and_leaves_no_worktree(fixtures):
    def broken_app(repo: Path) -> None:
        (repo / "stacks" / "app.py").write_text("import sys\nsys.exit('stacks broken on purpose')\n")

    def fixed_app(repo: Path) -> None:
        shutil.copy2(fixtures.snapshot / "stacks" / "app.py", repo / "stacks" / "app.py")

    repo = fixtures.repo("broken-base", broken_app, fixed_app)
    with pytest.raises(UserError, match=r"^synth failed at HEAD~1 \([0-9a-f]{10}\): stacks broken on purpose"):
        pr.review("HEAD~1", repo)
    assert len(_git(repo, "worktree", "list").splitlines()) == 1


def test_cli_prints_the_review_and_writes_the_changed_stacks(repos, reviews, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tpu_rl.scripts.cli import app

    monkeypatch.chdir(repos["topology and spot"])
    changed = tmp_path / "changed-stacks.txt"
    result = CliRunner().invoke(app, ["plan-review", "--base", "HEAD~1", "--changed-stacks", str(changed)])
    assert result.exit_code == 0, result.output
    assert result.output == reviews["topology and spot"].markdown
    assert changed.read_text() == "gemma4-v6e64\nqwen3-v6e32\n"


def test_cli_output_ends_with_a_newline_when_nothing_changed(monkeypatch):
    # issue 28: "No changes: ..." was printed without one, so the shell prompt followed it on the same line.
    from typer.testing import CliRunner

    import tpu_rl.scripts.plan_review as scripts_plan_review
    from tpu_rl.scripts.cli import app
    from tpu_rl.scripts.plan_review.worktrees import Side

    side = Side(stacks={"artifacts": {}}, manifests={}, costs="no estimate")
    monkeypatch.setattr(scripts_plan_review, "review",
                        lambda base: scripts_plan_review.compare_sides(side, side, "HEAD~1 (0123456789)"))
    result = CliRunner().invoke(app, ["plan-review", "--base", "HEAD~1"])
    assert result.exit_code == 0, result.output
    assert result.output == ("No changes: the stacks, manifests and cost estimates at HEAD~1 (0123456789) and in "
                             "the working tree are the same.\n")


def test_cli_bad_ref_exits_2_with_one_line(repos, monkeypatch):
    from typer.testing import CliRunner

    from tpu_rl.scripts.cli import app

    monkeypatch.chdir(repos["no change"])
    result = CliRunner().invoke(app, ["plan-review", "--base", "no-such-branch"])
    assert result.exit_code == 2
    assert result.output.startswith("error: unknown ref 'no-such-branch'") and result.output.count("\n") == 1

