"""Finding the CPython interpreters the zipapp supports on this machine (PATH first, then pyenv).

Used by the build (to compile each version's .pyc files) and by the tests (to run the built file
under every version present), so both agree on what "available here" means.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SUPPORTED = ("3.10", "3.11", "3.12", "3.13", "3.14")


def version_of(exe: str) -> str:
    out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True)
    return out.stdout.strip()


def find_python(version: str) -> str | None:
    """A real interpreter of this version (not a pyenv shim, which adds ~150 ms a start)."""
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in sorted(pyenv_root.glob(f"{version}.*"), reverse=True):
        exe = candidate / "bin" / f"python{version}"
        if exe.exists():
            return str(exe)
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found and version_of(found) == version:
        return found
    return None


def available() -> dict[str, str]:
    """{version: interpreter} for every supported version found here."""
    return {v: exe for v in SUPPORTED if (exe := find_python(v))}
