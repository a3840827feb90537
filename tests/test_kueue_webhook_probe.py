"""The hook pod's script that holds the queue objects back until Kueue's webhook answers, taken from the
synthesized GKE stack and run by a POSIX shell against a stand-in `nc` (and a `sleep` that returns at
once)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import resources


@pytest.fixture(scope="module")
def script(stacks_json) -> str:
    release = next(r for r in resources(stacks_json["qwen3-v6e32"], "helm_release").values()
                   if r["name"] == "tpu-rl-queues")
    (probe,) = [m for m in yaml.safe_load(release["values"][0])["manifests"] if m["kind"] == "Pod"]
    (container,) = probe["spec"]["containers"]
    assert container["command"][:2] == ["sh", "-c"]
    return container["command"][2]


def run_probe(script: str, tmp_path: Path, answers: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the script with an `nc` that succeeds (1) or refuses (0) per call as `answers` says (refusing
    once they run out); returns the result and the argument lines `nc` was called with."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "answers").write_text(answers)
    calls = tmp_path / "calls"
    (bin_dir / "nc").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f"n=$(wc -l < {calls})\n"
        f"answer=$(cut -c \"$n\" {tmp_path / 'answers'})\n"
        '[ "$answer" = 1 ]\n'
    )
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("nc", "sleep"):
        (bin_dir / tool).chmod(0o755)
    result = subprocess.run(["sh", "-c", script], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=60)
    return result, calls.read_text().splitlines() if calls.exists() else []


def test_the_probe_connects_to_kueues_webhook_service_without_io(script, tmp_path):
    result, calls = run_probe(script, tmp_path, "111")
    assert result.returncode == 0
    assert calls == ["-z -w 2 kueue-webhook-service.kueue-system.svc 443"] * 3


def test_the_probe_waits_through_refusals_until_three_answers_in_a_row(script, tmp_path):
    result, calls = run_probe(script, tmp_path, "0000111")
    assert (result.returncode, len(calls)) == (0, 7)


def test_an_answer_followed_by_a_refusal_does_not_count(script, tmp_path):
    result, calls = run_probe(script, tmp_path, "110111")
    assert (result.returncode, len(calls)) == (0, 6)


def test_the_probe_gives_up_with_one_line_naming_the_service_and_what_to_look_at(script, tmp_path):
    result, calls = run_probe(script, tmp_path, "")
    assert result.returncode == 1
    assert len(calls) == 120
    assert result.stderr.splitlines() == [
        "the Kueue webhook kueue-webhook-service.kueue-system.svc:443 did not accept connections after 120 tries: "
        "see kubectl -n kueue-system get pods,endpointslices"]


def test_the_probe_is_clean_posix_sh_for_busybox(script, shellcheck):
    result = subprocess.run([shellcheck, "--shell=sh", "-"], input=script, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
