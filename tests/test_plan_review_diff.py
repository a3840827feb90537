"""The plan review's diff and Markdown, on small synthetic inputs (no synth, no git)."""

from __future__ import annotations

from tpu_rl.recipes import get_recipe
from tpu_rl.recipes.costs.run import hourly_estimate, pipeline_run_estimate
from tpu_rl.recipes.runs.spec import RunSpec
from tpu_rl.scripts.field_diff import describe, flatten
from tpu_rl.scripts.plan_review import compare
from tpu_rl.scripts.plan_review.diff import diff_manifests, diff_stacks
from tpu_rl.scripts.plan_review.report import StackCost, costs_for, render_stacks
from tpu_rl.scripts.plan_review.worktrees import Side


def _pool(topology: str, nodes: int) -> dict:
    return {
        "//": {"metadata": {"path": "qwen3-v6e32/tpu/pool", "uniqueId": "pool"}},
        "name": "tpu-np-0",
        "node_count": nodes,
        "placement_policy": {"type": "COMPACT", "tpu_topology": topology},
        "node_config": {"taint": [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}]},
    }


def _stack(*pools: dict, nat: bool = True) -> dict:
    resource = {"google_container_node_pool": {f"tpu_{i}": pool for i, pool in enumerate(pools)}}
    if nat:
        resource["google_compute_router_nat"] = {"nat": {"name": "tpu-rl-nat"}}
    return {"resource": resource, "output": {"cluster": {"value": "tpu-rl-example"}}}


def _jobset(args: list[str], replicas: int = 1) -> dict:
    container = {"name": "workload-container", "image": "maxtext:0.2.4", "args": args,
                 "env": [{"name": "JAX_PLATFORMS", "value": "proxy"}]}
    return {"spec": {"replicatedJobs": [
        {"name": "pathways-head", "replicas": 1, "template": {"spec": {"containers": [container]}}},
        {"name": "worker", "replicas": replicas},
    ]}}


def test_flatten_uses_dotted_paths_names_for_named_lists_and_drops_cdktf_metadata():
    flat = flatten(_pool("4x8", 8))
    assert flat["placement_policy.tpu_topology"] == "4x8"
    assert flat["node_config.taint.0.key"] == "google.com/tpu"
    assert not any(path.startswith("//") for path in flat)
    named = flatten(_jobset(["a=1"]))
    assert named["spec.replicatedJobs[worker].replicas"] == 1
    assert named["spec.replicatedJobs[pathways-head].template.spec.containers[workload-container].env[JAX_PLATFORMS].value"] == "proxy"
    assert named["spec.replicatedJobs[pathways-head].template.spec.containers[workload-container].args"] == ["a=1"]


def test_changed_node_pool_lists_old_and_new_for_each_attribute():
    diffs = diff_stacks({"qwen3-v6e32": _stack(_pool("4x8", 8))}, {"qwen3-v6e32": _stack(_pool("8x8", 16))})
    assert render_stacks(diffs) == [
        "### Stacks",
        "",
        "#### `qwen3-v6e32`",
        "- changed `google_container_node_pool.tpu_0`: node_count 8 → 16, placement_policy.tpu_topology 4x8 → 8x8",
        "",
    ]


def test_added_and_removed_resources_and_whole_stacks():
    before = {"qwen3-v6e32": _stack(_pool("4x8", 8)), "old": _stack(_pool("2x4", 1))}
    after = {"qwen3-v6e32": _stack(_pool("4x8", 8), _pool("4x8", 8), nat=False), "new": _stack(nat=False)}
    lines = render_stacks(diff_stacks(before, after))
    assert lines == [
        "### Stacks",
        "",
        "#### `new` (stack added)",
        "- added `output.cluster`",
        "",
        "#### `old` (stack removed)",
        "- removed `google_compute_router_nat.nat`",
        "- removed `google_container_node_pool.tpu_0`",
        "- removed `output.cluster`",
        "",
        "#### `qwen3-v6e32`",
        "- added `google_container_node_pool.tpu_1`",
        "- removed `google_compute_router_nat.nat`",
        "",
    ]


def test_maxtext_arguments_diff_as_a_set_of_keys():
    text, extra = describe(["python3", "-m", "train_rl", "batch_size=8", "debug=True", "rl.num_generations=4"],
                           ["python3", "-m", "train_rl", "batch_size=16", "rl.num_generations=4", "lr=1e-5"])
    assert (text, extra) == ("batch_size 8 → 16; - debug=True; + lr=1e-5", [])


def test_arguments_inside_a_shell_script_diff_as_keys_too():
    old = "set -e\npython3 -m maxtext.train_rl \\\n  num_batches=50 \\\n  'vllm_hf_overrides={\"a\": 1}'\n"
    new = old.replace("num_batches=50", "num_batches=100")
    assert describe(old, new) == ("num_batches 50 → 100", [])


def test_other_script_changes_show_the_changed_lines():
    text, extra = describe("set -e\necho one\n", "set -e\necho two\n")
    assert (text, extra) == ("2 lines changed", ["`-echo one`", "`+echo two`"])


def test_non_argument_list_items_show_as_added_and_removed():
    assert describe(["a", "b"], ["a", "c"]) == ("+ c; - b", [])
    assert describe(None, "x") == ("(none) → x", [])


def test_manifest_diff_per_recipe_and_step():
    before = {"qwen3-v6e32": {"convert": _jobset(["x=1"]), "train": _jobset(["num_batches=50"], replicas=1)}}
    after = {"qwen3-v6e32": {"convert": _jobset(["x=1"]), "train": _jobset(["num_batches=50"], replicas=2)},
             "gemma4-v6e64": {"train": _jobset([])}}
    diffs = diff_manifests(before, after)
    assert [(d.recipe, d.step, d.status) for d in diffs] == [
        ("gemma4-v6e64", "train", "added"), ("qwen3-v6e32", "train", "changed")]
    assert diffs[1].fields == [("spec.replicatedJobs[worker].replicas", "1 → 2", [])]


def _side(stacks: dict, manifests: dict, costs: dict) -> Side:
    return Side(stacks=stacks, manifests=manifests, costs=costs)


def _costs(*names: str) -> dict:
    return {name: StackCost(hourly_estimate(get_recipe(name)), pipeline_run_estimate(RunSpec.of_catalog(get_recipe(name))))
            for name in names}


def test_nothing_changed_is_one_line():
    side = _side({"qwen3-v6e32": _stack(_pool("4x8", 8))}, {"qwen3-v6e32": {"train": _jobset([])}},
                 _costs("qwen3-v6e32"))
    assert compare(side, side, "main (abc)") == (
        "No changes: the stacks, manifests and cost estimates at main (abc) and in the working tree are the same.\n")


def test_review_has_three_sections_and_a_cost_row_per_stack():
    costs = _costs("qwen3-v6e32")
    before = _side({"artifacts": {}, "qwen3-v6e32": _stack(_pool("4x8", 8))}, {}, costs)
    after = _side({"artifacts": {}, "qwen3-v6e32": _stack(_pool("8x8", 16))}, {}, costs)
    review = compare(before, after, "main (abc)")
    assert review.startswith("## Plan review: main (abc) → working tree\n")
    for heading in ("### Stacks", "### Manifests", "### Cost (estimates)"):
        assert f"\n{heading}\n" in review
    assert "\nNo manifest changes.\n" in review
    hourly = costs["qwen3-v6e32"].hourly.summary()
    run = costs["qwen3-v6e32"].run.summary()
    assert f"| `qwen3-v6e32` | {hourly} | {hourly} | no change | {run} | {run} |" in review
    assert "| `artifacts` | negligible | negligible | no change | — | — |" in review
    assert "not a quote" in review


def test_a_side_whose_recipe_table_cannot_be_read_has_no_estimate_and_says_why(tmp_path):
    broken = tmp_path / "recipes.toml"
    broken.write_text("[recipes.qwen3-v6e32]\nplatform = 'mainframe'\n")
    reason = costs_for(broken)
    assert isinstance(reason, str) and reason.startswith("no estimate (recipes.toml: ")
    costs = _costs("qwen3-v6e32")
    before = _side({"qwen3-v6e32": _stack(_pool("4x8", 8))}, {}, reason)
    after = _side({"qwen3-v6e32": _stack(_pool("4x8", 8))}, {}, costs)
    review = compare(before, after, "main (abc)")
    assert f"_REF: {reason}_" in review
    hourly, run = costs["qwen3-v6e32"].hourly.summary(), costs["qwen3-v6e32"].run.summary()
    assert f"| `qwen3-v6e32` | — | {hourly} | — | — | {run} |" in review


def test_a_new_recipe_stack_costs_its_whole_estimate_more():
    costs = _costs("qwen3-v6e32")
    before = _side({"artifacts": {}}, {}, {})
    after = _side({"artifacts": {}, "qwen3-v6e32": _stack(_pool("4x8", 8))}, {}, costs)
    hourly = costs["qwen3-v6e32"].hourly
    review = compare(before, after, "main (abc)")
    assert "#### `qwen3-v6e32` (stack added)" in review
    assert (f"| `qwen3-v6e32` | — | {hourly.summary()} | +${hourly.total:,.2f}/h | — | "
            f"{costs['qwen3-v6e32'].run.summary()} |") in review
