"""Under CI a skipped test is a failure that names what was missing (a pytest plugin, loaded by conftest).

A skip means a check did not run: an input was absent (a schema, a downloaded wheel, a CLI such as
terraform), and pytest still exits 0, so a CI run can be green while checking little. CI therefore
provides every input, and a group it cannot provide (the seeds, which live in ../shared outside the
repository) is deselected in the CI command, where the reason is written next to it. Deselected tests
produce no report, so they are not touched here; nor are xfails (expected failures, not skips).
"""

from __future__ import annotations

import os

import pytest

CI_VALUES = {"true", "1"}  # GitHub Actions and this workplace's CI set CI=true


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def _skip_reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple):  # (path, line, "Skipped: <reason>")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_if_skipped_in_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (f"skipped under CI, so the check did not run: {_skip_reason(report.longrepr)} "
                           "(provide it in CI, or deselect the test in the CI command and say why)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    _fail_if_skipped_in_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    report = yield
    _fail_if_skipped_in_ci(report)  # pytest.skip(..., allow_module_level=True) skips a whole file
    return report
