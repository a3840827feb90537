"""The platform is a seam, not a branch (issues 26 and 38): the CLI and the pipeline ask
scripts/pipeline/platforms.py for the recipe's implementation, and only the implementations (a package each)
and the registries know which platform they are on. What a platform is, is facts (recipes/platforms/) that
code reads by what they are; each layer's behaviour routes through its one registry, and a third platform
made only for these tests is found in every one of them."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
import typing

import pytest
from peers.fixtures import REPO, clean_environment

from tpu_rl.recipes.platforms import PLATFORMS, PlatformFacts
from tpu_rl.scripts.pipeline.platforms import IMPLEMENTATIONS, Platform, platform_for

PRODUCT_PACKAGES = ("scripts", "jobs", "recipes", "infra", "stacks")
IMPLEMENTATION_PACKAGES = ("scripts/pipeline/gke/", "scripts/pipeline/vm/")
ROUTE = "scripts/pipeline/platforms.py"  # the one place that maps a platform's name to its implementation
# A condition on the platform, in each form Python writes one: a flag, a comparison (with a name or with a
# platform's literal), membership, a match, an isinstance of an implementation. A lookup by the platform's
# name in a layer's registry (recipes/platforms PLATFORMS, stacks/compositions.py, IMPLEMENTATIONS) is the seam.
BRANCH = re.compile(r"\bis_(?:gke|vm)\b|\bplatform\)?\s*[!=]=|[!=]=\s*[\w.]*platform\b"
                    r"|[!=]=\s*[\"'](?:gke|vm)[\"']|[\"'](?:gke|vm)[\"']\s*[!=]="
                    r"|\bplatform\)?\s+(?:not\s+)?in\b|\bmatch\s+[\w.()]*platform\b|isinstance\([^)]*\b(?:Gke|Vm)\w*Platform")


def _branches() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for package in PRODUCT_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative == ROUTE or relative.startswith(IMPLEMENTATION_PACKAGES):
                continue
            lines = [f"{number}: {line.strip()}" for number, line in enumerate(path.read_text().splitlines(), 1)
                     if BRANCH.search(line)]
            if lines:
                found[relative] = lines
    return found


def test_the_pattern_sees_each_kind_of_branch():
    # Guards the guard: the forms the seam replaced (scripts/cli/cloud.py, recipes/catalog/entry.py before it).
    for line in ('if recipe.is_gke:', 'if self.platform == "vm" and x:', 'recipe.platform != "vm"',
                 'if "gke" == recipe.platform:', 'if recipe.platform in ("gke",):', 'if platform not in SLICED:',
                 'match recipe.platform:', 'if isinstance(impl, VmPlatform):', 'if platform_for(r).name == "vm":',
                 'if str(recipe.platform) == kind:', 'if (recipe.platform) == "gke":', "x if kind != 'vm' else y"):
        assert BRANCH.search(line), line
    for line in ('IMPLEMENTATIONS[recipe.platform]', 'rules = PLATFORMS[self.platform]',
                 '"run": {"gke": CLUSTER, "vm": VM},'):
        assert not BRANCH.search(line), line


def test_no_platform_branch_outside_the_implementations():
    assert _branches() == {}, "branch on the platform behind the seam (scripts/pipeline/platforms.py) instead"


# The facts' own layer and the implementations may read a per-platform yes-or-no; elsewhere it would be
# `is_gke` under another name (issue 38): a reader asks a fact with a value of its own, or a method.
FACTS_PACKAGE = "recipes/platforms/"
# An expression that is a platform's facts, and a name a module binds to one (`rules = PLATFORMS[...]`).
FACTS = r"(?:platform_facts|facts_of\([^)]*\)|PLATFORMS\[[^\]]*\])"
BOUND = re.compile(rf"\b(\w+)\s*(?::[^=]*)?=\s*[\w.]*{FACTS}\s*(?:#.*)?$")


def _per_platform_booleans(facts: type = PlatformFacts, seen: frozenset = frozenset()) -> set[str]:
    """The bool fields of the facts, and of every dataclass a fact is (a yes-or-no one level down is one)."""
    found = set()
    for name, kind in typing.get_type_hints(facts).items():
        if kind is bool:
            found.add(name)
        elif dataclasses.is_dataclass(kind) and kind not in seen:
            found |= _per_platform_booleans(kind, seen | {facts})
    return found


class _Nested:
    flag: bool


def test_the_boolean_search_looks_inside_a_fact_that_is_a_dataclass():
    holder = dataclasses.make_dataclass("Holder", [("inner", dataclasses.dataclass(_Nested)), ("name", str)])
    assert _per_platform_booleans(holder) == {"flag"}


def _boolean_reads(text: str, fields: set[str]) -> list[str]:
    """The lines of `text` that read one of `fields` of a platform's facts, directly or through a name."""
    names = {FACTS, *(re.escape(match.group(1)) for line in text.splitlines() if (match := BOUND.search(line)))}
    read = re.compile(rf"(?:{'|'.join(sorted(names))})\.(?:{'|'.join(sorted(fields))})\b(?!\s*\()")
    return [f"{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1) if read.search(line)]


def test_the_read_pattern_sees_a_boolean_fact_read():
    fields = {"cpu_pool", "control_plane", "pathways"}
    for text in ("lazy = recipe.platform_facts.cpu_pool", "any(r.platform_facts.control_plane for r in runs)",
                 "rules = PLATFORMS[self.platform]\nif not rules.pathways and x:",
                 "platform = recipe.platform_facts  # why\nx = platform.cpu_pool", "facts_of(name).pathways"):
        assert _boolean_reads(text, fields), text
    for text in ("from tpu_rl.infra.cpu_pool import CpuPool", "if recipe.pathways:", "props.cpu_pool",
                 "recipe.platform_facts.cpu_pool_zones", "rules = PLATFORMS[p]\nrules.pathways_of(x)"):
        assert not _boolean_reads(text, fields), text


def test_no_per_platform_boolean_is_read_outside_the_platforms():
    booleans = _per_platform_booleans()
    found = {}
    for package in PRODUCT_PACKAGES if booleans else ():
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative.startswith((FACTS_PACKAGE, *IMPLEMENTATION_PACKAGES)):
                continue
            if lines := _boolean_reads(path.read_text(), booleans):
                found[relative] = lines
    assert found == {}, f"reads of PlatformFacts' booleans {sorted(booleans)}: ask a fact or a method instead"
    # None is left to read: a yes-or-no per platform stays inside its layer, as a method's answer.
    assert not booleans, "a per-platform boolean is a platform's name in disguise: state a fact of its own"


def test_every_platform_has_rules_and_an_implementation_of_the_whole_protocol():
    names = set(PLATFORMS)
    assert set(IMPLEMENTATIONS) == names
    wanted = {name for name, member in vars(Platform).items() if inspect.isfunction(member) and name[0] != "_"}
    assert {"run", "cancel", "status", "logs", "evaluate", "render"} <= wanted
    for name in names:
        implementation = platform_for(type("Recipe", (), {"platform": name})())
        assert implementation.name == name
        missing = {method for method in wanted if not callable(getattr(implementation, method, None))}
        assert not missing, f"{name}'s PLATFORM lacks {sorted(missing)}"
        for method in wanted:  # the CLI calls them by keyword: the same parameters as the protocol
            assert (list(inspect.signature(getattr(implementation, method)).parameters)
                    == list(inspect.signature(getattr(Platform, method)).parameters)[1:]), (name, method)


def test_help_imports_no_platform_implementation(tmp_path):
    probe = ("import sys\nfrom typer.testing import CliRunner\nfrom tpu_rl.scripts.cli import app\n"
             "result = CliRunner().invoke(app, ['--help'])\nassert result.exit_code == 0, result.output\n"
             "print(sorted(m for m in sys.modules if m.startswith(('tpu_rl.scripts.pipeline.gke', 'tpu_rl.scripts.pipeline.vm'))))")
    env = {**clean_environment(tmp_path), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"


# --- A third platform, made only for these tests: its facts mix the two real platforms' (TPU node pools
# with no CPU pool, no control plane, a startup script per run), so a read that still meant "is it GKE"
# would take the wrong side. Registered in every registry, it must be found wherever a platform is asked.
THIRD = "third"
REGISTRY_FILES = ("recipes/platforms/__init__.py", "scripts/pipeline/platforms.py", "stacks/compositions.py",
                  "jobs/__init__.py", "jobs/maxtext.py", "recipes/costs/run.py", "recipes/costs/standing.py")
REGISTERED = re.compile(r"registered\([^\n]*?\"([A-Z_]+ of [\w/.]+)\"")


def _third_facts():
    from dataclasses import replace

    from tpu_rl.recipes.capacity.modes import CAPACITY_MODES
    from tpu_rl.recipes.platforms import StepRunner
    from tpu_rl.recipes.platforms.facts import CpuStepsHost, TpuHosts

    vm = PLATFORMS["vm"]
    # a TPU VM's stack and startup script, whose convert and export run on a CPU pool
    return replace(vm, label="third", capacity=CAPACITY_MODES, max_capacity_modes=2, tpu_zones=None,
                   tpu_hosts=TpuHosts.WHILE_TRAINING, steps_run_as=StepRunner.STARTUP_SCRIPT,
                   cpu_steps_on=CpuStepsHost.CPU_POOL, cpu_machine_runs=("convert", "export"),
                   needs={**vm.needs, "runs": ("project",)}, refused=())


class _ThirdPlatform:
    name = THIRD


def _third_recipe():
    import tomllib

    from tpu_rl.recipes import build_recipes

    parsed = tomllib.loads((REPO / "recipes" / "recipes.toml").read_text())
    vm_recipe = next(name for name, entry in parsed["recipes"].items() if entry["platform"] == "vm")
    parsed["recipes"] = {"third-recipe": {**parsed["recipes"][vm_recipe], "platform": THIRD, "capacity": "spot",
                                          "cpu_machine_type": "n4-standard-64"}}  # its convert's CPU pool
    return build_recipes(parsed)["third-recipe"]


@pytest.fixture
def third(monkeypatch):
    """The third platform in every registry: the facts, the commands' implementation and the stack."""
    from tpu_rl.stacks.compositions import COMPOSITIONS
    from tpu_rl.stacks.vm import VmRecipeStack

    implementation = _ThirdPlatform()
    monkeypatch.setitem(PLATFORMS, THIRD, _third_facts())
    monkeypatch.setitem(IMPLEMENTATIONS, THIRD, lambda: implementation)
    monkeypatch.setitem(COMPOSITIONS, THIRD, VmRecipeStack)
    return implementation


def test_a_third_platform_is_found_in_every_registry(third):
    from tpu_rl import jobs
    from tpu_rl.recipes import example_settings
    from tpu_rl.recipes.runs.spec import RunSpec
    from tpu_rl.recipes.settings.specs import COMMANDS, needs, needs_table
    from tpu_rl.stacks.compositions import composition_for
    from tpu_rl.stacks.vm import VmRecipeStack

    recipe = _third_recipe()  # recipes.toml takes its name
    assert recipe.platform_facts is PLATFORMS[THIRD]
    assert platform_for(recipe) is third
    assert composition_for(THIRD) is VmRecipeStack
    assert [needs(command, THIRD) for command in COMMANDS] == [PLATFORMS[THIRD].needs[c] for c in COMMANDS]
    assert needs_table().splitlines()[0] == "| command | GKE recipe | TPU VM recipe | third recipe |"
    settings = example_settings()
    assert list(jobs.render_steps(RunSpec.of_catalog(recipe), settings)) == ["startup script"]
    # its convert and export are written for a CPU pool, though its steps run as the TPU VM's do
    from tpu_rl.jobs.paths import ArtifactPaths

    commands = jobs.maxtext_commands(recipe, ArtifactPaths(RunSpec.of_catalog(recipe), settings))
    assert "--lazy_load_tensors=True" in commands["convert"].argv
    assert "--override_model_architecture" in commands["export"].argv
    # Its facts, not its likeness to either platform, decide: node pools in every zone of ZONE, two modes of
    # a capacity list, no cluster; its stack is priced and stopped as the TPU VM's it is.
    zoned = type(settings)(**{**vars(settings), "zones": ("us-east5-b", "us-east5-a"),
                              "capacity": ("spot", "on-demand", "reservation")})
    assert zoned.zones_for(recipe) == ("us-east5-b", "us-east5-a")
    assert zoned.with_capacity(recipe).capacity == ("spot", "on-demand")
    assert zoned.for_recipe(recipe.with_capacity(("spot",), "test")) is zoned  # no AUTHORIZED_CIDR asked
    from tpu_rl.recipes.costs.run import hourly_estimate
    from tpu_rl.recipes.costs.standing import idle_bill, stop_command

    assert hourly_estimate(recipe, zones=zoned.zones_for(recipe)).zones == ("us-east5-b", "us-east5-a")
    assert idle_bill(recipe).items[-1].item == "Cloud NAT"
    assert stop_command(recipe) == "`npx cdktf destroy third-recipe`"


def test_every_registry_names_itself_when_a_platform_is_missing(third, monkeypatch):
    from tpu_rl.recipes.platforms import facts_of
    from tpu_rl.stacks.compositions import COMPOSITIONS, composition_for

    recipe = type("Recipe", (), {"platform": THIRD})()
    for registry, lookup, where in ((PLATFORMS, lambda: facts_of(THIRD), "PLATFORMS of recipes/platforms"),
                                    (IMPLEMENTATIONS, lambda: platform_for(recipe), "IMPLEMENTATIONS of scripts/"),
                                    (COMPOSITIONS, lambda: composition_for(THIRD), "COMPOSITIONS of stacks/")):
        entry = registry.pop(THIRD)
        with pytest.raises(KeyError, match=f"platform '{THIRD}' is not registered in {where}"):
            lookup()
        registry[THIRD] = entry
    # jobs/ keys its renderers by what runs the steps: a way of running them with no renderer names RENDERERS.
    from tpu_rl import jobs
    from tpu_rl.recipes import example_settings
    from tpu_rl.recipes.runs.spec import RunSpec

    runner = PLATFORMS[THIRD].steps_run_as
    monkeypatch.delitem(jobs.RENDERERS, runner)
    with pytest.raises(KeyError, match=f"steps '{runner}' is not registered in RENDERERS of jobs/"):
        jobs.render_steps(RunSpec.of_catalog(_third_recipe()), example_settings())
    # recipes/costs keys what a stack bills by what the stack is: a new kind of stack names both tables.
    from tpu_rl.recipes.costs import run, standing

    # jobs/ keys convert's and export's arguments by where they run: a new host names CPU_STEP_ARGS.
    from tpu_rl.jobs import maxtext
    from tpu_rl.jobs.paths import ArtifactPaths

    host = PLATFORMS[THIRD].cpu_steps_on
    monkeypatch.delitem(maxtext.CPU_STEP_ARGS, host)
    with pytest.raises(KeyError, match=f"CPU steps host '{host}' is not registered in CPU_STEP_ARGS of jobs/"):
        jobs.maxtext_commands(_third_recipe(), ArtifactPaths(RunSpec.of_catalog(_third_recipe()), example_settings()))
    stack = PLATFORMS[THIRD].stack
    for table, bill in ((run.HOURLY_LINES, lambda: run.hourly_estimate(_third_recipe())),
                        (standing.IDLE_BILLS, lambda: standing.idle_bill(_third_recipe()))):
        monkeypatch.delitem(table, stack)
        with pytest.raises(KeyError, match=f"stack '{stack}' is not registered in [A-Z_]+ of recipes/costs/"):
            bill()


def test_where_convert_runs_and_what_the_cpu_machine_runs_must_agree():
    from dataclasses import replace

    from tpu_rl.recipes.platforms.facts import CpuStepsHost

    with pytest.raises(ValueError, match="convert and export run on the cpu pool, so cpu_machine_runs must name"):
        replace(PLATFORMS["vm"], cpu_steps_on=CpuStepsHost.CPU_POOL)
    with pytest.raises(ValueError, match="run on the tpu host, so cpu_machine_runs must not name them"):
        replace(PLATFORMS["gke"], cpu_steps_on=CpuStepsHost.TPU_HOST)


def test_a_recipe_on_an_unregistered_platform_is_refused_naming_the_registered_ones():
    from tpu_rl.recipes import UserError

    with pytest.raises(UserError, match=f"platform takes one of 'gke' or 'vm', not '{THIRD}'"):
        _third_recipe()


def test_every_registry_has_every_platform_and_the_checklist_names_each():
    from tpu_rl.recipes.settings.specs import COMMANDS
    from tpu_rl.stacks.compositions import COMPOSITIONS

    assert set(IMPLEMENTATIONS) == set(COMPOSITIONS) == set(PLATFORMS)
    for name, facts in PLATFORMS.items():
        assert set(facts.needs) == set(COMMANDS), name
    # Each lookup through `registered` names its registry; docs/development.md's checklist names them all.
    wheres = {where for path in REGISTRY_FILES for where in REGISTERED.findall((REPO / path).read_text())}
    assert len(wheres) == len(REGISTRY_FILES), wheres
    checklist = (REPO / "docs" / "development.md").read_text().split("A new platform is", 1)[1].split("\n\n")[0]
    for where in wheres:
        registry, _, home = where.partition(" of ")
        assert registry in checklist and home in checklist, f"the checklist leaves out {where}"
    assert "prices.toml" in checklist


def test_no_per_platform_table_or_old_rules_outside_the_registries():
    # A table keyed by a platform's name belongs in its layer's registry; plan review keeps its table for
    # base revisions older than jobs' registry (scripts/plan_review/worktrees.py).
    allowed = {*REGISTRY_FILES, "scripts/plan_review/worktrees.py"}
    keyed = re.compile(r"[\"'](?:gke|vm)[\"']\s*:|\bplatform_rules\b|\bPLATFORM_RULES\b|\bNEEDS\b")
    found = {}
    for package in PRODUCT_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative in allowed or relative.startswith(IMPLEMENTATION_PACKAGES):
                continue
            lines = [line.strip() for line in path.read_text().splitlines() if keyed.search(line)]
            if lines:
                found[relative] = lines
    assert found == {}
