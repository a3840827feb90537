"""Under CI=true a skip fails and names its reason (tests/ci_skips.py); elsewhere it stays a skip.

Each case runs pytest in a subprocess on a small test file, with the plugin loaded as conftest loads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from contracts import maxtext_schema

TESTS = Path(__file__).resolve().parent

SKIPS = '''
import pytest

@pytest.fixture(scope="session")
def wheel():
    pytest.skip("fixture input absent")

def test_skips_while_running():
    pytest.skip("call input absent")

@pytest.mark.skipif(True, reason="marker input absent")
def test_skipped_by_a_marker():
    pass

def test_needs_a_fixture_that_skips(wheel):
    pass
'''
MODULE_SKIP = '''
import pytest
pytest.skip("module input absent", allow_module_level=True)

def test_never_collected():
    pass
'''
NOT_SKIPS = '''
import pytest

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_expected_failure():
    assert False

def test_deselected_in_the_ci_command():
    pytest.skip("input this CI cannot have")

def test_runs():
    pass
'''
REASONS = ["fixture input absent", "call input absent", "marker input absent"]


def run_pytest(tmp_path: Path, source: str, ci: str | None, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_case.py").write_text(source)
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(TESTS)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "ci_skips", "-p", "no:cacheprovider", "-q", "-rA",
         "--rootdir", str(tmp_path), str(tmp_path / "test_case.py"), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_every_kind_of_skip_fails_and_names_its_reason(tmp_path, ci):
    result = run_pytest(tmp_path, SKIPS, ci)
    assert result.returncode == 1, result.stdout
    summary = result.stdout[result.stdout.index("short test summary info"):]
    for reason in REASONS:
        assert f"skipped under CI, so the check did not run: {reason}" in summary, result.stdout
    assert "skipped" not in result.stdout.splitlines()[-1]


def test_under_ci_a_skipped_module_fails_the_collection(tmp_path):
    result = run_pytest(tmp_path, MODULE_SKIP, "true")
    assert result.returncode == 2, result.stdout  # interrupted: an error during collection
    assert "skipped under CI, so the check did not run: module input absent" in result.stdout


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_outside_ci_a_skip_stays_a_skip(tmp_path, ci):
    result = run_pytest(tmp_path, SKIPS, ci)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1].startswith("3 skipped")
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED [1] test_case.py:")]
    assert sorted(line.split(": ", 1)[1] for line in skipped) == sorted(REASONS)


def test_under_ci_xfails_pass_and_a_deselected_test_does_not_run(tmp_path):
    result = run_pytest(tmp_path, NOT_SKIPS, "true", "--deselect", "test_case.py::test_deselected_in_the_ci_command")
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1].startswith("1 passed, 1 deselected, 1 xfailed")


def test_this_suite_loads_the_plugin(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("ci_skips")


def test_a_maxtext_wheel_that_cannot_be_downloaded_is_named_in_the_reason(tmp_path, monkeypatch):
    """The reason becomes the failure line under CI; offline pip (no index, no links) fails at once."""
    monkeypatch.setattr(maxtext_schema, "CACHE", tmp_path / "cache")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    wheel, reason = maxtext_schema.fetch_wheel("0.2.4")
    assert wheel is None
    assert reason.startswith("could not download the wheel maxtext-0.2.4-py3-none-any.whl (maxtext==0.2.4)"), reason


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_missing_maxtext_venv_fails_and_names_it_in_ci_and_locally(ci, monkeypatch):
    from maxtext_cpu.chain import need_venv

    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match=r"\.venv-maxtext-9\.9\.9 is missing: `make install` builds it"):
        need_venv("9.9.9")
