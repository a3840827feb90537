"""The bad-input table (security/bad_input.yaml), one test per row, and docs/bad-input.md generated from it.

Each row runs a real entry point (`python -m tpu_rl.stacks.app` for synth, the `tpu-rl` console script otherwise) in
a process of its own, forked from a warm interpreter (tests/forked_cli.py), in an empty working directory; three
rows, one for each way a fork starts differently, also run as plain subprocesses, for the exit code of a fresh
process. Each must end with:
- a non-zero exit and no Python traceback;
- the row's message, on one line, naming the setting and saying how to fix it;
- nothing created or submitted: no file appears in the working directory (so no cdktf.out, no rendered
  files), and the local fake APIs hold nothing new (no JobSet, Secret, secret version or object).

Regenerate the doc after editing the table: `.venv/bin/python tests/test_bad_input.py --write-doc`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from peers.fixtures import REPO, TOKEN, TRACEBACK, VENV_BIN, GcsEmulators, clean_environment, start_peers

TABLE = REPO / "security" / "bad_input.yaml"
DOC = REPO / "docs" / "bad-input.md"
STAGES = ("synth", "render", "preflight", "run", "plan")
MIN_ROWS = 25


@dataclass(frozen=True)
class Row:
    id: str
    stage: str
    input: str
    command: list[str]
    setting: str
    fix: str
    message: str
    env: dict[str, str | None] = field(default_factory=dict)
    config: str | None = None
    recipes: list[str] | None = None
    files: dict[str, str] = field(default_factory=dict)
    pad: dict[str, int] = field(default_factory=dict)  # files made this many bytes long with a comment line
    stdin: str | None = None
    peers: dict | None = None
    git_branch: str | None = None  # make the working directory a git clone with one commit on this branch


def load_table() -> tuple[dict[str, str], list[Row]]:
    data = yaml.safe_load(TABLE.read_text())
    return data["base_env"], [Row(**row) for row in data["rows"]]


BASE_ENV, ROWS = load_table()


# ---------------------------------------------------------------------------------------------------
# The doc


def _cell(text: str) -> str:
    shown = text.replace("{tmp}", "DIR").replace("{out}", "DIR/out").replace("{sentinel}", "hf_...").replace(
        "\0", "\\0")  # a NUL byte of a binary file's row, shown, not written into the doc
    # Outside code spans, <placeholders> would be read as HTML tags; inside, entities show literally.
    parts = shown.replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(part if index % 2 else part.replace("<", "&lt;").replace(">", "&gt;")
                    for index, part in enumerate(parts))


def _shown_command(row: Row) -> str:
    argv = ["python -m tpu_rl.stacks.app" if row.command[0] == "synth" else "tpu-rl", *row.command[1:]]
    return " ".join(argv)


def render_doc(rows: list[Row]) -> str:
    lines = [
        "# Bad input: what tpu-rl rejects, where, and what it says",
        "",
        "Generated from `security/bad_input.yaml` by `.venv/bin/python tests/test_bad_input.py --write-doc`;",
        "do not edit by hand. Every row is a test in `tests/test_bad_input.py`: it runs the real entry point",
        "(`python -m tpu_rl.stacks.app` for synth, the `tpu-rl` console script otherwise) and checks a non-zero exit,",
        "this message on one line (naming the setting and the fix), no Python traceback, and that nothing",
        "was created or submitted (no file written; nothing new in the local fake Kubernetes, Secret Manager and GCS).",
        "",
        "Stages: **synth** (`make synth` / `python -m tpu_rl.stacks.app`), **render** (`tpu-rl render`),",
        "**preflight** (`tpu-rl preflight`, `tpu-rl secret set`), **run** (`tpu-rl run`, `cancel`, `status`, `logs`),",
        "**plan** (`tpu-rl plan-review`). Settings and the recipe table are checked by every command where",
        "they enter; each row names the command its test runs. Settings rows start from a valid environment",
        "and change one thing; recipe rows edit one place of a copy of recipes.toml.",
        "",
        "| # | stage | bad input | command | setting | message |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for number, row in enumerate(rows, 1):
        changes = [f"{key}={'(unset)' if value is None else value}" for key, value in row.env.items()]
        if row.config is not None:
            changes.append(f"config file: {row.config.strip()}")
        if row.recipes is not None:
            changes.append(f"recipes.toml: {row.recipes[0].strip()} → {row.recipes[1].strip() or '(removed)'}")
        detail = f" ({'; '.join(changes)})" if changes else ""
        lines.append(
            f"| {number} | {row.stage} | {_cell(row.input + detail)} | `{_cell(_shown_command(row))}` | "
            f"`{_cell(row.setting)}` | {_cell(row.message)} |"
        )
    counts = ", ".join(f"{stage} {sum(r.stage == stage for r in rows)}" for stage in STAGES)
    lines += ["", f"{len(rows)} rows: {counts}.", ""]
    return "\n".join(lines)


def test_table_has_enough_rows_with_known_stages():
    assert len(ROWS) >= MIN_ROWS
    assert len({row.id for row in ROWS}) == len(ROWS), "row ids must be unique"
    assert {row.stage for row in ROWS} <= set(STAGES)


def test_every_row_message_names_its_setting_and_fix():
    for row in ROWS:
        assert row.setting in row.message or row.setting.lstrip("-") in row.message, row.id
        assert row.fix in row.message, row.id


def test_doc_is_generated_from_the_table():
    assert DOC.read_text() == render_doc(ROWS), (
        "docs/bad-input.md drifted from security/bad_input.yaml: run "
        "`.venv/bin/python tests/test_bad_input.py --write-doc`")


# ---------------------------------------------------------------------------------------------------
# Running a row


@dataclass
class Sandbox:
    root: Path
    sentinel: str

    @property
    def work(self) -> Path:  # the command's working directory; must not change
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def packages(self) -> Path:  # a patched copy of the recipes package, ahead of the installed one
        return self.root / "pkgs"

    def fill(self, text: str) -> str:
        return text.replace("{tmp}", str(self.work)).replace("{out}", str(self.work / "out")).replace(
            "{sentinel}", self.sentinel)


def contains_in_order(line: str, parts: list[str]) -> bool:
    position = 0
    for part in parts:
        position = line.find(part, position)
        if position < 0:
            return False
        position += len(part)
    return True


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else b"<dir>"
            for p in sorted(directory.rglob("*"))}


def patch_recipes(sandbox: Sandbox, old: str, new: str) -> None:
    from tpu_rl import recipes

    source = Path(recipes.__file__).parent
    copy = sandbox.packages / "tpu_rl" / "recipes"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    # the namespace the PYTHONPATH finds first: the patched recipes, then this checkout's other packages
    (copy.parent / "__init__.py").write_text(f"__path__.append({str(REPO)!r})\n")
    table = copy / "recipes.toml"
    text = table.read_text()
    assert text.count(old) == 1, f"the recipe edit must match exactly once: {old!r}"
    table.write_text(text.replace(old, new))


def make_clone(directory: Path, branch: str, env: dict[str, str]) -> None:
    git = {**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    (directory / "README.md").write_text("a clone\n")
    for args in (["init", "-q", "-b", branch], ["add", "README.md"], ["commit", "-q", "-m", "first"]):
        subprocess.run(["git", *args], cwd=directory, env=git, check=True, capture_output=True)


def prepare(row: Row, sandbox: Sandbox) -> tuple[list[str], dict[str, str], str | None]:
    for directory in (sandbox.work, sandbox.home, sandbox.packages):
        directory.mkdir(parents=True)
    env = clean_environment(sandbox.home)
    env.update({key: sandbox.fill(value) for key, value in BASE_ENV.items()})
    for key, value in row.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = sandbox.fill(value)
    if row.config is not None:
        config = sandbox.home / "tpu-rl-config.toml"
        config.write_text(sandbox.fill(row.config))
        env["TPU_RL_CONFIG"] = str(config)
    if row.recipes is not None:
        patch_recipes(sandbox, *row.recipes)
        env["PYTHONPATH"] = os.pathsep.join((str(sandbox.packages), env["PYTHONPATH"]))  # then this checkout
    for name, text in row.files.items():
        text = sandbox.fill(text)
        if name in row.pad:
            text += "#" * max(0, row.pad[name] - len(text.encode()) - 1) + "\n"
        (sandbox.work / name).write_text(text)
    if row.git_branch is not None:
        make_clone(sandbox.work, row.git_branch, env)
    if row.command[0] == "synth":
        argv = [str(VENV_BIN / "python"), "-m", "tpu_rl.stacks.app", *row.command[1:]]
    else:
        assert row.command[0] == "tpu-rl", row.command
        argv = [str(VENV_BIN / "tpu-rl"), *row.command[1:]]
    argv = [sandbox.fill(arg) for arg in argv]
    stdin = sandbox.fill(row.stdin) if row.stdin is not None else None
    return argv, env, stdin


# ---------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    sandbox: Sandbox
    returncode: int
    output: str
    files_before: dict[str, bytes]
    files_after: dict[str, bytes]
    cloud_before: dict
    cloud_after: dict


def execute(row: Row, root: Path, runner, emulators: GcsEmulators) -> Outcome:
    """Run one row in its own sandbox (and its own fake APIs, so rows can run side by side), with `runner`'s
    `run`: a WarmPool's forks, or a FreshProcess."""
    sandbox = Sandbox(root, TOKEN)
    argv, env, stdin = prepare(row, sandbox)
    with emulators.lend() if row.peers is not None else nullcontext() as emulator:
        peers = start_peers(row.peers, env, sandbox.home, sandbox.sentinel, emulator) if emulator else None
        before = snapshot(sandbox.work)
        try:
            result = runner.run(argv, cwd=sandbox.work, env=env, input=stdin if stdin is not None else "",
                                capture_output=True, text=True, timeout=300)
            cloud = (peers.before, peers.state()) if peers else ({}, {})
        finally:
            if peers:
                peers.stop()
    return Outcome(sandbox, result.returncode, result.stdout + result.stderr, before, snapshot(sandbox.work), *cloud)


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory, gcs_emulators, warm_cli) -> dict[str, Future]:
    """Every selected row, each forked from a warm interpreter, a few side by side (some wait on the peers)."""
    selected = [item.callspec.params["row"] for item in request.session.items
                if hasattr(item, "callspec") and isinstance(item.callspec.params.get("row"), Row)
                and item.originalname == "test_bad_input_is_rejected_clearly_and_changes_nothing"]
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {row.id: pool.submit(execute, row, tmp_path_factory.mktemp(row.id), warm_cli, gcs_emulators) for row in selected}
    yield futures
    pool.shutdown(wait=True)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_is_rejected_clearly_and_changes_nothing(row: Row, outcomes):
    assert_rejected_clearly(row, outcomes[row.id].result())


# A few rows also run as a plain subprocess: the forks above stand for a fresh process, and these show that a
# fresh process ends the same way. One row for each way a fork starts differently from a fresh process (the
# stage does not change how a command starts): `python -m tpu_rl.stacks.app` with a patched recipe table ahead on
# PYTHONPATH, the console script offline, and the console script against the peers.
IN_A_FRESH_PROCESS = [next(row for row in ROWS if row.command[0] == "synth" and row.recipes is not None),
                      next(row for row in ROWS if row.command[0] == "tpu-rl" and row.peers is None and not row.recipes),
                      next(row for row in ROWS if row.command[0] == "tpu-rl" and row.peers is not None)]


@pytest.mark.parametrize("row", IN_A_FRESH_PROCESS, ids=[row.id for row in IN_A_FRESH_PROCESS])
def test_bad_input_is_rejected_alike_by_a_fresh_process(row: Row, tmp_path, gcs_emulators):
    assert_rejected_clearly(row, execute(row, tmp_path, FreshProcess(), gcs_emulators))


class FreshProcess:
    """subprocess.run with this checkout's packages behind the row's own PYTHONPATH, as the warm interpreter
    has them (the same as the venv's on a clone; in a git worktree the venv's editable install is another's)."""

    @staticmethod
    def run(argv, *, env, **options):
        path = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(REPO)]))
        return subprocess.run(argv, env={**env, "PYTHONPATH": path}, **options)


def assert_rejected_clearly(row: Row, outcome: Outcome) -> None:
    sandbox, output = outcome.sandbox, outcome.output
    assert outcome.returncode != 0, f"{row.id} exited 0:\n{output[-2000:]}"
    assert TRACEBACK not in output, output[-3000:]
    message = sandbox.fill(row.message)
    lines = [line for line in output.splitlines() if contains_in_order(line, message.split("…"))]
    assert lines, f"{row.id}: expected one line with\n  {message}\ngot:\n{output[-2000:]}"
    assert sandbox.fill(row.fix) in lines[0]
    assert sandbox.sentinel not in output, "the output echoes a token"
    assert outcome.files_after == outcome.files_before, "the command wrote files although it rejected its input"
    assert outcome.cloud_after == outcome.cloud_before, "the command changed the cloud although it rejected its input"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-doc"]:
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(render_doc(ROWS))
        print(f"wrote {DOC.relative_to(REPO)} ({len(ROWS)} rows)")
    else:
        sys.exit("usage: tests/test_bad_input.py --write-doc")
