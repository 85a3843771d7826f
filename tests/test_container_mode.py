"""Container mode (harness.sandbox.container_mode) and the judge's image (dawnbench/judge_image.py,
docker/Dockerfile.judge) without an engine: the worker container's arguments, the CPU time read from a
cgroup, the choice of the mode, the workers' environment read through a container's root. On a real
engine: tests/test_containers.py's last block."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO

from dawnbench import containers, judge_image
from harness import installed_files, worker_env
from harness.errors import UsageError
from harness.sandbox import bubblewrap, container_mode, modes


def worker_argv(**kwargs) -> list[str]:
    mounts = bubblewrap.View(ro=[("/host/data/train.npz", "/dawnbench/data/fashion-mnist/train.npz")],
                             rw=[("/host/scratch", "/dawnbench/scratch")], hidden=["/dawnbench/data/big"])
    return container_mode.run_argv("dawnbench-train-1", "judge-1", "entrant:tag", "/opt/venv/bin/python", mounts,
                                   workdir="/dawnbench/scratch/work", env={"HOME": "/dawnbench/scratch/home"}, **kwargs)


def options(argv: list[str]) -> list[tuple[str, str]]:
    """The (option, value) pairs of a `docker run` command line up to the image."""
    end = argv.index("entrant:tag")
    pairs, i = [], 2
    while i < end:
        if argv[i] in ("-i", "--rm", "--read-only"):
            pairs.append((argv[i], ""))
            i += 1
        else:
            pairs.append((argv[i], argv[i + 1]))
            i += 2
    return pairs


def test_a_worker_container_is_shut_on_every_side():
    argv = worker_argv()
    given = options(argv)
    assert argv[:2] == ["docker", "run"]
    for pair in [("-i", ""), ("--rm", ""), ("--read-only", ""), ("--network", "none"), ("--cap-drop", "ALL"),
                 ("--security-opt", "no-new-privileges"), ("--user", "65534:65534"), ("--ipc", "private"),
                 ("--label", "org.dawnbench.worker-of=judge-1"), ("--workdir", "/dawnbench/scratch/work"),
                 ("--entrypoint", "/bin/sh")]:
        assert pair in given, pair
    mounts = [value for option, value in given if option == "--mount"]
    # the data read-only, the scratch writable, nothing else of the host
    assert mounts == ["type=bind,source=/host/data/train.npz,target=/dawnbench/data/fashion-mnist/train.npz,readonly",
                      "type=bind,source=/host/scratch,target=/dawnbench/scratch"]
    assert ("--tmpfs", "/dawnbench/data/big") in given and any(v.startswith("/tmp:") for o, v in given if o == "--tmpfs")
    assert not any(option in ("--privileged", "--pid", "--cap-add", "-v", "--volume", "--gpus") for option, _ in given)
    assert [value for option, value in given if option == "--env"] == ["HOME=/dawnbench/scratch/home"]
    # the channel moves to fds 3 and 4 before the worker runs: a print() of the reference's goes to stderr
    shell, python = argv[-2], argv[-1]
    assert python == "/opt/venv/bin/python" and argv[-3] == "-c"
    assert re.fullmatch(r'exec 3<&0 4>&1 </dev/null 1>&2; exec "\$0" -m harness.worker 3 4', shell)
    assert ("--gpus", "all") in options(worker_argv(gpus=True))


def test_a_view_shows_the_judges_code_and_the_roles_files_at_the_bubblewrap_paths(tmp_path):
    mounts, seen = container_mode.view("predict", tmp_path / "scratch", data_files=[(tmp_path / "x.npz", "ds/x.npz")],
                                       snapshots=tmp_path / "scored", code_dirs=[REPO / "harness", REPO / "common"])
    assert (str(REPO / "harness"), f"{container_mode.CODE}/harness") in mounts.ro
    assert (str(tmp_path / "scored"), "/dawnbench/snapshots") in mounts.ro        # a predictor cannot write the model
    assert mounts.rw == [(str(tmp_path / "scratch"), "/dawnbench/scratch")]
    assert seen["data_root"] == "/dawnbench/data" and seen["snapshots"] == "/dawnbench/snapshots"
    mounts, _ = container_mode.view("train", tmp_path / "scratch", data_files=[], snapshots=tmp_path / "snapshots")
    assert (str(tmp_path / "snapshots"), "/dawnbench/snapshots") in mounts.rw


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_containers_cpu_time_is_its_cgroups(tmp_path, version):
    """The harness's /proc walk cannot see a container's processes (another PID namespace): the eval
    bound's CPU time is the container's cgroup's."""
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "42").mkdir(parents=True)
    if version == "v1":
        (proc / "42" / "cgroup").write_text("12:freezer:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
        (root / "cpu,cpuacct" / "docker" / "abc").mkdir(parents=True)
        (root / "cpu,cpuacct" / "docker" / "abc" / "cpuacct.usage").write_text("2500000000\n")
    else:
        (proc / "42" / "cgroup").write_text("0::/system.slice/docker-abc.scope\n")
        (root / "system.slice" / "docker-abc.scope").mkdir(parents=True)
        (root / "system.slice" / "docker-abc.scope" / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert container_mode.cgroup_cpu_seconds(42, str(root), str(proc)) == 2.5
    assert container_mode.cgroup_cpu_seconds(43, str(root), str(proc)) is None


def test_container_mode_is_asked_for_and_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(modes.ISOLATION_ENV, "container")
    monkeypatch.delenv(container_mode.IMAGE_ENV, raising=False)
    modes.probe.cache_clear()
    try:
        with pytest.raises(UsageError, match=r"needs \$DAWNBENCH_WORKER_IMAGE.*make run RUNTIME=docker"):
            modes.probe()
        monkeypatch.setenv(container_mode.IMAGE_ENV, "entrant:tag")
        monkeypatch.setenv(container_mode.ENGINE_ENV, "no-such-engine-cli")
        with pytest.raises(UsageError, match="needs the no-such-engine-cli CLI on PATH"):
            modes.probe()
    finally:
        modes.probe.cache_clear()
    # the workers' interpreter is a path in the image: not looked for on this machine
    monkeypatch.delenv(worker_env.WORKER_PYTHON_ENV, raising=False)
    assert worker_env.worker_python() == worker_env.IMAGE_PYTHON
    assert modes.worker_reads_as(modes.Isolation("container")) == bubblewrap.SANDBOX_UID


def test_the_image_environments_files_are_hashed_through_the_containers_root(tmp_path):
    """The same files hash the same read at their path or through a root above it (a container's
    /proc/PID/root), and a changed file shows as not as recorded either way."""
    def record(site: str) -> dict:
        return {"prefix": "/opt/venv", "site_packages": [site],
                "distributions": [{"name": "pkg", "version": "1", "files": [[site, "pkg/__init__.py", None]]}]}

    site = tmp_path / "opt/venv/lib/python3.11/site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("x = 1\n")
    (site / "stray.py").write_text("")
    here, there = record(str(site)), record("/opt/venv/lib/python3.11/site-packages")
    installed_files.read(here)
    installed_files.read(there, str(tmp_path))
    assert here["distributions"] == there["distributions"] and here["unrecorded"] == there["unrecorded"]
    assert there["unrecorded"]["files"] == ["stray.py"] and there["distributions"][0]["files"] == 1


def test_the_judge_image_is_built_from_the_projects_files_only():
    """docker/Dockerfile.judge copies no reference and runs the harness as a judge process; a judge image
    (labelled) is never taken for the base the references build on."""
    text = (REPO / "docker" / "Dockerfile.judge").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    copied = [line.split()[-2] for line in lines if line.startswith("COPY") and "--from=" not in line]
    assert copied and all(src.startswith(("docker/", "requirements/", "harness/", "common/")) for src in copied), copied
    assert not any("references/" in line or "/opt/venv" in line for line in lines)
    assert lines[-1] == 'ENTRYPOINT ["/opt/harness/bin/python", "-I", "-B", "/opt/dawnbench/harness/judge.py", "harness"]'
    assert "!docker/Dockerfile.judge" in (REPO / ".dockerignore").read_text().split()
    assert re.fullmatch(r"dawnbench/judge:[0-9a-f]{16}", judge_image.tag())

    def image(tags, labels):
        return SimpleNamespace(tags=tags, attrs={"Config": {"Labels": labels}, "Created": "2026"})
    client = SimpleNamespace(images=SimpleNamespace(list=lambda: [
        image([judge_image.tag()], {containers.LOCAL_BASE_LABEL: "debian-bookworm", containers.JUDGE_LABEL: "1"}),
        image(["made/base:bookworm"], {containers.LOCAL_BASE_LABEL: "debian-bookworm"})]))
    assert containers.local_images(client).made_base == "made/base:bookworm"
    assert judge_image.default_base(containers.local_images(client)) == "made/base:bookworm"


def test_a_judge_here_runs_one_rank_and_says_so():
    with pytest.raises(UsageError, match="--judge host runs one rank: give --nproc 1"):
        containers.run_judged_here("x", [], image_id="sha256:0", tag="t", nproc=2, data_root=Path("/d"),
                                   results=Path("/r"))
