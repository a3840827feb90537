"""Each command needs exactly the settings it reads (recipes/settings/specs.py), refused in one place, one way.

For every command the real `tpu-rl` runs in a process of its own (forked from a warm interpreter,
tests/forked_cli.py) against fresh local peers (tests/peers), three ways: with every setting, with only those recipes/settings/specs.py names for it, and with each of those missing.
Only the needed ones give the same output and exit code as all of them (so the command reads nothing
else: an unset field it reads would be refused, recipes/settings/load.py `Settings.__getattribute__`); each
missing one is the same line in every command, `error: <VAR> is not set: export <VAR>=…`, exit 2, before
any cloud call (those runs have every API at a closed port).
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cli_helpers import make_review_clone
from forked_cli import WarmPool
from peers.fixtures import TOKEN, TRACEBACK, VENV_BIN, GcsEmulators, clean_environment, start_peers, spec_of
from tpu_rl.recipes.settings.specs import COMMANDS, RULES, needs
from tpu_rl.recipes.settings.specs import SPECS

GKE, VM = "qwen3-v6e32", "llama31-v6e8"
FULL = {"PROJECT": "acme-rl-research", "REGION": "us-east5", "ZONE": "us-east5-b", "CLUSTER_NAME": "acme-rl",
        "GCS_BUCKET": "acme-rl-artifacts", "RESERVATION": "acme-v6e-reservation", "AUTHORIZED_CIDR": "203.0.113.7/32"}
ENV_OF = {spec.field: spec.env for spec in SPECS} | {"vm_name": "CLUSTER_NAME"}
REWARDS = "def short(prompts, completions, tmvp_config, **kwargs):\n    return [0.0] * len(completions)\n"


@dataclass(frozen=True)
class Case:
    command: str  # a command of recipes/settings/specs.py COMMANDS
    argv: tuple[str, ...]
    platform: str = "gke"
    peers: dict = field(default_factory=dict)
    stdin: str = ""
    clone: bool = False  # run in a git clone whose working tree's stacks report the settings they see

    @property
    def id(self) -> str:
        return f"{' '.join(self.argv[:3])}-{self.platform}"


CASES = (
    Case("recipes", ("recipes",)),
    Case("render", ("render", GKE, "--out", "-")),
    Case("render", ("render", VM, "--out", "-"), "vm"),
    Case("preflight", ("preflight", GKE)),
    Case("preflight", ("preflight", VM), "vm"),
    Case("secret set", ("secret", "set"), stdin=TOKEN),
    Case("run", ("run", GKE, "--dry-run")),
    Case("run", ("run", VM, "--dry-run"), "vm", {"vm": "RUNNING"}),
    Case("sweep", ("sweep", GKE, "--grid", "learning_rate=1e-6,3e-6", "--dry-run")),
    Case("eval", ("eval", GKE, "--run", "rl")),
    Case("cancel", ("cancel", GKE, "--yes")),
    Case("cancel", ("cancel", VM, "--yes"), "vm", {"vm": "RUNNING"}),
    Case("status", ("status", GKE)),
    Case("status", ("status", VM), "vm", {"vm": "RUNNING"}),
    Case("runs", ("runs", GKE)),
    Case("runs", ("runs", VM), "vm"),
    Case("logs", ("logs", GKE, "train")),
    Case("logs", ("logs", VM, "convert"), "vm", {"vm": "RUNNING"}),
    Case("metrics", ("metrics", GKE)),
    # No state names these settings' cluster (none in the checkout, no TF_STATE_BUCKET): nothing to stop.
    Case("down", ("down", GKE, "--yes")),
    Case("down", ("down", VM, "--yes"), "vm"),
    Case("check-rewards", ("check-rewards", "rewards.py:short")),
    Case("fit", ("fit", GKE)),
    Case("fit", ("fit", VM), "vm"),
    Case("plan-review", ("plan-review",), clone=True),
)

def run_cli(case: Case, settings: dict[str, str], root: Path, warm: WarmPool, emulators: GcsEmulators,
            peers: bool = True) -> tuple[int, str]:
    """`tpu-rl <argv>` with exactly `settings`: against fresh, healthy peers set up for FULL, or (`peers`
    False) with every API at a closed port, where any cloud call would fail with a connection error."""
    import tempfile

    work = Path(tempfile.mkdtemp(dir=root))
    home = work / "home"
    home.mkdir()
    (work / "rewards.py").write_text(REWARDS)
    if case.clone:
        make_review_clone(work)
    env = {**clean_environment(home), **FULL}
    with emulators.lend() if peers else nullcontext() as emulator:
        started = start_peers(case.peers, env, home, TOKEN, emulator) if peers else None
        for key in FULL:
            env.pop(key)
        env.update(settings)
        try:
            result = warm.run([str(VENV_BIN / "tpu-rl"), *case.argv], cwd=work, env=env, input=case.stdin,
                              timeout=300)
        finally:
            if started:
                started.stop()
    return result.returncode, result.stdout + result.stderr


def needed_env(case: Case) -> dict[str, str]:
    return {ENV_OF[name]: FULL[ENV_OF[name]] for name in needs(case.command, case.platform)}


def refused_fields(case: Case) -> list[str]:
    """The needs of the case whose absence is refused: all but the rules, and RESERVATION (every recipe
    here runs on a reservation)."""
    return [name for name in needs(case.command, case.platform) if name not in RULES or name == "reservation"]


def without(case: Case, name: str) -> dict[str, str]:
    env = {key: value for key, value in needed_env(case).items() if key != ENV_OF[name]}
    env.setdefault("HF_TOKEN_SECRET", "hf-token")  # something set, or render falls back to the example
    return env


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, warm_cli, gcs_emulators):
    """Every run of every case, two at a time (some wait on the peers)."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path_factory.mktemp("needs")
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {}
    for case in CASES:
        futures[case.id, "all"] = pool.submit(run_cli, case, FULL, root, warm_cli, gcs_emulators)
        futures[case.id, "needed"] = pool.submit(run_cli, case, needed_env(case), root, warm_cli, gcs_emulators)
        for name in refused_fields(case):
            futures[case.id, name] = pool.submit(run_cli, case, without(case, name), root, warm_cli, gcs_emulators, False)
    yield futures
    pool.shutdown(wait=True)


def test_every_command_of_the_cli_has_its_row():
    from tpu_rl.scripts.cli import app
    from tpu_rl.scripts.cli.core import secret_app

    # Not the hidden `drive`: the run's driver reads the settings `run` needs (scripts/cli/drive.py), which
    # `run` puts in its Job (jobs/driver.py settings_env).
    names = {command.name or command.callback.__name__ for command in app.registered_commands if not command.hidden}
    names |= {f"secret {command.name}" for command in secret_app.registered_commands}
    assert names == set(COMMANDS) - {"synth"}
    # Every command that names a recipe has a case here, for each platform it runs on.
    assert {case.command for case in CASES} == names


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_command_runs_with_only_what_it_needs_and_refuses_each_missing_one_alike(case, outcomes):
    full = outcomes[case.id, "all"].result()
    assert TRACEBACK not in full[1], full[1][-2000:]
    only = outcomes[case.id, "needed"].result()
    assert only == full, f"only {sorted(needed_env(case))} set:\n{only[1][-2000:]}\nall set:\n{full[1][-2000:]}"
    for name in refused_fields(case):
        code, output = outcomes[case.id, name].result()
        variable = ENV_OF[name]
        lines = output.splitlines()
        # One line, before any cloud call: every API is at a closed port, which would be another error.
        assert code == 2 and len(lines) == 1, output
        assert lines[0].startswith(f"error: {variable} is not set") and f"export {variable}=<" in lines[0], output


def test_the_tpu_vm_name_is_met_by_tpu_name_without_cluster_name(tmp_path, warm_cli, gcs_emulators, outcomes):
    case = Case("status", ("status", VM), "vm", {"vm": "RUNNING"})
    assert case in CASES
    full = outcomes[case.id, "all"].result()  # the case's run with every setting
    env = {key: value for key, value in needed_env(case).items() if key != "CLUSTER_NAME"}
    only = run_cli(case, {**env, "TPU_NAME": "acme-rl-vm"}, tmp_path, warm_cli, gcs_emulators)  # the name <CLUSTER_NAME>-vm gives
    assert only == full, only[1]


def test_a_set_value_is_checked_even_where_the_command_does_not_read_it(tmp_path, warm_cli, gcs_emulators):
    case = Case("runs", ("runs", GKE))
    code, output = run_cli(case, {**needed_env(case), "REGION": "useast5"}, tmp_path, warm_cli, gcs_emulators, peers=False)
    assert (code, output.splitlines()) == (2, ["error: REGION 'useast5' is not a region name like us-east5"])


def test_the_needs_table_is_the_one_in_docs_settings():
    from peers.fixtures import REPO
    from tpu_rl.recipes.settings.specs import needs_table

    assert needs_table() in (REPO / "docs" / "settings.md").read_text(), \
        "docs/settings.md lacks the table of recipes/settings/specs.py: paste tpu_rl.recipes.settings.specs.needs_table()"


def test_status_of_a_jobset_waiting_for_kueue_reads_only_what_status_needs(cloud, monkeypatch):
    """The admission note reads the zones its slice may come from: an unset field a command reads is the
    missing-setting line, never an empty value (so ZONE is in status's needs)."""
    from typer.testing import CliRunner

    from tpu_rl.jobs import render_manifests
    from peers.fixtures import SETTINGS, jobset_of, peer_settings
    from tpu_rl.scripts.cli import app

    cloud["kube"].plan(jobset_of(GKE, "train"), outcome="hang", admitted_after=10_000, capacity="reservation")
    cloud["kube"].put_jobset(render_manifests(spec_of(load_settings_for(GKE)), peer_settings())["train"], "running")
    full = CliRunner().invoke(app, ["status", GKE])
    assert full.exit_code == 0 and "train: " in full.output, full.output
    for key in set(SETTINGS) - {ENV_OF[name] for name in needs("status", "gke")}:
        monkeypatch.delenv(key)
    only = CliRunner().invoke(app, ["status", GKE])
    def timeless(text: str) -> str:  # the JobSet's elapsed time moves on between the two
        return re.sub(r"\d+:\d\d:\d\d", "H:MM:SS", text)

    assert (only.exit_code, timeless(only.output)) == (full.exit_code, timeless(full.output))
    monkeypatch.delenv("ZONE")
    without = CliRunner().invoke(app, ["status", GKE])
    assert without.exit_code == 2 and without.output.startswith("error: ZONE is not set: export ZONE=<"), without.output


def load_settings_for(name: str):
    from peers.fixtures import peer_settings
    from tpu_rl.recipes import get_recipe

    return peer_settings().recipe(get_recipe(name))


def test_a_field_nobody_set_is_refused_where_it_is_read_not_read_as_empty():
    from tpu_rl.recipes import UserError, load_settings

    settings = load_settings({"PROJECT": "acme-rl-research", "GCS_BUCKET": "acme-rl-artifacts"},
                             needs=needs("metrics"))
    assert settings.gcs_bucket == "acme-rl-artifacts"
    for name in ("zone", "zones", "region", "cluster_name", "vm_name"):
        with pytest.raises(UserError, match="is not set: export"):
            getattr(settings, name)
