"""A bucket or a cluster that cannot be reached (issue 28): a line on stderr within seconds saying what is
tried and for how long, a bounded wait (TPU_RL_REACH_SECONDS, short here), exit 4, and one message naming
the endpoint, never cut mid-word (`runs`, `metrics`, `status`). Before, `runs` was silent for 95 s
(google-cloud-storage's 120 s of retries) and ended with the library's text cut at 200 characters;
`status` was silent for 35 s and exited 2. Real `tpu-rl` processes, so that the time of each stderr line
is the user's."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from peers.fixtures import CONTEXT, REPO, TOKEN, VENV_BIN, _free_port
from peers.cluster_access import write_kubeconfig
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.scripts.cloud.reach import ANNOUNCE_AFTER_SECONDS

RECIPE = "qwen3-v6e32"
REACH = 6  # seconds (TPU_RL_REACH_SECONDS)
# The line comes ANNOUNCE_AFTER_SECONDS into the wait (scripts/cloud/reach.py). A blackholed endpoint takes
# the whole bound, so the line comes that long before the end; measured against the end, not against the
# process's start, whose import time is the machine's load, not the command's.
SAID_BEFORE_END = REACH - ANNOUNCE_AFTER_SECONDS - 1
# And for every endpoint, from the process's start: before a whole wait could have passed, with room for a
# loaded machine's start-up (a command silent until its end fails this).
SAID_WITHIN = REACH + 2
ENDED_WITHIN = 15  # the bound, plus start-up and the last request


@pytest.fixture
def blackhole():
    """A port that takes connections and never answers (a firewall that drops, an API server gone dark)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def timed_run(args: list[str], env: dict[str, str], cwd: Path,
              stdin: str | None = None) -> tuple[int, float, list[tuple[float, str]]]:
    """`tpu-rl *args` with the default backoff (and `stdin` as its input): exit code, seconds it took, and
    each stderr line with the second it came."""
    start = time.monotonic()
    env = {**env, "PYTHONPATH": str(REPO), "TPU_RL_REACH_SECONDS": str(REACH), "TPU_RL_RETRY_BASE_SECONDS": "1"}
    env.pop("TPU_RL_REACH_NOTICE_SECONDS", None)  # the line comes at its default
    process = subprocess.Popen([str(VENV_BIN / "tpu-rl"), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE, text=True, env=env,
                               cwd=cwd)
    if stdin is not None:
        process.stdin.write(stdin)
        process.stdin.close()
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic() - start, line.rstrip("\n"))
                                                          for line in process.stderr))
    reader.start()
    try:
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        reader.join(timeout=5)
        process.stdout.close()
    return code, time.monotonic() - start, lines


def check_said_and_ended(code: int, took: float, lines, trying: str, error: str, fix: str,
                          blackholed: bool) -> None:
    said = "\n".join(line for _, line in lines)
    assert code == ExitCode.API_ERROR, said
    # An endpoint that answered, only slowly on a loaded machine, has its own notice first: not this one's.
    lines = [(at, line) for at, line in lines if not line.startswith("reaching ") or line.startswith(trying)]
    assert took < ENDED_WITHIN, f"took {took:.1f} s:\n{said}"
    # The first line within seconds: what is tried, or already the end when the retries gave up early
    # (google-api-core's backoff is jittered: a refused port may end before the 2 s the line waits). A
    # blackholed endpoint always takes the whole bound, so it always shows the first kind.
    (first_at, first), (last_at, last) = lines[0], lines[-1]
    assert first == f"{trying} (up to {REACH} s, TPU_RL_REACH_SECONDS)…" or len(lines) == 1, said
    assert first_at < SAID_WITHIN, (first_at, said)
    if blackholed:
        assert len(lines) > 1 and last_at - first_at > SAID_BEFORE_END, (first_at, last_at, said)
    assert last.startswith(error) and last.endswith(f"{fix}, or set TPU_RL_REACH_SECONDS to wait longer"), said
    # Shortened only between words: whatever stands before "…" is a whole word of the library's text.
    assert all(part.endswith(" ") for part in last.split("…")[:-1]), last


@pytest.mark.parametrize("command, kind", [("runs", "refused"), ("runs", "blackholed"), ("metrics", "refused")])
def test_an_unreachable_bucket_says_so_within_seconds_and_exits_4(settings_env, tmp_path, command, kind, request):
    endpoint = request.getfixturevalue("blackhole") if kind == "blackholed" else f"http://127.0.0.1:{_free_port()}"
    env = {**os.environ, "STORAGE_EMULATOR_HOST": endpoint}
    code, took, lines = timed_run([command, RECIPE], env, tmp_path)
    check_said_and_ended(code, took, lines, f"reaching bucket gs://rl-test-artifacts at {endpoint}",
                         f"error: cannot reach bucket gs://rl-test-artifacts at {endpoint} within {REACH} s (",
                         "check the network", kind == "blackholed")


@pytest.mark.parametrize("kind", ["refused", "blackholed"])
def test_status_with_an_unreachable_cluster_says_so_within_seconds_and_exits_4(settings_env, gcs, tmp_path, kind,
                                                                                request):
    endpoint = request.getfixturevalue("blackhole") if kind == "blackholed" else f"http://127.0.0.1:{_free_port()}"
    write_kubeconfig(tmp_path / "kubeconfig", endpoint, CONTEXT)
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig")}
    code, took, lines = timed_run(["status", RECIPE], env, tmp_path)
    check_said_and_ended(code, took, lines, f"reaching cluster 'rl-test' at {endpoint}",
                         f"error: cannot reach cluster 'rl-test' at {endpoint} within {REACH} s (",
                         "check that AUTHORIZED_CIDR includes your address and the cluster exists",
                         kind == "blackholed")


def test_vm_status_with_an_unreachable_compute_api_says_so_within_seconds_and_exits_4(settings_env, gcs, tmp_path,
                                                                                       blackhole):
    # Before, the Compute Engine client (no timeout of its own) kept `status` of a VM recipe silent for good.
    env = {**os.environ, "TPU_RL_COMPUTE_ENDPOINT": blackhole}
    code, took, lines = timed_run(["status", "llama31-v6e8"], env, tmp_path)
    what = "the Compute Engine API for TPU VM 'rl-test-vm'"
    check_said_and_ended(code, took, lines, f"reaching {what} at {blackhole}",
                         f"error: cannot reach {what} at {blackhole} within {REACH} s (", "check the network",
                         True)


@pytest.mark.parametrize("kind", ["refused", "blackholed"])
def test_preflight_with_an_unreachable_compute_api_says_so_within_seconds_and_exits_4(settings_env, gcs, tmp_path,
                                                                                      kind, request):
    # Before, preflight's reservation, quota and machine-type reads had no timeout: silent for good on a
    # blackholed endpoint. The first Compute call is the reservation's (RESERVATION in the test settings).
    endpoint = request.getfixturevalue("blackhole") if kind == "blackholed" else f"http://127.0.0.1:{_free_port()}"
    env = {**os.environ, "TPU_RL_COMPUTE_ENDPOINT": endpoint}
    env.pop("KUBECONFIG", None)
    code, took, lines = timed_run(["preflight", RECIPE], env, tmp_path)
    what = f"the Compute Engine API for reservation '{settings_env['RESERVATION']}'"
    check_said_and_ended(code, took, lines, f"reaching {what} at {endpoint}",
                         f"error: cannot reach {what} at {endpoint} within {REACH} s (", "check the network",
                         kind == "blackholed")


def test_preflight_with_an_unreachable_secret_manager_names_it_and_exits_4(settings_env, gcs, google, tmp_path,
                                                                          blackhole):
    # Compute and TPU answer (the `google` peer); only Secret Manager never does. Before: 60 s silent,
    # then "cannot reach a Google API (ReadTimeout…)" without the endpoint.
    env = {**os.environ, "TPU_RL_SECRETMANAGER_ENDPOINT": blackhole}
    env.pop("KUBECONFIG", None)
    code, took, lines = timed_run(["preflight", RECIPE], env, tmp_path)
    what = "Secret Manager for secret 'hf-token'"
    check_said_and_ended(code, took, lines, f"reaching {what} at {blackhole}",
                         f"error: cannot reach {what} at {blackhole} within {REACH} s (", "check the network",
                         True)


def test_secret_set_with_an_unreachable_secret_manager_names_it_and_exits_4(settings_env, hub, tmp_path, blackhole):
    env = {**os.environ, "TPU_RL_SECRETMANAGER_ENDPOINT": blackhole}
    code, took, lines = timed_run(["secret", "set"], env, tmp_path, stdin=TOKEN + "\n")
    what = "Secret Manager for secret 'hf-token'"
    said = "\n".join(line for _, line in lines)
    assert TOKEN not in said
    # The Hub's answer comes first (on stdout), so the first stderr line is the reaching one.
    check_said_and_ended(code, took, lines, f"reaching {what} at {blackhole}",
                         f"error: cannot reach {what} at {blackhole} within {REACH} s (", "check the network",
                         True)
