"""The VM startup script is its bash parts (jobs/vm_script/*.sh) under a preamble of the run's values
(jobs/vm_preamble.py): every name a part reads is given there or set by a part, every value given is read, and
each value reaches bash as written, whatever it holds. shellcheck reads the parts in tests/test_jobs_shellcheck.py,
the wheel ships them in tests/test_imports.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tpu_rl.jobs.vm_preamble import Knob, part, preamble
from vm_helpers import example_script as script

PARTS = sorted((Path(__file__).parents[1] / "jobs" / "vm_script").glob("*.sh"))
# What bash itself sets.
BASH_SETS = {"PIPESTATUS"}
# $NAME or ${NAME, ${!NAME (an array's keys), and a bare NAME in arithmetic: (( NAME ... )) and $(( NAME ... )).
REFERENCE = re.compile(r"\$\{?!?([A-Z][A-Z0-9_]*)")
ARITHMETIC = re.compile(r"\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)")
GIVEN = re.compile(r"^(?:readonly|declare -r[aA]) ([A-Z][A-Z0-9_]*)=", re.MULTILINE)
ASSIGNED = re.compile(r"(?:^|[\s;])([A-Z][A-Z0-9_]*)=", re.MULTILINE)


def _read(text: str) -> set[str]:
    names = set(REFERENCE.findall(text))
    for expression in ARITHMETIC.findall(text):
        names |= set(re.findall(r"\b([A-Z][A-Z0-9_]*)\b", expression))
    return names


def test_every_name_a_part_reads_is_given_by_the_preamble_or_set_by_a_part():
    text = script()
    given, parts = set(GIVEN.findall(text)), "\n".join(path.read_text() for path in PARTS)
    assigned = set(ASSIGNED.findall(parts))
    assert _read(parts) - given - assigned - BASH_SETS == set()
    assert given - _read(parts) == set(), "a value no part reads: drop it from the preamble"
    assert not given & assigned, "a part assigns a readonly value"


def test_the_rendered_script_is_its_head_the_preamble_and_every_part_whole():
    text = script()
    for path in PARTS:
        assert part(path.stem) + "\n" in text, path.name
    assert text.startswith("#!/bin/bash\n")
    assert text.index("set -euo pipefail\n") < text.index("readonly RUN=") < text.index(part("records"))


@pytest.mark.parametrize("value", ["plain", "two words", "it's", "$HOME `id` \"q\"", "2,4,1", "done", "a\nb", ""])
def test_a_value_reaches_bash_as_written(value):
    text = preamble({"SCALAR": value, "LIST": (value, "x"), "TABLE": {"key": value}})
    shown = subprocess.run(["bash", "-c", text + '\nprintf "%s|" "$SCALAR" "${LIST[0]}" "${LIST[1]}" "${TABLE[key]}"'],
                           capture_output=True, text=True, check=True).stdout
    assert shown == f"{value}|{value}|x|{value}|"


def test_a_knob_takes_the_environment_over_its_default_and_the_values_are_readonly():
    text = preamble({"WAIT": Knob("TPU_RL_TEST_WAIT", 300)})
    assert text == 'readonly WAIT="${TPU_RL_TEST_WAIT:-300}"'
    run = ["bash", "-c", text + '\necho "$WAIT"; (WAIT=1) 2>/dev/null || echo readonly']
    assert subprocess.run(run, capture_output=True, text=True, check=True, env={}).stdout == "300\nreadonly\n"
    assert subprocess.run(run, capture_output=True, text=True, env={"TPU_RL_TEST_WAIT": "5"}).stdout.startswith("5\n")


def test_a_name_no_part_could_read_is_refused():
    for bad in ({"lower": "x"}, {"TABLE": {"two words": "x"}}, {"WAIT": Knob("not a name", 1)}):
        with pytest.raises(ValueError):
            preamble(bad)
