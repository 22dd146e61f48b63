"""Build dist/shardeval.pyz: one file for CPython 3.10-3.14 on x86_64 and aarch64 Linux, glibc or musl.

Run by build/build.sh inside the build venv (which has shiv and uv). Steps, and why:

1. One locked resolution (build/requirements.lock, `uv pip compile --universal
   --fork-strategy fewest`) so every target gets the same version of every package, save where
   no one version has wheels for all (build/wheel-constraints.txt says which and why).
2. For each target, uv installs the locked wheels for that platform into its own folder; the
   folders are merged: a file every target has identically goes in site-packages/ once, any
   other in variants/GROUP/, one folder per set of targets sharing it, extracted only for them
   (dist-info RECORD/WHEEL are merged instead).
3. Debug symbols are stripped, numpy's own test suite is dropped, and every Python available here
   compiles unchecked-hash .pyc files (valid wherever the archive is extracted, so a
   PYTHONDONTWRITEBYTECODE=1 node never recompiles).
4. The archive: the POSIX launcher header (shims/zipapp/launcher.sh), then a zip with
   site-packages/, shiv's runtime (_bootstrap/, environment.json), our version gate and entry
   preamble (shims/zipapp/), and shardeval-build.json saying which files belong to which target.
   Entries are sorted, timestamps come from SOURCE_DATE_EPOCH, modes are normalised: two builds of
   the same tree are byte-identical.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pythons  # build/pythons.py, beside this file
import shiv
from shiv import bootstrap as shiv_bootstrap
from shiv.bootstrap.environment import Environment

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "build" / "requirements.lock"
CONSTRAINTS = REPO / "build" / "wheel-constraints.txt"
PYTHONS = pythons.SUPPORTED
ARCHES = ("x86_64", "aarch64")
# The oldest glibc with wheels for every locked package: numpy's cp314 wheels need 2.28.
MANYLINUX = {"3.14": "manylinux_2_28"}
ENTRY_POINT = "shardeval.cli:main"
DROP_DIRS = ("numpy/tests", "numpy/*/tests", "numpy/*/*/tests")  # numpy's test suite: 8 MB a target
# Files only compilers and type checkers read. Every file costs the first run on a node a create.
DROP_SUFFIXES = (".pyi", ".c", ".h", ".pxd", ".pyx", ".a", ".pc")
MERGEABLE = ("RECORD", "WHEEL")
INSTALL_RECORDS = ("direct_url.json", "uv_cache.json", "INSTALLER", "REQUESTED")
PAYLOAD = "payload.zip"  # site-packages and variants, extracted by shims/zipapp/extract.py


def log(message: str) -> None:
    print(f"build: {message}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def source_date_epoch() -> int:
    """SOURCE_DATE_EPOCH if set, else the last commit's time: same tree, same timestamps."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    out = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else 315532800


def lock(uv: str) -> None:
    run([uv, "pip", "compile", str(REPO / "pyproject.toml"), "-c", str(CONSTRAINTS), "--universal", "--python-version", "3.10",
         "--fork-strategy", "fewest", "--no-annotate", "-q", "-o", str(LOCK),
         "--custom-compile-command", "bash build/build.sh --relock"])


def build_wheel(uv: str, out: Path) -> Path:
    """The shardeval wheel (and sdist, for dist/), built from this tree."""
    run([uv, "build", "-q", "--out-dir", str(out), str(REPO)])
    return next(out.glob("shardeval-*.whl"))


def targets() -> dict[str, tuple[str, str]]:
    """{name: (Python version, uv platform)}: "cp312-x86_64" (glibc), "cp312-musl-x86_64" (musl).

    The names tell a musl node from a glibc one even where the extension files do not (before
    3.13 CPython on musl names them `...-x86_64-linux-gnu.so` too).
    """
    found = {}
    for py in PYTHONS:
        for arch in ARCHES:
            tag = "cp" + py.replace(".", "")
            found[f"{tag}-{arch}"] = (py, f"{arch}-{MANYLINUX.get(py, 'manylinux_2_17')}")
            found[f"{tag}-musl-{arch}"] = (py, f"{arch}-unknown-linux-musl")  # musllinux_1_2
    return found


def install_target(uv: str, py: str, platform: str, wheel: Path, dest: Path) -> None:
    run([uv, "pip", "install", "-q", "--target", str(dest), "--python-version", py,
         "--python-platform", platform, "--only-binary", ":all:", "--no-deps",
         "--link-mode", "copy", "-r", str(LOCK), str(wheel)])


def merge_targets(trees: dict[str, Path], site: Path, variants: Path) -> dict[str, list[str]]:
    """One site-packages from every target's tree; returns {variant folder: targets it serves}.

    A file every target has identically goes in site-packages/ once. Any other (an extension, a
    library auditwheel grafted, numpy's build configuration, a package only some Pythons get) goes
    in variants/GROUP/, GROUP naming the set of targets that have that content, and is extracted
    only for them. dist-info RECORD and WHEEL are the exception: their lines are merged.
    """
    digests: dict[str, dict[str, str]] = {}
    for target, tree in trees.items():
        for path in tree.rglob("*"):
            if path.is_file():
                rel = path.relative_to(tree).as_posix()
                digests.setdefault(rel, {})[target] = hashlib.sha256(path.read_bytes()).hexdigest()
    served: dict[str, list[str]] = {}
    for rel in sorted(digests):
        seen = digests[rel]
        if Path(rel).parent.name.endswith(".dist-info") and Path(rel).name in MERGEABLE:
            lines = set().union(*((trees[t] / rel).read_text().splitlines() for t in seen))
            content = {"merged": ("\n".join(sorted(lines)) + "\n").encode()}
            holders = {"merged": sorted(seen)}
        else:
            holders = {d: sorted(t for t in seen if seen[t] == d) for d in set(seen.values())}
            content = {d: (trees[ts[0]] / rel).read_bytes() for d, ts in holders.items()}
        for key, group in holders.items():
            folder = site
            if len(group) < len(trees):
                name = hashlib.sha256(" ".join(group).encode()).hexdigest()[:12]
                served[name] = group
                folder = variants / name
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(content[key])
            (folder / rel).chmod((trees[group[0]] / rel).stat().st_mode & 0o777)
    return dict(sorted(served.items()))


def is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def drop_install_records(site: Path) -> None:
    """Forget how and from where each wheel was installed (paths, cache times): not reproducible."""
    for info in site.glob("*.dist-info"):
        for name in INSTALL_RECORDS:
            (info / name).unlink(missing_ok=True)
        record = info / "RECORD"
        if record.exists():
            keep = [l for l in record.read_text().splitlines() if l.split(",")[0].rsplit("/", 1)[-1] not in INSTALL_RECORDS]
            record.write_text("\n".join(keep) + "\n")


def prune_records(site: Path) -> None:
    """RECORD lists only what ships. A dropped file's line would stay behind, and some carry the
    build machine in their hash: a console script's shebang names the build venv, so two
    checkouts of one commit built different archives."""
    for record in site.glob("*.dist-info/RECORD"):
        lines = record.read_text().splitlines()
        keep = [line for line in lines if line and _ships(site, line.split(",")[0])]
        if keep != lines:
            record.write_text("\n".join(keep) + "\n")


def _ships(site: Path, rel: str) -> bool:
    path = (site / rel).resolve()
    return path.is_relative_to(site.resolve()) and path.is_file()


def strip_and_drop(site: Path) -> None:
    for pattern in DROP_DIRS:
        for folder in site.glob(pattern):
            shutil.rmtree(folder)
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts of the dependencies
    drop_install_records(site)
    for path in list(site.rglob("*")):
        if path.is_file() and (path.suffix in DROP_SUFFIXES or path.name == "py.typed"):
            path.unlink()
    prune_records(site)
    strip = shutil.which("strip")
    for path in sorted(site.rglob("*.so*")):
        # Libraries auditwheel grafted into NAME.libs/ were rewritten by patchelf, and GNU strip
        # breaks them ("ELF load command address/offset not page-aligned"): leave them alone.
        if path.parent.name.endswith(".libs"):
            continue
        if path.is_file() and is_elf(path) and strip:
            subprocess.run([strip, "--strip-debug", str(path)], check=False, stderr=subprocess.DEVNULL)


# Python 3.10's compiler output depends on the heap: the same source compiled twice can differ in
# marshal's reference flags (a longer path in argv was enough to change 12 numpy files, and ASLR
# alone flips some). So on 3.10 each file is compiled in its own fresh interpreter, with address
# randomisation off, a fixed environment and an argv that depends only on the file's place in the
# archive; it writes an unchecked-hash .pyc exactly as compileall would. 3.11 and later are
# stable and use compileall in one process.
COMPILE_ONE = """
import importlib.util, marshal, sys
source = sys.stdin.buffer.read()
code = compile(source, sys.argv[1], "exec", dont_inherit=True)
flags = (0b01).to_bytes(4, "little")  # hash-based, not checked against the source
sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code))
"""


def _compile_isolated(exe: str, folder: Path, tag: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    no_aslr = ["setarch", os.uname().machine, "-R"]
    if not shutil.which("setarch") or subprocess.run([*no_aslr, "true"], capture_output=True).returncode != 0:
        log("setarch -R is not available here: 3.10 .pyc files may differ between builds")
        no_aslr = []

    def one(source: Path) -> None:
        rel = source.relative_to(folder).as_posix()
        # -s -S, not -I: isolated mode would ignore PYTHONHASHSEED and randomise set constants.
        out = subprocess.run([*no_aslr, exe, "-s", "-S", "-c", COMPILE_ONE, f"site-packages/{rel}"],
                             input=source.read_bytes(), capture_output=True, env={"PYTHONHASHSEED": "0"})
        if out.returncode != 0:  # syntax this Python does not know (a file for newer ones)
            return
        target = source.parent / "__pycache__" / f"{source.stem}.cpython-{tag[2:]}.pyc"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(out.stdout)

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(one, sorted(folder.rglob("*.py"))))


def compile_pycs(site: Path, variants: Path, served: dict[str, list[str]]) -> list[str]:
    """Unchecked-hash .pyc for every supported Python found here; returns the versions done.

    Variant folders are compiled only by the Pythons they serve.
    """
    done = []
    for py in PYTHONS:
        exe = pythons.find_python(py)
        if exe is None:
            log(f"python{py} not found: its .pyc files are left out (that Python compiles on first import)")
            continue
        tag = "cp" + py.replace(".", "")
        folders = [site] + [variants / f for f, targets in served.items() if any(t.startswith(tag + "-") for t in targets)]
        for folder in folders:
            if py == "3.10":
                _compile_isolated(exe, folder, tag)
                continue
            # A fixed hash seed keeps set constants in one order.
            subprocess.run([exe, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
                            "-d", "site-packages", str(folder)], check=False, stdout=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONHASHSEED": "0"})
        done.append(py)
    return done


def write_archive(target: Path, site: Path, info: dict, epoch: int) -> str:
    stamp = time.gmtime(max(epoch, 315532800))[:6]
    members: list[tuple[str, bytes, int]] = []
    digest = hashlib.sha256()
    for root, prefix in ((site, "site-packages/"), (site.parent / "variants", "variants/")):
        for path in sorted(root.rglob("*"), key=lambda p: p.as_posix()):
            if path.is_file():
                rel = prefix + path.relative_to(root).as_posix()
                data = path.read_bytes()
                digest.update(rel.encode() + b"\0" + data)
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                members.append((rel, data, mode))
    boot_dir = Path(shiv_bootstrap.__file__).parent
    for path in sorted(boot_dir.glob("*.py")):
        members.append((f"_bootstrap/{path.name}", path.read_bytes(), 0o644))
    env = Environment(
        built_at=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch)),
        shiv_version=shiv.__version__ if hasattr(shiv, "__version__") else "",
        build_id=digest.hexdigest(),
        compile_pyc=False,
        entry_point=ENTRY_POINT,
        reproducible=True,
    )
    members.append(("environment.json", env.to_json().encode(), 0o644))
    members.append(("shardeval-build.json", json.dumps(info, sort_keys=True, indent=1).encode(), 0o644))
    members.append(("__main__.py", (REPO / "shims/zipapp/main.py").read_bytes(), 0o644))
    payload = [m for m in members if m[0].startswith(("site-packages/", "variants/"))]
    outer = [m for m in members if not m[0].startswith(("site-packages/", "variants/"))]
    for name, source in (("_shardeval_entry.py", "entry.py"), ("_shardeval_extract.py", "extract.py"),
                         ("_shardeval_root.py", "root.py")):
        outer.append((name, (REPO / "shims/zipapp" / source).read_bytes(), 0o644))
    outer.append(("shardeval-start.txt", f"{env.build_id} {env.entry_point}\n".encode(), 0o644))
    outer.append((PAYLOAD, _zip_bytes(payload, stamp, zipfile.ZIP_DEFLATED), 0o644))
    tmp = target.with_suffix(".tmp")
    with open(tmp, "wb") as fd:
        # The header tries the Pythons this file has wheels for, newest first, before python3.
        tried = " ".join(f"python{py}" for py in reversed(PYTHONS))
        fd.write((REPO / "shims/zipapp/launcher.sh").read_text().replace("@PYTHONS@", tried).encode())
        fd.write(_zip_bytes(outer, stamp, zipfile.ZIP_STORED, offset=fd.tell()))
    tmp.chmod(0o755)
    tmp.replace(target)
    return env.build_id


def _zip_bytes(members: list[tuple[str, bytes, int]], stamp: tuple, compression: int, offset: int = 0) -> bytes:
    """A zip of these members, sorted, with fixed timestamps and modes (reproducible).

    The outer archive is stored, not compressed: it holds a handful of entries so Python's
    zipimport reads its directory in no time at every start; the payload inside is compressed.
    """
    buffer = io.BytesIO()
    buffer.write(b"\0" * offset)  # offsets in the directory count from the start of the file
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data, mode in sorted(members):
            zinfo = zipfile.ZipInfo(name, date_time=stamp)
            zinfo.compress_type = compression
            zinfo.external_attr = (0o100000 | mode) << 16
            zinfo.create_system = 3
            archive.writestr(zinfo, data, compresslevel=6 if compression == zipfile.ZIP_DEFLATED else None)
    return buffer.getvalue()[offset:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "dist"), help="where shardeval.pyz, the wheel and sdist go")
    parser.add_argument("--work", default=str(REPO / "build" / "out"), help="scratch folder")
    parser.add_argument("--relock", action="store_true", help="re-resolve build/requirements.lock first")
    parser.add_argument("--uv", default=shutil.which("uv") or "uv")
    args = parser.parse_args()
    out, work = Path(args.out), Path(args.work)
    if args.relock or not LOCK.exists():
        lock(args.uv)
    shutil.rmtree(work, ignore_errors=True)
    (work / "targets").mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("shardeval-*"):
        old.unlink()
    wheel = build_wheel(args.uv, out)
    site, variants = work / "site-packages", work / "variants"
    trees: dict[str, Path] = {}
    for target, (py, platform) in targets().items():
        trees[target] = work / "targets" / target
        install_target(args.uv, py, platform, wheel, trees[target])
        strip_and_drop(trees[target])
    served = merge_targets(trees, site, variants)
    compiled = compile_pycs(site, variants, served)
    info = {"targets": list(trees), "variants": served, "pyc": [f"cp{py.replace('.', '')}" for py in compiled],
            "serves": f"CPython {', '.join(PYTHONS)} on {' and '.join(sorted(ARCHES))} Linux (glibc or musl)"}
    build_id = write_archive(out / "shardeval.pyz", site, info, source_date_epoch())
    size = (out / "shardeval.pyz").stat().st_size
    log(f"{out / 'shardeval.pyz'}: {size / 2**20:.1f} MiB, build {build_id[:12]}, pyc for {', '.join(compiled)}")


if __name__ == "__main__":
    main()
