"""The tuning settings (TPU_RL_POLL_SECONDS and the others of recipes/settings/tuning.py) are declared like
the other settings, read through their specs only, checked where they enter, and documented from the table."""

from __future__ import annotations

import re

import pytest

from import_graph import ROOT
from tpu_rl.recipes import UserError
from tpu_rl.recipes.settings.tuning import TUNING, retry_policy, tuning_table


def test_the_tuning_table_is_the_one_in_docs_settings():
    assert tuning_table() in (ROOT / "docs" / "settings.md").read_text(), \
        "docs/settings.md lacks the table of recipes/settings/tuning.py: paste its tuning_table()"


def test_no_module_reads_a_tuning_variable_but_through_its_spec():
    names = {spec.env for spec in TUNING}
    readers = sorted(f"{path.relative_to(ROOT)}: {name}" for package in ("recipes", "jobs", "scripts")
                     for path in (ROOT / package).rglob("*.py") if path.name != "tuning.py"
                     for name in names if re.search(rf"[\"']{name}[\"']", path.read_text()))
    assert not readers, f"read these as recipes/settings/tuning.py's specs: {readers}"


def test_unset_or_empty_is_the_default_and_the_retry_policy_takes_them():
    policy = retry_policy({"TPU_RL_RETRY_BASE_SECONDS": "0", "TPU_RL_REQUEST_TIMEOUT_SECONDS": "",
                           "TPU_RL_REACH_SECONDS": "2.5"})
    assert (policy.base_delay, policy.request_timeout, policy.reach_seconds) == (0.0, 30.0, 2.5)
    assert [spec.seconds({}) for spec in TUNING] == [15.0, 1.0, 30.0, 20.0, 3600.0, 60.0]


# the lines docs/bad-input.md shows (rows 48-52)
@pytest.mark.parametrize("env, raw, line", [
    ("TPU_RL_REQUEST_TIMEOUT_SECONDS", "0", "TPU_RL_REQUEST_TIMEOUT_SECONDS='0' is not a number of seconds more "
     "than 0: set e.g. TPU_RL_REQUEST_TIMEOUT_SECONDS=30 or unset it (default 30)"),
    ("TPU_RL_REACH_SECONDS", "0", "TPU_RL_REACH_SECONDS='0' is not a number of seconds more than 0: set e.g. "
     "TPU_RL_REACH_SECONDS=20 or unset it (default 20)"),
    ("TPU_RL_POLL_SECONDS", "fast", "TPU_RL_POLL_SECONDS='fast' is not a number of seconds 0 or more: set e.g. "
     "TPU_RL_POLL_SECONDS=15 or unset it (default 15)"),
    ("TPU_RL_RETRY_BASE_SECONDS", "inf", "TPU_RL_RETRY_BASE_SECONDS='inf' is not a number of seconds 0 or more: "
     "set e.g. TPU_RL_RETRY_BASE_SECONDS=1 or unset it (default 1)"),
    ("TPU_RL_MAINTENANCE_GRACE_SECONDS", "-1", "TPU_RL_MAINTENANCE_GRACE_SECONDS='-1' is not a number of seconds 0 "
     "or more: set e.g. TPU_RL_MAINTENANCE_GRACE_SECONDS=3600 or unset it (default 3600)"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_its_default(env, raw, line):
    (spec,) = [spec for spec in TUNING if spec.env == env]
    with pytest.raises(UserError) as raised:
        spec.seconds({env: raw})
    assert str(raised.value) == line
