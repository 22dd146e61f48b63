"""The zipapp's entry preamble: pick where to extract, extract once, hand over to shiv's runtime.

Stored at the root of dist/shardeval.pyz as `_shardeval_entry.py` and run by its `__main__.py`
once the Python version is known to be >= 3.10. Stdlib only: nothing is extracted yet.

Why not shiv's own extraction: the archive carries the compiled files of every CPython 3.10-3.13
on x86_64 and aarch64 side by side, and extracting all of them would cost seconds; and shiv
extracts under ~/.shiv, which on a cluster is often an NFS home that hundreds of array tasks would
hit at once, or read-only in a container. So this module chooses a node-local root when the home
is shared or read-only, has `_shardeval_extract` unpack (once per node, under a lock) only the
files this interpreter and architecture can use, then puts that site-packages on sys.path the
way shiv's bootstrap would and runs the CLI. The warm path (already extracted) imports nothing
beyond what Python has loaded anyway: every start pays for it.
"""

from __future__ import annotations

import json
import os
import sys

ROOT_ENV = "SHARDEVAL_ZIPAPP_ROOT"  # where extracted copies live (a parent of per-target folders)
SHIV_ROOT_ENV = "SHIV_ROOT"
SHIV_OVERRIDES = ("SHIV_INTERPRETER", "SHIV_ENTRY_POINT", "SHIV_MODULE", "SHIV_CONSOLE_SCRIPT")
QUIET_ENV = "SHARDEVAL_ZIPAPP_ROOT_CHOSEN"  # set once a root was chosen: children stay quiet
# File systems shared between nodes: extracting there makes every task of an array hit one server.
SHARED_FS = frozenset(
    "nfs nfs4 lustre gpfs cifs smb3 smbfs beegfs ceph fuse.ceph glusterfs fuse.glusterfs panfs "
    "wekafs afs fuse.sshfs fuse.gcsfuse fuse.s3fs fuse.juicefs 9p".split()
)
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def notice(message: str) -> None:
    sys.stderr.write(f"shardeval: notice: {message}\n")


def this_target() -> str:
    """The build's name for this interpreter and machine, e.g. "cp311-x86_64"."""
    machine = os.uname().machine.lower()
    impl = "cp" if sys.implementation.name == "cpython" else sys.implementation.name
    return f"{impl}{sys.version_info[0]}{sys.version_info[1]}-{_ARCH_ALIASES.get(machine, machine)}"


def _unescape_mount(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_of(path: str, mounts_file: str = "/proc/self/mounts") -> tuple[str, set[str]]:
    """(fs type, mount options) of the mount holding `path`; ("", set()) when unknown."""
    best, found = "", ("", set())
    try:
        with open(mounts_file, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        point = _unescape_mount(parts[1])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, found = point, (parts[2], set(parts[3].split(",")))
    return found


def home_is_usable(home: str, mounts_file: str = "/proc/self/mounts") -> tuple[bool, str]:
    """Whether extracting under the home is a good idea, and if not, why (for the notice)."""
    if not home or not os.path.isdir(home):
        return False, f"home {home or '(unset)'} does not exist"
    real = os.path.realpath(home)
    fstype, options = mount_of(real, mounts_file)
    if fstype in SHARED_FS:
        return False, f"home {home} is on {fstype}, shared between nodes"
    if "ro" in options or not os.access(real, os.W_OK):
        return False, f"home {home} is read-only"
    return True, ""


def _private_dir(parent: str) -> str | None:
    """parent/shardeval-UID, created 0700 and owned by us; None if someone else planted it."""
    path = os.path.join(parent, f"shardeval-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    st = os.lstat(path)
    if os.path.islink(path) or not os.path.isdir(path) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return path


def choose_base() -> str:
    """The parent folder for extracted copies: explicit setting, else ~/.shiv, else node-local."""
    explicit = os.environ.get(ROOT_ENV) or os.environ.get(SHIV_ROOT_ENV)
    if explicit:
        return os.path.expanduser(explicit)
    home = os.path.expanduser("~")
    usable, why = home_is_usable(home)
    if usable:
        return os.path.join(home, ".shiv")
    private = node_local_dir()
    if not os.environ.get(QUIET_ENV):
        notice(f"{why}: extracting to node-local {private} (set {ROOT_ENV} to choose)")
    return private


def node_local_dir() -> str:
    """$TMPDIR (unless shared) or /tmp, in a private per-user folder."""
    local = os.environ.get("TMPDIR") or "/tmp"
    if not os.path.isdir(local) or mount_of(os.path.realpath(local))[0] in SHARED_FS:
        local = "/tmp"
    private = _private_dir(local)
    if private is None:
        import tempfile

        private = tempfile.mkdtemp(prefix="shardeval-")
    return private


def _extract(archive: str, site_parent: str, info: dict, target: str) -> None:
    import _shardeval_extract

    _shardeval_extract.extract(archive, site_parent, info, target)


def _first_site_index() -> int:
    for index, part in enumerate(sys.path):
        if os.path.basename(part.rstrip("/")) in ("site-packages", "dist-packages"):
            return index
    return len(sys.path)


def activate(site_packages: str) -> None:
    """Put the app's site-packages ahead of the interpreter's own, as shiv's bootstrap does.

    `site.addsitedir` honours .pth files; the reorder keeps anything the node installed
    system-wide visible, but after the app's pinned packages. The plugin directory is appended
    later still, by shardeval.plugins.
    """
    import site

    index, length = _first_site_index(), len(sys.path)
    site.addsitedir(site_packages)
    sys.path[:] = sys.path[:index] + sys.path[length:] + sys.path[index:length]


def main() -> None:
    archive = sys.argv[0]
    loader = globals()["__loader__"]  # the zipimporter that loaded us: reads members without zipfile
    env = json.loads(loader.get_data(os.path.join(loader.archive, "environment.json")))
    target = this_target()
    name = f"{os.path.basename(os.path.realpath(archive))}_{env['build_id']}"
    base = choose_base()
    site_parent = os.path.join(base, target, name)  # shiv's layout below the root: NAME_BUILDID/
    if not os.path.isdir(os.path.join(site_parent, "site-packages")):
        info = json.loads(loader.get_data(os.path.join(loader.archive, "shardeval-build.json")))
        if target not in info["targets"]:
            notice(
                f"this file was built for {', '.join(info['targets'])}, not {target}: "
                "compiled packages fall back where they can (msgspec) or fail to load"
            )
        try:
            _extract(archive, site_parent, info, target)
        except OSError as exc:  # e.g. a pre-extracted image run by another Python, read-only
            base = node_local_dir()
            notice(f"cannot extract under {site_parent} ({exc.strerror or exc}): using node-local {base}")
            site_parent = os.path.join(base, target, name)
            _extract(archive, site_parent, info, target)
    os.environ[ROOT_ENV] = base  # children (shards, simulators) reuse the same copy, silently
    os.environ[QUIET_ENV] = "1"
    root = os.path.join(base, target)
    site_packages = os.path.join(site_parent, "site-packages")
    if any(os.environ.get(v) for v in SHIV_OVERRIDES):
        # shiv's own switches (an interactive shell in the app's environment, another entry
        # point): hand over to shiv's runtime, which finds the copy just made.
        import _bootstrap

        os.environ[SHIV_ROOT_ENV] = root
        _bootstrap.bootstrap()
        return
    # The plain path does shiv's bootstrap steps itself: importing shiv's runtime (compileall,
    # hashlib, pathlib, zipfile) would cost every start ~16 ms, a third of the CLI's own time.
    activate(site_packages)
    module, _, function = env["entry_point"].partition(":")
    sys.exit(getattr(__import__(module, fromlist=[function]), function)())
