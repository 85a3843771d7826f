"""The two several-machine launchers of imagenet-resnet50-pytorch, checked offline.

slurm.sbatch: shellcheck, `bash -n`, and a run under stand-ins for `scontrol` and `srun` that record
what the script would start on every node. kubernetes.yaml: read into Kubeflow's PyTorchJob models
and the Kubernetes API's (no cluster: kubectl's dry run needs a server); nothing of it may be lost
on the way (a misspelt field is dropped by the models, so the round trip finds it). Then the harness's
own rank launcher reads both commands (harness.local_ranks.parse), the manifest's with the variables
the training operator sets in each pod: the same image, the same rendezvous, the same harness command.

Issue 46: both started `/opt/venv/bin/torchrun`, the reference's environment's, as the parent of every
rank's harness: a `.pth` of the reference's requirements ran in it and handed the ranks a `sitecustomize`.
Now the launcher, like each rank, is a judge process of the image's harness environment.
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
from conftest import PYTHON, REPO, missing

from harness import local_ranks
from harness.cli import build_parser

REF = "imagenet-resnet50-pytorch"
DIR = REPO / "references" / REF
SBATCH, MANIFEST = DIR / "slurm.sbatch", DIR / "kubernetes.yaml"
HARNESS_PYTHON = "/opt/harness/bin/python"     # the image's harness environment (issue 33)
# the launcher as a judge process of it (harness/judge.py), as dawnbench.containers.rank_entrypoint starts it
LAUNCHER = [HARNESS_PYTHON, "-I", "-u", "/opt/dawnbench/harness/judge.py", "harness.local_ranks"]
HARNESS_ARGS = ["run", REF, "--nodes", "2", "--results", "/dawnbench-private/results"]
TOKEN = "0123456789abcdef0123456789abcdef"


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


def launched(argv: list[str], **env: str):
    """What the harness's rank launcher makes of a command line, in a node's environment `env`:
    (local ranks, Nodes, module, the ranks' arguments)."""
    assert argv[:len(LAUNCHER)] == LAUNCHER, argv
    return local_ranks.parse(argv[len(LAUNCHER):], {"DAWNBENCH_RUN_TOKEN": TOKEN, **env})


def test_the_slurm_script_starts_the_judges_launcher_on_every_node_in_the_image(tmp_path):
    proc = sbatch(tmp_path, "--cost-per-hour", "98.32")
    assert proc.returncode == 0, proc.stderr
    argv = srun_argv(tmp_path)
    srun_opts, command = argv[:argv.index(HARNESS_PYTHON)], argv[argv.index(HARNESS_PYTHON):]
    assert "--ntasks-per-node=1" in srun_opts and "--kill-on-bad-exit=1" in srun_opts
    assert f"--container-image={slurm_image(srun_opts)}" in srun_opts
    assert (f"--container-mounts=/shared/data:/dawnbench-private/data:ro,"
            f"{tmp_path / 'results'}:/dawnbench-private/results") in srun_opts
    assert "--container-env=DAWNBENCH_RUN_TOKEN,DAWNBENCH_IMAGE" in srun_opts
    # the reference's environment starts nothing of the judge: no torchrun of /opt/venv (issue 46)
    assert not [a for a in command if "/opt/venv" in a or "torchrun" in a], command
    for node in (0, 1):      # srun's task on each node has that node's SLURM_NODEID
        ranks, nodes, module, args = launched(command, SLURM_NODEID=str(node))
        assert (ranks, nodes) == (8, local_ranks.Nodes(2, node, "gpu01", 29500)) and module == "harness"
        assert args == [*HARNESS_ARGS, "--cost-per-hour", "98.32"]
        first = local_ranks.rank_environment(0, ranks, {"MASTER_ADDR": nodes.master_addr}, nodes)
        assert (first["RANK"], first["WORLD_SIZE"], first["LOCAL_RANK"], first["GROUP_RANK"]) == \
            (str(8 * node), "16", "0", str(node))
    harness = build_parser().parse_args(args)      # a command the harness takes
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


def test_the_manifest_is_a_pytorchjob_of_a_fixed_size(job):
    from kubeflow.training import KubeflowOrgV1PyTorchJob
    from kubernetes.client import V1PodTemplateSpec
    assert isinstance(job, KubeflowOrgV1PyTorchJob)
    assert (job.api_version, job.kind) == ("kubeflow.org/v1", "PyTorchJob")
    # no elasticPolicy: that is torchrun's c10d rendezvous; the operator then sets PET_NODE_RANK per pod
    assert job.spec.elastic_policy is None and job.spec.nproc_per_node == "8"
    replicas = job.spec.pytorch_replica_specs
    assert sorted(replicas) == ["Master", "Worker"] and replicas["Master"].replicas == 1
    assert job.spec.run_policy.backoff_limit == 0
    for spec in replicas.values():
        assert spec.restart_policy == "Never" and isinstance(spec.template, V1PodTemplateSpec)
        ports = {p.name: p.container_port for p in spec.template.spec.containers[0].ports}
        assert ports == {"pytorchjob-port": 29500}       # the operator's MASTER_PORT


def operator_env(job, replica: str, index: int) -> dict[str, str]:
    """What the Kubeflow training operator (v1, pkg/controller.v1/pytorch/envvar.go) sets in pod `index` of
    `replica` of a PyTorchJob with a Master and nprocPerNode, and no elasticPolicy."""
    replicas = job.spec.pytorch_replica_specs
    total = sum(spec.replicas for spec in replicas.values())
    rank = index + (1 if replica == "Worker" else 0)
    master = f"{job.metadata.name}-master-0"
    port = str(replicas["Master"].template.spec.containers[0].ports[0].container_port)
    return {"MASTER_ADDR": master, "MASTER_PORT": port, "PET_MASTER_ADDR": master, "PET_MASTER_PORT": port,
            "WORLD_SIZE": str(total * int(job.spec.nproc_per_node)), "RANK": str(rank),
            "PET_NPROC_PER_NODE": job.spec.nproc_per_node, "PET_NODE_RANK": str(rank), "PET_NNODES": str(total)}


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
        # the node's rank and the master's address are the operator's (operator_env), never typed in here
        assert not [n for n in env if n.startswith(("PET_", "MASTER_"))]
        mounts = {m.mount_path: m for m in c.volume_mounts}
        volumes = {v.name: v for v in spec.template.spec.volumes}
        data, results = mounts["/dawnbench-private/data"], mounts["/dawnbench-private/results"]
        assert data.read_only and volumes[data.name].persistent_volume_claim.read_only
        assert not results.read_only and volumes[results.name].persistent_volume_claim.claim_name


def test_both_launchers_run_the_same_image_and_harness_command(job, tmp_path):
    assert sbatch(tmp_path).returncode == 0
    argv = srun_argv(tmp_path)
    command = argv[argv.index(HARNESS_PYTHON):]
    (pod,) = {tuple(c.command) for c in containers(job).values()}
    assert not [a for a in pod if "/opt/venv" in a or "torchrun" in a], pod      # issue 46
    (image,) = {c.image for c in containers(job).values()}
    assert slurm_image(argv[:argv.index(HARNESS_PYTHON)]) == image
    assert ":" in image.rpartition("/")[2] and not image.endswith(":latest")    # pinned by a tag
    slurm = [launched(command, SLURM_NODEID=str(n)) for n in (0, 1)]
    k8s = [launched(list(pod), **operator_env(job, "Master", 0)), launched(list(pod), **operator_env(job, "Worker", 0))]
    for (s_ranks, s_nodes, s_module, s_args), (k_ranks, k_nodes, k_module, k_args) in zip(slurm, k8s):
        assert (s_ranks, s_module, s_args) == (k_ranks, k_module, k_args) == (8, "harness", HARNESS_ARGS)
        assert (s_nodes.count, s_nodes.rank, s_nodes.master_port) == (k_nodes.count, k_nodes.rank, k_nodes.master_port)
    assert [n.rank for _, n, _, _ in k8s] == [0, 1] and k8s[0][1].master_addr == f"{job.metadata.name}-master-0"
    assert {n.count for _, n, _, _ in slurm + k8s} == {2}     # --nodes 2 either way


def test_a_node_launcher_refuses_in_one_line_what_it_cannot_run():
    """Several nodes need every node's rank, node 0's address and one secret: each missing one is a line
    that says what to give, before any rank starts."""
    base = ["--nnodes", "2", "--nproc-per-node", "8", "--master-addr", "gpu01"]
    for argv, env, said in (
            (base + ["run", REF], {"DAWNBENCH_RUN_TOKEN": TOKEN}, "--node-rank is needed"),
            (base + ["--node-rank", "2", "run", REF], {"DAWNBENCH_RUN_TOKEN": TOKEN}, "--node-rank '2': give"),
            (base + ["--node-rank", "1", "run", REF], {}, "DAWNBENCH_RUN_TOKEN is not set"),
            (["--nnodes", "2:4", "--nproc-per-node", "8", "run", REF], {}, "a fixed number: no elastic range"),
            (["--nnodes", "2", "--nproc-per-node", "8", "--node-rank", "1", "run", REF], {"DAWNBENCH_RUN_TOKEN": TOKEN},
             "--master-addr is needed")):
        proc = subprocess.run([PYTHON, "-I", str(REPO / "harness" / "judge.py"), "harness.local_ranks", *argv],
                              env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and said in lines[0], proc.stderr


def test_a_node_launcher_starts_its_ranks_as_the_ranks_of_every_node():
    """Node 1 of 2, 2 ranks each: its ranks are global ranks 2 and 3 of 4, rendezvous at node 0's address,
    each a judge process (no PYTHONPATH from the launcher's environment reaches it)."""
    script = 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT ${PYTHONPATH:-none}"'
    proc = subprocess.run([PYTHON, "-I", str(REPO / "harness" / "judge.py"), "harness.local_ranks",
                           "--nproc-per-node", "2", "-m", "harness.local_ranks", "sh", "-c", script],
                          env={"PATH": os.environ["PATH"], "DAWNBENCH_RUN_TOKEN": TOKEN, "PYTHONPATH": "/planted",
                               "PET_NNODES": "2", "SLURM_NODEID": "1", "MASTER_ADDR": "gpu01", "MASTER_PORT": "29400"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["2 4 0 2 1 gpu01:29400 none", "3 4 1 2 1 gpu01:29400 none"]
