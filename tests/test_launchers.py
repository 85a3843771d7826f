"""The two several-machine launchers of imagenet-resnet50-pytorch, checked offline.

slurm.sbatch: shellcheck, `bash -n`, and a run under stand-ins for `scontrol` and `srun` that record
what the script would start on every node. kubernetes.yaml: read into Kubeflow's PyTorchJob models
and the Kubernetes API's (no cluster: kubectl's dry run needs a server); nothing of it may be lost
on the way (a misspelt field is dropped by the models, so the round trip finds it). Then torchrun's
own parser reads both commands, the manifest's with the PET_* variables the training operator
derives from its elasticPolicy: the same image, the same rendezvous, the same harness command.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, missing

from harness.cli import build_parser

REF = "imagenet-resnet50-pytorch"
DIR = REPO / "references" / REF
SBATCH, MANIFEST = DIR / "slurm.sbatch", DIR / "kubernetes.yaml"
TORCHRUN = "/opt/venv/bin/torchrun"
HARNESS_PYTHON = "/opt/harness/bin/python"     # each rank's harness: the image's harness environment (issue 33)
HARNESS_ARGS = ["run", REF, "--nodes", "2", "--results", "/dawnbench-private/results"]


def test_the_slurm_script_passes_shellcheck():
    if shutil.which("shellcheck") is None:
        missing("shellcheck is not installed (apt-get install shellcheck)", "DAWNBENCH_REQUIRE_SHELLCHECK")
    proc = subprocess.run(["shellcheck", "--severity=style", str(SBATCH)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_slurm_script_parses():
    proc = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def sbatch(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The batch script as Slurm runs it on the first node of a 2-node job, with `srun` recording its
    arguments and the token it was handed instead of starting anything."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    executable(bin_dir / "scontrol", '#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "gpu01\\ngpu02\\n"\n')
    executable(bin_dir / "srun", '#!/bin/sh\nprintf "%s\\n" "$DAWNBENCH_RUN_TOKEN" > "$SRUN_LOG.token"\n'
                                 'printf "%s\\n" "$@" > "$SRUN_LOG"\n')
    base = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path), "SRUN_LOG": str(tmp_path / "srun"),
            "SLURM_NNODES": "2", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[01-02]",
            "DAWNBENCH_DATA": "/shared/data", "DAWNBENCH_RESULTS": str(tmp_path / "results")}
    return subprocess.run(["bash", str(SBATCH), *args], cwd=tmp_path, env={**base, **env}, capture_output=True,
                          text=True, timeout=30)


def srun_argv(tmp_path: Path) -> list[str]:
    return (tmp_path / "srun").read_text().splitlines()


def torchrun_args(argv: list[str], **pet_env: str):
    """torchrun's own reading of a command line (and of the PET_* variables a launcher sets)."""
    from torch.distributed.run import get_args_parser
    assert argv[0] == TORCHRUN
    saved = {k: os.environ.get(k) for k in pet_env}
    os.environ.update(pet_env)
    try:
        return get_args_parser().parse_args(argv[1:])
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def test_the_slurm_script_starts_one_torchrun_per_node_in_the_image(tmp_path):
    proc = sbatch(tmp_path, "--cost-per-hour", "98.32")
    assert proc.returncode == 0, proc.stderr
    argv = srun_argv(tmp_path)
    srun_opts, command = argv[:argv.index(TORCHRUN)], argv[argv.index(TORCHRUN):]
    assert "--ntasks-per-node=1" in srun_opts and "--kill-on-bad-exit=1" in srun_opts
    assert f"--container-image={slurm_image(srun_opts)}" in srun_opts
    assert (f"--container-mounts=/shared/data:/dawnbench-private/data:ro,"
            f"{tmp_path / 'results'}:/dawnbench-private/results") in srun_opts
    assert "--container-env=DAWNBENCH_RUN_TOKEN,DAWNBENCH_IMAGE" in srun_opts
    args = torchrun_args(command)
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == \
        ("2", "8", "c10d", "gpu01:29500", "4242")
    assert args.no_python and args.training_script == HARNESS_PYTHON and args.training_script_args[:2] == ["-m", "harness"]
    assert args.training_script_args[2:] == [*HARNESS_ARGS, "--cost-per-hour", "98.32"]
    harness = build_parser().parse_args(args.training_script_args[2:])      # a command the harness takes
    assert harness.reference == REF and harness.nodes == 2 and harness.cost_per_hour == 98.32
    # one random secret for every node, in the environment, never on the command line
    token = (tmp_path / "srun.token").read_text().strip()
    assert len(token) == 32 and int(token, 16) >= 0 and token not in argv
    assert (tmp_path / "results" / REF).is_dir()


def slurm_image(srun_opts: list[str]) -> str:
    (image,) = [o.partition("=")[2] for o in srun_opts if o.startswith("--container-image=")]
    return image


def test_the_slurm_script_needs_the_data_folder(tmp_path):
    proc = sbatch(tmp_path, DAWNBENCH_DATA="")
    assert proc.returncode != 0 and "DAWNBENCH_DATA" in proc.stderr and not (tmp_path / "srun").exists()
    assert len(proc.stderr.strip().splitlines()) == 1


def quantities_as_text(doc):
    """Kubernetes reads `nvidia.com/gpu: 8` as the quantity "8": the models keep quantities as text."""
    if isinstance(doc, dict):
        return {k: {q: str(n) for q, n in v.items()} if k in ("limits", "requests") else quantities_as_text(v)
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [quantities_as_text(v) for v in doc]
    return doc


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


@pytest.fixture(scope="module")
def job(manifest):
    from kubeflow.training import ApiClient

    class Response:      # ApiClient.deserialize reads an HTTP response's body
        data = json.dumps(manifest)
    client = ApiClient()
    job = client.deserialize(Response(), "KubeflowOrgV1PyTorchJob")
    assert client.sanitize_for_serialization(job) == quantities_as_text(manifest)   # no field unknown to the models
    return job


def test_the_manifest_is_a_pytorchjob_with_an_elastic_policy(job):
    from kubeflow.training import KubeflowOrgV1PyTorchJob
    from kubernetes.client import V1PodTemplateSpec
    assert isinstance(job, KubeflowOrgV1PyTorchJob)
    assert (job.api_version, job.kind) == ("kubeflow.org/v1", "PyTorchJob")
    policy = job.spec.elastic_policy
    assert (policy.rdzv_backend, policy.n_proc_per_node, policy.max_restarts) == ("c10d", 8, 0)
    replicas = job.spec.pytorch_replica_specs
    assert sorted(replicas) == ["Master", "Worker"]
    nodes = sum(spec.replicas for spec in replicas.values())
    assert policy.min_replicas == policy.max_replicas == nodes == 2     # the size the cost counts
    assert policy.rdzv_host == f"{job.metadata.name}-master-0"
    for spec in replicas.values():
        assert spec.restart_policy == "Never" and isinstance(spec.template, V1PodTemplateSpec)


def containers(job):
    return {name: spec.template.spec.containers[0] for name, spec in job.spec.pytorch_replica_specs.items()}


def test_every_pod_runs_the_image_with_gpus_data_results_and_the_token(job):
    pods = containers(job)
    (image,) = {c.image for c in pods.values()}
    for name, spec in job.spec.pytorch_replica_specs.items():
        c = pods[name]
        assert c.resources.limits == {"nvidia.com/gpu": "8"}
        env = {e.name: e for e in c.env}
        assert env["DAWNBENCH_IMAGE"].value == image
        secret = env["DAWNBENCH_RUN_TOKEN"].value_from.secret_key_ref
        assert secret.name == "dawnbench-run-token" and secret.key and env["DAWNBENCH_RUN_TOKEN"].value is None
        assert env["PET_LOCAL_ADDR"].value_from.field_ref.field_path == "status.podIP"
        mounts = {m.mount_path: m for m in c.volume_mounts}
        volumes = {v.name: v for v in spec.template.spec.volumes}
        data, results = mounts["/dawnbench-private/data"], mounts["/dawnbench-private/results"]
        assert data.read_only and volumes[data.name].persistent_volume_claim.read_only
        assert not results.read_only and volumes[results.name].persistent_volume_claim.claim_name


def test_both_launchers_run_the_same_image_and_harness_command(job, tmp_path):
    assert sbatch(tmp_path).returncode == 0
    argv = srun_argv(tmp_path)
    slurm = torchrun_args(argv[argv.index(TORCHRUN):])
    (pod,) = {tuple(c.command) for c in containers(job).values()}
    policy = job.spec.elastic_policy
    # what the training operator sets from elasticPolicy (its ElasticEnvVarGenerator)
    k8s = torchrun_args(list(pod), PET_NNODES=f"{policy.min_replicas}:{policy.max_replicas}",
                        PET_NPROC_PER_NODE=str(policy.n_proc_per_node), PET_RDZV_BACKEND=policy.rdzv_backend,
                        PET_RDZV_ENDPOINT=f"{policy.rdzv_host}:{policy.rdzv_port}", PET_RDZV_ID=policy.rdzv_id,
                        PET_MAX_RESTARTS=str(policy.max_restarts))
    (image,) = {c.image for c in containers(job).values()}
    assert slurm_image(argv[:argv.index(TORCHRUN)]) == image
    assert ":" in image.rpartition("/")[2] and not image.endswith(":latest")    # pinned by a tag
    assert k8s.training_script_args == slurm.training_script_args == ["-m", "harness", *HARNESS_ARGS]
    assert k8s.no_python and slurm.no_python and k8s.training_script == slurm.training_script == HARNESS_PYTHON
    assert (k8s.nproc_per_node, k8s.rdzv_backend) == (slurm.nproc_per_node, slurm.rdzv_backend) == ("8", "c10d")
    assert (k8s.nnodes, slurm.nnodes, k8s.max_restarts) == ("2:2", "2", 0)    # --nodes 2 either way
