"""Write recipes/environments/constraints-<version>.txt: every package of MaxText <version>'s `tpu-post-train`
extra pinned to the lowest version the extra allows.

That is what the post-training image gets: dependencies/scripts/setup.sh installs the extra's
generated_requirements/tpu-post-train-requirements.txt with `uv pip install --resolution=lowest`. The CPU
test venv (`make install`, tests/test_maxtext_real.py) installs a few of those packages under these
constraints; unpinned, the resolver picks a newer jax and MaxText's import fails
(`jax.experimental.hijax` has no `HiPrimitive`). The extra is read from the wheel's METADATA
(Requires-Dist ...; extra == 'tpu-post-train'), without installing it.

    .venv/bin/python tools/generate_maxtext_constraints.py 0.2.3 0.2.4

tunix: the image installs google-tunix from a GitHub archive at the commit named in the wheel's
dependencies/extra_deps/post_train_github_deps.txt, which PyPI cannot serve; the extra's own lower bound
is older than that commit (0.2.3: >=0.1.3, which lacks tunix.rl.agentic that utils_rl imports). The
constraints name the PyPI release nearest to the commit that installs with the release's transformers
(NEAREST_RELEASE; a commit not in it stops the generator, so that a new pin gets a deliberate choice).
That release is not the commit's code everywhere: 0.2.3's commit 683256db has the same
tunix/sft/checkpoint_manager.py as 0.1.7, but 0.2.4's c4ec573d saves with orbax's v1 API
(ocp.training.Checkpointer with a Context, checkpoint_manager.py L26-27, L88-133). The installed
orbax-checkpoint (0.12.2, the extra's lowest) has that API, so the train probe saves 0.2.4's actor with
the same orbax calls and options (tests/maxtext_cpu/run.py save_with_orbax_v1), not with the installed
tunix; github_commits tells it which commit the image has.

PyTorch: the extra pins `torch==2.11.0+cpu` (a local version served only by the PyTorch index, which
this project cannot reach); PyPI's torch of the same release is written instead. PyPI's torch brings its
CUDA libraries, which the test venv installs with it (scripts/fit/environment.py: libtorch_cuda.so
links them, so `import torch` fails without them).
"""

from __future__ import annotations

import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from contracts.maxtext_schema import fetch_wheel  # noqa: E402

EXTRA = "tpu-post-train"
OUT_DIR = REPO / "recipes" / "environments"
GITHUB_DEPS = "dependencies/extra_deps/post_train_github_deps.txt"
# (package, commit) -> the PyPI release used instead. google-tunix 0.1.6 requires transformers<=4.57.1,
# which neither release's transformers (>=5.11) satisfies; 0.1.7 (2026-06-11) is the next release. Its
# tunix/sft/checkpoint_manager.py (orbax v0 CheckpointManager) is 683256db's file unchanged; c4ec573d's
# uses orbax v1 (google/tunix c4ec573d tunix/sft/checkpoint_manager.py L26-27, L88-133), which the train
# probe reproduces with orbax's own calls (tests/maxtext_cpu/run.py save_with_orbax_v1).
NEAREST_RELEASE = {
    ("google-tunix", "683256db1a0919b5cfd46cee52cebc96331494fb"): "0.1.7",  # MaxText 0.2.3
    ("google-tunix", "c4ec573d29e4c3a3955b348256d464b119c8a6d1"): "0.1.7",  # MaxText 0.2.4
}
_GITHUB_PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)\s*@\s*https://github\.com/\S+/archive/(?P<commit>[0-9a-f]{40})\.zip")
_EXTRA_MARKER = re.compile(r"""\s*(and\s+)?extra\s*==\s*['"]tpu-post-train['"]\s*""")
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<op>>=|==)\s*(?P<version>[^;\s]+)\s*$")


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode()


def github_commits(wheel: Path) -> dict[str, str]:
    """package -> the commit the image installs it at from a GitHub archive (the wheel's GITHUB_DEPS)."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        text = archive.read(GITHUB_DEPS).decode() if GITHUB_DEPS in names else ""
    commits = {}
    for line in text.splitlines():
        match = _GITHUB_PIN.match(line.strip())
        if match:
            commits[match["name"].lower()] = match["commit"]
    return commits


def github_pins(wheel: Path) -> dict[str, str]:
    """package -> the PyPI release standing in for the commit the image installs from GitHub."""
    pins = {}
    for name, commit in github_commits(wheel).items():
        if name not in {package for package, _ in NEAREST_RELEASE}:
            continue  # tpu-inference, vLLM: the TPU rollout, which the CPU venv does not install
        if (name, commit) not in NEAREST_RELEASE:
            raise SystemExit(f"{wheel.name} installs {name} at {commit}: add the nearest PyPI release to "
                             "NEAREST_RELEASE in tools/generate_maxtext_constraints.py")
        pins[name] = NEAREST_RELEASE[name, commit]
    return pins


def lowest_pins(metadata: str, replaced: dict[str, str] | None = None) -> list[str]:
    """`name==lowest` (with its environment marker, the extra clause removed) for each requirement of the
    extra. Raises on a requirement that is not `>=X` or `==X`: then there is no single lowest version."""
    pins = []
    for requirement in Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        spec, _, marker = requirement.partition(";")
        if not re.search(r"""extra\s*==\s*['"]tpu-post-train['"]""", marker):
            continue
        marker = _EXTRA_MARKER.sub("", marker).strip()
        marker = re.sub(r"\s+and\s*$", "", marker).strip()
        if marker.startswith("(") and marker.endswith(")") and marker.count("(") == 1:
            marker = marker[1:-1]
        match = _REQUIREMENT.match(spec.strip())
        if not match:
            raise SystemExit(f"tpu-post-train requirement '{spec.strip()}' has no single lowest version")
        version = match["version"].split("+", 1)[0]  # torch==2.11.0+cpu -> PyPI's torch==2.11.0
        name = match["name"].lower()
        version = (replaced or {}).get(name, version)
        pins.append(f"{name}=={version}" + (f"; {marker}" if marker else ""))
    if not pins:
        raise SystemExit(f"the wheel has no '{EXTRA}' extra")
    return sorted(pins)


def constraints_text(version: str) -> str:
    wheel, reason = fetch_wheel(version)
    if wheel is None:
        raise SystemExit(reason)
    header = (f"# MaxText {version}: the '{EXTRA}' extra of {wheel.name} at its lowest versions.\n"
              "# Generated by tools/generate_maxtext_constraints.py; do not edit.\n")
    replaced = github_pins(wheel)
    notes = "".join(f"# {name}: {release}, the PyPI release nearest to the commit in {GITHUB_DEPS}.\n"
                    for name, release in sorted(replaced.items()))
    return header + notes + "\n".join(lowest_pins(_metadata(wheel), replaced)) + "\n"


def constraints_path(version: str) -> Path:
    return OUT_DIR / f"constraints-{version}.txt"


def main(versions: list[str]) -> None:
    if not versions:
        raise SystemExit("usage: tools/generate_maxtext_constraints.py VERSION... (e.g. 0.2.3 0.2.4)")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for version in versions:
        path = constraints_path(version)
        path.write_text(constraints_text(version))
        print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main(sys.argv[1:])
