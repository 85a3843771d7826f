"""A fork is one directory: `cp -r` of a reference and an edit of its Python file give a reference
that runs natively through `make run` (its own virtual environment, from its own pinned
requirements) and that the static checks accept before anything lists it. The same fork builds
and runs in Docker in tests/test_containers.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_env
from project_copy import FORK, MARKER, copy_project, fork

from harness import datasets

pytestmark = pytest.mark.second_env     # the fork's own virtual environment, made by make


@pytest.fixture(scope="module")
def forked(tmp_path_factory):
    project = copy_project(tmp_path_factory.mktemp("project"))
    fork(project)
    return project


def test_fresh_fork_passes_the_static_checks(forked):
    """Nothing lists the fork yet (docker-compose.yml is written by make): no check fails for it."""
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_containers.py",
                           "-k", "static_rules or cuda or compose_lists"], cwd=forked, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"test_dockerfile_static_rules[{FORK}] PASSED" in subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_containers.py", "-k",
         f"static_rules and {FORK}"], cwd=forked, env=env, capture_output=True, text=True, timeout=600).stdout


@pytest.mark.trains_default
def test_fork_runs_natively_through_make(forked, fashion_subset):
    """make run REF=<fork> RUNTIME=native: a virtual environment of its own, from the fork's
    requirements, then the fork's code trained to a lowered threshold. The plumbing needs a run, not
    the full set's: one epoch on a fifth of Fashion-MNIST (conftest's `fashion_subset`, its manifest
    passed down through make), a threshold of 0.5 that one epoch reaches."""
    results = forked / "results"
    root, manifest = fashion_subset
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["DAWNBENCH_DATA"] = str(root)
    env[datasets.MANIFEST_ENV] = str(manifest)
    # The data is fetched from the tools' environment: the test environment holds their requirements.
    proc = subprocess.run(["make", "--no-print-directory", "run", f"REF={FORK}", "RUNTIME=native",
                           f"PYTHON={sys.base_prefix}/bin/python3", f"TOOLS_VENV={Path(sys.executable).parent.parent}",
                           "ARGS=--threshold 0.5 --max-epochs 1 --no-progress --no-save"],
                          cwd=forked, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "runtime: native (RUNTIME=native)" in proc.stdout
    assert f"setting up .venv/{FORK} from references/{FORK}/requirements.txt" in proc.stdout
    assert (forked / ".venv" / FORK / ".installed").is_file()
    assert MARKER in proc.stderr
    (run_dir,) = (results / FORK).iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["reference"] == FORK and result["status"] == "converged"
    assert result["misc"]["description"] == "My network: the default CNN, forked."
