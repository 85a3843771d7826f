"""The host tools' virtual environment, as `make` creates it on a fresh clone (.venv/tools, from
requirements/tools.txt): its `dawnbench` command exists and runs the host tools. Before, a silent
`pip install -e .` failure left it without one, and `make run` broke wherever a Docker engine
answered."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from leaderboard_fixture import write_entries

from harness import datasets

pytestmark = pytest.mark.second_env     # builds .venv/tools in a copy of the project

TOOLS = REPO / ".venv" / "tools"


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_make_tools_gives_a_working_dawnbench(tmp_path):
    proc = subprocess.run(["make", "--no-print-directory", "tools"], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dawnbench = TOOLS / "bin" / "dawnbench"
    assert dawnbench.is_file()
    listed = subprocess.run([str(dawnbench), "list"], cwd=REPO, env=_env(), capture_output=True, text=True)
    assert listed.returncode == 0 and "fashion-mnist-cnn-pytorch" in listed.stdout, listed.stderr
    # The entry tools (jsonschema, jinja2) and the container tools (Docker SDK) run from it.
    entries = write_entries(tmp_path / "entries")
    site = subprocess.run([str(dawnbench), "leaderboard", str(entries), "--out", str(tmp_path / "site")], cwd=REPO,
                          env=_env(), capture_output=True, text=True)
    assert site.returncode == 0, site.stderr
    assert "alice_resnet18_p3.2xlarge_pytorch" in (tmp_path / "site" / "index.html").read_text()
    engine = subprocess.run([str(TOOLS / "bin" / "python"), "-m", "dawnbench.containers", "build",
                             "fashion-mnist-cnn-pytorch"], cwd=REPO, capture_output=True, text=True,
                            env=dict(_env(), DOCKER_HOST="unix:///nonexistent/docker.sock"))
    assert engine.returncode == 2
    assert engine.stderr.strip().startswith("dawnbench: error: no Docker engine answers at unix:///nonexistent")
    assert len(engine.stderr.strip().splitlines()) == 1


def test_make_stops_at_a_failed_step(tmp_path):
    """bash -eu -o pipefail: a pip failure behind the output filter fails the target."""
    bad = tmp_path / "requirements.txt"
    bad.write_text("no-such-package-dawnbench==0.0.0\n")
    venv = tmp_path / "venv"
    probe = tmp_path / "probe.mk"
    probe.write_text(f"include {REPO / 'Makefile'}\nprobe:\n\t$(call venv,{venv},{bad},harness)\n")
    proc = subprocess.run(["make", "--no-print-directory", "-f", str(probe), "probe"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "no-such-package-dawnbench" in proc.stdout + proc.stderr
    assert not (venv / ".installed").exists()


def test_native_run_checks_the_data_before_installing_the_framework(tmp_path):
    """`make run RUNTIME=native` (its run-native) with the data missing stops on the data's one line before the
    reference's environment is set up (the Docker path already checked first). The test
    environment stands in for the tools' (it holds their requirements; -o: make never reinstalls
    it), and PYTHON=false makes any environment install fail at once rather than take minutes."""
    tools = Path(sys.executable).parent.parent
    venv = tmp_path / "venv"
    env = dict(_env(), DAWNBENCH_DATA=str(tmp_path / "empty"))
    env.pop(datasets.MANIFEST_ENV, None)
    # run-native itself: `make run` reaches it through a second make, which -o would not reach
    proc = subprocess.run(["make", "--no-print-directory", "run-native", "REF=imagenet-resnet50-pytorch",
                           "-o", f"{tools}/.installed", f"TOOLS_VENV={tools}", f"VENV={venv}", "PYTHON=false"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "setting up" not in proc.stdout and not venv.exists(), proc.stdout
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]     # whatever the command's name
    assert len(errors) == 1 and f"imagenet in {tmp_path / 'empty' / 'imagenet'} is not prepared" in errors[0], proc.stderr
    assert "data prepare imagenet --from DIR" in errors[0]
