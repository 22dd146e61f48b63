"""The one-file app, for real: dist/shardeval.pyz run by every CPython 3.10-3.14 found here, by an
arm64 Debian Python under qemu-user, by its own POSIX launcher, and the way the container runs it.
CPython 3.14 and musl are not installed on this machine: their targets are checked by listing the
archive (every locked package, an extension of the right Python and machine for each compiled one).

Nothing is mocked: the archive is the one build/build.sh makes, each run is a real sharded
evaluation against the built-in simulator (each shard starts its own) followed by the merge, and
its scores.json must be byte-identical to the same evaluation run from the pip install.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from zipapp_support import ARM64_ROOT, LOCK, REPO, SUPPORTED, built_zipapp, interpreters, run, write_config

pytestmark = pytest.mark.timeout(600)
SHIMS = REPO / "shims" / "zipapp"


@pytest.fixture(scope="module")
def pyz() -> Path:
    return built_zipapp()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> bytes:
    """scores.json of the same small evaluation run from the pip-installed package."""
    folder = tmp_path_factory.mktemp("reference")
    config = write_config(folder, folder / "out")
    proc = run([sys.executable, "-m", "shardeval", "run", str(config)])
    assert proc.returncode == 0, proc.stderr
    return (folder / "out" / "merged" / "scores.json").read_bytes()


def this_python() -> str:
    """The real interpreter of the Python running the tests (not a pyenv shim)."""
    return interpreters()[f"{sys.version_info[0]}.{sys.version_info[1]}"]


def pyz_env(tmp: Path, **extra: str) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "SHARDEVAL_ZIPAPP_ROOT": str(tmp / "root"), **extra}


def load_shim(name: str):
    """shims/zipapp/NAME.py as a module (inside the archive it is `_shardeval_NAME`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"zipapp_{name}", SHIMS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", SUPPORTED)
def test_sharded_evaluation_and_merge_on_each_python(version, pyz, reference, tmp_path):
    python = interpreters().get(version)
    if python is None:
        pytest.skip(f"no CPython {version} on this machine")
    config = write_config(tmp_path, tmp_path / "out")
    env = pyz_env(tmp_path)
    proc = run([python, str(pyz), "run", str(config)], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = tmp_path / "out" / "merged" / "scores.json"
    assert scores.read_bytes() == reference
    (tmp_path / "out" / "merged").rename(tmp_path / "first-merge")
    again = run([python, str(pyz), "merge", str(tmp_path / "out")], env=env)
    assert again.returncode == 0, again.stderr
    assert scores.read_bytes() == reference
    tag = "cp" + version.replace(".", "")
    extracted = list((tmp_path / "root").iterdir())
    assert [p.name for p in extracted] == [f"{tag}-{os.uname().machine}"]
    # provenance: every shard names this file's build and this Python
    build_id = next(extracted[0].glob("*/site-packages")).parent.name.rsplit("_", 1)[-1]
    for shard in sorted((tmp_path / "out").glob("shard_*")):
        provenance = json.loads((shard / "manifest.json").read_text())["provenance"]
        assert provenance["build_id"] == build_id and provenance["python"].startswith(f"CPython {version}.")


def test_every_supported_python_is_exercised_here():
    found = interpreters()
    assert sys.version_info[:2] >= (3, 10)
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in found, found
    if os.environ.get("CI"):  # pyenv here has 3.10-3.13; 3.14 is checked by listing the archive
        assert sorted(found) == ["3.10", "3.11", "3.12", "3.13"], found


@pytest.mark.parametrize("old", ["2.7", "3.8", "3.9"])
def test_old_python_is_refused_in_one_line(old, pyz, tmp_path):
    candidates = sorted((Path.home() / ".pyenv" / "versions").glob(f"{old}.*"))
    python = next((c / "bin" / f"python{old}" for c in candidates if (c / "bin" / f"python{old}").exists()), None)
    if python is None:
        pytest.skip(f"no Python {old} on this machine")
    proc = run([str(python), str(pyz), "--version"], env=pyz_env(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs Python >= 3.10" in lines[0] and f"Python {old}" in lines[0], proc.stderr
    assert not (tmp_path / "root").exists()  # refused before extracting anything


def _bin_dir(tmp: Path, links: dict[str, str]) -> Path:
    folder = tmp / "bin"
    folder.mkdir()
    for name, target in links.items():
        (folder / name).symlink_to(target)
    return folder


def test_launcher_prefers_the_newest_python_it_was_built_for(pyz, tmp_path):
    """python3.12 before python3.11 before python3 (here a 3.13, served too, but only a fallback)."""
    found = interpreters()
    if not {"3.11", "3.12", "3.13"} <= found.keys():
        pytest.skip("needs Pythons 3.11, 3.12 and 3.13")
    folder = _bin_dir(tmp_path, {"python3": found["3.13"], "python3.11": found["3.11"], "python3.12": found["3.12"]})
    env = pyz_env(tmp_path, PATH=f"{folder}:/usr/bin:/bin")
    proc = run([str(pyz), "--version"], env=env)  # executed directly: its sh header picks
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("shardeval, version")
    assert [p.name for p in (tmp_path / "root").iterdir()] == [f"cp312-{os.uname().machine}"]
    header = pyz.read_bytes()[:2000].decode(errors="replace")
    assert " ".join(f"python{v}" for v in reversed(SUPPORTED)) + " python3;" in header


def test_a_machine_it_has_no_wheels_for_is_refused_in_one_line(pyz, tmp_path):
    """A real interpreter under `setarch linux32`: the kernel reports a 32-bit machine (i686 on
    x86_64, armv8l on aarch64), which the file has no wheels for."""
    python = this_python()
    if subprocess.run(["setarch", "linux32", python, "-c", ""], capture_output=True).returncode != 0:
        pytest.skip("setarch linux32 does not work here")
    proc = run(["setarch", "linux32", python, str(pyz), "--version"], env=pyz_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and proc.stdout == "", proc.stderr
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"not CPython {version} on " in lines[0] and "on aarch64 and x86_64 Linux (glibc or musl)" in lines[0]
    assert "3.10, 3.11, 3.12, 3.13, 3.14" in lines[0] and "`pip install shardeval`" in lines[0]
    assert not (tmp_path / "root").exists()  # refused before extracting anything


def test_launcher_without_any_new_python_says_so(pyz, tmp_path):
    old = next(iter(sorted((Path.home() / ".pyenv" / "versions").glob("3.9.*"))), None)
    if old is None:
        pytest.skip("needs a Python 3.9")
    folder = _bin_dir(tmp_path, {"python3": str(old / "bin" / "python3.9")})
    proc = run(["/bin/sh", str(pyz), "--version"], env=pyz_env(tmp_path, PATH=str(folder)))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no Python >= 3.10 found" in proc.stderr
    assert "python3.14 python3.13 python3.12 python3.11 python3.10, python3 on PATH" in proc.stderr


def test_many_first_runs_at_once_extract_once(pyz, tmp_path):
    python = this_python()
    env = pyz_env(tmp_path)
    procs = [
        subprocess.Popen([python, str(pyz), "--version"], env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(12)
    ]
    results = [(p.wait(120), p.stdout.read(), p.stderr.read()) for p in procs]
    assert all(code == 0 and b"version" in out for code, out, _ in results), results
    target_dir = next((tmp_path / "root").iterdir())
    entries = sorted(p.name for p in target_dir.iterdir())
    copies = [e for e in entries if e.startswith("shardeval.pyz_")]
    assert len(copies) == 1, entries  # one copy, no temporary folders left behind
    assert entries == sorted(copies + [f".{copies[0]}.lock"]), entries


def test_pyc_files_are_shipped_and_trusted(pyz, tmp_path):
    """With PYTHONDONTWRITEBYTECODE=1 nothing is compiled at start: the archive's unchecked-hash
    .pyc files are used as they are (editing an extracted source changes nothing)."""
    python = this_python()
    env = pyz_env(tmp_path, PYTHONDONTWRITEBYTECODE="1")
    assert run([python, str(pyz), "--version"], env=env).returncode == 0
    site = next((tmp_path / "root").rglob("site-packages"))
    before = sorted(str(p) for p in site.rglob("*.pyc"))
    tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"
    assert any(p.endswith(f"shardeval/__pycache__/cli.{tag}.pyc") for p in before)
    assert all(tag in Path(p).name for p in before)  # only this Python's share was extracted
    init = site / "shardeval" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "edited-'))
    proc = run([python, str(pyz), "--version"], env={**env, "PYTHONDONTWRITEBYTECODE": ""})
    assert proc.returncode == 0 and "edited" not in proc.stdout, proc.stdout
    assert sorted(str(p) for p in site.rglob("*.pyc")) == before


def test_every_target_has_every_locked_package(pyz):
    """From the archive alone (shardeval-build.json and the payload's members, as the extractor
    picks them): each of the 20 targets, CPython 3.10-3.14 on x86_64 and aarch64, glibc and musl,
    gets every package build/requirements.lock names for its Python; each compiled one with
    extensions for exactly that Python and machine (ELF header checked), each pure one its files.
    3.14 and musl cannot run here; the other targets also run in the tests above."""
    import zipfile

    from packaging.markers import Marker

    extract = load_shim("extract")
    info = json.loads(zipfile.ZipFile(pyz).read("shardeval-build.json"))
    expected = {f"cp3{minor}-{libc}{arch}" for minor in range(10, 15) for libc in ("", "musl-") for arch in ("x86_64", "aarch64")}
    assert sorted(info["targets"]) == sorted(expected)
    lock = [l.split(";") for l in LOCK.read_text().splitlines() if l.strip() and not l.startswith("#")]
    elf_machine = {"x86_64": 62, "aarch64": 183}
    with extract.open_payload(str(pyz)) as payload:
        members = payload.infolist()
        for target in info["targets"]:
            tag, arch = target.partition("-")[0], target.rpartition("-")[2]
            share = {dest[len("site-packages/") :]: m for m in members if (dest := extract.destination(m.filename, info, target))}
            python = {"python_version": f"3.{tag[3:]}", "python_full_version": f"3.{tag[3:]}.0"}
            wanted = [pin.strip() for pin, *marker in lock if not marker or Marker(marker[0]).evaluate(python)]
            # musllinux wheels name extensions "-linux-musl" or, as CPython did before 3.13, "-linux-gnu"
            suffix = (f".cpython-{tag[2:]}-{arch}-linux-gnu.so", f".cpython-{tag[2:]}-{arch}-linux-musl.so")[: 1 + ("musl" in target)]
            for pin in wanted:
                name, version = pin.split("==")
                dist = next((d for d in share if d.lower() == f"{name.replace('-', '_')}-{version}.dist-info/record"), None)
                assert dist, f"{target}: no {pin}"
                files = [line.split(",")[0] for line in payload.read(share[dist]).decode().splitlines()]
                shipped = [f for f in files if f in share and not f.endswith(".pyc") and ".dist-info/" not in f]
                assert shipped, f"{target}: {pin} has no files"
                if b"Root-Is-Purelib: false" in payload.read(share[dist.replace("RECORD", "WHEEL")]):
                    extensions = [f for f in shipped if f.endswith(".so") and ".cpython-" in f]
                    assert extensions and all(f.endswith(suffix) for f in extensions), (target, pin, extensions)
                    for f in extensions:
                        head = payload.open(share[f]).read(20)
                        assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == elf_machine[arch], (target, f)
            assert all(f.endswith(suffix) for f in share if ".cpython-" in f and f.endswith(".so")), target


def test_two_builds_are_byte_identical(pyz, tmp_path):
    """The same tree built from another checkout path (its own build venv, work folder and output)
    gives the same bytes: nothing of the build machine's paths may reach the archive."""
    elsewhere = tmp_path / "another checkout"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file():
            (elsewhere / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, elsewhere / rel)
    # a copy has no git history: give it the commit time a build takes its timestamps from
    epoch = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    proc = run(
        ["bash", str(elsewhere / "build" / "build.sh"), "--out", str(tmp_path / "dist"), "--work", str(tmp_path / "work")],
        env={"SOURCE_DATE_EPOCH": epoch},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = hashlib.sha256(pyz.read_bytes()).hexdigest()
    second = hashlib.sha256((tmp_path / "dist" / "shardeval.pyz").read_bytes()).hexdigest()
    assert first == second
    assert list((tmp_path / "dist").glob("shardeval-*.whl")) and list((tmp_path / "dist").glob("shardeval-*.tar.gz"))


def test_home_on_a_shared_or_read_only_mount_is_avoided(tmp_path):
    entry = load_shim("root")
    home = tmp_path / "home"
    home.mkdir()
    mounts = tmp_path / "mounts"
    for line, usable in [
        (f"server:/export {home} nfs4 rw,relatime 0 0", False),
        (f"/dev/sda1 {home} ext4 ro,relatime 0 0", False),
        (f"/dev/sda1 {tmp_path} ext4 rw 0 0\nfs0 {home} lustre rw 0 0", False),
        (f"fs0 {home} lustre rw 0 0\n/dev/sda1 {tmp_path} ext4 rw 0 0", False),  # the deeper mount wins
        (f"/dev/sda1 {home} xfs rw,relatime 0 0", True),
        (f"fs0 {tmp_path}/home\\040two nfs rw 0 0\n/dev/sda1 {home} xfs rw 0 0", True),
    ]:
        mounts.write_text(line + "\n")
        assert entry.home_is_usable(str(home), str(mounts))[0] is usable, line


def _needs_root_namespaces() -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("read-only mounts need root and unshare (a private mount namespace)")


def _read_only(paths: list[Path], argv: list[str]) -> list[str]:
    """argv run in a private mount namespace where each path is a read-only bind mount."""
    binds = " && ".join(f"mount --bind {p} {p} && mount -o remount,bind,ro {p}" for p in paths)
    return ["unshare", "-m", "sh", "-c", f'mount --make-rprivate / && {binds} && exec "$@"', "sh", *argv]


def test_read_only_home_extracts_node_local(pyz, tmp_path):
    _needs_root_namespaces()
    python = this_python()
    home, local = tmp_path / "home", tmp_path / "local"
    home.mkdir()
    local.mkdir()
    config = write_config(tmp_path, tmp_path / "out")
    env = {"HOME": str(home), "TMPDIR": str(local)}
    proc = run(_read_only([home], [python, str(pyz), "run", str(config)]), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notices = [l for l in proc.stderr.splitlines() if "node-local" in l]
    assert len(notices) == 1 and "read-only" in notices[0], proc.stderr  # once, not once per shard
    assert list(home.iterdir()) == []
    assert (local / f"shardeval-{os.getuid()}").is_dir()


def dockerfile() -> tuple[dict[str, str], list[str]]:
    """The ENV settings and ENTRYPOINT of build/Dockerfile, so this test runs what the image runs."""
    env: dict[str, str] = {}
    entrypoint: list[str] = []
    import json
    import shlex

    for line in (REPO / "build" / "Dockerfile").read_text().splitlines():
        if line.startswith("ENV "):
            env.update(item.split("=", 1) for item in shlex.split(line[4:]))
        elif line.startswith("ENTRYPOINT "):
            entrypoint = json.loads(line[len("ENTRYPOINT ") :])
    return env, entrypoint


def test_container_entrypoint_with_read_only_home_and_image(pyz, tmp_path):
    """build/Dockerfile, step by step without an engine: the file at /opt/shardeval, its first run
    at build time, then the ENTRYPOINT with the image's environment, a read-only home and a
    read-only /opt (as with readOnlyRootFilesystem)."""
    _needs_root_namespaces()
    python = interpreters().get("3.12") or this_python()
    image = tmp_path / "image"
    opt = image / "opt" / "shardeval"
    opt.mkdir(parents=True)
    shutil.copy2(pyz, opt / "shardeval.pyz")
    bin_dir = image / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "shardeval").symlink_to(opt / "shardeval.pyz")
    (bin_dir / "python3").symlink_to(python)  # the image's python3
    env_settings, entrypoint = dockerfile()
    assert entrypoint == ["shardeval"]
    env = {k: v.replace("/opt/shardeval", str(opt)) for k, v in env_settings.items()}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    (opt / "plugins").mkdir()
    build_step = run(["shardeval", "--version"], env={**env, "HOME": str(tmp_path / "builder")})
    assert build_step.returncode == 0, build_step.stderr
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    config = write_config(work, work / "out")
    before = sorted(str(p) for p in opt.rglob("*"))
    proc = run(_read_only([home, opt], [*entrypoint, "run", str(config)]), env={**env, "HOME": str(home)}, cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "notice" not in proc.stderr, proc.stderr
    assert sorted(str(p) for p in opt.rglob("*")) == before
    assert (work / "out" / "merged" / "scores.json").exists()


def _binfmt_aarch64() -> str | None:
    """Why the arm64 test cannot run here, or None when it can."""
    if not (ARM64_ROOT / "usr" / "bin" / "python3").exists():
        return f"no arm64 Debian root at {ARM64_ROOT} (scripts/setup/zipapp.sh makes it)"
    status = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    if not status.exists() or "enabled" not in status.read_text():
        return "qemu-aarch64 is not registered with binfmt_misc (scripts/setup/zipapp.sh does it)"
    if os.geteuid() != 0:
        return "chroot needs root"
    return None


def test_aarch64_build_under_qemu(pyz, reference):
    """The same file, the same evaluation and merge, on a Debian arm64 Python under qemu-user."""
    why = _binfmt_aarch64()
    if why:
        pytest.skip(why)
    inside = Path("/tmp") / f"shardeval-test-{uuid.uuid4().hex[:8]}"
    host = ARM64_ROOT / inside.relative_to("/")
    host.mkdir(parents=True)
    try:
        shutil.copy2(pyz, host / "shardeval.pyz")
        write_config(host, inside / "out")
        (host / "home").mkdir()
        env = {"HOME": str(inside / "home"), "SHARDEVAL_ZIPAPP_ROOT": str(inside / "root"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        proc = run(
            [
                shutil.which("chroot") or "/usr/sbin/chroot",
                str(ARM64_ROOT),
                "/usr/bin/python3",
                str(inside / "shardeval.pyz"),
                "run",
                str(inside / "eval.yaml"),
            ],
            env=env,
            timeout=400,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (host / "out" / "merged" / "scores.json").read_bytes() == reference
        machines = {p.name.split("-", 1)[1] for p in (host / "root").iterdir()}
        assert machines == {"aarch64"}
        sos = list((host / "root").rglob("*.so"))
        assert sos and all("x86_64" not in p.name for p in sos)
    finally:
        shutil.rmtree(host, ignore_errors=True)


def test_third_party_plugin_installed_into_the_built_file(pyz, tmp_path):
    """The example plugin goes into the zipapp's plugin directory with `plugins install` (no
    rebuild, no network: a wheel built here, --no-index) and a sharded run uses its benchmark,
    in the shards and in the simulators the shards start."""
    python = this_python()
    wheels, source = tmp_path / "wheels", tmp_path / "example-plugin"
    shutil.copytree(REPO / "examples" / "shardeval-example-plugin", source)  # setuptools builds in the tree
    built = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)])
    assert built.returncode == 0, built.stderr
    env = pyz_env(tmp_path)  # the plugin directory defaults to the platformdirs data dir under HOME
    wheel = next(wheels.glob("shardeval_example-*.whl"))
    installed = run([python, str(pyz), "plugins", "install", "--no-index", str(wheel)], env=env)
    assert installed.returncode == 0, installed.stderr
    listing = run([python, str(pyz), "plugins"], env=env)
    line = next(l for l in listing.stdout.splitlines() if l.startswith("example"))
    assert "0.1.0" in line and "plugin dir" in line, listing.stdout
    plugin_dir = tmp_path / "home" / ".local" / "share" / "shardeval" / "plugins"
    assert (plugin_dir / "shardeval_example").is_dir()
    assert not list(plugin_dir.glob("click*")) and not list(plugin_dir.glob("numpy*"))  # bundled ones stay bundled
    config = tmp_path / "capitals.yaml"
    config.write_text(
        f"""
services:
  model: {{type: sim, bench: capitals, accuracy: 1.0, ttft_ms: 1, itl_ms: 0}}
benchmarks:
  - {{name: capitals, max_concurrent: 8, solver: {{type: simple, service: model}}}}
cluster: {{type: local, shards: 2}}
output: {{dir: {tmp_path / "out"}}}
"""
    )
    proc = run([python, str(pyz), "run", str(config)], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    scores = json.loads((tmp_path / "out" / "merged" / "scores.json").read_text())
    assert scores["capitals"]["n_problems"] == 24 and scores["capitals"]["metrics"]["accuracy"]["value"] == 1.0
    removed = run([python, str(pyz), "plugins", "uninstall", "shardeval-example"], env=env)
    assert removed.returncode == 0, removed.stderr
    assert "example" not in run([python, str(pyz), "plugins"], env=env).stdout.split()


def test_scripts_for_other_nodes_let_the_file_pick_each_nodes_python(pyz, tmp_path):
    """A SLURM script written from the one file names the file, not the submitting interpreter's
    path (which a compute node may not have): the file's own launcher picks the node's Python. Here
    the "node" is a PATH whose newest Python is another version than the one that submitted
    (newer than the system's /usr/bin one, which the launcher would otherwise prefer)."""
    found = interpreters()
    submit_version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    node_version = next((v for v in ("3.13", "3.12") if v in found and v != submit_version), None)
    if node_version is None:
        pytest.skip("needs a Python 3.12 or 3.13 besides the one running the tests")
    config = tmp_path / "slurm.yaml"
    config.write_text(
        "services: {model: {type: sim, bench: arith, accuracy: 0.7, ttft_ms: 2, itl_ms: 0, output_tokens: 8}}\n"
        "benchmarks: [{name: arith, params: {n: 12}}]\n"
        'cluster: {type: slurm, walltime: "10:00", shards: 2}\n'
    )
    out = tmp_path / "out"
    proc = run([this_python(), str(pyz), "run", str(config), "--dry-run", "-o", str(out)], env=pyz_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    script = (out / "eval.sbatch").read_text()
    assert this_python() not in script and f"/bin/sh {pyz} run " in script
    node = _bin_dir(tmp_path, {f"python{node_version}": found[node_version]})
    (tmp_path / "node").mkdir()
    env = {**pyz_env(tmp_path / "node"), "PATH": f"{node}:/usr/bin:/bin", "NEL_SHARD_IDX": "1"}
    proc = run(["bash", str(out / "eval.sbatch")], env=env)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "shard_1" / "manifest.json").read_text())
    assert manifest["state"] == "complete" and manifest["provenance"]["python"].startswith(f"CPython {node_version}.")
