"""Start-up of the one-file app (DESIGN.md §10): warm `shardeval --version` from the zipapp within
1.5x of the same command from a venv install, and the first run on a node (extraction) under 1 s.

Both sides use the same interpreter binary: a fresh venv in which the wheel from dist/ is
installed normally (not editable; its dependencies come from the test venv through a .pth line),
so the ratio measures the zipapp's own cost. Runs alternate, and medians are compared. The size
of the file and of one node's extracted copy are reported too.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest

from zipapp_support import REPO, built_zipapp

WARM_TARGET = 1.5
FIRST_RUN_TARGET_S = 1.0
ROUNDS = 15


def wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # noqa: UP022
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0 and proc.stdout.startswith(b"shardeval, version"), proc.stderr
    return elapsed


def venv_install(folder: Path) -> Path:
    """A venv with dist/'s wheel installed as a user would (pip, not editable)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    wheel = next((REPO / "dist").glob("shardeval-*.whl"))
    target = folder / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    # The dependencies (click, pluggy, ...) from the test venv, after the wheel's own packages.
    (target / "zz_test_venv_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = folder / "bin" / "shardeval"
    script.write_text(f"#!{folder}/bin/python\nimport sys\nfrom shardeval.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return script


@pytest.mark.timeout(900)  # includes a rebuild when dist/ is older than the tree
def test_startup_zipapp_vs_venv(tmp_path):
    pyz = built_zipapp()
    script = venv_install(tmp_path / "venv")
    python = str(tmp_path / "venv" / "bin" / "python")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDEVAL_", "VIRTUAL_ENV", "PYTHON"))}
    env = {**base, "HOME": str(tmp_path), "SHARDEVAL_ZIPAPP_ROOT": str(tmp_path / "root")}

    first = []
    for i in range(5):
        root = tmp_path / f"first-{i}"
        first.append(wall([python, str(pyz), "--version"], {**env, "SHARDEVAL_ZIPAPP_ROOT": str(root)}))
        shutil.rmtree(root)
    on_tmpfs = []
    if os.path.isdir("/dev/shm"):
        for _ in range(3):
            root = tempfile.mkdtemp(dir="/dev/shm")
            on_tmpfs.append(wall([python, str(pyz), "--version"], {**env, "SHARDEVAL_ZIPAPP_ROOT": root}))
            shutil.rmtree(root)

    wall([python, str(pyz), "--version"], env)  # extract once, then every start is warm
    wall([str(script), "--version"], env)
    zipapp, venv, launcher = [], [], []
    for _ in range(ROUNDS):
        venv.append(wall([str(script), "--version"], env))
        zipapp.append(wall([python, str(pyz), "--version"], env))
        launcher.append(wall([str(pyz), "--version"], {**env, "SHARDEVAL_PYTHON": python}))
    ratio = statistics.median(zipapp) / statistics.median(venv)
    extracted = sum(p.stat().st_size for p in (tmp_path / "root").rglob("*") if p.is_file())
    print(
        f"\nstart-up, `--version`, median of {ROUNDS}: venv install {statistics.median(venv) * 1000:.0f} ms, "
        f"zipapp warm {statistics.median(zipapp) * 1000:.0f} ms (ratio {ratio:.2f}, target <= {WARM_TARGET}), "
        f"zipapp through its sh launcher {statistics.median(launcher) * 1000:.0f} ms"
        f"\nfirst run (extraction), median of 5: {statistics.median(first):.2f} s on {tmp_path.parent} "
        f"(target < {FIRST_RUN_TARGET_S} s)"
        + (f", {statistics.median(on_tmpfs):.2f} s on tmpfs" if on_tmpfs else "")
        + f"\nsize: dist/shardeval.pyz {pyz.stat().st_size / 2**20:.1f} MiB, one node's extracted copy "
        f"{extracted / 2**20:.1f} MiB"
    )
    assert ratio <= WARM_TARGET
    assert statistics.median(first) < FIRST_RUN_TARGET_S
