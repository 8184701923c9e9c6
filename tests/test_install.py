"""The installed wheel is the product: built, installed without -e, used from another directory."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "data" / "graphs" / "real" / "mlp_d16_w256_b32_fwd_pre.json.gz"


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """A fresh venv holding only regal's wheel; its dependencies come from this environment's
    site-packages (a plain path entry, so this environment's editable regal stays invisible)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp)],
                   check=True, capture_output=True)
    (whl,) = tmp.glob("regal-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(whl)],
                   check=True, capture_output=True)
    return venv, tmp


def _run(venv, cwd, *args):
    return subprocess.run([str(venv / "bin" / "python"), "-m", "regal.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, "REGAL_JAX_CACHE": "0"})


@pytest.mark.slow  # a fresh install compiles every kernel: about 45 s
def test_wheel_runs_from_another_directory(wheel_venv):
    """From the wheel, in a directory without the source tree: regal is the installed copy, and
    `optimize` and `solve` (a plugged-in baseline) work on a shipped graph."""
    venv, cwd = wheel_venv
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import regal, regal_baselines; print(regal.__file__); print(regal_baselines.__file__)"],
                           cwd=cwd, capture_output=True, text=True, check=True).stdout
    assert str(ROOT) not in where, where
    r = _run(venv, cwd, "optimize", str(GRAPH), "-d", "2", "-n", "300", "--policy", "none", "--json")
    assert r.returncode == 0, r.stderr
    assert '"peak_bytes"' in r.stdout
    r = _run(venv, cwd, "solve", "gp-dfs", str(GRAPH), "-d", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert '"method": "gp-dfs"' in r.stdout
    r = _run(venv, cwd, "solve", "--list")
    assert r.returncode == 0 and "cpsat" in r.stdout and "local-search" in r.stdout


def test_wheel_does_not_claim_the_name_baselines(wheel_venv):
    """The wheel installs `regal` and `regal_baselines`, not the bare name `baselines`."""
    venv, cwd = wheel_venv
    site = next((cwd / "venv" / "lib").glob("python*/site-packages"))
    assert (site / "regal").is_dir() and (site / "regal_baselines").is_dir()
    assert not (site / "baselines").exists()
