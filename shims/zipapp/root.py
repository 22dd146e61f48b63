"""Where the zipapp extracts when nobody said: the home's ~/.shiv, unless the home is shared
between nodes or read-only, then node-local storage.

Stored at the root of dist/shardeval.pyz as `_shardeval_root.py`; imported by the entry preamble
only when neither SHARDEVAL_ZIPAPP_ROOT nor SHIV_ROOT is set (the first process of a run; its
children inherit the choice). On a cluster the home is often an NFS mount that hundreds of array
tasks would extract to at once; in a container it is often read-only.
"""

from __future__ import annotations

import os

# File systems shared between nodes: extracting there makes every task of an array hit one server.
SHARED_FS = frozenset(
    "nfs nfs4 lustre gpfs cifs smb3 smbfs beegfs ceph fuse.ceph glusterfs fuse.glusterfs panfs "
    "wekafs afs fuse.sshfs fuse.gcsfuse fuse.s3fs fuse.juicefs 9p".split()
)


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
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
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


def home_or_node_local() -> tuple[str, str]:
    """(~/.shiv, "") when the home is local and writable, else (a private node-local folder, why)."""
    home = os.path.expanduser("~")
    usable, why = home_is_usable(home)
    return (os.path.join(home, ".shiv"), "") if usable else (node_local_dir(), why)


def node_local_dir() -> str:
    """$TMPDIR (unless it is shared too) or /tmp, in a private per-user folder."""
    local = os.environ.get("TMPDIR") or "/tmp"
    if not os.path.isdir(local) or mount_of(os.path.realpath(local))[0] in SHARED_FS:
        local = "/tmp"
    private = _private_dir(local)
    if private is None:
        import tempfile

        private = tempfile.mkdtemp(prefix="shardeval-")
    return private
