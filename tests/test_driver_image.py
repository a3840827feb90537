"""The run driver's runtime (docs/pipeline.md, "The driver's image"): staging it in the bucket (the GCS
emulator; the locked wheels from a loopback file server), its container against Kubernetes' schema, its
install run offline with the command the container runs, the lock against pyproject.toml and the image's
tags, and the one line a CLI says about a driver of another version."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import zipfile
from pathlib import Path

import kubernetes_validate
import pytest
from google.cloud.storage import Bucket
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from contracts.k8s_schema import KUBERNETES_VERSION
from tpu_rl.jobs.driver_runtime import (DRIVER_VERSION_ANNOTATION, SITE_VOLUME, TMP_VOLUME, DriverRuntime,
                                 driver_container, driver_drift, driver_env, driver_node_selector,
                                 driver_pod_annotations, driver_volumes)
from peers.driver_files import seed_locked_wheels
from peers.settings import SETTINGS, peer_settings, spec_of
from tpu_rl.jobs.k8s import cpu_pool_placement
from tpu_rl.recipes import UserError, get_recipe
from tpu_rl.recipes.conventions import NAMESPACE
from tpu_rl.recipes.outcome import ExitCode
from tpu_rl.recipes.driver.runtime import (BASE_IMAGE, BUCKET_PREFIX, LEFT_OUT, PYTHON_PLATFORM, PYTHON_VERSION,
                                           SITE_SIZE_LIMIT_MIB, TMP_SIZE_LIMIT_MIB, LockedWheel, driver_lock)
from tpu_rl.scripts.cloud.clients import Clients
from tpu_rl.scripts.pipeline.gke import driver_wheel
from tpu_rl.scripts.pipeline.gke.driver_image import download_wheel, stage, stage_driver
from tpu_rl.scripts.pipeline.session import Session

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BUCKET = SETTINGS["GCS_BUCKET"]


class _Files(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    served: list[str] = []

    def do_GET(self):  # http.server's name
        body = self.files.get(self.path)
        self.served.append(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def file_host():
    """A loopback file server standing in for PyPI's file host: (base URL, files by path, paths served)."""
    files, served = {}, []
    handler = type("Files", (_Files,), {"files": files, "served": served})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", files, served
    server.shutdown()
    server.server_close()


def _locked(base: str, files: dict, name: str, content: bytes) -> LockedWheel:
    file = f"{name}-1.0-py3-none-any.whl"
    files[f"/packages/{file}"] = content
    return LockedWheel(name, "1.0", file, f"{base}/packages/{file}", hashlib.sha256(content).hexdigest(), len(content))


@pytest.fixture
def package_copy(tmp_path):
    """A copy of this checkout's package files laid out as installed (site-packages/tpu_rl), free to change."""
    copy = tmp_path / "package" / driver_wheel.NAMESPACE
    for name in driver_wheel.package_files(ROOT):
        target = copy / name.removeprefix(f"{driver_wheel.NAMESPACE}/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(driver_wheel._source(ROOT, name), target)
    return copy


def _objects(gcs) -> dict[str, bytes]:
    return {blob.name: blob.download_as_bytes() for blob in gcs.list_blobs(BUCKET, prefix=f"{BUCKET_PREFIX}/")}


def test_staging_twice_uploads_nothing_the_second_time(gcs, file_host, package_copy):
    base, files, served = file_host
    lock = (_locked(base, files, "alpha", b"alpha wheel"), _locked(base, files, "beta", b"beta wheel"))
    first, uploaded = stage(gcs, BUCKET, lock, root=package_copy, release="0.1.0")
    assert sorted(served) == ["/packages/alpha-1.0-py3-none-any.whl", "/packages/beta-1.0-py3-none-any.whl"]
    assert len(uploaded) == 4  # two locked wheels, the package's wheel, the requirements
    before = _objects(gcs)
    assert before[f"{BUCKET_PREFIX}/wheels/alpha-1.0-py3-none-any.whl"] == b"alpha wheel"
    second, uploaded_again = stage(gcs, BUCKET, lock, root=package_copy, release="0.1.0")
    assert (second, uploaded_again, len(served)) == (first, [], 2)
    assert _objects(gcs) == before
    assert first.image == BASE_IMAGE and first.bucket == BUCKET
    assert re.fullmatch(r"0\.1\.0\+[0-9a-f]{12}", first.version)
    # the pod's spec carries the requirements' sha256, so the bucket's copy is checked against the CLI's
    assert first.requirements_sha256 == hashlib.sha256(before[f"{BUCKET_PREFIX}/{first.requirements}"]).hexdigest()
    requirements = before[f"{BUCKET_PREFIX}/{first.requirements}"].decode().splitlines()
    wheel_name = f"tpu_rl-{first.version}-py3-none-any.whl"
    wheel = before[f"{BUCKET_PREFIX}/runtimes/{first.version}/{wheel_name}"]
    assert requirements == [
        f"./wheels/alpha-1.0-py3-none-any.whl --hash=sha256:{hashlib.sha256(b'alpha wheel').hexdigest()}",
        f"./wheels/beta-1.0-py3-none-any.whl --hash=sha256:{hashlib.sha256(b'beta wheel').hexdigest()}",
        f"./runtimes/{first.version}/{wheel_name} --hash=sha256:{hashlib.sha256(wheel).hexdigest()}"]


def _session() -> Session:
    return Session(spec_of(get_recipe("qwen3-v6e32")), peer_settings(), Clients(peer_settings()))


def test_stage_driver_stages_this_package_beside_the_locked_wheels_a_bucket_holds(gcs_server, gcs, settings_env):
    """The tests' bucket holds the lock's wheels (peers.driver_files); PyPI's file host is a closed port."""
    assert os.environ["TPU_RL_WHEELS_ENDPOINT"] == "http://127.0.0.1:9"
    with pytest.raises(UserError, match=r"could not download \S+\.whl for the run's driver \(http://127\.0\.0\.1:9/"):
        stage_driver(_session())
    assert _objects(gcs) == {}
    seeded = seed_locked_wheels(gcs_server, BUCKET)
    runtime = stage_driver(_session())
    assert runtime.version == driver_wheel.runtime_version()
    assert len(_objects(gcs)) == seeded + 2  # this package's wheel and its requirements
    before = _objects(gcs)
    assert stage_driver(_session()) == runtime and _objects(gcs) == before
    assert len(before[f"{BUCKET_PREFIX}/{runtime.requirements}"].decode().splitlines()) == seeded + 1


def test_the_locked_wheels_are_checked_in_one_listing_and_one_with_another_sha256_is_uploaded_again(
        gcs, file_host, package_copy, monkeypatch):
    """~80 locked wheels: one objects.list for them all, not a GET each, on every `run`."""
    base, files, served = file_host
    lock = tuple(_locked(base, files, name, f"{name} wheel".encode()) for name in ("alpha", "beta", "gamma"))
    stage(gcs, BUCKET, lock, root=package_copy, release="0.1.0")
    blob = gcs.bucket(BUCKET).blob(f"{BUCKET_PREFIX}/wheels/{lock[1].file}")
    blob.metadata = {"sha256": "0" * 64}  # replaced since: not the lock's
    blob.upload_from_string(b"another beta")
    gets = []
    real_get_blob = Bucket.get_blob
    monkeypatch.setattr(Bucket, "get_blob", lambda self, name, *a, **k: gets.append(name) or real_get_blob(
        self, name, *a, **k))
    _, uploaded = stage(gcs, BUCKET, lock, root=package_copy, release="0.1.0")
    assert uploaded == [f"wheels/{lock[1].file}"]
    assert _objects(gcs)[f"{BUCKET_PREFIX}/wheels/{lock[1].file}"] == b"beta wheel"
    assert not any("/wheels/" in name for name in gets), gets  # the package's wheel and requirements only


def test_a_wheel_the_peers_put_in_the_emulator_reads_back_as_one_uploaded_through_the_client(gcs_server, gcs):
    """peers/driver_files.py writes the seeded wheels into the emulator's store with its own upload code;
    what the storage client reads back is what an upload through it gives."""
    from peers.gcs_emulator import put_object

    uploaded = gcs.bucket(BUCKET).blob("seed/uploaded.whl")
    uploaded.metadata = {"sha256": "ab" * 32}
    uploaded.upload_from_string(b"stand-in bytes", content_type="application/octet-stream")  # as staging puts it
    put_object(gcs_server, BUCKET, "seed/put.whl", b"stand-in bytes", {"sha256": "ab" * 32})
    varying = {"name", "id", "selfLink", "mediaLink", "generation", "timeCreated", "updated",
               "timeStorageClassUpdated"}
    listed = {blob.name: blob for blob in gcs.list_blobs(BUCKET, prefix="seed/")}
    got = {name: gcs.bucket(BUCKET).get_blob(name) for name in ("seed/uploaded.whl", "seed/put.whl")}
    for blobs in (listed, got):
        one, other = ({k: v for k, v in blobs[name]._properties.items() if k not in varying}
                      for name in ("seed/uploaded.whl", "seed/put.whl"))
        assert one == other and one["metadata"] == {"sha256": "ab" * 32}
    assert got["seed/put.whl"].download_as_bytes() == b"stand-in bytes"


def test_another_package_version_gives_another_runtime(gcs, package_copy):
    first, _ = stage(gcs, BUCKET, (), root=package_copy, release="0.1.0")
    released, _ = stage(gcs, BUCKET, (), root=package_copy, release="0.2.0")
    (package_copy / "scripts" / "pipeline" / "gke" / "steps.py").write_text("# changed\n", encoding="utf-8")
    changed, uploaded = stage(gcs, BUCKET, (), root=package_copy, release="0.1.0")
    versions = {first.version, released.version, changed.version}
    assert len(versions) == 3 and len({first.requirements, released.requirements, changed.requirements}) == 3
    assert released.version.startswith("0.2.0+") and first.version.split("+")[1] == released.version.split("+")[1]
    assert len(uploaded) == 2  # the changed package's wheel and requirements, beside the others


def test_the_same_files_give_the_same_wheel_bytes(package_copy):
    version = driver_wheel.runtime_version(package_copy, "0.1.0")
    assert driver_wheel.build_wheel(package_copy, version) == driver_wheel.build_wheel(package_copy, version)
    assert driver_wheel.runtime_version(ROOT, "0.1.0") == version  # a copy of the files is the same runtime


def test_a_download_that_differs_from_the_lock_is_refused_in_one_line(gcs, file_host, package_copy):
    base, files, _ = file_host
    wheel = _locked(base, files, "alpha", b"alpha wheel")
    files[f"/packages/{wheel.file}"] = b"something else"
    with pytest.raises(UserError, match="does not have the sha256 recipes/driver/driver_lock.toml pins"):
        stage(gcs, BUCKET, (wheel,), root=package_copy, release="0.1.0")
    assert _objects(gcs) == {}  # nothing uploaded halfway
    gone = LockedWheel("gone", "1.0", "gone-1.0-py3-none-any.whl", f"{base}/packages/gone.whl", "0" * 64, 1)
    with pytest.raises(UserError, match="could not download gone-1.0-py3-none-any.whl for the run's driver"):
        download_wheel(gone)


def _driver_job(runtime: DriverRuntime) -> dict:
    """The driver's container and volumes in a batch/v1 Job as the driver's Job places them."""
    placement = cpu_pool_placement()
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "tpu-rl-driver-r", "namespace": NAMESPACE},
            "spec": {"backoffLimit": 3, "template": {
                "metadata": {"annotations": driver_pod_annotations(runtime)},
                "spec": {"serviceAccountName": "tpu-rl-driver", "restartPolicy": "OnFailure",
                         "nodeSelector": {**placement["nodeSelector"], **driver_node_selector(runtime)},
                         "tolerations": placement["tolerations"],
                         "containers": [driver_container(runtime, ["drive", "qwen3-v6e32", "--run", "r"])],
                         "volumes": driver_volumes(runtime)}}}}


RUNTIME = DriverRuntime(BASE_IMAGE, "0.1.0+0123456789ab", BUCKET, "runtimes/0.1.0+0123456789ab/requirements.txt",
                        "0" * 64)


def test_the_driver_container_passes_kubernetes_validate_strict_in_a_job():
    job = _driver_job(RUNTIME)
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    pod = job["spec"]["template"]
    (volume,) = [v for v in pod["spec"]["volumes"] if "csi" in v]
    assert volume["csi"]["driver"] == "gcsfuse.csi.storage.gke.io" and volume["csi"]["readOnly"] is True
    assert volume["csi"]["volumeAttributes"]["bucketName"] == BUCKET
    assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    assert pod["metadata"]["annotations"][DRIVER_VERSION_ANNOTATION] == RUNTIME.version
    bad = _driver_job(RUNTIME)
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMountz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_the_base_image_is_pinned_by_digest_and_the_lock_installs_on_it():
    assert re.fullmatch(r"docker\.io/library/python:3\.12-slim-bookworm@sha256:[0-9a-f]{64}", BASE_IMAGE)
    assert PYTHON_VERSION == "3.12"  # the image's tag
    arch, _, manylinux = PYTHON_PLATFORM.partition("-")
    glibc_minor = int(manylinux.rsplit("_", 1)[1])
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 4, -1)]
    platforms += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    image_tags = {*cpython_tags((3, 12), platforms=platforms), *compatible_tags((3, 12), platforms=platforms)}
    lock = driver_lock()
    for wheel in lock:
        name, version, _, tags = parse_wheel_filename(wheel.file)
        assert (canonicalize_name(wheel.name), str(version)) == (name, wheel.version)
        assert tags & image_tags, f"{wheel.file} does not install on CPython 3.12 {PYTHON_PLATFORM}"
        assert wheel.url.startswith("https://files.pythonhosted.org/") and wheel.url.endswith("/" + wheel.file)
        assert re.fullmatch(r"[0-9a-f]{64}", wheel.sha256)
    assert Tag("py3", "none", "any") in image_tags


def test_the_lock_holds_every_dependency_the_driver_keeps_and_none_it_leaves_out():
    locked = {canonicalize_name(wheel.name) for wheel in driver_lock()}
    declared = {canonicalize_name(re.match(r"[A-Za-z0-9._-]+", spec).group(0))
                for spec in PYPROJECT["project"]["dependencies"]}
    left_out = {canonicalize_name(name) for name in LEFT_OUT}
    assert left_out <= declared, "LEFT_OUT names a package pyproject.toml does not depend on"
    assert declared - left_out <= locked, "run tools/lock_driver.py: the lock misses a dependency"
    assert not left_out & locked


def test_no_module_the_driver_runs_imports_what_it_leaves_out():
    from import_graph import MODULES, imports_of, package_of  # the repository's one reading of every import

    importers = {}
    for module, path in MODULES.items():
        for name in imports_of(module, path):
            top = name.split(".")[0]
            if top in ("cdktf", "constructs", "jsii", "cdktf_cdktf_provider_google", "cdktf_cdktf_provider_helm",
                       "matplotlib"):
                importers.setdefault(top, set()).add(package_of(module) if top != "matplotlib" else module)
    assert importers.get("matplotlib") == {"tpu_rl.scripts.metrics.plot"}
    assert {package for top, found in importers.items() if top != "matplotlib" for package in found} <= {"infra", "stacks"}


def test_the_wheel_ships_what_pyproject_ships():
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {driver_wheel.NAMESPACE: driver_wheel.NAMESPACE,
                                         **{f"{driver_wheel.NAMESPACE}.{p}": p for p in driver_wheel.PACKAGES}}
    assert driver_wheel.PACKAGE_DATA == setuptools["package-data"]
    assert driver_wheel.CONSOLE_SCRIPTS == PYPROJECT["project"]["scripts"]
    assert driver_wheel.REQUIRES_PYTHON == PYPROJECT["project"]["requires-python"]
    files = driver_wheel.package_files(ROOT)
    assert {"tpu_rl/__init__.py", "tpu_rl/recipes/driver/driver_lock.toml", "tpu_rl/scripts/cli/__main__.py"} <= set(files)
    assert not [name for name in files if "__pycache__" in name or not name.startswith("tpu_rl/")]


def _pod_dirs(gcs, tmp_path: Path, runtime: DriverRuntime, bin_dirs: tuple[Path, ...] = ()):
    """The pod's three directories on this machine: the bucket's driver files as the FUSE volume shows
    them, the site and the /tmp emptyDirs; with the container's argv and environment (TMPDIR is unset
    in the pod, so Python's temporary files go to /tmp: here the tmp directory stands for it)."""
    files, site, scratch = tmp_path / "fuse", tmp_path / "site", tmp_path / "tmp"
    for name, data in _objects(gcs).items():
        (files / name.removeprefix(f"{BUCKET_PREFIX}/")).parent.mkdir(parents=True, exist_ok=True)
        (files / name.removeprefix(f"{BUCKET_PREFIX}/")).write_bytes(data)
    site.mkdir(), scratch.mkdir()
    # `python3` is this venv's: its dependencies stand in for the locked wheels, which need the network
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "python3").exists()
    container = driver_container(runtime, ["--help"])
    env = {item["name"]: item["value"] for item in driver_env(runtime)}
    path = os.pathsep.join([*map(str, bin_dirs), str(bin_dir), os.environ["PATH"]])
    env.update({"TPU_RL_DRIVER_FILES": str(files), "TPU_RL_DRIVER_SITE": str(site), "TPU_RL_DRIVER_TMP": str(scratch),
                "HOME": str(scratch), "TMPDIR": str(scratch), "PATH": path, "PIP_NO_INDEX": "1", "COLUMNS": "80"})
    return files, site, scratch, [*container["command"], *container["args"]], env


def test_the_container_installs_the_staged_runtime_offline_and_runs_tpu_rl(gcs, package_copy, tmp_path):
    """The bucket's driver files, laid out as the FUSE volume shows them, installed with the container's
    own script, and `tpu-rl --help` run from what it installed: no network (pip --no-index)."""
    runtime, _ = stage(gcs, BUCKET, (), root=package_copy, release="0.1.0")
    files, site, scratch, argv, env = _pod_dirs(gcs, tmp_path, runtime)
    wheel = files / runtime.requirements.rsplit("/", 1)[0] / f"tpu_rl-{runtime.version}-py3-none-any.whl"
    good = wheel.read_bytes()
    wheel.write_bytes(good[:-1] + b"x")  # an object changed in the bucket after staging
    refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    # a failed install is retried by the Job as the driver's transient failures are (EX_TEMPFAIL, 75)
    assert refused.returncode == 75 and "tpu-rl driver: installing runtimes/" in refused.stderr
    assert "HASHES" in refused.stderr and not (site / runtime.version).exists()
    wheel.write_bytes(good)
    starts = [subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120) for _ in range(2)]
    for result in starts:
        assert result.returncode == 0, result.stderr
        assert "Usage:" in result.stdout
    # the second start of the pod's container finds the install done
    assert ["installing from" in result.stdout for result in starts] == [True, False]
    installed = site / runtime.version
    where = subprocess.run([sys.executable, "-P", "-c", "import tpu_rl.scripts as scripts, importlib.metadata as m; "
                            "from tpu_rl.scripts.pipeline.gke.driver_wheel import runtime_version; "
                            "print(scripts.__file__, m.version('tpu-rl'), runtime_version())"],
                           env={**env, "PYTHONPATH": str(installed)}, cwd=scratch, capture_output=True, text=True)
    # what it installed is this copy, and it computes the same version from its own files as the CLI did
    assert where.stdout.split() == [str(installed / "tpu_rl" / "scripts" / "__init__.py"), runtime.version, runtime.version], \
        where.stderr


def test_a_package_that_does_not_import_ends_the_drivers_job_in_one_line(gcs, package_copy, tmp_path):
    """A crash before `drive` runs is the staged files' or the image's, which the next pod gets the same: it ends
    as bad input, a code the Job fails on (Python's own exit 1 would say a step failed), after its traceback."""
    from tpu_rl.jobs.driver import OUTCOME_EXIT_CODES

    cli = package_copy / "scripts" / "cli" / "__init__.py"
    cli.write_text(cli.read_text() + "import a_module_the_image_lacks\n")
    runtime, _ = stage(gcs, BUCKET, (), root=package_copy, release="0.1.0")
    _, _, _, argv, env = _pod_dirs(gcs, tmp_path, runtime)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == ExitCode.BAD_INPUT and result.returncode in OUTCOME_EXIT_CODES
    assert "Traceback" in result.stderr and "scripts/cli/__init__.py" in result.stderr
    assert result.stdout.splitlines()[-1] == (
        "error: tpu-rl does not import in the driver pod (ModuleNotFoundError: No module named "
        "'a_module_the_image_lacks'): the staged runtime or the driver image is broken, the same in any new pod, "
        "so its Job ends")


def test_a_driver_of_another_version_is_said_in_one_line():
    assert driver_drift("0.1.0+0123456789ab", "0.1.0+0123456789ab") is None
    older = driver_drift("0.2.0+0123456789ab", "0.1.0+ba9876543210")
    newer = driver_drift("0.1.0+0123456789ab", "0.1.10+0123456789ab")
    rebuilt = driver_drift("0.1.0+0123456789ab", "0.1.0+ba9876543210")
    unknown = driver_drift("0.1.0+0123456789ab", None)
    for line in (older, newer, rebuilt, unknown):
        assert line and "\n" not in line
    assert "tpu-rl 0.1.0+ba9876543210, older than this CLI (0.2.0+0123456789ab)" in older
    assert "newer than" in newer and "built from other files than" in rebuilt
    assert DRIVER_VERSION_ANNOTATION in unknown


def test_the_docs_state_the_runtime_the_code_runs():
    from tpu_rl.jobs.driver_runtime import DRIVER_RESOURCES, GCSFUSE_ANNOTATIONS, INSTALL_SECONDS

    page = (ROOT / "docs" / "pipeline.md").read_text()
    section = " ".join(page.split("## The driver's image", 1)[1].split("\n## ", 1)[0].split())
    requests = DRIVER_RESOURCES["requests"]
    assert BASE_IMAGE.split("@")[0] in section and f"({INSTALL_SECONDS} s)" in section
    assert f"{GCSFUSE_ANNOTATIONS['gke-gcsfuse/cpu-request']} CPU" in section
    assert f"driver's {requests['cpu']} and {requests['memory'].removesuffix('Gi')} GiB" in section
    assert f"{GCSFUSE_ANNOTATIONS['gke-gcsfuse/memory-request'].removesuffix('Mi')} MiB" in section
    assert f"about {len(driver_lock()) // 10 * 10} wheels, {sum(w.size for w in driver_lock()) / 1e6:.0f} MB" in section
    from tpu_rl.jobs.driver_runtime import REQUIREMENTS_SHA256_ENV

    assert f"site `emptyDir` ({SITE_SIZE_LIMIT_MIB // 1024} GiB)" in section
    assert f"`/tmp`'s `emptyDir` ({TMP_SIZE_LIMIT_MIB} MiB)" in section
    assert f"(`{REQUIREMENTS_SHA256_ENV}`)" in section
    ((label, arch),) = driver_node_selector(RUNTIME).items()
    assert f"`{label}: {arch}`" in section


def test_the_lock_tool_keeps_the_image_s_best_wheel_and_leaves_out_what_the_driver_does_not_import():
    sys.path.insert(0, str(ROOT / "tools"))
    import lock_driver

    kept = lock_driver.driver_requirements(PYPROJECT)
    assert len(kept) == len(PYPROJECT["project"]["dependencies"]) - len(LEFT_OUT)
    assert not [spec for spec in kept if canonicalize_name(re.match(r"[A-Za-z0-9._-]+", spec).group(0)) in LEFT_OUT]
    # uv's pylock.toml lists each release's wheels for the platform (aiohttp 3.14.5, as uv wrote it)
    wheels = [{"url": "https://files.pythonhosted.org/packages/68/30/aiohttp-3.14.5-py3-none-any.whl"},
              {"url": "https://files.pythonhosted.org/packages/da/e4/aiohttp-3.14.5-cp312-cp312-manylinux2014_x86_64"
                      ".manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl"}]
    ranks = {tag: index for index, tag in enumerate(lock_driver.image_tags())}
    assert lock_driver.best_wheel(wheels, ranks) is wheels[1]
    newer_glibc = [{"url": "https://files.pythonhosted.org/x/example-1.0-cp312-cp312-manylinux_2_39_x86_64.whl"}]
    with pytest.raises(SystemExit, match="installs on x86_64-manylinux_2_36"):
        lock_driver.best_wheel(newer_glibc, ranks)


def test_pip_stages_its_install_in_the_site_volume_not_in_tmp(gcs, package_copy, tmp_path):
    """pip --target builds the whole install under its temporary directory before moving it (pypa/pip
    tag 23.2.1 src/pip/_internal/commands/install.py, `TempDirectory(kind="target")`): with the real
    lock that tree outgrows the /tmp emptyDir, so the script points pip's TMPDIR into the site volume.
    A `python3` in front on PATH records the TMPDIR that `python3 -m pip` is started with."""
    runtime, _ = stage(gcs, BUCKET, (), root=package_copy, release="0.1.0")
    shim_dir, record = tmp_path / "shim", tmp_path / "pip-tmpdir"
    shim_dir.mkdir()
    (shim_dir / "python3").write_text(f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then echo "$TMPDIR" >> {record}; fi\n'
                                      f'exec {Path(sys.executable).parent / "python3"} "$@"\n')
    (shim_dir / "python3").chmod(0o755)
    _, site, scratch, argv, env = _pod_dirs(gcs, tmp_path, runtime, (shim_dir,))
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    (pip_tmp,) = record.read_text().splitlines()
    assert Path(pip_tmp).parent == site and Path(pip_tmp) != scratch
    assert sorted(path.name for path in site.iterdir()) == [runtime.version]  # pip's tree is removed


def test_a_requirements_file_changed_in_the_bucket_is_refused_before_pip_runs(gcs, package_copy, tmp_path):
    """Whoever may write the bucket may change a wheel and its hash line together: the requirements must
    have the sha256 the CLI put in the pod's spec, or nothing is installed."""
    runtime, _ = stage(gcs, BUCKET, (), root=package_copy, release="0.1.0")
    files, site, _, argv, env = _pod_dirs(gcs, tmp_path, runtime)
    requirements = files / runtime.requirements
    wheel = files / runtime.requirements.rsplit("/", 1)[0] / f"tpu_rl-{runtime.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "a") as changed:  # a module added to the package's wheel...
        changed.writestr("scripts/planted.py", "print('not the package staged')\n")
    old_hash = re.search(r"sha256:([0-9a-f]{64})$", requirements.read_text().splitlines()[-1]).group(1)
    # ...and its hash line to match, so pip --require-hashes alone would install it
    requirements.write_text(requirements.read_text().replace(old_hash, hashlib.sha256(wheel.read_bytes()).hexdigest()))
    refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2  # bad input the user must clear: the Job does not retry it
    assert refused.stderr.splitlines() == [
        f"tpu-rl driver: {BUCKET_PREFIX}/{runtime.requirements} in the bucket is not the file tpu-rl run staged "
        "(another sha256): not installed; delete it and run again"]
    assert list(site.iterdir()) == []


def test_the_wheel_is_stored_so_one_package_gives_the_same_bytes_on_any_zlib(package_copy):
    version = driver_wheel.runtime_version(package_copy, "0.1.0")
    name, first = driver_wheel.build_wheel(package_copy, version)
    assert driver_wheel.build_wheel(package_copy, version) == (name, first)
    with zipfile.ZipFile(io.BytesIO(first)) as wheel:
        methods = {info.compress_type for info in wheel.infolist()}
        assert methods == {zipfile.ZIP_STORED}  # no deflate: its bytes depend on the zlib that wrote them
        assert wheel.testzip() is None


def test_the_lock_tool_ranks_every_manylinux_platform_pip_accepts_on_the_image(monkeypatch):
    """packaging's own ranking on a glibc 2.36 x86_64 (the image's, recipes/driver/runtime.py): down to
    manylinux_2_5, with manylinux2014, manylinux2010 and manylinux1 (pypa/packaging@0b3621f3
    src/packaging/_manylinux.py `platform_tags`)."""
    import packaging._manylinux as manylinux

    sys.path.insert(0, str(ROOT / "tools"))
    import lock_driver

    arch, _, glibc = PYTHON_PLATFORM.partition("-")
    assert arch == "x86_64" and os.uname().machine == "x86_64", "packaging ranks the platforms of its own machine"
    monkeypatch.setattr(manylinux, "_get_glibc_version",
                        lambda: manylinux._GLibCVersion(*map(int, glibc.removeprefix("manylinux_").split("_"))))
    expected = list(manylinux.platform_tags([arch]))
    assert f"manylinux1_{arch}" in expected and f"manylinux2010_{arch}" in expected
    assert lock_driver.image_platforms() == expected
    python = tuple(int(part) for part in PYTHON_VERSION.split("."))
    assert lock_driver.image_tags() == [*cpython_tags(python, platforms=expected),
                                        *compatible_tags(python, platforms=expected)]
    old_wheel = [{"url": "https://files.pythonhosted.org/x/example-1.0-cp312-cp312-manylinux1_x86_64.whl"}]
    ranks = {tag: index for index, tag in enumerate(lock_driver.image_tags())}
    assert lock_driver.best_wheel(old_wheel, ranks) is old_wheel[0]


def test_the_driver_pod_asks_for_nodes_of_the_lock_s_architecture():
    """The base image is multi-arch, the lock is x86_64 alone: the pod selects kubernetes.io/arch by Go's
    name of the lock's architecture (kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-arch)."""
    go_arch = {"x86_64": "amd64", "aarch64": "arm64"}
    assert driver_node_selector(RUNTIME) == {"kubernetes.io/arch": go_arch[PYTHON_PLATFORM.partition("-")[0]]}
    pod = _driver_job(RUNTIME)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {**cpu_pool_placement()["nodeSelector"], "kubernetes.io/arch": "amd64"}


def test_lock_verify_measures_each_volume_s_peak_against_its_size_limit(tmp_path):
    """--verify runs the install as the pod would and samples both emptyDirs: a peak over a sizeLimit
    (which gets the pod evicted) fails it in one line per volume, even when the file is gone at the end."""
    sys.path.insert(0, str(ROOT / "tools"))
    import lock_driver

    site, scratch = tmp_path / "site", tmp_path / "tmp"
    site.mkdir(), scratch.mkdir()
    writes = (f"head -c {3 * 2**20} /dev/zero > {scratch}/big && sleep 0.5 && rm {scratch}/big && "
              f"head -c {2**20} /dev/zero > {site}/kept")
    code, peaks = lock_driver.peak_usage(["bash", "-c", writes], dict(os.environ),
                                         {SITE_VOLUME: site, TMP_VOLUME: scratch}, timeout=30)
    assert code == 0 and lock_driver.disk_usage(scratch) == 0
    assert peaks[TMP_VOLUME] >= 3 * 2**20 and 2**20 <= peaks[SITE_VOLUME] < 2 * 2**20
    assert lock_driver.over_limits(peaks, {SITE_VOLUME: 2, TMP_VOLUME: 2}) == [
        "the driver's driver-tmp volume peaked at 3 MiB, over its sizeLimit of 2 MiB (recipes/driver/runtime.py): "
        "the kubelet would evict the pod"]
    assert lock_driver.over_limits(peaks, {SITE_VOLUME: SITE_SIZE_LIMIT_MIB, TMP_VOLUME: TMP_SIZE_LIMIT_MIB}) == []
    volumes = {volume["name"]: volume["emptyDir"]["sizeLimit"] for volume in driver_volumes(RUNTIME) if "emptyDir" in volume}
    assert volumes == {SITE_VOLUME: f"{SITE_SIZE_LIMIT_MIB}Mi", TMP_VOLUME: f"{TMP_SIZE_LIMIT_MIB}Mi"}
