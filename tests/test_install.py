"""`pip install .` gives a working `dawnbench`: the wheel carries the data files, and the installed
command finds the references of the current directory (or --references DIR, or
$DAWNBENCH_REFERENCES), never those of the checkout it was built from.

Offline: the wheel is built without build isolation, and the fresh virtual environment gets its
dependencies (numpy, tqdm, PyYAML) from this one's site-packages through a folder of links, so
nothing of the checkout is importable in it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import PYTHON, REPO

pytestmark = pytest.mark.second_env     # the wheel, installed into a virtual environment of its own

DEPENDENCIES = ("numpy", "numpy.libs", "tqdm", "yaml", "_yaml")    # top-level names in site-packages
SOURCES = ("pyproject.toml", "harness", "common", "dawnbench")


def run(*cmd, cwd: Path, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"{cmd}: {proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("install")
    # Build from a copy of the sources: a build in place would leave build/ in the checkout.
    src = tmp / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    run(PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp / "wheels", src, cwd=tmp)
    (wheel,) = (tmp / "wheels").glob("dawnbench-*.whl")

    venv = tmp / "venv"
    run(PYTHON, "-m", "venv", "--without-pip", venv, cwd=tmp)
    run(PYTHON, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-deps", "--no-index", wheel,
        cwd=tmp)
    site = Path(run(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                    cwd=tmp).stdout.strip())
    deps = tmp / "deps"
    deps.mkdir()
    ours = Path(__import__("numpy").__file__).resolve().parent.parent
    for name in DEPENDENCIES:
        if (ours / name).exists():
            (deps / name).symlink_to(ours / name)
    (site / "dawnbench-test-deps.pth").write_text(f"{deps}\n")

    work = tmp / "work"
    shutil.copytree(REPO / "references", work / "references", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("DAWNBENCH_")}
    return {"wheel": wheel, "venv": venv, "site": site, "work": work, "env": env, "tmp": tmp}


def dawnbench(installed, *args, cwd=None, env=None, check=True):
    return run(installed["venv"] / "bin" / "dawnbench", *args, cwd=cwd or installed["work"],
               env={**installed["env"], **(env or {})}, check=check)


def test_the_wheel_carries_the_data_files(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for data in ("harness/data/datasets.toml", "harness/data/tasks.toml", "harness/data/result.schema.json",
                 "dawnbench/data/prices.yaml", "dawnbench/data/mlperf/common.yaml",
                 "dawnbench/data/mlperf/open_fashion-mnist.yaml", "harness/__main__.py", "dawnbench/__main__.py"):
        assert data in names, data
    assert not any(n.startswith(("references/", "tests/")) for n in names)


def test_the_installed_package_shadows_nothing_of_the_checkout(installed):
    out = run(installed["venv"] / "bin" / "python", "-c",
              "import harness, common, dawnbench; print(harness.__file__, common.__file__, dawnbench.__file__)",
              cwd=installed["work"], env=installed["env"]).stdout
    assert all(Path(f).is_relative_to(installed["site"]) for f in out.split()), out


def test_installed_dawnbench_lists_the_references_of_the_current_directory(installed):
    listed = [line.split()[0] for line in dawnbench(installed, "list").stdout.splitlines()]
    assert listed == sorted(p.parent.name for p in (REPO / "references").glob("*/reference.toml"))


def test_installed_dawnbench_takes_references_from_the_option_or_the_variable(installed):
    mine = installed["tmp"] / "mine"
    shutil.copytree(REPO / "references" / "fashion-mnist-cnn-pytorch", mine / "my-cnn")
    empty = installed["tmp"] / "empty"
    empty.mkdir(exist_ok=True)
    assert dawnbench(installed, "list", "--references", mine, cwd=empty).stdout.split()[0] == "my-cnn"
    assert dawnbench(installed, "list", cwd=empty, env={"DAWNBENCH_REFERENCES": str(mine)}).stdout.split()[0] == "my-cnn"
    none = dawnbench(installed, "list", cwd=empty, check=False)
    assert none.returncode == 2 and "give --references DIR" in none.stderr and len(none.stderr.splitlines()) == 1
    harness = run(installed["venv"] / "bin" / "python", "-m", "harness", "list", "--references", mine, cwd=empty,
                  env=installed["env"])
    assert harness.stdout.split()[0] == "my-cnn"


def test_installed_dawnbench_prices_an_instance(installed):
    proc = dawnbench(installed, "run", "fashion-mnist-cnn-pytorch", "--instance", "aws:p3.2xlarg", check=False)
    assert proc.returncode == 2 and "close matches: aws:p3.2xlarge" in proc.stderr, proc.stderr


def test_installed_harness_reads_its_manifest(installed, tmp_path):
    proc = run(installed["venv"] / "bin" / "python", "-m", "harness", "data", "verify", "fashion-mnist",
               "--data", tmp_path, cwd=installed["work"], env=installed["env"], check=False)
    assert proc.returncode == 2 and "dawnbench data fetch fashion-mnist" in proc.stderr, proc.stderr
