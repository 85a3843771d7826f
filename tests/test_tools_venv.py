"""The host tools' virtual environment, as `make` creates it on a fresh clone (.venv/tools, from
requirements/tools.txt): its `dawnbench` command exists and runs the host tools. Before, a silent
`pip install -e .` failure left it without one, and `make run` broke wherever a Docker engine
answered."""
from __future__ import annotations

import os
import subprocess

import pytest
from conftest import REPO
from leaderboard_fixture import write_entries

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
