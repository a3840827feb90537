"""Where the fit check compiles: MaxText's environment of a release, found or built with the release's
Python, and the shipped figures found by a user who never names an environment."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tpu_rl.recipes import UserError, all_recipes
from tpu_rl.scripts.fit import compiler, environment

REPO = Path(__file__).resolve().parents[1]
VERSIONS = sorted({recipe.maxtext_version for recipe in all_recipes().values()})


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _python(path: Path, version: str) -> Path:
    """A stand-in interpreter that answers the version question as Python `version` would."""
    return _script(path, f'echo {version}')


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """A PATH holding only what the test puts there (and sh, for the scripts)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/bin:/usr/bin")
    return bin_dir


def test_a_python_of_the_version_on_path_is_taken(bare_path):
    python = _python(bare_path / "python3.12", "3.12")
    uv = _script(bare_path / "uv", "exit 1")
    assert environment.find_python(str(uv), "3.12") == str(python)


def test_a_shim_on_path_that_does_not_run_is_passed_over_for_uvs(bare_path, tmp_path):
    """pyenv puts python3.12 on PATH for every installed version; unselected, it exits 127."""
    _script(bare_path / "python3.12", "echo 'pyenv: python3.12: command not found' >&2; exit 127")
    uvs = _python(tmp_path / "uv-python", "3.12")
    uv = _script(bare_path / "uv", f'[ "$2" = find ] && echo {uvs} && exit 0; exit 2')
    assert environment.find_python(str(uv), "3.12") == str(uvs)


def test_without_one_on_path_uv_finds_its_own(bare_path, tmp_path):
    uvs = _python(tmp_path / "uv-python", "3.12")
    uv = _script(bare_path / "uv", f'[ "$1 $2 $3" = "python find 3.12" ] && echo {uvs} && exit 0; exit 2')
    assert environment.find_python(str(uv), "3.12") == str(uvs)


def test_uv_installs_one_when_it_has_none_and_says_so(bare_path, tmp_path):
    installed = tmp_path / "installed"
    uvs = _python(tmp_path / "uv-python", "3.12")
    uv = _script(bare_path / "uv", "\n".join([
        f'if [ "$2" = install ]; then touch {installed}; exit 0; fi',
        f'if [ "$2" = find ] && [ -e {installed} ]; then echo {uvs}; exit 0; fi',
        "exit 2",
    ]))
    said = []
    assert environment.find_python(str(uv), "3.12", say=said.append) == str(uvs)
    assert said == ["installing Python 3.12 with uv (once; MaxText's environment needs it)"]


def test_no_python_anywhere_is_one_line_naming_the_version_and_the_fix(bare_path):
    uv = _script(bare_path / "uv", "exit 2")
    with pytest.raises(UserError) as refused:
        environment.find_python(str(uv), "3.12", say=lambda line: None)
    assert str(refused.value) == ("MaxText's environment needs Python 3.12, which is not on PATH and uv could not "
                                  "install: install python3.12, or set TPU_RL_MAXTEXT_ENV to an environment of your own")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_missing_environment_is_built_with_an_interpreter_of_the_releases_python(version, tmp_path, monkeypatch):
    """The first `tpu-rl fit --set` on a user's machine: no TPU_RL_MAXTEXT_ENV, nothing built yet. The
    build is handed the interpreter found for the release's Python, not the version's name."""
    monkeypatch.delenv("TPU_RL_MAXTEXT_ENV", raising=False)
    monkeypatch.setenv("TPU_RL_CACHE", str(tmp_path / "cache"))
    asked, built = [], {}
    monkeypatch.setattr(environment, "find_python",
                        lambda uv, python_version, say: asked.append(python_version) or "/found/python3.12")

    def build(version, python, uv, torch, say):
        built.update(version=version, python=python, torch=torch)
        return environment.Environment(version, tmp_path / "env")

    monkeypatch.setattr(environment, "build", build)
    compiler.ready_environment(version, say=lambda line: None)
    release_python = next(r.maxtext.python for r in all_recipes().values() if r.maxtext_version == version)
    assert asked == [release_python]
    assert built == {"version": version, "python": "/found/python3.12", "torch": False}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_environment_make_install_builds_holds_the_versions_its_release_pins(version):
    """The shipped figures are keyed on the pinned versions (a user names no environment) and made in the
    environment `make install` builds: the two must agree, or no recipe's figure is ever found."""
    env = environment.Environment(version, (REPO / f".venv-maxtext-{version}").resolve())
    assert env.ready, f"{env.path}: run `make install`"
    assert env.versions() == environment.pinned_versions(version)
