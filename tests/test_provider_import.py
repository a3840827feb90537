"""The lazy provider import (infra/google.py) changes speed only, never output, and only when safe.

The two synths run the cdktf.json app command in fresh processes, the way `cdktf synth` does, one
with the normal import forced and one with the lazy import forced, into separate directories.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from tpu_rl.infra import google
from tpu_rl.recipes import UserError, all_recipes
from tpu_rl.recipes.conventions import ARTIFACTS_STACK

REPO = Path(__file__).resolve().parents[1]
APP_COMMAND = json.loads((REPO / "cdktf.json").read_text())["app"]
QUIET_NODE = {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (google.IMPORT_MODE_ENV, "CDKTF_OUTDIR")}
    return {**env, **QUIET_NODE, **extra}


def _status_line(stderr: str) -> dict:
    lines = [line for line in stderr.splitlines() if line.startswith("tpu-rl provider import: ")]
    assert len(lines) == 1, f"expected one provider import status line on stderr, got:\n{stderr[-3000:]}"
    return json.loads(lines[0].split(": ", 1)[1])


def _start_python(code: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=_env(**env),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    process = _start_python(code, **env)
    stdout, stderr = process.communicate(timeout=900)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# Simulates an installed provider of another version: the guard must choose the normal import. The probe
# records the import it asks for instead of running it (a whole provider import costs ~11 s of CPU): that
# import is the one the forced full synth below runs, whose output matches the lazy synth's.
FALLBACK_PROBE = """
    import importlib, importlib.metadata, sys
    real_version = importlib.metadata.version
    importlib.metadata.version = lambda name: "16.13.0" if name == "cdktf-cdktf-provider-google" else real_version(name)
    from tpu_rl.infra import google
    requested, real_import = [], importlib.import_module

    def recorded(name, *args):
        if name == google.PROVIDER_PACKAGE:
            requested.append(name)
            return None
        return real_import(name, *args)

    importlib.import_module = recorded
    status = google.import_status()
    assert requested == [google.PROVIDER_PACKAGE], requested  # the package's own __init__, all submodules
    assert google.PROVIDER_PACKAGE not in sys.modules, "a lazy stand-in was installed"
"""


@pytest.fixture(scope="module")
def fallback_probe():
    """Started before the synths, so that it runs beside them."""
    process = _start_python(FALLBACK_PROBE, **{google.IMPORT_DEBUG_ENV: "1"})
    yield process
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def synths(tmp_path_factory, fallback_probe) -> dict[str, tuple[Path, str]]:
    """{mode: (outdir, stderr)} for the app command run once per forced mode, both at once."""
    runs = {}
    for mode in ("full", "lazy"):
        outdir = tmp_path_factory.mktemp(f"cdktf.out.{mode}")
        env = _env(CDKTF_OUTDIR=str(outdir), CDKTF_CONTINUE_SYNTH_ON_ERROR_ANNOTATIONS="true",
                   **{google.IMPORT_MODE_ENV: mode, google.IMPORT_DEBUG_ENV: "1"})
        process = subprocess.Popen(APP_COMMAND, shell=True, cwd=REPO, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        runs[mode] = (outdir, process)
    finished = {}
    for mode, (outdir, process) in runs.items():
        stdout, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, f"{mode} synth failed:\n{stdout[-2000:]}\n{stderr[-4000:]}"
        finished[mode] = (outdir, stderr)
    return finished


def _tree(outdir: Path) -> dict[str, bytes]:
    return {str(path.relative_to(outdir)): path.read_bytes() for path in sorted(outdir.rglob("*")) if path.is_file()}


def test_lazy_and_full_provider_imports_write_byte_identical_cdk_tf_json_for_every_stack(synths):
    (full_dir, _), (lazy_dir, _) = synths["full"], synths["lazy"]
    expected_stacks = {ARTIFACTS_STACK, *all_recipes()}
    for outdir in (full_dir, lazy_dir):
        assert {path.parent.name for path in outdir.glob("stacks/*/cdk.tf.json")} == expected_stacks
    for stack in sorted(expected_stacks):
        relative = Path("stacks", stack, "cdk.tf.json")
        assert (lazy_dir / relative).read_bytes() == (full_dir / relative).read_bytes(), f"{relative} differs"


def test_lazy_and_full_provider_imports_write_the_same_files_byte_for_byte(synths):
    full, lazy = _tree(synths["full"][0]), _tree(synths["lazy"][0])
    assert sorted(lazy) == sorted(full)  # manifest.json, assets (helm charts), every cdk.tf.json
    assert [name for name in full if lazy[name] != full[name]] == []


def test_forced_full_synth_used_the_normal_import(synths):
    status = _status_line(synths["full"][1])
    assert status == {"mode": "full", "node_lazy_require": False, "reason": f"forced by {google.IMPORT_MODE_ENV}=full"}
    assert "tpu-rl lazy require:" not in synths["full"][1]


def test_forced_lazy_synth_skipped_the_package_init_in_python_and_the_eager_requires_in_node(synths):
    stderr = synths["lazy"][1]
    assert _status_line(stderr)["mode"] == "lazy"
    assert _status_line(stderr)["node_lazy_require"] is True
    # Printed by google_lazy_require.js inside the jsii node kernel when it takes over index.js.
    assert "tpu-rl lazy require:" in stderr and "@cdktf/provider-google/lib/index.js" in stderr


def test_provider_version_other_than_16_12_1_falls_back_to_the_normal_import(fallback_probe):
    stdout, stderr = fallback_probe.communicate(timeout=900)
    assert fallback_probe.returncode == 0, stderr[-3000:]
    status = _status_line(stderr)
    assert status["mode"] == "full" and status["node_lazy_require"] is False
    assert "16.13.0" in status["reason"] and "16.12.1" in status["reason"]


def test_forcing_lazy_with_another_provider_version_stops_with_one_line_naming_the_setting():
    result = _run_python(
        """
        import importlib.metadata, sys
        real_version = importlib.metadata.version
        importlib.metadata.version = lambda name: "17.0.0" if name == "cdktf-cdktf-provider-google" else real_version(name)
        from tpu_rl.infra import google
        from tpu_rl.recipes import UserError
        try:
            google.import_status()
        except UserError as error:
            print(error)
            sys.exit(3 if "cdktf_cdktf_provider_google" not in sys.modules else 4)
        """,
        **{google.IMPORT_MODE_ENV: "lazy"},
    )
    assert result.returncode == 3, result.stderr[-3000:]  # refused before importing anything
    assert result.stdout.count("\n") == 1
    assert "TPU_RL_PROVIDER_IMPORT=lazy" in result.stdout and "17.0.0" in result.stdout


def test_an_unknown_import_mode_is_a_user_error(monkeypatch):
    monkeypatch.setattr(google, "_status", {})
    monkeypatch.setenv(google.IMPORT_MODE_ENV, "fast")
    with pytest.raises(UserError, match="TPU_RL_PROVIDER_IMPORT='fast' is not a mode: use one of auto, full, lazy"):
        google.import_status()


def test_a_provider_init_that_differs_from_the_pinned_wheel_blocks_the_lazy_import(monkeypatch):
    monkeypatch.setitem(google._EXPECTED_SHA256, "__init__.py", "0" * 64)
    monkeypatch.delitem(sys.modules, google.PROVIDER_PACKAGE, raising=False)
    blocker = google.lazy_import_blocker()
    assert blocker is not None and "__init__.py differs" in blocker


def test_lazy_package_loads_submodules_on_attribute_access_and_for_jsii_type_lookups():
    result = _run_python(
        """
        import sys
        from tpu_rl.infra import google
        assert google.import_status()["mode"] == "lazy"
        package = sys.modules["cdktf_cdktf_provider_google"]
        assert package.__tpu_rl_lazy__ and "cdktf_cdktf_provider_google.compute_disk" not in sys.modules
        assert package.compute_address.ComputeAddress.__name__ == "ComputeAddress"  # PEP 562 access
        from jsii import _reference_map
        # What jsii does for a type coming back from node whose submodule nobody imported yet:
        assert _reference_map._try_import_type_module("@cdktf/provider-google.computeDisk.ComputeDisk")
        assert "@cdktf/provider-google.computeDisk.ComputeDisk" in _reference_map._types
        """,
        **{google.IMPORT_MODE_ENV: "lazy"},
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_fqn_map_names_the_python_module_of_every_jsii_submodule_in_the_assembly():
    root = Path(importlib.util.find_spec(google.PROVIDER_PACKAGE).submodule_search_locations[0])
    with tarfile.open(root / "_jsii" / google.ASSEMBLY_FILE) as archive:
        assembly = json.load(archive.extractfile("package/.jsii"))
    fqn_map = google.submodule_fqn_map([str(root)])
    assert sorted(fqn_map) == sorted(assembly["submodules"])
    namespaces = {fqn.rsplit(".", 1)[0] for fqn in assembly["types"]}
    assert namespaces <= set(fqn_map)
    for module in fqn_map.values():
        assert (root / module.split(".", 1)[1] / "__init__.py").is_file()


def test_node_hook_leaves_any_index_js_but_the_pinned_provider_one_to_node(tmp_path):
    package = tmp_path / "node_modules" / "@cdktf" / "provider-google"
    (package / "lib" / "a").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@cdktf/provider-google", "version": "16.12.1"}))
    (package / "lib" / "index.js").write_text('exports.a = require("./a");\n')  # right shape, other bytes
    (package / "lib" / "a" / "index.js").write_text("globalThis.requiredEagerly = true;\n")
    script = f"require({json.dumps(str(google.LAZY_REQUIRE_HOOK))}); require({json.dumps(str(package / 'lib'))});" \
             "console.log(JSON.stringify(globalThis.requiredEagerly === true));"
    result = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "true"


def test_another_jsii_version_blocks_the_lazy_import(monkeypatch):
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "1.143.0" if name == "jsii" else real_version(name))
    monkeypatch.delitem(sys.modules, google.PROVIDER_PACKAGE, raising=False)
    blocker = google.lazy_import_blocker()
    assert blocker == "jsii is 1.143.0; the lazy import relies on private jsii parts verified only in 1.142.0"


def test_a_jsii_without_the_submodule_fqn_map_blocks_the_lazy_import(monkeypatch):
    from jsii import _reference_map

    monkeypatch.delattr(_reference_map, "_submodule_fqn_map")
    monkeypatch.delitem(sys.modules, google.PROVIDER_PACKAGE, raising=False)
    blocker = google.lazy_import_blocker()
    assert blocker is not None and "no _submodule_fqn_map" in blocker
