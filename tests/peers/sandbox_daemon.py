"""`make sandbox` and `make sandbox-stop` (python -m peers.sandbox_daemon from tests/): the sandbox
(peers/sandbox.py) kept running in a process of its own, and what its `npx` does with the stack.

- start: starts `serve` detached (its output in DIR/log, so `eval "$(make -s sandbox)"` does not wait on
  it), waits for its environment file DIR/env.sh (at most START_SECONDS) and prints it: export lines to
  eval, or the file to source. A sandbox already running is reused.
- serve: the sandbox itself, until SIGTERM or SIGINT; DIR/pid names it.
- stop: SIGTERM to the pid DIR/pid names, when that process is this sandbox; waits at most STOP_SECONDS.
- destroy STACK, deploy STACK: what the sandbox's `npx cdktf destroy|deploy STACK` runs (sandbox.SANDBOX_NPX):
  the stack's state taken from, or put back in, the sandbox's state bucket, said to be a simulation.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from peers.fixtures import REPO, VENV_BIN

DIR = REPO / ".sandbox"
START_SECONDS = 60  # the peers start in about a second; the first import of the cloud libraries takes longer
STOP_SECONDS = 30  # the peers stop in about a second (the GCS emulator's half-second poll)
# What the user's shell gets: the settings, each endpoint, the kubeconfig, the state bucket, the pace, the
# sandbox's name. Not HOME, LANG or PYTHONPATH, which are the user's.
EXPORTED = ("PROJECT", "REGION", "ZONE", "CLUSTER_NAME", "GCS_BUCKET", "RESERVATION", "AUTHORIZED_CIDR",
            "TF_STATE_BUCKET", "KUBECONFIG", "STORAGE_EMULATOR_HOST", "TPU_RL_COMPUTE_ENDPOINT",
            "TPU_RL_TPU_ENDPOINT", "TPU_RL_SECRETMANAGER_ENDPOINT", "TPU_RL_LOGGING_ENDPOINT",
            "TPU_RL_REGISTRY_ENDPOINT", "TPU_RL_WHEELS_ENDPOINT", "HF_ENDPOINT", "TPU_RL_RETRY_BASE_SECONDS",
            "TPU_RL_POLL_SECONDS", "TPU_RL_REACH_NOTICE_SECONDS", "TPU_RL_SANDBOX")
def environment_lines(env: dict[str, str], bin_dir: Path) -> str:
    """export lines for a shell: EXPORTED from the sandbox's env, PATH with the sandbox's npx and this
    checkout's tpu-rl first, and every setting the sandbox does not set unset (a CAPACITY or TPU_RL_CONFIG
    of the user's would change the runs)."""
    from tpu_rl.recipes.settings.specs import CONFIG_ENV, SPECS

    lines = [f"export {name}={shlex.quote(env[name])}" for name in EXPORTED if name in env]
    lines.append(f'export PATH={shlex.quote(f"{bin_dir}{os.pathsep}{VENV_BIN}")}"{os.pathsep}$PATH"')
    unset = [spec.env for spec in SPECS if spec.env not in env] + [CONFIG_ENV, "HF_TOKEN"]
    lines.append(f"unset {' '.join(dict.fromkeys(unset))}")
    return "\n".join(lines) + "\n"


def serving(pid: int) -> bool:
    """Whether process `pid` is a sandbox's `serve` (a pid file can outlive its process, and pids are reused):
    its command line, as ps prints it on Linux and macOS alike, or /proc has it where there is no ps."""
    try:
        shown = subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True,
                               timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        try:
            shown = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
    return "peers.sandbox_daemon serve" in shown


def _running(directory: Path) -> int | None:
    try:
        pid = int((directory / "pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if serving(pid) else None


def serve(directory: Path) -> int:
    from peers.sandbox import start_sandbox

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    sandbox = start_sandbox(directory / "home")
    bin_dir = sandbox.bin_dir
    try:
        (directory / "pid").write_text(str(os.getpid()))
        partial = directory / "env.sh.partial"
        partial.write_text(environment_lines(sandbox.env, bin_dir))
        partial.replace(directory / "env.sh")  # whole or absent: `start` waits for it
        print(f"sandbox: serving (pid {os.getpid()})", flush=True)
        while not stop:
            time.sleep(0.5)
    finally:
        (directory / "env.sh").unlink(missing_ok=True)
        sandbox.stop()
        (directory / "pid").unlink(missing_ok=True)
        print("sandbox: stopped", flush=True)
    return 0


def start(directory: Path) -> int:
    env_file = directory / "env.sh"
    pid = _running(directory)
    if pid is None:
        directory.mkdir(parents=True, exist_ok=True)
        env_file.unlink(missing_ok=True)
        with open(directory / "log", "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "peers.sandbox_daemon", "serve", "--dir", str(directory)],
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True, cwd=REPO)
        deadline = time.monotonic() + START_SECONDS
        while not env_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                why = f"exited {process.returncode}" if process.poll() is not None else \
                    f"wrote no {env_file} within {START_SECONDS} s"
                if process.poll() is None:
                    process.terminate()
                print(f"sandbox: the peers {why}; see {directory / 'log'}", file=sys.stderr)
                return 1
            time.sleep(0.2)
        pid = process.pid
    sys.stdout.write(env_file.read_text())
    # on stderr, so `eval "$(make -s sandbox)"` runs only the exports; the command to copy on a line of its own
    print(f"# sandbox: running (pid {pid}); `make sandbox-stop` ends it; another shell can", file=sys.stderr)
    print(f"source {env_file}", file=sys.stderr)
    return 0


def stop(directory: Path) -> int:
    pid = _running(directory)
    if pid is None:
        print("sandbox: none running", file=sys.stderr)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    while serving(pid):
        if time.monotonic() > deadline:
            print(f"sandbox: pid {pid} did not stop within {STOP_SECONDS} s; see {directory / 'log'}",
                  file=sys.stderr)
            return 1
        time.sleep(0.2)
    print("sandbox: stopped; open a new shell to leave its environment", file=sys.stderr)
    return 0


def stack_state(action: str, stack: str) -> int:
    """`npx cdktf destroy|deploy STACK` in the sandbox: its state removed from, or put back in,
    TF_STATE_BUCKET of the sandbox's GCS emulator; nothing real is made or destroyed."""
    from tpu_rl.recipes import conventions
    from peers.fixtures import storage_client
    from peers.sandbox import stack_state_text

    env = os.environ
    client = storage_client(env["PROJECT"], env["STORAGE_EMULATOR_HOST"])
    blob = client.bucket(env["TF_STATE_BUCKET"]).blob(conventions.remote_state_object(stack))
    if action == "destroy":
        if blob.exists():
            blob.delete()
    else:
        blob.upload_from_string(stack_state_text(env, stack))
    print(f"simulation: `cdktf {action} {stack}` in the local sandbox: its Terraform state "
          f"{'removed' if action == 'destroy' else 'written'}, nothing real {action}ed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "serve", "stop", "destroy", "deploy"))
    parser.add_argument("stack", nargs="?")
    parser.add_argument("--dir", type=Path, default=DIR, help="where the sandbox keeps its files")
    args = parser.parse_args(argv)
    if args.action in ("destroy", "deploy"):
        from tpu_rl.recipes import UserError

        try:
            return stack_state(args.action, args.stack)
        except UserError as error:  # a stack no recipe names
            print(f"error: {error}", file=sys.stderr)
            return 2
    return {"start": start, "serve": serve, "stop": stop}[args.action](args.dir.resolve())


if __name__ == "__main__":
    sys.exit(main())
