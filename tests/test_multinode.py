"""Several machines, as the Slurm and Kubernetes launchers start them: one harness rank launcher per node
(harness/local_ranks.py, a judge process, never the reference's torchrun: issue 46), node 0 hosting the
rendezvous, make one run.

Both launchers run on this machine (127.0.0.1), one process each, the gloo backend on the CPU: what a
two-node cluster does, with the network of one. The harness ranks agree on the clock and the stop
through harness/collective.py (MASTER_PORT + 1 on node 0), rank 0 writes the one run folder, and the
cost counts both nodes. Stopping either launcher stops both, without a hang.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, cli_env

from harness import judge
from harness.events import read_events

REF = "fashion-mnist-cnn-pytorch"
RUN_SECONDS = 150       # one epoch on 2 CPU cores takes about 40 s; a hang fails well before pytest's own limit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_nodes(results: Path, data_root: Path, epochs: int = 1, threshold: float = 0.5, ref: str = REF,
                     extra: tuple[str, ...] = ()) -> list[subprocess.Popen]:
    """Two nodes' rank launchers (node 0 and node 1, as Slurm's SLURM_NODEID says), sharing one run token."""
    env = cli_env(DAWNBENCH_RUN_TOKEN=secrets.token_hex(16), DAWNBENCH_DATA=str(data_root))
    port = free_port()

    def node(rank: int) -> list[str]:
        return judge.command("harness.local_ranks", "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node",
                             "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
                             "-m", "harness", "run", ref, "--max-epochs", str(epochs), "--threshold", str(threshold),
                             "--nodes", "2", "--cost-per-hour", "1.0", "--results", str(results), "--no-progress",
                             *extra, python=PYTHON)
    # a session of their own: a failed test kills each launcher's whole process group, never a stray
    return [subprocess.Popen(node(rank), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True) for rank in range(2)]


def finish(procs: list[subprocess.Popen], seconds: float) -> list[tuple[int, str]]:
    """Each launcher's (exit status, output); a launcher still running after `seconds` fails the test."""
    deadline, done = time.monotonic() + seconds, []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            done.append((proc.returncode, out))
    except subprocess.TimeoutExpired:
        pytest.fail(f"a launcher was still running after {seconds:g} s: the two nodes hang")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return done


def the_run(results: Path, ref: str = REF) -> Path:
    runs = list((results / ref).iterdir())
    assert len(runs) == 1, runs           # rank 0 alone made a folder
    return runs[0]


@pytest.mark.multiprocess
def test_two_nodes_are_one_run(fashion_root, tmp_path):
    results = tmp_path / "results"
    done = finish(launch_two_nodes(results, fashion_root), RUN_SECONDS)
    assert all(code == 0 for code, _ in done), "\n".join(out[-3000:] for _, out in done)
    assert sum("results: " in out for _, out in done) == 1    # one launcher's node is rank 0 and says where
    run_dir = the_run(results)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "converged" and result["world_size"] == 2 and result["nodes"] == 2
    assert result["costPerHour"] == 2.0 and "2 nodes" in result["hardware"]
    assert result["cost_usd"] == pytest.approx(2 * 1.0 * result["tta_seconds"] / 3600)

    # each rank trains on its half of the 60,000 images; MLPerf's train_samples is both halves
    events = read_events(run_dir / "events.jsonl")
    (stop,) = [e for e in events if e["key"] == "epoch_stop"]
    (train_samples,) = [e["value"] for e in events if e["key"] == "train_samples"]
    assert stop["metadata"]["samples"] <= 30_000
    assert train_samples == stop["metadata"]["samples_all_ranks"] == 2 * stop["metadata"]["samples"]
    assert 59_000 <= train_samples <= 60_000

    proc = subprocess.run([PYTHON, "-m", "dawnbench", "verify", str(run_dir)], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].startswith("verified: "), proc.stdout + proc.stderr


@pytest.mark.multiprocess
def test_imagenet_resnet50_on_two_nodes(imagenet_root, tmp_path):
    """The flagship reference under DistributedDataParallel (gloo) across the two nodes, on the ImageNet
    fixture: each rank trains on its half of every global batch, rank 0's predictor scores the run."""
    ref, results = "imagenet-resnet50-pytorch", tmp_path / "results"
    small = ["image_size_start=32", "image_size_end=32", "eval_resize=40", "eval_crop=32", "batch_size=4",
             "eval_batch_size=6", "num_workers=0"]
    done = finish(launch_two_nodes(results, imagenet_root, threshold=0.99, ref=ref,
                                   extra=tuple(a for s in small for a in ("--set", s))), RUN_SECONDS)
    run_dir = the_run(results, ref)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "DNC" and result["dnc_reason"].startswith("budget"), \
        "\n".join(out[-3000:] for _, out in done)
    assert result["world_size"] == 2 and result["nodes"] == 2 and result["epochs"] == 1
    events = read_events(run_dir / "events.jsonl")
    (stop,) = [e for e in events if e["key"] == "epoch_stop"]
    # 14 training images, global batches of 4 (2 per rank): 3 full steps, 6 images a rank, 12 in all
    assert stop["metadata"]["samples"] == 6 and stop["metadata"]["samples_all_ranks"] == 12
    proc = subprocess.run([PYTHON, "-m", "dawnbench", "verify", str(run_dir), "--data", str(imagenet_root)],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].startswith("verified: "), proc.stdout + proc.stderr


@pytest.mark.multiprocess
@pytest.mark.parametrize("which, signum", [(0, signal.SIGTERM), (1, signal.SIGINT)])
def test_stopping_one_launcher_stops_both(fashion_root, tmp_path, which, signum):
    results = tmp_path / "results"
    procs = launch_two_nodes(results, fashion_root, epochs=3, threshold=0.99)   # still training when stopped
    deadline = time.monotonic() + 90
    while not list(results.glob(f"{REF}/*/events.jsonl")) or \
            "run_start" not in next(results.glob(f"{REF}/*/events.jsonl")).read_text():
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            finish(procs, 1)
            pytest.fail("the two-node run did not start training")
        time.sleep(0.2)
    procs[which].send_signal(signum)
    done = finish(procs, 60)
    assert all(code != 0 for code, _ in done), [code for code, _ in done]
    result = json.loads((the_run(results) / "result.json").read_text())   # a DNC keeps its folder whole
    assert result["status"] == "DNC" and result["world_size"] == 2


def test_the_hardware_label_counts_every_node():
    """result.json's `hardware`, which the leaderboard shows, is rank 0's machine times --nodes."""
    from harness.environment import hardware_label
    gpus = {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8, "cpu": {"model": "x", "usable_cores": 96}}
    assert hardware_label(gpus, 16, nodes=2) == "16 x NVIDIA H100 80GB HBM3 (2 nodes)"
    assert hardware_label(gpus, 8) == "8 x NVIDIA H100 80GB HBM3"
    cpu = {"gpus": [], "cpu": {"model": "AMD EPYC", "usable_cores": 2}}
    assert hardware_label(cpu, 2, nodes=2) == "AMD EPYC (2 cores, 2 processes, 2 nodes)"
    assert hardware_label(cpu, 1) == "AMD EPYC (2 cores)"
