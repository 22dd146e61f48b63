"""The zipapp's entry preamble: pick where to extract, extract once, hand over to shiv's runtime.

Stored at the root of dist/shardeval.pyz as `_shardeval_entry.py` and run by its `__main__.py`
once the Python version is known to be >= 3.10. Stdlib only: nothing is extracted yet.

Why not shiv's own extraction: the archive carries the compiled files of every CPython 3.10-3.14
on x86_64 and aarch64, glibc and musl, side by side, and extracting all of them would cost
seconds; and shiv extracts under ~/.shiv, which on a cluster is often an NFS home that hundreds of
array tasks would hit at once, or read-only in a container. So `_shardeval_root` chooses a
node-local root when the home is shared or read-only, `_shardeval_extract` unpacks (once per node,
under a lock) only the files this interpreter and machine can use (a target the file has no wheels
for is refused in one line), and this module puts that site-packages on sys.path the way shiv's
bootstrap would and runs the CLI. The warm path (already extracted) imports nothing beyond what
Python has loaded anyway: every start pays for it.
"""

from __future__ import annotations

import os
import sys

ROOT_ENV = "SHARDEVAL_ZIPAPP_ROOT"  # where extracted copies live (a parent of per-target folders)
BUILD_ID_ENV = "SHARDEVAL_BUILD_ID"  # the running file's build, for each shard's provenance
SHIV_ROOT_ENV = "SHIV_ROOT"
SHIV_OVERRIDES = ("SHIV_INTERPRETER", "SHIV_ENTRY_POINT", "SHIV_MODULE", "SHIV_CONSOLE_SCRIPT")
QUIET_ENV = "SHARDEVAL_ZIPAPP_ROOT_CHOSEN"  # set once a root was chosen: children stay quiet
START_INFO = "shardeval-start.txt"  # "BUILD_ID ENTRY_POINT", written by build/zipapp.py
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def notice(message: str) -> None:
    sys.stderr.write(f"shardeval: notice: {message}\n")


def machine() -> tuple[str, str]:
    """(architecture, C library): they decide which compiled files load here. os.confstr knows
    glibc without touching the file system (musl has no such name): every start asks."""
    arch = os.uname().machine.lower()
    try:
        libc = "glibc" if os.confstr("CS_GNU_LIBC_VERSION") else "musl"
    except (ValueError, OSError):
        libc = "musl"
    return _ARCH_ALIASES.get(arch, arch), libc


def this_target() -> str:
    """The build's name for this interpreter and machine: "cp311-x86_64", "cp312-musl-aarch64"."""
    arch, libc = machine()
    impl = "cp" if sys.implementation.name == "cpython" else sys.implementation.name
    return f"{impl}{sys.version_info[0]}{sys.version_info[1]}-{'musl-' * (libc == 'musl')}{arch}"


def refuse(serves: str) -> None:
    """One line, exit 2: no wheels here, and msgspec, numpy and aiohttp are compiled."""
    import platform

    version = f"{platform.python_implementation()} {sys.version_info[0]}.{sys.version_info[1]}"
    sys.stderr.write(
        f"shardeval: error: this file serves {serves}, not {version} on {' ('.join(machine())}); "
        "run it with one of those (set SHARDEVAL_PYTHON to its path), or `pip install shardeval` "
        "into an environment of this Python\n"
    )
    sys.exit(2)


def choose_base() -> tuple[str, str]:
    """(parent folder for extracted copies, why it is node-local or ""). An explicit setting
    needs no file system checks: every start of a container or a child process takes that path.
    Otherwise _shardeval_root picks the home's ~/.shiv or node-local storage."""
    if explicit := os.environ.get(ROOT_ENV) or os.environ.get(SHIV_ROOT_ENV):
        return os.path.expanduser(explicit), ""
    import _shardeval_root

    return _shardeval_root.home_or_node_local()


def activate(site_packages: str) -> None:
    """Put the app's site-packages ahead of the interpreter's own, as shiv's bootstrap does.

    `site.addsitedir` honours .pth files; the reorder keeps anything the node installed
    system-wide visible, but after the app's pinned packages. The plugin directory is appended
    later still, by shardeval.plugins.
    """
    import site

    length = len(sys.path)
    index = next((i for i, part in enumerate(sys.path) if os.path.basename(part.rstrip("/")) in ("site-packages", "dist-packages")), length)
    site.addsitedir(site_packages)
    sys.path[:] = sys.path[:index] + sys.path[length:] + sys.path[index:length]


def main() -> None:
    archive = sys.argv[0]
    loader = globals()["__loader__"]  # the zipimporter that loaded us: reads members without zipfile
    # Two lines, build id and entry point, so a warm start needs no json module (2 ms).
    build_id, entry_point = loader.get_data(os.path.join(loader.archive, START_INFO)).decode().split()
    target = this_target()
    name = f"{os.path.basename(os.path.realpath(archive))}_{build_id}"
    base, why = choose_base()
    site_parent = os.path.join(base, target, name)  # shiv's layout below the root: NAME_BUILDID/
    if not os.path.isdir(os.path.join(site_parent, "site-packages")):
        import json  # only here: a copy exists only for a target the file serves

        info = json.loads(loader.get_data(os.path.join(loader.archive, "shardeval-build.json")))
        if target not in info["targets"]:
            refuse(info["serves"])
        if why and not os.environ.get(QUIET_ENV):  # said once, when extracting, not at every start
            notice(f"{why}: extracting to node-local {base} (set {ROOT_ENV} to choose)")
        import _shardeval_extract

        try:
            _shardeval_extract.extract(archive, site_parent, info, target)
        except OSError as exc:  # e.g. a pre-extracted image run by another Python, read-only
            import _shardeval_root

            base = _shardeval_root.node_local_dir()
            notice(f"cannot extract under {site_parent} ({exc.strerror or exc}): using node-local {base}")
            site_parent = os.path.join(base, target, name)
            _shardeval_extract.extract(archive, site_parent, info, target)
    os.environ.update({ROOT_ENV: base, QUIET_ENV: "1", BUILD_ID_ENV: build_id})  # children reuse the same copy, silently
    if any(os.environ.get(v) for v in SHIV_OVERRIDES):
        # shiv's own switches (an interactive shell in the app's environment, another entry
        # point): hand over to shiv's runtime, which finds the copy just made.
        import _bootstrap

        os.environ[SHIV_ROOT_ENV] = os.path.join(base, target)
        _bootstrap.bootstrap()
        return
    # The plain path does shiv's bootstrap steps itself: importing shiv's runtime (compileall,
    # hashlib, pathlib, zipfile) would cost every start ~16 ms, a third of the CLI's own time.
    activate(os.path.join(site_parent, "site-packages"))
    module, _, function = entry_point.partition(":")
    sys.exit(getattr(__import__(module, fromlist=[function]), function)())
