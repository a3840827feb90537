"""Your own reward functions: `tpu-rl check-rewards` calls them in a clean subprocess as MaxText's
make_reward_fn will (scripts/rewards/check.py has the source), and `run --rewards` brings the file into the
train head through a ConfigMap, into the run's identity and its record (fake Kubernetes API, GCS emulator)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tpu_rl.jobs.paths import ArtifactPaths
from peers.fixtures import peer_settings, put_step_output, spec_of
from tpu_rl.recipes import UserError, get_recipe
from tpu_rl.scripts.cli import app
from tpu_rl.scripts.cloud import gcs as gcs_io

RECIPE = "qwen3-v6e32"
runner = CliRunner()
REWARDS = '''
import json, re

def short_answer(prompts, completions, tmvp_config, **kwargs):
    """Pays for short completions."""
    return [1.0 if len(c) < 80 else 0.0 for c in completions]

def correct(prompts, completions, tmvp_config, answer, **kwargs):
    found = [re.search(tmvp_config.solution_start_token + "(.*?)" + tmvp_config.solution_end_token, c)
             for c in completions]
    return [2.0 if m and m.group(1).strip() in json.loads(a) else 0.0 for m, a in zip(found, answer)]

def one_value(prompts, completions, tmvp_config, **kwargs):
    return [1.0]

def text_values(prompts, completions, tmvp_config, **kwargs):
    return ["1"] * len(completions)

def raises(prompts, completions, tmvp_config, **kwargs):
    return [kwargs["reference"] for _ in completions]

# Call shapes of tunix c4ec573d (rl_learner._compute_rewards adds mode="train" to the batch's columns and
# trajectory_ids; reward_manager passes
# GRPOConfig fields by parameter name, keeps np.array(r), sums with np.nansum) and of maxtext 0.2.4
# evaluate_rl._compute_row_reward (one completion, question a str, answer=[answer], no mode).
def named(prompts, completions, tmvp_config, question, answer, mode="eval", **kwargs):
    return [1.0 if mode == "train" else 0.0 for _ in completions]

def needs_mode(prompts, completions, tmvp_config, question, answer, mode, **kwargs):
    return [0.0 for _ in completions]

def no_mode(prompts, completions, tmvp_config, question, answer):
    return [0.0 for _ in completions]

def generations(prompts, completions, tmvp_config, num_generations=0, **kwargs):
    return [float(num_generations) for _ in completions]

def as_numpy(prompts, completions, tmvp_config, **kwargs):
    import numpy as np
    return np.array([np.nan] + [1.0] * (len(completions) - 1))

def exact_format(prompts, completions, tmvp_config, **kwargs):
    return [tmvp_config.reward_exact_format_match for _ in completions]

def gemma_turn(prompts, completions, tmvp_config, **kwargs):
    return [float(p.startswith("<start_of_turn>user")) for p in prompts]

def per_question(prompts, completions, tmvp_config, question, **kwargs):
    return [float(len(q) > 0) for q in question]
'''


@pytest.fixture
def no_hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache, so that no tokenizer of the machine's own cache is found."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def rewards_file(tmp_path) -> Path:
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARDS)
    return path


def test_check_rewards_calls_each_function_on_sample_completions(rewards_file):
    result = runner.invoke(app, ["check-rewards", f"{rewards_file}:short_answer,correct"])
    assert result.exit_code == 0, result.output
    # rl.yml's num_generations=2 completions of each of two gsm8k rows, in tunix's order (row 0's, then
    # row 1's): right with the tags (88 and 83 characters), wrong with the tags (96, then 600).
    assert result.output.splitlines()[:2] == ["short_answer: 0, 1, 0, 1", "correct: 2, 0, 2, 0"]


def test_check_rewards_calls_them_as_tunix_and_evaluation_do(rewards_file):
    result = runner.invoke(app, ["check-rewards", f"{rewards_file}:named,generations,as_numpy,exact_format"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:4] == [
        "named: 1, 1, 1, 1", "generations: 2, 2, 2, 2", "as_numpy: nan, 1, 1, 1",
        "exact_format: 0.1, 0.1, 0.1, 0.1"]


def test_check_rewards_uses_the_recipes_template(rewards_file, no_hub_cache):
    # qwen3-v6e32 names data_template_path=.../openmathinstruct2_rl.json, whose TEMPLATE (maxtext 0.2.4
    # examples/chat_templates) is "{system_prompt}\n\n{question}": no Gemma turn markers.
    plain = runner.invoke(app, ["check-rewards", f"{rewards_file}:gemma_turn"])
    qwen = runner.invoke(app, ["check-rewards", f"{rewards_file}:gemma_turn", "--recipe", "qwen3-v6e32"])
    assert plain.exit_code == qwen.exit_code == 0, plain.output + qwen.output
    assert plain.output.splitlines()[0] == "gemma_turn: 1, 1, 1, 1"
    assert qwen.output.splitlines()[0] == "gemma_turn: 0, 0, 0, 0, 0, 0, 0, 0"  # rl.num_generations=4


@pytest.mark.parametrize("functions, line", [
    ("nope", "it defines no function 'nope'"),
    ("raises", "raises raised KeyError: 'reference'"),
    ("no_mode", "no_mode takes no **kwargs, but tunix also passes trajectory_ids, mode: add **kwargs"),
    ("needs_mode", "needs_mode raised TypeError: needs_mode() missing 1 required positional argument: 'mode' "
                   "in evaluation (one completion, question a str, answer=[answer], no mode)"),
    ("per_question", "per_question returned 155 values for 1 completions in evaluation: return a list of 1 "
                     "floats, one per completion"),
    ("one_value", "one_value returned 1 values for 4 completions in training: return a list of 4 floats, one per completion"),
    ("text_values", "text_values returned '1' (str) in training: each score must be a float (nan is skipped)"),
])
def test_check_rewards_refuses_in_one_line(rewards_file, functions, line):
    result = runner.invoke(app, ["check-rewards", f"{rewards_file}:{functions}"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: --rewards {rewards_file}:{functions}: {line}"]


def test_rewards_need_a_gke_recipe_on_maxtext_0_2_4(rewards_file):
    from tpu_rl.recipes.runs.user_files import read_user_file

    old = get_recipe(RECIPE).model_copy(update={"maxtext_version": "0.2.3"})
    with pytest.raises(UserError, match=r"--rewards needs MaxText 0.2.4 or later \(reward_functions_path\)"):
        read_user_file(old, "rewards", rewards_file, ("correct",))
    with pytest.raises(UserError, match="applies to GKE recipes"):
        read_user_file(get_recipe("llama31-v6e8"), "rewards", rewards_file, ("correct",))


SHORT = "def short(prompts, completions, tmvp_config, **kwargs):\n    return [0.0] * len(completions)\n"


@pytest.mark.parametrize("name, size, recipe, line", [
    ("my rewards.py", 0, RECIPE, "--rewards {path}: the name 'my rewards.py' is not a ConfigMap key, which the "
                                 "trainer reads it from: rename it to letters, digits, '-', '_' and '.' only"),
    ("big.py", 1_100_000, RECIPE, "--rewards {path} has 1100000 bytes, over the 1 MiB a ConfigMap holds (the "
                                  "trainer reads it from one): keep the file under 1 MiB, e.g. load large data "
                                  "from the bucket"),
    ("vm.py", 0, "llama31-v6e8", "--rewards applies to GKE recipes: recipe 'llama31-v6e8' runs on a TPU VM whose "
                                 "startup script trains the recipe as recipes.toml defines it (MaxText 0.2.4 or "
                                 "later on GKE has reward_functions_path)"),
])
def test_check_rewards_refuses_what_run_refuses_with_the_same_line(cloud, tmp_path, name, size, recipe, line):
    # issue 28: check-rewards said `ok` to files that `run --rewards` then refused.
    path = tmp_path / name
    path.write_text(SHORT + "#" * max(0, size - len(SHORT) - 1) + ("\n" if size else ""))
    expected = [f"error: {line.format(path=path)}"]
    checked = runner.invoke(app, ["check-rewards", f"{path}:short", "--recipe", recipe])
    ran = runner.invoke(app, ["run", recipe, "--rewards", f"{path}:short"])
    # issue 28: render took no --rewards; it refuses the file as run does, and writes nothing
    rendered = runner.invoke(app, ["render", recipe, "--out", str(tmp_path / "out"), "--rewards", f"{path}:short"])
    assert (checked.exit_code, ran.exit_code, rendered.exit_code) == (2, 2, 2), (
        checked.output + ran.output + rendered.output)
    assert checked.output.strip().splitlines() == expected
    assert ran.output.strip().splitlines() == expected
    assert rendered.output.strip().splitlines() == expected and not (tmp_path / "out").exists()
    assert not cloud["kube"].created and not cloud["kube"].configmaps
    if recipe == RECIPE:  # the file's own rules hold with no recipe named too
        alone = runner.invoke(app, ["check-rewards", f"{path}:short"])
        assert alone.exit_code == 2 and alone.output.strip().splitlines() == expected, alone.output


def test_run_with_rewards_mounts_the_file_and_records_it(cloud, rewards_file):
    from tpu_rl.recipes.runs.spec import RunSpec, run_name
    from tpu_rl.recipes.runs.user_files import read_user_file

    recipe = get_recipe(RECIPE)
    custom = RunSpec.requested(recipe).with_user_files((read_user_file(recipe, "rewards", rewards_file, ("short_answer", "correct")),))
    name = run_name(custom)
    assert name != run_name(RunSpec.of_catalog(recipe))  # the file joins the identity
    changed = RunSpec.requested(recipe).with_user_files((read_user_file(recipe, "rewards", rewards_file, ("correct",)),))
    assert run_name(changed) != name
    put_step_output(cloud["gcs"], recipe, "convert")
    train = f"{name}-train"
    cloud["kube"].plan(train, ticks=2, on_success=lambda: put_step_output(cloud["gcs"], custom, "train"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train", "--rewards", f"{rewards_file}:short_answer,correct"])
    assert result.exit_code == 0, result.output
    configmap = cloud["kube"].configmaps[f"{name}-user-files"]
    assert configmap["data"] == {"my_rewards.py": REWARDS}
    head = next(job for job in cloud["kube"].jobsets[train]["spec"]["replicatedJobs"] if job["name"] == "pathways-head")
    pod = head["template"]["spec"]["template"]["spec"]
    main = next(c for c in pod["containers"] if c["name"] == "workload-container")
    assert {"name": "tpu-rl-user-files", "mountPath": "/etc/tpu-rl/user", "readOnly": True} in main["volumeMounts"]
    assert {"name": "tpu-rl-user-files", "configMap": {"name": f"{name}-user-files"}} in pod["volumes"]
    script = " ".join(main["command"])
    assert "reward_functions_path=/etc/tpu-rl/user/my_rewards.py" in script
    assert "reward_functions=short_answer,correct" in script
    paths = ArtifactPaths(spec_of(custom), peer_settings())
    record = gcs_io.read_json(cloud["gcs"], paths.run_record)
    copy = record["files"]["rewards"]["copy"]
    assert copy == paths.run_record.rpartition("/")[0] + "/user-files/my_rewards.py"
    assert gcs_io.read_text(cloud["gcs"], copy) == REWARDS
    assert record["identity"]["user_files"][0]["functions"] == ["short_answer", "correct"]


def test_run_refuses_a_broken_reward_before_anything_is_submitted(cloud, rewards_file):
    result = runner.invoke(app, ["run", RECIPE, "--rewards", f"{rewards_file}:one_value"])
    assert result.exit_code == 2
    assert not cloud["kube"].created and not cloud["kube"].configmaps


def test_render_refuses_a_broken_reward_with_runs_line(cloud, rewards_file, tmp_path):
    ran = runner.invoke(app, ["run", RECIPE, "--rewards", f"{rewards_file}:one_value"])
    rendered = runner.invoke(app, ["render", RECIPE, "--out", "-", "--rewards", f"{rewards_file}:one_value"])
    assert (ran.exit_code, rendered.exit_code) == (2, 2), ran.output + rendered.output
    line = (f"error: --rewards {rewards_file}:one_value: one_value returned 1 values for 8 completions in "
            "training: return a list of 8 floats, one per completion")
    assert ran.output.strip().splitlines() == rendered.output.strip().splitlines() == [line]


def test_render_with_rewards_writes_the_configmap_and_jobsets_run_submits(cloud, rewards_file, tmp_path):
    # issue 28: render took no --rewards, so its manifests showed another run than the one submitted.
    import yaml

    from tpu_rl.jobs.driver import DRIVER_PREFIX

    option = f"{rewards_file}:short_answer,correct"
    put_step_output(cloud["gcs"], get_recipe(RECIPE), "convert")
    ran = runner.invoke(app, ["run", RECIPE, "--steps", "train", "--rewards", option])
    # the user files' ConfigMap, beside the request of the run's driver (which carries the file too)
    (submitted_name, configmap), = ((name, body) for name, body in cloud["kube"].configmaps.items()
                                    if not name.startswith(DRIVER_PREFIX))
    [request] = [body for name, body in cloud["kube"].configmaps.items() if name.startswith(DRIVER_PREFIX)]
    assert request["data"]["my_rewards.py"] == REWARDS
    (train_name, train), = ((name, job) for name, job in cloud["kube"].jobsets.items() if name.endswith("-train"))
    # submitted; the fake train writes no checkpoint, which is not this test's concern
    assert f"train: submitted JobSet {train_name}" in ran.output, ran.output
    out = tmp_path / "out"
    rendered = runner.invoke(app, ["render", RECIPE, "--out", str(out), "--rewards", option])
    assert rendered.exit_code == 0, rendered.output
    assert sorted(path.name for path in out.iterdir()) == ["convert.yaml", "export.yaml", "train.yaml",
                                                           "user-files.yaml"]
    assert yaml.safe_load((out / "user-files.yaml").read_text()) == configmap
    assert configmap["data"] == {"my_rewards.py": REWARDS}
    rendered_train = yaml.safe_load((out / "train.yaml").read_text())
    run = train["metadata"]["labels"]["tpu-rl/run"]
    assert rendered_train["metadata"]["name"] == train_name and submitted_name == f"{run}-user-files"
    assert rendered_train["metadata"]["labels"] == train["metadata"]["labels"]
    assert rendered_train["spec"] == train["spec"]
    assert f"run {run}," in rendered.output
    stream = runner.invoke(app, ["render", RECIPE, "--out", "-", "--rewards", option])
    assert stream.exit_code == 0, stream.output
    assert next(yaml.safe_load_all(stream.stdout)) == configmap  # first: kubectl apply creates it before train


def test_the_hints_of_a_run_with_rewards_reach_the_same_run(cloud, rewards_file):
    from tpu_rl.recipes.runs.spec import RunSpec, run_name
    from tpu_rl.recipes.runs.user_files import read_user_file

    recipe = get_recipe(RECIPE)
    option = f"{rewards_file}:short_answer"
    custom = RunSpec.requested(recipe, ("learning_rate=1e-5",)).with_user_files((read_user_file(recipe, "rewards", rewards_file,
                                                                                        ("short_answer",)),))
    name = run_name(custom)
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(f"{name}-train", outcome="fail")
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train", "--set", "learning_rate=1e-5", "--rewards", option])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    # The failure's logs hint names the run (logs takes no --rewards); rerunning repeats every option.
    assert f"`tpu-rl logs {RECIPE} train --set learning_rate=1e-5 --run {name}`" in text, result.output


def test_cancel_says_how_to_go_on_with_the_runs_reward_file(cloud, rewards_file, monkeypatch):
    import sys

    from tpu_rl.recipes.runs.spec import RunSpec, run_name
    from tpu_rl.recipes.runs.user_files import read_user_file

    recipe = get_recipe(RECIPE)
    option = f"{rewards_file}:short_answer"
    name = run_name(RunSpec.requested(recipe).with_user_files((read_user_file(recipe, "rewards", rewards_file, ("short_answer",)),)))
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(f"{name}-train", outcome="hang")
    argv = ["tpu-rl", "run", RECIPE, "--rewards", option]
    monkeypatch.setattr(sys, "argv", argv)  # what run.json records as the command
    with monkeypatch.context() as patch:
        from cli_helpers import interrupt, session_hook

        session_hook(patch, sleep=interrupt)  # run is interrupted while waiting; its JobSet keeps running
        assert runner.invoke(app, argv[1:]).exit_code == 130
    result = runner.invoke(app, ["cancel", RECIPE, "--run", name, "--yes"])
    assert result.exit_code == 0, result.output
    assert f"`tpu-rl run {RECIPE} --rewards {option}` goes on from them" in " ".join(result.output.split())


PROCESSOR = '''
import json

def process_data(dataset_name, model_tokenizer, template_config, tmvp_config, x):
    final = x["answer"].split("####")[-1].strip()
    messages = [{"role": "user", "content": template_config["TEMPLATE"].format(
        system_prompt=template_config["SYSTEM_PROMPT"].format(
            reasoning_start_token=tmvp_config.reasoning_start_token, reasoning_end_token=tmvp_config.reasoning_end_token,
            solution_start_token=tmvp_config.solution_start_token, solution_end_token=tmvp_config.solution_end_token),
        question=x["question"])}]
    prompts = model_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return {"prompts": prompts, "question": x["question"], "answer": json.dumps([final])}
'''


def test_a_data_processor_is_called_on_a_gsm8k_row_and_mounted(cloud, tmp_path, no_hub_cache):
    from tpu_rl.scripts.rewards.check import check_processor

    path = tmp_path / "my_data.py"
    path.write_text(PROCESSOR)
    row = check_processor(path)[0]
    assert row["answer"] == '["72"]' and row["prompts"].endswith("<start_of_turn>model")
    bad = tmp_path / "bad_data.py"
    bad.write_text(PROCESSOR.replace('"answer": json.dumps([final])', '"solution": final'))
    result = runner.invoke(app, ["run", RECIPE, "--data-processor", str(bad)])
    assert result.exit_code == 2
    assert (f"error: --data-processor {bad}: process_data's result has no string answer: the trainer batches "
            "prompts, question, answer") in " ".join(result.output.split())
    assert not cloud["kube"].created
    result = runner.invoke(app, ["run", RECIPE, "--data-processor", str(path), "--dry-run", "--show-manifests"])
    assert result.exit_code == 0, result.output
    assert "dataset_processor_path=/etc/tpu-rl/user/my_data.py" in result.output


@pytest.mark.parametrize("key, option", [("reward_functions_path", "--rewards"), ("reward.reward_functions", "--rewards"),
                                         ("dataset_processor_path", "--data-processor")])
def test_the_file_settings_are_refused_in_set_with_the_option_that_mounts_them(key, option):
    from tpu_rl.recipes.runs.identity import with_sets

    with pytest.raises(UserError, match=rf"--set {key} is refused: pass the (file|functions) with {option} "):
        with_sets(get_recipe(RECIPE), [f"{key}=/tmp/mine.py"])


def test_a_custom_reward_is_checked_run_and_compared_with_the_default_by_accuracy(cloud, rewards_file, tmp_path,
                                                                                   monkeypatch):
    from contracts.tunix_log import evaluation_line, train_step_line
    from peers.event_files import put_event_files
    from tpu_rl.recipes.runs.spec import RunSpec, run_name
    from tpu_rl.recipes.runs.user_files import read_user_file
    from cli_helpers import plan_success

    monkeypatch.setenv("COLUMNS", "80")
    option = f"{rewards_file}:short_answer,correct"
    assert runner.invoke(app, ["check-rewards", option]).exit_code == 0
    recipe = RunSpec.requested(get_recipe(RECIPE))
    custom = recipe.with_user_files((read_user_file(recipe.recipe, "rewards", rewards_file, ("short_answer", "correct")),))
    pre = evaluation_line("pre", 26, 64, 30, 50, 0.8)
    for each, post in ((recipe, evaluation_line("post", 34, 64, 36, 60, 1.5)),
                       (custom, evaluation_line("post", 40, 64, 41, 63, 2.5))):
        plan_success(cloud, each, logs=f"{pre}\n{train_step_line(50, 0.2)}\n{post}\n")
        put_event_files(cloud["gcs"], ArtifactPaths(spec_of(each), peer_settings()).tensorboard,
                        {"rewards/train/mean": [(0, 0.1), (49, 0.4)]}, tmp_path / run_name(each))
    assert runner.invoke(app, ["run", RECIPE]).exit_code == 0
    result = runner.invoke(app, ["run", RECIPE, "--rewards", option])
    assert result.exit_code == 0, result.output
    assert "accuracy 40.6% → 62.5% (+21.9) on 64 gsm8k test questions" in result.output.splitlines()  # 40/64

    listing = runner.invoke(app, ["runs", RECIPE, "--json"])
    runs = {run["run"]: run for run in json.loads(listing.output)["runs"]}
    assert runs[run_name(recipe)]["differs"] == [] and runs[run_name(recipe)]["accuracy_after"] == 53.125
    assert runs[run_name(custom)]["differs"] == ["rewards my_rewards.py:short_answer,correct"]
    assert runs[run_name(custom)]["accuracy_after"] == 62.5

    compared = runner.invoke(app, ["metrics", RECIPE, "--run", run_name(recipe), "--run", run_name(custom)])
    assert compared.exit_code == 0, compared.output
    rows = {line[:18].strip(): line[18:].split() for line in compared.output.splitlines()[1:] if line[:18].strip()}
    assert rows["accuracy after %"] == ["53.1", "62.5"] and rows["accuracy change"] == ["+12.5", "+21.9"]
    assert f"run 2: {run_name(custom)} (rewards my_rewards.py:short_answer,correct)" in compared.output


SHAPES = """
import numpy as np

def batch_shape(prompts, completions, tmvp_config, mode=None, question=None, answer=None, trajectory_ids=None,
                **kwargs):
    n = len(completions)
    if mode is None:  # evaluation: one completion, the row's own values
        ok = (isinstance(question, np.str_) and len(prompts) == 1 and isinstance(answer, list)
              and len(answer) == 1 and isinstance(answer[0], np.str_))
        return [float(ok)]
    ok = (mode == "train" and isinstance(prompts, list) and all(isinstance(p, np.str_) for p in prompts)
          and isinstance(question, np.ndarray) and question.dtype.kind == "U" and len(question) == n
          and isinstance(answer, np.ndarray) and answer.dtype.kind == "U" and len(answer) == n
          and len(set(question[:n // 2])) == 1 and question[0] != question[-1])
    return [float(ok) for _ in completions] + ([] if trajectory_ids else [0.0])

def ids(prompts, completions, tmvp_config, trajectory_ids=(), **kwargs):
    return [float(t.replace("_", ".")) for t in trajectory_ids] if kwargs.get("mode") else [0.0]

def beta(prompts, completions, tmvp_config, beta=-1.0, **kwargs):  # evaluation passes no GRPO field
    return [beta for _ in completions]

def im_start(prompts, completions, tmvp_config, **kwargs):
    return [float(p.startswith("<|im_start|>user\\n")) for p in prompts]

def answers(prompts, completions, tmvp_config, answer, **kwargs):
    import json
    return [float(len(json.loads(a))) for a in answer]
"""


@pytest.fixture
def shapes_file(tmp_path) -> Path:
    path = tmp_path / "shapes.py"
    path.write_text(SHAPES)
    return path


def test_check_rewards_calls_them_with_the_batch_tunix_makes(shapes_file, no_hub_cache):
    # grain batches each column as a numpy array of str; tunix c4ec573d repeats it num_generations times,
    # makes prompts a list, adds trajectory_ids "<row>_<generation>", mode="train" and the GRPOConfig
    # fields the function names (beta: rl.yml's rl.grpo_beta 0.08); evaluation passes numpy str values.
    result = runner.invoke(app, ["check-rewards", f"{shapes_file}:batch_shape,ids,beta,answers", "--recipe",
                                 "qwen3-v6e32"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:4] == [
        "batch_shape: 1, 1, 1, 1, 1, 1, 1, 1", "ids: 0, 0.1, 0.2, 0.3, 1, 1.1, 1.2, 1.3",
        "beta: 0.08, 0.08, 0.08, 0.08, 0.08, 0.08, 0.08, 0.08",
        "answers: 2, 2, 2, 2, 2, 2, 2, 2"]  # utils_rl.process_answer: [answer, answer]
    assert "(2 prompts x 4 generations, in training and one at a time as in evaluation)" in result.output


def _tiny_tokenizer_files(directory: Path, family: str) -> Path:
    """The tiny tokenizer's chat template and special tokens (tests/maxtext_cpu/tiny.py SPECIALS), as
    save_pretrained writes them: chat_template.jinja and tokenizer_config.json."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "maxtext_cpu"))
    from tiny import SPECIALS

    _, roles, template = SPECIALS[family]
    directory.mkdir(parents=True)
    (directory / "chat_template.jinja").write_text(template)
    (directory / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in roles.items() if v}))
    return directory


def test_check_rewards_applies_the_chat_template_of_the_recipes_cached_tokenizer(shapes_file, no_hub_cache):
    # What AutoTokenizer.from_pretrained("Qwen/Qwen3-30B-A3B-Instruct-2507") reads offline: the snapshot
    # refs/main names in the Hugging Face cache.
    repo = no_hub_cache / "models--Qwen--Qwen3-30B-A3B-Instruct-2507"
    snapshot = _tiny_tokenizer_files(repo / "snapshots" / "0123abc", "qwen3")  # Qwen3-30B-A3B's family
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    result = runner.invoke(app, ["check-rewards", f"{shapes_file}:im_start", "--recipe", "qwen3-v6e32"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "im_start: 1, 1, 1, 1, 1, 1, 1, 1"
    assert f"prompts in the chat template of {snapshot}/chat_template.jinja" in " ".join(result.output.split())
    without = runner.invoke(app, ["check-rewards", f"{shapes_file}:im_start", "--recipe", "gemma4-v6e64"])
    assert without.output.splitlines()[0] == "im_start: 0, 0, 0, 0"
    assert ("prompts WITHOUT the tokenizer's chat template: none in the Hugging Face cache of "
            "google/gemma-4-26b-a4b-it; pass --tokenizer DIR") in " ".join(without.output.split())


def test_check_rewards_takes_the_rows_of_a_data_processor(shapes_file, tmp_path, no_hub_cache):
    path = tmp_path / "my_data.py"
    path.write_text(PROCESSOR)  # its answer is json.dumps([final]): one item
    result = runner.invoke(app, ["check-rewards", f"{shapes_file}:answers", "--data-processor", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "answers: 1, 1, 1, 1"
    path.write_text(PROCESSOR.replace('json.dumps([final])', 'final'))
    result = runner.invoke(app, ["check-rewards", f"{shapes_file}:answers", "--data-processor", str(path)])
    assert result.exit_code == 2
    assert (f"error: --data-processor {path}: process_data's answer '72' is not a JSON list: MaxText's "
            "evaluation reads it as the list of accepted answers (utils_rl's is json.dumps([answer, answer]))"
            ) in " ".join(result.output.split())


ROWS_RECIPES = ("qwen3-v6e32", "gemma4-v6e64")


@pytest.fixture(scope="module")
def maxtext_rows(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """(the --data-processor file, {recipe: tests/maxtext_cpu/rows.py's answer for its two cases: the built-in
    process_data, then the file's}), with an empty Hugging Face cache. One process of a release's venv
    answers for all its recipes: its imports (grain, transformers, MaxText's utils_rl) cost ~6 s of CPU."""
    import os
    import subprocess

    from maxtext_cpu.chain import HERE, need_venv
    from tpu_rl.scripts.rewards.prompts import SAMPLES

    root = tmp_path_factory.mktemp("maxtext-rows")
    processor, cache = root / "my_data.py", root / "hf-cache"
    processor.write_text(PROCESSOR)
    cache.mkdir()
    by_version: dict[str, list[str]] = {}
    for name in ROWS_RECIPES:
        by_version.setdefault(get_recipe(name).maxtext_version, []).append(name)
    answers = {}
    for version, names in by_version.items():
        cases = []
        for name in names:
            recipe = get_recipe(name)
            template = (recipe.rl.override("data_template_path") or "gsm8k_rl.json").rpartition("/")[2]
            cases += [{"model": recipe.model.maxtext_name, "data_template": template, "processor": processor_path}
                      for processor_path in (None, str(processor))]
        spec = {"rows": [row for row, _ in SAMPLES], "cases": cases}
        done = subprocess.run([str(need_venv(version)), str(HERE / "rows.py"), str(root), json.dumps(spec)],
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "HF_HUB_CACHE": str(cache)})
        assert done.returncode == 0, done.stderr[-3000:]
        real = json.loads(done.stdout.strip().splitlines()[-1])
        for index, name in enumerate(names):
            answers[name] = {"dataset_name": real["dataset_name"], "cases": real["cases"][2 * index:2 * index + 2]}
    return processor, answers


@pytest.mark.parametrize("recipe_name", ROWS_RECIPES)
def test_the_checks_rows_are_what_maxtexts_own_pipeline_makes(recipe_name, maxtext_rows, no_hub_cache):
    """MaxText 0.2.4's utils_rl.process_data (and a --data-processor file through load_custom_callable),
    with the tiny tokenizer loaded by AutoTokenizer and grain's batch (tests/maxtext_cpu/rows.py), in the
    release's venv; the check builds the same rows from the same tokenizer directory."""
    from tpu_rl.scripts.rewards.check import check_inputs, check_processor, sample_rows
    from tpu_rl.scripts.rewards.prompts import DATASET

    recipe = get_recipe(recipe_name)
    processor, answers = maxtext_rows
    real = answers[recipe_name]
    assert real["dataset_name"] == DATASET
    builtin, processed = real["cases"]
    inputs = check_inputs(recipe, Path(builtin["tokenizer"]))
    assert inputs.chat is not None
    assert sample_rows(inputs) == builtin["rows"]
    assert check_processor(processor, inputs) == processed["rows"]
    assert builtin["types"] == {key: ["ndarray", "U"] for key in ("prompts", "question", "answer")}


# -- review of issue 17: the check's tmvp_config, imports and tokenizer are the trainer's -----------------
CONFIG_READER = '''
def reads_config(prompts, completions, tmvp_config, **kwargs):
    # What MaxText's own check_numbers reads (0.2.4 utils_rl.py L479-480), and a nested model's field.
    assert isinstance(tmvp_config.base_output_directory, str) and isinstance(tmvp_config.run_name, str)
    return [float(tmvp_config.rl.num_generations) + (10.0 if tmvp_config.debug else 0.0) for _ in completions]

def unknown_key(prompts, completions, tmvp_config, **kwargs):
    return [float(tmvp_config.no_such_key) for _ in completions]
'''


def test_the_checks_tmvp_config_holds_the_releases_values_and_the_recipes_overrides(tmp_path, no_hub_cache):
    path = tmp_path / "config_rewards.py"
    path.write_text(CONFIG_READER)
    recipe = get_recipe(RECIPE)
    # qwen3-v6e32 (recipes.toml) sets rl.num_generations=4 and debug=True.
    assert (recipe.rl.override("rl.num_generations"), recipe.rl.override("debug")) == ("4", "True")
    result = runner.invoke(app, ["check-rewards", f"{path}:reads_config", "--recipe", RECIPE])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "reads_config: " + ", ".join(["14"] * 8)
    result = runner.invoke(app, ["check-rewards", f"{path}:unknown_key", "--recipe", RECIPE])
    assert result.exit_code == 2
    assert "unknown_key raised AttributeError: MaxText 0.2.4's config has no no_such_key" in " ".join(
        result.output.split())


IMPORTS_MAXTEXT = '''
from maxtext.trainers.post_train.rl import utils_rl

def short(prompts, completions, tmvp_config, **kwargs):
    return [0.0 for _ in completions]
'''


def test_a_file_importing_what_this_python_lacks_is_said_unchecked_and_run_takes_it_with_the_flag(cloud, tmp_path):
    from tpu_rl.recipes.runs.spec import RunSpec, run_name
    from tpu_rl.recipes.runs.user_files import read_user_file

    path = tmp_path / "uses_maxtext.py"
    path.write_text(IMPORTS_MAXTEXT)
    result = runner.invoke(app, ["check-rewards", f"{path}:short"])
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert ("it imports maxtext, which is not installed where the check runs, so it cannot be checked here: run "
            "with --unchecked-imports to submit it unchecked (run.json records it)") in out
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train", "--rewards", f"{path}:short"])
    assert result.exit_code == 2 and not cloud["kube"].created
    recipe = get_recipe(RECIPE)
    custom = RunSpec.requested(recipe).with_user_files((read_user_file(recipe, "rewards", path, ("short",)),))
    put_step_output(cloud["gcs"], recipe, "convert")
    cloud["kube"].plan(f"{run_name(custom)}-train", ticks=2,
                       on_success=lambda: put_step_output(cloud["gcs"], custom, "train"))
    result = runner.invoke(app, ["run", RECIPE, "--steps", "train", "--rewards", f"{path}:short",
                                 "--unchecked-imports"])
    assert result.exit_code == 0, result.output
    assert f"! {path}:short: not checked, it imports maxtext (--unchecked-imports)" in " ".join(result.output.split())
    record = gcs_io.read_json(cloud["gcs"], ArtifactPaths(spec_of(custom), peer_settings()).run_record)
    assert record["files"]["rewards"]["unchecked"] == "imports maxtext"


TOKENIZING = PROCESSOR.replace('    return {"prompts"', '    assert model_tokenizer.tokenize(prompts)\n'
                               '    assert model_tokenizer.encode(prompts)\n    return {"prompts"')


def test_a_data_processor_gets_the_real_tokenizer_or_a_clear_line(tmp_path, no_hub_cache):
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = tmp_path / "tokenizing.py"
    path.write_text(TOKENIZING)
    rewards = tmp_path / "zero.py"
    rewards.write_text("def short(prompts, completions, tmvp_config, **kwargs):\n    return [0.0 for _ in completions]\n")
    result = runner.invoke(app, ["check-rewards", f"{rewards}:short", "--data-processor", str(path)])
    assert result.exit_code == 2
    assert ("process_data called model_tokenizer.tokenize, and the check has no tokenizer to give it: pass "
            "--tokenizer DIR (with tokenizer.json)") in " ".join(result.output.split())
    # A tokenizer directory as `hf download` leaves it: tokenizer.json (the tokenizers library's file) and
    # the chat template in tokenizer_config.json.
    directory = tmp_path / "tok"
    directory.mkdir()
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    result = runner.invoke(app, ["check-rewards", f"{rewards}:short", "--data-processor", str(path),
                                 "--tokenizer", str(directory)])
    assert result.exit_code == 0, result.output


def test_render_takes_unchecked_imports_and_keeps_the_stream_yaml(settings_env, tmp_path):
    # the "not checked" line goes to stderr: `render --out - | kubectl apply -f -` reads only manifests
    import yaml

    path = tmp_path / "uses_maxtext.py"
    path.write_text(IMPORTS_MAXTEXT)
    refused = runner.invoke(app, ["render", RECIPE, "--out", "-", "--rewards", f"{path}:short"])
    assert refused.exit_code == 2 and "--unchecked-imports" in refused.output
    result = runner.invoke(app, ["render", RECIPE, "--out", "-", "--rewards", f"{path}:short", "--unchecked-imports"])
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(result.stdout))
    assert [doc["kind"] for doc in documents] == ["ConfigMap", "JobSet", "JobSet", "JobSet"]
    assert documents[0]["data"] == {"uses_maxtext.py": IMPORTS_MAXTEXT}
    assert "not checked, it imports maxtext (--unchecked-imports)" in " ".join(result.stderr.split())
