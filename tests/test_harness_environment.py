"""The harness's process runs no entrant-installed code (issue 33).

The attack: a reference's requirements.txt named a local wheel whose `.pth` file ran in every
interpreter of .venv/REF, the harness's included (it ran there), and slowed the harness's clock. Here:
a reference's requirements may name only exact pins of the index, hashed https wheels or the shared
files, anything else refused in one line before install; the harness runs from the tools environment
with only its sandboxed workers in the reference's (a .pth planted there does not run in the harness's
process); and the run records what the workers' environment held, which verify and reproduce check.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO

REQUIREMENTS_TOOL = REPO / "docker" / "requirements.py"
WRAPPER = REPO / "bin" / "dawnbench"
# The planted start-up file: a `.pth` line that starts with `import` runs in every interpreter of the
# environment that processes its site-packages. It appends its pid to $PTH_MARKER wherever it can write.
PLANTED = ("import os; p = os.environ.get('PTH_MARKER'); "
           "exec(\"try:\\n open(p, 'a').write(str(os.getpid()) + chr(10)) if p else None\\nexcept OSError:\\n pass\")\n")


# --- requirements: refused before install --------------------------------------------------------------

def _requirements(tmp_path: Path, *lines: str) -> Path:
    """A checkout's shape: references/evil/requirements.txt beside requirements/ (the shared files)."""
    shutil.copytree(REPO / "requirements", tmp_path / "requirements")
    ref = tmp_path / "references" / "evil"
    ref.mkdir(parents=True)
    (ref / "requirements.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ref / "requirements.txt"


@pytest.mark.parametrize("line, says", [
    ("./clock-1.0-py3-none-any.whl", "a local path or URL is not allowed"),
    ("/wheels/clock-1.0-py3-none-any.whl", "a local path or URL is not allowed"),
    ("clock @ file:///wheels/clock-1.0-py3-none-any.whl", "a local path or URL is not allowed"),
    ("clock @ https://example.org/clock-1.0-py3-none-any.whl", "a wheel URL without its sha256"),
    ("git+https://example.org/clock.git", "a local path or URL is not allowed"),
    ("-e ./clock", "option -e is not allowed"),
    ("--index-url https://example.org/simple", "option --index-url is not allowed"),
    ("--find-links /wheels", "option --find-links is not allowed"),
    ("clock", "not pinned"),
    ("clock>=1.0", "not pinned"),
    ("-r ../../../etc/requirements.txt", "-r may include only the repository's shared files"),
])
def test_a_requirement_that_is_not_a_pinned_release_is_refused_in_one_line(tmp_path, line, says):
    path = _requirements(tmp_path, "-r ../../requirements/harness.txt", line, "torch==2.13.0")
    for action in ("check", "flatten"):       # make setup checks; the image build and the wheelhouse flatten
        proc = subprocess.run([sys.executable, str(REQUIREMENTS_TOOL), action, str(path)], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 1 and proc.stdout == "", (action, proc.stdout)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"requirements refused: {path}:2: {line.strip()}: "), lines
        assert says in lines[0] and "Traceback" not in proc.stderr


def test_pins_hashed_wheels_and_the_shared_files_are_allowed(tmp_path):
    digest = "0" * 64
    path = _requirements(tmp_path, "-r ../../requirements/harness.txt", "torch==2.13.0  # the framework",
                         "tensorflow[and-cuda]==2.21.0; sys_platform == 'linux'",
                         f"clock==1.0 --hash=sha256:{digest}",
                         f"clock-extra @ https://example.org/clock_extra-1.0-py3-none-any.whl --hash=sha256:{digest}")
    proc = subprocess.run([sys.executable, str(REQUIREMENTS_TOOL), "flatten", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == (REPO / "requirements" / "harness.txt").read_text().split("\n")[2:4]
    assert "torch==2.13.0" in proc.stdout.splitlines()


@pytest.mark.parametrize("reference", sorted(p.parent.name for p in (REPO / "references").glob("*/requirements.txt")))
def test_every_reference_s_requirements_pass(reference):
    proc = subprocess.run([sys.executable, str(REQUIREMENTS_TOOL), "check",
                           str(REPO / "references" / reference / "requirements.txt")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_make_checks_the_requirements_before_it_installs_anything(tmp_path):
    """`make setup`'s recipe, as make would run it (-n): the check comes before the first pip install."""
    proc = subprocess.run(["make", "--no-print-directory", "-n", "setup", "REF=fashion-mnist-cnn-pytorch",
                           f"VENVS={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    commands = proc.stdout.splitlines()
    check = next(i for i, c in enumerate(commands)
                 if "docker/requirements.py check references/fashion-mnist-cnn-pytorch/requirements.txt" in c)
    assert check < next(i for i, c in enumerate(commands) if "pip install" in c)


# --- a .pth planted in the reference's environment ----------------------------------------------------

def _link(source: Path, target: Path) -> None:
    """Hard links where one file system holds both (fast), else a copy."""
    def link(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    if source.is_dir():
        shutil.copytree(source, target, copy_function=link)
    else:
        link(source, target)


@pytest.fixture
def planted_env():
    """A tiny environment for the workers (venv --without-pip, numpy and tqdm hard-linked in from this
    one) with clock.pth planted in its site-packages. Under /var/tmp: a sandboxed worker's /tmp is its own."""
    root = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="dawnbench-test-env-"))
    venv = root / "ref"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    ours = Path(__import__("numpy").__file__).resolve().parent.parent
    for name in os.listdir(ours):
        if name.startswith(("numpy", "tqdm")):
            _link(ours / name, site / name)
    (site / "clock.pth").write_text(PLANTED, encoding="utf-8")
    (venv / ".installed").touch()
    yield venv
    shutil.rmtree(root, ignore_errors=True)


def test_a_pth_in_the_reference_environment_never_runs_in_the_harness(planted_env, references_root, fashion_root,
                                                                       tmp_path):
    """`bin/dawnbench run` of a reference whose environment holds clock.pth: the workers run there, the
    harness does not (the planted file leaves no mark of the harness's process), and env.json lists it."""
    marker = tmp_path / "ran.txt"
    python = planted_env / "bin" / "python"
    # the planted file does run in a plain interpreter of that environment: the test can see it
    subprocess.run([str(python), "-c", "pass"], env={**os.environ, "PTH_MARKER": str(marker)}, check=True)
    assert marker.read_text().strip(), "the planted .pth did not run"
    marker.unlink()
    venvs = tmp_path / "venvs"
    venvs.mkdir()
    (venvs / "tools").symlink_to(Path(sys.prefix))        # this test environment stands in for the tools one
    (venvs / "scripted-test").symlink_to(planted_env)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DAWNBENCH_LAUNCHED")}
    env.update(DAWNBENCH_VENVS=str(venvs), DAWNBENCH_DATA=str(fashion_root), PTH_MARKER=str(marker),
               DAWNBENCH_PYTHON=shutil.which("python3", path="/usr/bin:/bin") or "python3")
    results = tmp_path / "results"
    proc = subprocess.run([str(WRAPPER), "run", "scripted-test", "--references", str(references_root),
                           "--results", str(results), "--no-progress", "--set", "accuracies=0.95"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (results / "scripted-test").iterdir()
    harness_pids = marker.read_text().split() if marker.exists() else []
    assert harness_pids == [], f"clock.pth ran outside the sandbox (the harness's process): {harness_pids}"
    system = json.loads((run_dir / "env.json").read_text())
    result = json.loads((run_dir / "result.json").read_text())
    record = system["worker_environment"]
    assert Path(record["prefix"]).resolve() == planted_env.resolve() and record["shared_with_harness"] is False
    assert [Path(p).name for p in record["pth_unexpected"]] == ["clock.pth"]
    assert {d["name"].lower() for d in record["distributions"]} >= {"numpy", "tqdm"}
    assert Path(system["harness_environment"]["prefix"]).resolve() == Path(sys.prefix).resolve()
    assert result["provenance"]["worker_environment_sha256"] == record["sha256"]
    assert result["status"] == "converged"

    from harness import verify_run
    check = next(c for c in verify_run.verify(run_dir, fashion_root).checks if c.name == "environment")
    assert check.ok is True and "clock.pth" in check.detail
    # the record agrees with itself: a list edited after the run no longer hashes to the recorded sha256
    record["pth"] = [p for p in record["pth"] if not p["file"].endswith("clock.pth")]
    record["pth_unexpected"] = []
    (run_dir / "env.json").write_text(json.dumps(system))
    check = next(c for c in verify_run.verify(run_dir, fashion_root).checks if c.name == "environment")
    assert check.ok is False and "not its recorded sha256" in check.detail


@pytest.mark.parametrize("workers", ["shared", "apart"])
def test_a_harness_whose_environment_holds_start_up_code_is_not_official(planted_env, references_root, tmp_path,
                                                                         fashion_root, workers):
    """The harness run by hand in the reference's environment (`.venv/REF/bin/python -m harness run`),
    or from an environment something planted clock.pth in: that file ran in the harness's process,
    which the run cannot undo; it says so and is never official."""
    env = {k: v for k, v in os.environ.items() if k not in ("DAWNBENCH_WORKER_PYTHON",)}
    env.update(DAWNBENCH_DATA=str(fashion_root), PYTHONPATH=str(REPO))
    if workers == "apart":
        env["DAWNBENCH_WORKER_PYTHON"] = sys.executable
    results = tmp_path / "results"
    proc = subprocess.run([str(planted_env / "bin" / "python"), "-m", "harness", "run", "scripted-test",
                           "--references", str(references_root), "--results", str(results), "--no-progress",
                           "--set", "accuracies=0.95"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (results / "scripted-test").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    system = json.loads((run_dir / "env.json").read_text())
    assert result["official"] is False
    said = "the harness ran in the workers' environment" if workers == "shared" else "the harness's environment"
    assert any(r.startswith(said) and "clock.pth" in r and "ran in the harness's process" in r
               for r in result["unofficial_reasons"]), result["unofficial_reasons"]
    assert [Path(p).name for p in system["harness_environment"]["pth_unexpected"]] == ["clock.pth"]


def test_an_image_build_refuses_the_requirements_before_it_asks_the_engine(tmp_path, monkeypatch):
    """`make build` (dawnbench.containers.build): the same one line, before any engine is asked."""
    from types import SimpleNamespace

    from dawnbench import containers
    path = _requirements(tmp_path, "-r ../../requirements/harness.txt", "./clock-1.0-py3-none-any.whl")
    (tmp_path / "docker").mkdir()
    shutil.copy(REQUIREMENTS_TOOL, tmp_path / "docker" / "requirements.py")
    monkeypatch.setattr(containers, "project_root", lambda: tmp_path)
    monkeypatch.setattr(containers.registry, "load_spec", lambda name: SimpleNamespace(name=name, directory=path.parent))
    monkeypatch.setattr(containers, "engine", lambda: pytest.fail("the engine was asked"))
    with pytest.raises(containers.UsageError) as caught:
        containers.build("evil")
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"requirements refused: {path}:2: ./clock-1.0-py3-none-any.whl: ")


def test_a_requirement_without_a_wheel_is_refused_before_its_build_code_runs(tmp_path):
    """Issue 46: `pip install` of a source distribution runs its setup.py on the host, before any
    sandbox exists. A pinned package published as an sdist only (here from a local index) whose setup.py
    leaves a mark: installed as wheels only, it is refused in one line naming it, and its code never runs."""
    import tarfile
    mark = tmp_path / "setup-py-ran"
    package = tmp_path / "src" / "evil-1.0"
    package.mkdir(parents=True)
    (package / "setup.py").write_text(f"open({str(mark)!r}, 'w').close()\n"
                                      "from setuptools import setup\nsetup(name='evil', version='1.0')\n")
    (package / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
    index = tmp_path / "index"
    index.mkdir()
    with tarfile.open(index / "evil-1.0.tar.gz", "w:gz") as tar:
        tar.add(package, arcname="evil-1.0")
    requirements = _requirements(tmp_path, "evil==1.0")
    assert subprocess.run([sys.executable, str(REQUIREMENTS_TOOL), "check", str(requirements)]).returncode == 0
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run([sys.executable, str(REQUIREMENTS_TOOL), "pip-install", str(Path(sys.executable).parent / "pip"),
                           "--quiet", "--dry-run", "--no-build-isolation", "-r", str(requirements)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert not mark.exists(), "the sdist's setup.py ran on the host"
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "requirements refused: evil==1.0 has no wheel for this platform and Python on the package index: requirements "
        "install as wheels only, so that no package's build code runs on the host (pin a release that has one, or "
        "build the wheel and name it by https URL with --hash=sha256:...)"]


@pytest.mark.skipif(not Path("/usr/bin/python3").is_file(), reason="no system Python here")
def test_a_venv_of_debian_s_python_is_read_from_its_own_site_packages(tmp_path):
    """Debian's patched site.getsitepackages names only dist-packages folders; a venv made by Debian's
    Python (the images' /opt/venv) keeps its distributions in lib/pythonX.Y/site-packages. The record
    missed them all (the image's env.json had no torch, its framework no version) until the probe
    looked in the venv's own folder first."""
    import subprocess as sp

    from harness import worker_env
    venv = tmp_path / "v"
    sp.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    version = sp.run([str(venv / "bin" / "python"), "-c", "import sys; print('python%d.%d' % sys.version_info[:2])"],
                     capture_output=True, text=True, check=True).stdout.strip()
    info = venv / "lib" / version / "site-packages" / "fakepkg-1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.2\n")
    record = worker_env.describe(str(venv / "bin" / "python"))
    assert [(d["name"], d["version"]) for d in record["distributions"]] == [("fakepkg", "1.2")]
    assert record["site_packages"][0] == str(venv / "lib" / version / "site-packages")


def _installed(site: Path, name: str, files: dict[str, bytes]) -> None:
    """A distribution as pip leaves it: its files, and a RECORD naming each with its sha256."""
    import base64
    import hashlib
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    rows = [f"{name}-1.0.dist-info/METADATA,,", f"{name}-1.0.dist-info/RECORD,,", f"../../../bin/{name},,"]
    for rel, content in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(content)
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={digest},{len(content)}")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def test_an_edited_file_of_the_workers_environment_changes_its_hash(tmp_path, monkeypatch):
    """Issue 46, attack 6: rewriting torch/nn/functional.py in the workers' environment left the
    record's hash (names and versions) as it was. Now each distribution's files are hashed and checked
    against its RECORD: the edit (same size, its modification time set back) changes the hash and is
    named, and so does a module dropped in that no RECORD names; a compiled cache changes nothing."""
    import subprocess as sp

    from harness import worker_env
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))    # the digests' cache, fresh
    venv = tmp_path / "v"
    sp.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(worker_env.describe(python)["site_packages"][0])
    functional = b"def relu(x):\n    return max(x, 0)\n"
    _installed(site, "torch", {"torch/__init__.py": b"", "torch/nn/functional.py": functional})
    honest = worker_env.describe(python)
    (torch,) = [d for d in honest["distributions"] if d["name"] == "torch"]
    assert torch["files"] == 3 and torch["not_as_recorded"] == [] and honest["unrecorded"]["count"] == 0
    assert worker_env.describe(python)["sha256"] == honest["sha256"]      # read again (from the cache): the same
    (site / "torch" / "nn" / "__pycache__").mkdir()
    (site / "torch" / "nn" / "__pycache__" / "functional.cpython-311.pyc").write_bytes(b"cache")
    assert worker_env.describe(python)["sha256"] == honest["sha256"]

    path = site / "torch" / "nn" / "functional.py"
    stat = path.stat()
    path.write_bytes(functional.replace(b"max(x, 0)", b"max(x, 1)"))      # the same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))              # and the same modification time
    edited = worker_env.describe(python)
    assert edited["sha256"] != honest["sha256"]
    (torch,) = [d for d in edited["distributions"] if d["name"] == "torch"]
    assert torch["not_as_recorded"] == ["torch/nn/functional.py"]
    assert worker_env.differences(honest, edited) == [
        "torch 1.0: its files differ (torch/nn/functional.py not as its RECORD says)"]
    assert worker_env.digest(edited) == edited["sha256"]                  # verify recomputes it from the record

    (site / "evil.py").write_text("import time\n")
    dropped = worker_env.describe(python)
    assert dropped["sha256"] != edited["sha256"] and dropped["unrecorded"]["files"] == ["evil.py"]
    assert "files of no distribution: 0 (none) vs 1 (evil.py)" in worker_env.differences(edited, dropped)
