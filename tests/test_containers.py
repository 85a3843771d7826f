"""Reference images: the Dockerfiles and the compose file (static checks), the requirements tool,
the comparison's arithmetic, and, on a real Docker engine that the tests start, a build of the
default reference from its real Dockerfile, a run through `make run`, compose, errors and
`make compare`.

No registry can be reached here, so the engine tests build their own base image as a user
without one does, with `make base-image`: a minimal Debian with Python (debootstrap), `docker
import`ed. The engine tests need root, `dockerd` and `debootstrap` (Debian's docker.io and
debootstrap packages); .ci/run installs them and sets DAWNBENCH_REQUIRE_DOCKER=1, which turns
their absence into a failure instead of a skip.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from cheats import SMUGGLE
from conftest import REPO, cli_env, missing
from project_copy import FORK, MARKER, copy_project, fork

from dawnbench import compare, containers
from harness import datasets, provenance, registry
from harness.errors import DawnbenchError
from harness.sandbox import uid_mode

REQUIREMENTS_TOOL = REPO / "docker" / "requirements.py"
BASE_TAG = "dawnbench-test/debian-python:bookworm"
DEFAULT = "fashion-mnist-cnn-pytorch"


# ------------------------------------------------------------------------------ static checks

CUDA_TABLE = tomllib.loads((REPO / "docker" / "cuda.toml").read_text())


def dockerfile_instructions(name: str) -> list[str]:
    text = (REPO / "references" / name / "Dockerfile").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def image_requirements(name: str) -> list[str]:
    """The requirement lines the image installs: requirements.txt flattened, with the Dockerfile's
    CUDA_FRAMEWORK_PIN where it swaps a CPU build for a CUDA one (MXNet's CUDA builds are packages
    of their own names: mxnet-cu117)."""
    pin = containers.dockerfile_args(registry.load_spec(name)).get("CUDA_FRAMEWORK_PIN", "")
    return subprocess.run([sys.executable, str(REQUIREMENTS_TOOL), "flatten",
                           str(REPO / "references" / name / "requirements.txt"), *([pin] if pin else [])],
                          capture_output=True, text=True, check=True).stdout.split()


def framework_requirement(name: str) -> str:
    """The framework requirement the image installs."""
    (line,) = [x for x in image_requirements(name) if x.split("==")[0].split("[")[0] in ("torch", "tensorflow", "tensorflow-cpu")
               or x.startswith("mxnet")]
    return line


def major_minor(version: str) -> tuple[int, ...]:
    """The parts of a version the pairing compares: "12.5.1" -> (12, 5); "9" -> (9,)."""
    return tuple(int(part) for part in version.split(".")[:2])


def image_cuda_problem(base: dict, build: dict, requirements: list[str]) -> str | None:
    """Why a GPU image's CUDA and cuDNN do not suit its framework build, or None. The base's CUDA
    has the build's major.minor; the cuDNN the image loads (the nvidia-cudnn wheel the requirements
    pin, else the one the build's own dependencies pin, else the base's) has the build's major and
    at least its minor, which is TensorFlow's own rule at start-up."""
    if not base["cuda"]:
        return f"the base has no CUDA; the build was compiled against CUDA {build['cuda']}"
    if major_minor(base["cuda"]) != major_minor(build["cuda"]):
        return f"the base has CUDA {base['cuda']}, the build was compiled against {build['cuda']}"
    # NVIDIA's wheels, where installed, are loaded before the base's libraries: TensorFlow's RUNPATH
    # names site-packages/nvidia/*/lib, and torch preloads them.
    pins = dict(line.split("==", 1) for line in requirements if "==" in line)
    cuda_major = build["cuda"].split(".")[0]
    runtime = pins.get(f"nvidia-cuda-runtime-cu{cuda_major}")
    if runtime and major_minor(runtime) != major_minor(build["cuda"]):
        return f"nvidia-cuda-runtime-cu{cuda_major}=={runtime}, the build was compiled against CUDA {build['cuda']}"
    wheel = f"nvidia-cudnn-cu{cuda_major}"
    if wheel in pins:
        cudnn, where = pins[wheel], f"{wheel}=={pins[wheel]}"
    elif build.get("wheel_cudnn"):
        cudnn, where = build["wheel_cudnn"], f"the build's own {wheel}"
    elif build.get("wheels"):
        return f"the build installs NVIDIA's wheels but nothing pins {wheel}: pin it in requirements.txt"
    else:
        cudnn, where = base["cudnn"], "the base's cuDNN"
    if not cudnn:
        return f"{where}: none; the build was compiled against cuDNN {build['cudnn']}"
    have, want = major_minor(cudnn), major_minor(build["cudnn"])
    if len(want) > 1 and len(have) < 2:
        return f"{where} is recorded as {cudnn}, without its minor: the build needs {build['cudnn']} or newer"
    if have[0] != want[0] or have[1:] < want[1:]:
        return f"{where} is {cudnn}, the build was compiled against {build['cudnn']} (same major, at least its minor)"
    return None


@pytest.mark.parametrize("name", registry.available())
def test_dockerfile_static_rules(name):
    """Base pinned by tag in ARG FROM_IMAGE_NAME (no latest), the reference a build argument (so a
    copied directory builds itself), harness copied in (never cloned), non-root user, the harness
    as entrypoint."""
    instructions = dockerfile_instructions(name)
    spec = registry.load_spec(name)
    args = containers.dockerfile_args(spec)
    assert containers.pinned_image(args["FROM_IMAGE_NAME"]), args["FROM_IMAGE_NAME"]
    froms = [line.split()[1] for line in instructions if line.startswith("FROM ")]
    assert froms and all(base == "${FROM_IMAGE_NAME}" for base in froms), froms
    assert "REFERENCE" in args and args["REFERENCE"] == ""       # given at build time, never written in
    assert name not in "\n".join(instructions), "the Dockerfile names its reference: a fork would build the original"
    assert any(line.startswith("COPY harness/") for line in instructions)
    assert any(line.startswith("COPY common/") for line in instructions)
    assert any(line.startswith("COPY references/${REFERENCE}/ ") for line in instructions)
    assert not any(line.startswith("COPY dawnbench/") for line in instructions), "host tools stay out of images"
    assert not any(re.search(r"\bgit clone\b|\bcurl\b.*\|\s*sh|\bwget\b", line) for line in instructions)
    users = [line.split()[1] for line in instructions if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0", "0:0"), "the image must end on a non-root user"
    assert any(line.startswith("ENTRYPOINT") and "entrypoint.sh" in line for line in instructions)
    # the harness from an environment of its own pins, the workers from the reference's (issue 33)
    assert "COPY --from=requirements /opt/harness /opt/harness" in instructions
    assert any(line.startswith("DAWNBENCH_WORKER_PYTHON=/opt/venv/bin/python") for line in instructions)   # in ENV
    entrypoint = (REPO / "docker" / "entrypoint.sh").read_text()
    # a judge process: -I and harness/judge.py, so the image's PYTHONPATH or a start-up hook reaches no harness (issue 46)
    assert "exec /opt/harness/bin/python -I -B /opt/dawnbench/harness/judge.py harness" in entrypoint
    assert "/opt/venv/bin/python -m" not in entrypoint and "unset LD_PRELOAD LD_AUDIT" in entrypoint


COMMIT_ARGS = ("REFERENCE", "GIT_COMMIT", "GIT_DIRTY", "REFERENCE_TREE_SHA256")


TPU = "imagenet-amoebanet-tpu"      # its Dockerfile.tpu: the flavour tpu-tensorflow, a [container] variant


def test_the_tpu_dockerfile_keeps_the_static_rules():
    """Dockerfile.tpu, the TPU VM's image (written from its flavour: tests/test_flavours.py), as every
    Dockerfile: the harness copied in with its own environment, which the entrypoint runs, non-root."""
    text = (REPO / "references" / TPU / "Dockerfile.tpu").read_text()
    instructions = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert "COPY --from=requirements /opt/harness /opt/harness" in instructions
    assert any(line.startswith("COPY harness/") for line in instructions)
    assert any(line.startswith("DAWNBENCH_WORKER_PYTHON=/opt/venv/bin/python") for line in instructions)
    assert [line.split()[1] for line in instructions if line.startswith("USER ")][-1] == "dawn"
    assert instructions[-1] == 'ENTRYPOINT ["/opt/dawnbench/docker/entrypoint.sh"]' and TPU not in text


@pytest.mark.parametrize("name", registry.available())
def test_dockerfile_layer_order_and_build_record(name):
    """REFERENCE only in the first stage of the install, so references with the same requirements
    share the environment layer; in the final stage the per-commit arguments come after the user
    and venv layers. The build record /opt/dawnbench/build.json is written from the host's build
    arguments after the reference is copied and before the image drops root; no ENV names the
    commit (a variable could name any)."""
    text = (REPO / "references" / name / "Dockerfile").read_text()
    stages, current = [], None
    for line in dockerfile_instructions(name):
        if line.startswith("FROM "):
            stages.append(current := [])
        elif current is not None:
            current.append(line)
    first, install, final = stages
    assert "ARG REFERENCE" in first
    assert not any(re.search(r"\bREFERENCE\b", line) for line in install), "REFERENCE in the install stage"
    venv = final.index("COPY --from=requirements /opt/venv /opt/venv")
    user = next(i for i, line in enumerate(final) if "useradd" in line)
    for arg in COMMIT_ARGS:
        (at,) = [i for i, line in enumerate(final) if re.match(rf"ARG {arg}\b", line)]
        assert at > max(venv, user), f"ARG {arg} before the user and venv layers: every commit rebuilds them"
    copied = next(i for i, line in enumerate(final) if line.startswith("COPY references/${REFERENCE}/ "))
    baked = next(i for i, line in enumerate(final) if line.startswith("RUN printf"))
    assert copied < baked < next(i for i, line in enumerate(final) if line.startswith("USER "))
    record = text[text.index("RUN printf"):text.index("/opt/dawnbench/build.json")]
    assert all(f'"${arg}"' in record for arg in COMMIT_ARGS)
    assert "DAWNBENCH_GIT_COMMIT" not in text


def test_build_args_fill_the_dockerfiles_record():
    """The arguments `make build` passes are ARGs of the Dockerfile, and the tree hash is the one
    the harness recomputes at run time."""
    spec = registry.load_spec(DEFAULT)
    args = containers.build_args(spec, "python:3.11.14-slim-bookworm")
    assert set(args) <= set(containers.dockerfile_args(spec))
    assert args["REFERENCE_TREE_SHA256"] == provenance.tree_hash(spec.directory)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert args["GIT_COMMIT"] == (head or "unknown") and args["GIT_DIRTY"] in ("true", "false", "unknown")
    assert "DAWNBENCH_GIT_COMMIT" not in (REPO / "dawnbench" / "containers.py").read_text()


@pytest.mark.parametrize("name", registry.available())
def test_image_pins_the_cuda_its_framework_uses(name):
    """A GPU reference's image loads the CUDA (major.minor) and cuDNN (same major, at least the
    minor) its framework build was compiled against; a CPU reference installs a CPU build on a base
    without CUDA."""
    spec = registry.load_spec(name)
    args = containers.dockerfile_args(spec)
    base = args["FROM_IMAGE_NAME"]
    assert base in CUDA_TABLE["bases"], f"{base}: add its CUDA and cuDNN to docker/cuda.toml"
    requirement, index = framework_requirement(name), args.get("PIP_EXTRA_INDEX_URL", "")
    builds = [b for b in CUDA_TABLE["frameworks"] if b["requirement"] == requirement and b["index"] == index]
    assert builds, f"{requirement} from {index or 'PyPI'}: add the build's CUDA and cuDNN to docker/cuda.toml"
    has, wants = CUDA_TABLE["bases"][base], builds[0]
    if spec.gpus:
        assert wants["cuda"], f"{name} says gpus = true but installs a CPU build ({requirement}, {index or 'PyPI'})"
        problem = image_cuda_problem(has, wants, image_requirements(name))
        assert problem is None, f"{name} ({base}, {requirement}): {problem}"
    else:
        assert not wants["cuda"], f"{name} is a CPU reference but installs a CUDA build ({requirement}): " \
                                  f"use the CPU index or the -cpu package"
        assert not has["cuda"], f"{name} is a CPU reference on a CUDA base {base}"


def test_cuda_pairing_compares_the_cudnn_minor():
    """The TensorFlow images' old pair: tensorflow 2.21.0 (built with cuDNN 9.3) on
    nvidia/cuda:12.5.1-cudnn-runtime, whose cuDNN is 9.2.1. A major-only comparison passed it;
    TensorFlow itself refuses that cuDNN when its first convolution runs."""
    old_base = CUDA_TABLE["bases"]["nvidia/cuda:12.5.1-cudnn-runtime-ubuntu24.04"]
    (plain,) = [b for b in CUDA_TABLE["frameworks"] if b["requirement"] == "tensorflow==2.21.0"]
    assert "cuDNN is 9.2.1.18" in image_cuda_problem(old_base, plain, ["tensorflow==2.21.0"])
    newer = dict(old_base, cudnn="9.10.2.21")       # 9.10 > 9.3: minors compare as numbers, not text
    assert image_cuda_problem(newer, plain, ["tensorflow==2.21.0"]) is None
    assert "8.9.7.29" in image_cuda_problem(dict(old_base, cudnn="8.9.7.29"), plain, [])    # another major
    assert "without its minor" in image_cuda_problem(dict(old_base, cudnn="9"), plain, [])
    assert "CUDA 12.4" in image_cuda_problem(dict(old_base, cuda="12.4.1"), plain, [])
    # With NVIDIA's wheels installed the base's cuDNN is not loaded: the pinned wheel's is.
    assert image_cuda_problem(old_base, plain, ["nvidia-cudnn-cu12==9.3.0.75"]) is None
    (extra,) = [b for b in CUDA_TABLE["frameworks"] if b["requirement"] == "tensorflow[and-cuda]==2.21.0"]
    assert image_cuda_problem(old_base, extra, ["nvidia-cudnn-cu12==9.3.0.75"]) is None
    assert "9.2.1.18" in image_cuda_problem(old_base, extra, ["nvidia-cudnn-cu12==9.2.1.18"])
    assert "pin it" in image_cuda_problem(old_base, extra, ["tensorflow[and-cuda]==2.21.0"])


TF_GPU_REFERENCES = [n for n in registry.available()
                     if registry.load_spec(n).framework == "tensorflow" and registry.load_spec(n).gpus]


@pytest.mark.parametrize("name", TF_GPU_REFERENCES)
def test_tensorflow_gpu_images_carry_what_xla_needs(name):
    """XLA compiles for the GPU with ptxas and links libdevice; neither is in a -runtime base. The
    nvidia-cuda-nvcc wheel carries both (nvidia/cuda_nvcc/bin/ptxas,
    nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc), and XLA looks in ../nvidia/cuda_nvcc next to
    TensorFlow's libraries (openxla/xla xla/tsl/platform/default/cuda_root_path.cc,
    CandidateCudaRoots). Every NVIDIA wheel is pinned, so two builds of the image load the same
    libraries."""
    lines = image_requirements(name)
    assert any(line.startswith("nvidia-cuda-nvcc-cu12==") for line in lines), lines
    unpinned = [line for line in lines if line.startswith("nvidia-") and "==" not in line]
    assert not unpinned and any(line.startswith("tensorflow[and-cuda]==") for line in lines), lines


def test_cuda_table_is_well_formed():
    for base, row in CUDA_TABLE["bases"].items():
        assert containers.pinned_image(base) and set(row) == {"cuda", "cudnn", "source"} and row["source"]
        if base.startswith("nvidia/cuda:"):       # the tag says it: nvidia/cuda:<X.Y.Z>-[cudnn-]...
            assert re.match(re.escape(row["cuda"]) + r"[-.]", base.split(":")[1]), (base, row["cuda"])
            assert bool(row["cudnn"]) == ("-cudnn" in base), base
    for build in CUDA_TABLE["frameworks"]:
        assert "==" in build["requirement"] and build["source"]
        assert set(build) <= {"requirement", "index", "cuda", "cudnn", "wheels", "wheel_cudnn", "source"}


def test_compose_lists_references_as_generated_and_tolerates_a_fresh_fork():
    """docker-compose.yml is generated by `make compose` (and `make build`), never tracked: one
    service per reference there is, a fresh fork included, each building its own reference on its
    Dockerfile's pinned base unless BASE_IMAGE is set."""
    specs = [registry.load_spec(n) for n in registry.available()]
    generated = yaml.safe_load(containers.compose(specs))
    assert set(generated["services"]) == {spec.name for spec in specs}
    for spec in specs:
        args = generated["services"][spec.name]["build"]["args"]
        assert args["REFERENCE"] == spec.name
        assert args["FROM_IMAGE_NAME"] == f"${{BASE_IMAGE:-{containers.default_base(spec)}}}"
    gpu = generated["services"]["cifar10-resnet56-pytorch"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert "deploy" not in generated["services"][DEFAULT]


@pytest.mark.parametrize("ref,pinned", [
    ("python:3.11.14-slim-bookworm", True), ("python", False), ("python:latest", False),
    ("localhost:5000/python", False), ("localhost:5000/python:3.11", True),
    ("nvcr.io/nvidia/pytorch:25.01-py3", True), ("python@sha256:" + "a" * 64, True), (":3.11", False),
])
def test_pinned_image(ref, pinned):
    assert containers.pinned_image(ref) is pinned


def test_dockerfile_without_a_base_default_is_one_line(tmp_path, monkeypatch):
    ref = tmp_path / "references" / "x-cnn-pytorch"
    ref.mkdir(parents=True)
    (ref / "reference.toml").write_text('task = "fashion-mnist"\nframework = "pytorch"\nmodel = "m"\n'
                                        'entry = "train:X"\n')
    (ref / "Dockerfile").write_text("ARG FROM_IMAGE_NAME\nFROM ${FROM_IMAGE_NAME}\n")
    monkeypatch.setenv("DAWNBENCH_REFERENCES", str(ref.parent))
    with pytest.raises(containers.UsageError, match=r"Dockerfile: no `ARG FROM_IMAGE_NAME=<image:tag>` default"):
        containers.default_base(registry.load_spec("x-cnn-pytorch"))


def flatten(req: Path, pin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REQUIREMENTS_TOOL), "flatten", str(req), pin],
                          capture_output=True, text=True)


def test_requirements_flatten_inlines_and_swaps_the_framework():
    req = REPO / "references" / "fashion-mnist-cnn-tensorflow" / "requirements.txt"
    plain = flatten(req).stdout.split()
    assert "tensorflow-cpu==2.21.0" in plain and "numpy==2.4.6" in plain     # the -r include, inlined
    swapped = flatten(req, "tensorflow-cpu==2.20.0").stdout.split()
    assert "tensorflow-cpu==2.20.0" in swapped and "tensorflow-cpu==2.21.0" not in swapped
    assert [x for x in swapped if "tensorflow" not in x] == [x for x in plain if "tensorflow" not in x]
    gpu = flatten(req, "tensorflow[and-cuda]==2.21.0").stdout.split()
    assert "tensorflow[and-cuda]==2.21.0" in gpu and not any(x.startswith("tensorflow-cpu") for x in gpu)
    torch_req = REPO / "references" / DEFAULT / "requirements.txt"
    assert "torch==2.13.0+cpu" in flatten(torch_req, "torch==2.13.0+cpu").stdout.split()
    # another package's pin replaces its own line (a numpy bump under the same framework)
    bumped = flatten(torch_req, "NumPy==2.3.5").stdout.split()
    assert "NumPy==2.3.5" in bumped and "numpy==2.4.6" not in bumped and "torch==2.13.0" in bumped


@pytest.mark.parametrize("pin,problem", [
    ("scipy==1.0.0", "has no scipy requirement to replace"),
    ("torch>=2.0", "pin an exact version with =="),
    ("tensorflow-cpu==2.20.0", "has no tensorflow requirement to replace"),
])
def test_requirements_bad_pins_are_one_line(pin, problem):
    proc = flatten(REPO / "references" / DEFAULT / "requirements.txt", pin)
    assert proc.returncode != 0 and problem in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def fake_result(seed, tta, samples, train_s, status="converged", **fields):
    return {"seed": seed, "status": status, "tta_seconds": tta if status == "converged" else None, "epochs": 3,
            "history": [{"samples": samples}], "spans_seconds": {"train": train_s}, "image_digest": "sha256:x",
            **fields}


COMPARE_PINS = ["tensorflow-cpu==2.20.0", "tensorflow-cpu==2.21.0"]


def compare_runs(a_times, b_times, **fields):
    """Synthetic result.json contents of two versions: converged runs at the given times (None: a
    DNC), each training 60000 samples in as many seconds as its time-to-accuracy."""
    return {pin: [fake_result(seed, t, 60000, t or 100.0, status="converged" if t else "DNC", **fields)
                  for seed, t in enumerate(times)]
            for pin, times in zip(COMPARE_PINS, (a_times, b_times))}


def test_compare_arithmetic_and_plot(tmp_path):
    versions = COMPARE_PINS
    runs = {versions[0]: [fake_result(0, 140.0, 60000, 120.0), fake_result(1, 150.0, 60000, 100.0),
                          fake_result(2, 0, 60000, 150.0, status="DNC")],
            versions[1]: [fake_result(0, 100.0, 60000, 80.0), fake_result(1, 110.0, 60000, 75.0),
                          fake_result(2, 90.0, 60000, 60.0)]}
    s = compare.summarize(runs, versions)
    a, b = s["versions"][versions[0]], s["versions"][versions[1]]
    assert a["converged"] == 2 and b["converged"] == 3
    assert {k: a["tta_seconds"][k] for k in ("n", "min", "median", "max")} == \
        {"n": 2, "min": 140.0, "median": 145.0, "max": 150.0}
    assert b["tta_seconds"]["median"] == 100.0
    assert s["speedup_tta"] == pytest.approx(1.45)
    assert a["samples_per_second"]["median"] == pytest.approx(500.0)        # 60000 / 120
    assert b["samples_per_second"]["median"] == pytest.approx(60000 / 75)
    assert s["speedup_throughput"] == pytest.approx((60000 / 75) / 500.0)
    lines = compare.table(s, versions)
    assert lines[1].startswith("A tensorflow-cpu==2.20.0") and "2/3" in lines[1] and "145.0" in lines[1]
    # one speedup, the Hodges-Lehmann estimate, in the table and the plot's title alike (the ratio of medians
    # differed from it in the third digit: issue 47); 2 and 3 runs: 6 pairwise ratios, their median
    assert lines[-2].startswith("speedup B/A: time-to-accuracy 1.449x (Hodges-Lehmann), ")
    assert lines[-2].startswith(compare.speedup_text(s)) and compare.speedup_text(s) in compare.title_text(s, "x")
    assert "; throughput " in lines[-2]
    # A has 2 converged runs: no verdict, and the line says why
    assert lines[-1] == ("verdict: too few runs to compare: A has 2 converged runs, B 3; 3 a side at least: "
                         "run more (RUNS=6)")
    assert s["verdict"]["verdict"] == "too few runs"
    compare.plot(s, versions, tmp_path / "c.png", "x")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_median_interval_is_the_exact_order_statistic_one():
    """The median's interval: x_(k)..x_(n+1-k), confidence 1 - 2 P(Binomial(n, 1/2) <= k-1). Under
    6 runs no k reaches 95%: min..max with what it has (3 runs: 75%, 5: 93.75%); 9 runs: k = 2."""
    assert compare.median_interval([5.0]) is None
    three = compare.median_interval([12.0, 10.0, 11.0])
    assert (three["low"], three["high"], three["confidence"]) == (10.0, 12.0, 0.75)
    assert compare.median_interval([1.0, 2, 3, 4, 5])["confidence"] == 0.9375
    assert compare.median_interval([1.0, 2, 3, 4, 5, 6])["confidence"] == 1 - 2 / 64
    nine = compare.median_interval([float(x) for x in range(1, 10)])
    assert (nine["low"], nine["high"]) == (2.0, 8.0) and nine["confidence"] == pytest.approx(1 - 2 * 10 / 512)
    assert compare.runs_for_confidence("median") == 6 and compare.runs_for_confidence("ratio") == 4


def test_compare_ratio_interval_is_the_exact_mann_whitney_one():
    """The speedup's interval: order statistics of the n*m ratios a_i/b_j, k from the exact null
    distribution of the Mann-Whitney U (checked against enumerating every ranking); 3 a side: the
    widest, min..max of the 9 ratios, 90% (1 - 2/C(6,3)); 5 a side: the 3rd from each end, 96.8%."""
    import itertools
    from collections import Counter
    from math import comb
    for n, m in [(3, 3), (2, 5), (4, 4), (5, 3)]:
        counts = Counter(sum(x < y for x in chosen for y in set(range(n + m)) - set(chosen))
                         for chosen in itertools.combinations(range(n + m), n))
        expected = list(itertools.accumulate(counts[u] for u in range(n * m + 1)))
        assert compare._u_cdf(n, m) == pytest.approx([c / comb(n + m, n) for c in expected], abs=1e-15)
    r = compare.ratio_interval([140.0, 145.0, 150.0], [90.0, 100.0, 110.0])
    assert r["estimate"] == pytest.approx(1.45) and r["confidence"] == pytest.approx(0.9)
    assert (r["low"], r["high"]) == (pytest.approx(140 / 110), pytest.approx(150 / 90))
    five = compare.ratio_interval([2.0, 3, 5, 7, 11], [1.0, 1.01, 1.02, 1.03, 1.04])     # 25 distinct ratios
    assert (five["low"], five["high"]) == (pytest.approx(2 / 1.02), pytest.approx(11 / 1.02))
    assert five["confidence"] == pytest.approx(1 - 2 * 4 / 252)


def test_compare_verdicts():
    """The issue's "done when": identical versions are not distinguishable, clearly separated ones
    are faster (or slower), and too few runs says so, with the runs to ask for."""
    same = compare.summarize(compare_runs([100.0, 104.0, 98.0], [100.0, 104.0, 98.0]), COMPARE_PINS)
    assert same["verdict"]["verdict"] == "not distinguishable"
    assert same["verdict"]["line"] == ("not distinguishable with 3 runs each: the 90% interval 0.942-1.061x "
                                       "includes 1; 3 a side cannot give 95%, 4 can; run more (RUNS=6)")
    # the same distribution, other draws: overlapping times
    mixed = compare.summarize(compare_runs([100.0, 96.0, 103.0, 99.0], [101.0, 97.0, 98.0, 104.0]), COMPARE_PINS)
    assert mixed["verdict"]["verdict"] == "not distinguishable" and "with 4 runs each" in mixed["verdict"]["line"]
    assert "(RUNS=8)" in mixed["verdict"]["line"]
    faster = compare.summarize(compare_runs([140.0, 145.0, 150.0], [90.0, 100.0, 110.0]), COMPARE_PINS)
    assert faster["verdict"]["line"] == ("B is faster than A: speedup 1.450x, 90% interval 1.273-1.667x "
                                         "(3 runs each; 3 a side cannot give 95%, 4 can)")
    four = compare.summarize(compare_runs([140.0, 145.0, 150.0, 148.0], [90.0, 100.0, 110.0, 95.0]), COMPARE_PINS)
    assert four["verdict"]["verdict"] == "faster" and "97.1% interval" in four["verdict"]["line"]
    assert "cannot give" not in four["verdict"]["line"]
    slower = compare.summarize(compare_runs([90.0, 100.0, 110.0], [140.0, 145.0, 150.0]), COMPARE_PINS)
    assert slower["verdict"]["line"].startswith("B is slower than A: speedup 0.690x, 90% interval 0.600-0.786x")
    # clearly separated, but one run a side: no verdict
    one = compare.summarize(compare_runs([150.0], [90.0]), COMPARE_PINS)
    assert one["verdict"] == {"verdict": "too few runs", "line": "too few runs to compare: A has 1 converged run, "
                                                                 "B 1; 3 a side at least: run more (RUNS=4)"}
    dnc = compare.summarize(compare_runs([150.0, 148.0, None], [90.0, 95.0, 92.0]), COMPARE_PINS)
    assert dnc["verdict"]["verdict"] == "too few runs" and "A has 2 converged runs, B 3" in dnc["verdict"]["line"]
    zero = compare_runs([150.0, 148.0, 149.0], [90.0, 95.0, 92.0])
    zero[COMPARE_PINS[0]][0]["tta_seconds"] = 0.0            # converged at 0 s: no measurement, and no crash
    assert "A has 2 converged runs, B 3" in compare.summarize(zero, COMPARE_PINS)["verdict"]["line"]


def test_compare_marks_lowered_threshold_runs_and_plots_from_zero(tmp_path):
    """Runs at a lowered threshold are marked unofficial in the printout and the plot; the plot's
    time and throughput axes start at zero (times far from zero: matplotlib alone would not)."""
    lowered = {"threshold": 0.8, "official_threshold": False, "official": False}
    s = compare.summarize(compare_runs([1400.0, 1450.0, 1500.0], [1390.0, 1410.0, 1420.0], **lowered), COMPARE_PINS)
    assert s["lowered_threshold_runs"] == 6
    assert s["versions"][COMPARE_PINS[0]]["runs"][0]["official_threshold"] is False
    lines = compare.table(s, COMPARE_PINS)
    assert "A runs, time-to-accuracy (s): seed 0 1400.0*, seed 1 1450.0*, seed 2 1500.0*" in lines
    assert ("* unofficial: at a threshold (0.8) other than the task's (--threshold); "
            "not the task's time-to-accuracy") in lines
    assert "A median time-to-accuracy 1450.0 s, 75% interval 1400.0-1500.0 s (3 runs cannot give 95%, 6 can)" in lines
    limits = compare.plot(s, COMPARE_PINS, tmp_path / "c.png", "x")
    assert limits["tta_seconds"][0] == 0.0 and limits["tta_seconds"][1] >= 1500.0
    assert limits["samples_per_second"][0] == 0.0
    import matplotlib.pyplot as plt
    assert not plt.get_fignums()                      # closed
    official = compare.summarize(compare_runs([140.0, 150.0, 145.0], [90.0, 100.0, 110.0]), COMPARE_PINS)
    assert official["lowered_threshold_runs"] == 0
    assert not any(line.startswith("* unofficial") or "*" in line.split(":")[-1] for line in
                   compare.table(official, COMPARE_PINS))


def test_no_engine_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert containers.main(["build", DEFAULT]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Docker engine answers at unix:///nonexistent/docker.sock" in err[0]
    assert "RUNTIME=native" in err[0]


def test_the_results_line_names_the_host_folder(tmp_path):
    """The Docker path names the run folder once, as the host sees it: the harness's `results:`
    line, read across chunks that split it, names the results mount's host side; every other
    line passes as it is, and a progress bar's \\r updates go out as they come."""
    host, run = tmp_path / "results", f"{DEFAULT}/20261126-101010-seed0"
    out, said = io.BytesIO(), set()
    inside = f"results: {containers.RESULTS_IN_CONTAINER}/{run}\n".encode()

    def chunks():
        yield b"epoch 1 10%\r"
        assert out.getvalue() == b"epoch 1 10%\r"          # not held back for a newline
        yield b"epoch 1 100%\nconverged: top1 92.50%\nresults: /tmp/other\n" + inside[:12]
        yield inside[12:]
    containers.relay(chunks(), host, out, said)
    assert out.getvalue().decode().split("\n") == ["epoch 1 10%\repoch 1 100%", "converged: top1 92.50%",
                                                   "results: /tmp/other", f"results: {host}/{run}", ""]
    assert said == {"/tmp/other", f"{host}/{run}"}
    assert containers.host_results_line(b"results: /dawnbench-private/results-old/x", host).endswith(b"-old/x")


# ------------------------------------------------------------------------------ the base, the runtime, without an engine

class FakeImage:
    def __init__(self, tags, labels=None, created="2026-01-01T00:00:00Z", id="sha256:" + "f" * 64):
        self.tags, self.id = list(tags), id
        self.attrs = {"Created": created, "Config": {"Labels": labels} if labels is not None else None}


class FakeClient:
    """What the base's choice asks of an engine: its images, and a registry that refuses every base
    (none answers here)."""
    def __init__(self, listed, registry_error="dial tcp: lookup registry-1.docker.io: no such host"):
        import docker
        self.api = SimpleNamespace(timeout=600)
        self.registry_error = registry_error
        self.images = SimpleNamespace(list=lambda: listed, get=self._get, get_registry_data=self._registry)
        self._listed, self._errors = listed, docker.errors

    def _get(self, name):
        for image in self._listed:
            if name in image.tags:
                return image
        raise self._errors.ImageNotFound(f"No such image: {name}")

    def _registry(self, name):
        assert self.api.timeout == containers.REGISTRY_TIMEOUT_S       # never the engine client's 600 s
        if self.registry_error:
            raise self._errors.APIError("500 Server Error", explanation=self.registry_error)
        return SimpleNamespace(id="sha256:" + "e" * 64)


MADE = "dawnbench/debian-python:bookworm"
LABEL = {containers.LOCAL_BASE_LABEL: "debian-bookworm"}


def test_the_base_make_base_image_made_is_found_on_the_engine():
    """The engine's own images are the record of `make base-image`: the newest image with its label
    and a pinned tag, never a reference's image built on it (which inherits the label), never an
    untagged one; an older base under the default tag without the label counts too."""
    own_tag = FakeImage(["mine/debian:1"], LABEL, created="2026-03-01T00:00:00Z")
    built_on_it = FakeImage([f"dawnbench/{DEFAULT}:abc"], {**LABEL, containers.REFERENCE_LABEL: DEFAULT},
                            created="2026-04-01T00:00:00Z")
    untagged = FakeImage([], LABEL, created="2026-05-01T00:00:00Z")
    older = FakeImage([MADE], None, created="2025-01-01T00:00:00Z")
    found = containers.local_images(FakeClient([older, own_tag, built_on_it, untagged]))
    assert found.made_base == "mine/debian:1" and MADE in found.tags
    assert containers.local_images(FakeClient([older, built_on_it])).made_base == MADE
    assert containers.local_images(FakeClient([built_on_it, FakeImage(["python:3.11"], {})])).made_base is None


def test_a_cpu_reference_builds_on_the_made_base_when_its_pinned_one_is_absent():
    """Without BASE_IMAGE=: the pinned base when the engine has it; else the base `make base-image`
    made, with one line that says so and why; a GPU reference never gets it unasked (no CUDA)."""
    spec, pinned = registry.load_spec(DEFAULT), containers.DEFAULT_BASE_IMAGE
    assert containers.default_base(spec) == pinned
    made = containers.LocalImages({MADE}, MADE)
    base, why = containers.choose_base(spec, None, made)
    assert base == MADE and "\n" not in why
    assert why.startswith(f"base {MADE}, which `make base-image` made: ") and f"{pinned} is not on this engine" in why
    assert containers.choose_base(spec, None, containers.LocalImages({MADE, pinned}, MADE)) == (pinned, None)
    assert containers.choose_base(spec, "other/base:2", made) == ("other/base:2", None)      # BASE_IMAGE= wins
    assert containers.choose_base(spec, None, containers.LocalImages(set(), None)) == (pinned, None)
    gpu = registry.load_spec("cifar10-resnet56-pytorch")
    assert containers.choose_base(gpu, None, made) == (containers.default_base(gpu), None)
    # the compose file's services build on what a build here would
    text = containers.compose([spec, gpu], {DEFAULT: MADE})
    services = yaml.safe_load(text)["services"]
    assert services[DEFAULT]["build"]["args"]["FROM_IMAGE_NAME"] == f"${{BASE_IMAGE:-{MADE}}}"
    assert services[gpu.name]["build"]["args"]["FROM_IMAGE_NAME"] == f"${{BASE_IMAGE:-{containers.default_base(gpu)}}}"


def test_make_runs_natively_in_one_line_when_the_engine_cannot_get_the_base(monkeypatch, capsys):
    """`make run`'s choice (python -m dawnbench.containers runtime REF): an engine without the base
    and no registry: native, one line saying why and what to do, exit 3 (the Makefile's native);
    with the made base there, or a registry that has the pinned one: docker, exit 0; no engine:
    native."""
    def choose(client, *args):
        if isinstance(client, Exception):
            def no_engine():
                raise client
            monkeypatch.setattr(containers, "engine", no_engine)
        else:
            monkeypatch.setattr(containers, "engine", lambda: client)
        status = containers.main(["runtime", DEFAULT, *args])
        out, err = capsys.readouterr()
        return status, out.splitlines(), err
    status, lines, err = choose(FakeClient([FakeImage(["other/thing:1"], {})]))
    assert status == containers.RUNTIME_NATIVE == 3 and len(lines) == 1 and not err
    assert lines[0].startswith(f"runtime: native (a Docker engine answers, but the base {containers.DEFAULT_BASE_IMAGE} "
                               f"is not on this engine and cannot be pulled (dial tcp: lookup registry-1.docker.io")
    assert lines[0].endswith("`sudo make base-image` makes a local one; RUNTIME=docker to insist)")
    docker_line = ["runtime: docker (an engine answers; RUNTIME=native to run here)"]
    assert choose(FakeClient([FakeImage([MADE], LABEL)]))[:2] == (0, docker_line)
    assert choose(FakeClient([], registry_error=None))[:2] == (0, docker_line)      # the build pulls it
    assert choose(FakeClient([FakeImage([MADE], LABEL)]), "--base-image", "gone/base:1")[0] == 3   # BASE_IMAGE= as asked
    status, lines, _ = choose(containers.UsageError("no Docker engine answers at unix:///x"))
    assert status == 3 and lines == ["runtime: native (no Docker engine answers; RUNTIME=docker to insist)"]


def test_a_build_shows_its_progress_and_its_base(monkeypatch, capsys):
    """make build shows every line of the build as it comes; a comparison's builds one line a
    Dockerfile step; either way the base it chose is said first. The image is reused when its
    base is the one chosen."""
    import docker
    built = FakeImage([], {"org.dawnbench.base-image": MADE})
    client = FakeClient([FakeImage([MADE], LABEL)])
    chunks = [{"stream": "Step 1/3 : FROM dawnbench/debian-python:bookworm\n"}, {"stream": " ---> abc\n"},
              {"stream": "Step 2/3 : RUN pip install torch\n"}, {"stream": "Collecting torch==2.13.0+cpu\n"},
              {"status": "Downloading", "progressDetail": {"current": 1}, "id": "layer"},
              {"stream": "Step 3/3 : COPY harness/ /opt/dawnbench/harness/\n"}, {"stream": "Successfully built abc\n"}]
    client.api.build = lambda **kwargs: iter(chunks)
    gets = []

    def get(name):
        gets.append(name)
        if len(gets) == 1 and not reuse:
            raise docker.errors.ImageNotFound(name)
        return built
    client.images.get = get
    monkeypatch.setattr(containers, "engine", lambda: client)
    monkeypatch.setattr(containers, "fill_wheelhouse", lambda *a: 0)
    monkeypatch.setattr(containers, "write_compose", lambda client=None: None)
    monkeypatch.setattr(containers, "image_tag", lambda *a: f"dawnbench/{DEFAULT}:0123456789ab")
    reuse = False
    containers.build(DEFAULT)
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith(f"dawnbench: base {MADE}, which `make base-image` made")
    assert "Collecting torch==2.13.0+cpu" in err and " ---> abc" in err and "Downloading" not in err
    gets.clear()
    containers.build(DEFAULT, progress="steps")
    lines = capsys.readouterr().err.splitlines()
    steps = [line for line in lines if line.startswith("dawnbench: Step ")]
    assert [line.rsplit(" (", 1)[0] for line in steps] == [
        "dawnbench: Step 1/3 : FROM dawnbench/debian-python:bookworm", "dawnbench: Step 2/3 : RUN pip install torch",
        "dawnbench: Step 3/3 : COPY harness/ /opt/dawnbench/harness/"]
    assert not any("Collecting" in line for line in lines)
    gets.clear()
    reuse = True
    containers.build(DEFAULT)
    assert f"image dawnbench/{DEFAULT}:0123456789ab exists" in capsys.readouterr().err


def test_debootstrap_shows_each_stage_once(monkeypatch):
    """make base-image's minute or more: one line as each stage of debootstrap first comes, and
    one every 15 s while a stage goes on, not its 250 lines (one a package and stage)."""
    clock = iter(range(0, 1000, 2))     # each line 2 s after the one before
    monkeypatch.setattr(containers.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    packages = [f"I: {verb} package{i} 1.0" for i in range(20) for verb in ("Retrieving", "Validating")]
    lines = ["I: Retrieving InRelease", "I: Checking Release signature", "I: Retrieving Packages", *packages,
             "I: Extracting libc6...", "I: Extracting zlib1g...", "", "I: Base system installed successfully."]
    with contextlib.redirect_stderr(out):
        last = containers.debootstrap_progress(lines, 0)
    said = [line.split(": ", 2)[2] for line in out.getvalue().splitlines()]
    assert last == "I: Base system installed successfully."
    assert said == ["Retrieving InRelease (0 s)", "Checking Release signature (2 s)", "Validating package0 1.0 (8 s)",
                    "Validating package4 1.0 (24 s)", "Validating package8 1.0 (40 s)", "Validating package12 1.0 (56 s)",
                    "Validating package16 1.0 (72 s)", "Extracting libc6... (86 s)",
                    "Base system installed successfully. (90 s)"]


# a file in each folder: git cannot tell that a path that is not there yet would be a folder
GENERATED = ("results/x", "entries/x", "site/x", "analysis/x", "infer/x", "bench-results/x", "docker-compose.yml")


def test_no_command_rewrites_a_tracked_file_and_what_they_write_is_ignored(tmp_path):
    """docker-compose.yml is generated (make compose, make build, make run in docker) into a file git
    ignores, never tracked; the folders the README's commands write are ignored too."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (a source archive): git cannot say which files are tracked or ignored here")

    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout
    assert git("ls-files", "docker-compose.yml") == ""
    assert git("check-ignore", *GENERATED).split() == list(GENERATED)
    before = git("status", "--porcelain", "--untracked-files=all")
    proc = subprocess.run([sys.executable, "-m", "dawnbench.containers", "compose"], cwd=REPO, capture_output=True,
                          text=True, env=cli_env(DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert git("status", "--porcelain", "--untracked-files=all") == before
    written = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert set(written["services"]) == set(registry.available())


# ------------------------------------------------------------------------------ a real engine

def _missing(reason: str):
    missing(reason, "DAWNBENCH_REQUIRE_DOCKER")


@pytest.fixture(scope="module")
def engine():
    """A Docker daemon of our own (data root, socket), with the base image built locally; yields
    the environment that points clients at it. Stopped at the end."""
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("debootstrap"):
        _missing("the engine tests need root, dockerd and debootstrap")
    # Short paths: a unix socket path is limited to 108 bytes.
    root = Path("/tmp") / f"dbk-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    sock = root / "docker.sock"
    log = open(root / "dockerd.log", "wb")
    daemon = subprocess.Popen(["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
                               "--pidfile", str(root / "dockerd.pid"), "-H", f"unix://{sock}"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env = cli_env(DOCKER_HOST=f"unix://{sock}")
    try:
        for _ in range(120):
            if subprocess.run(["docker", "info"], env=env, capture_output=True).returncode == 0:
                break
            if daemon.poll() is not None:
                pytest.fail(f"dockerd exited: {(root / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.5)
        else:
            pytest.fail(f"dockerd did not answer: {(root / 'dockerd.log').read_text()[-2000:]}")
        # What a user without a registry runs (README, "Containers"); the tests' base is that image.
        made = make(env, "base-image", f"BASE_IMAGE={BASE_TAG}")
        assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
        assert f"built {BASE_TAG}" in made.stderr
        yield env
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        log.close()
        subprocess.run(["umount", "-R", str(root / "data")], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def make(env, *args, timeout=1800, cwd=REPO) -> subprocess.CompletedProcess:
    # The test environment already holds the tools' requirements: no second virtual environment.
    tools = Path(sys.executable).parent.parent
    return subprocess.run(["make", "--no-print-directory", f"TOOLS_VENV={tools}", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def subset_env(engine, fashion_subset) -> tuple[Path, dict]:
    """(data root, the engine's environment with $DAWNBENCH_DATASETS_MANIFEST set) of conftest's `fashion_subset`:
    a run's plumbing in a container needs no full Fashion-MNIST, only one epoch to a lowered threshold (0.5) on a
    fifth of it; `containers.run` mounts the host's manifest into the container, as for the ImageNet fixture."""
    root, manifest = fashion_subset
    return root, dict(engine, **{datasets.MANIFEST_ENV: str(manifest)})


SUBSET_RUN = "--threshold 0.5 --max-epochs 1 --no-progress"     # ~74% at one epoch of the subset (conftest)


@pytest.fixture(scope="module")
def default_image(engine):
    proc = make(engine, "build", f"REF={DEFAULT}", f"BASE_IMAGE={BASE_TAG}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    assert built["tag"].startswith(f"dawnbench/{DEFAULT}:")
    return built


def test_make_run_in_docker_leaves_the_native_result_folder(engine, default_image, subset_env, tmp_path):
    """Without BASE_IMAGE=: the base `make base-image` made (the engine has no python:*) is the one
    the image is built on, so it is the image built with BASE_IMAGE= (reused, or rebuilt from the
    build cache of a dirty tree: the same ID either way; image_digest below)."""
    results, (data, env_subset) = tmp_path / "results", subset_env
    proc = make(env_subset, "run", f"REF={DEFAULT}", f"ARGS={SUBSET_RUN} --data {data} --results {results}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "runtime: docker (an engine answers" in proc.stdout          # RUNTIME=auto chose docker
    assert f"dawnbench: base {BASE_TAG}, which `make base-image` made: " in proc.stderr
    (run_dir,) = (results / DEFAULT).iterdir()
    # the run folder, once and as this host sees it: not the container's /dawnbench-private path
    assert [line for line in proc.stderr.splitlines() if line.startswith("results: ")] == [f"results: {run_dir}"]
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(
        ["env.json", "events.jsonl", f"{DEFAULT}.tsv", "model", "predictions", "result.json"])
    result = json.loads((run_dir / "result.json").read_text())
    env = json.loads((run_dir / "env.json").read_text())
    assert result["status"] == "converged" and result["official_threshold"] is False
    assert result["image_digest"] == default_image["id"] == env["image_digest"]
    assert env["container"] == default_image["tag"]
    assert env["process"]["uid"] == 0          # the harness: root in the container, to drop the reference's uids
    assert result["isolation"] == {"mode": "uid", "reason": None}
    assert env["data"] == {"root": "/dawnbench-private/data", "read_only": True}   # the data mount was read-only
    assert env["network_interfaces"] == ["lo"]     # the container had no network: loopback only
    assert run_dir.stat().st_uid == os.geteuid()   # the run folder is the host user's
    assert result["git"]["commit"] == containers.environment.git_commit(REPO)["commit"]
    # the commit comes from the image's build record, believed because the reference tree still matches it
    assert result["git"]["source"] == "image" and result["provenance"]["build"]["reference"] == DEFAULT
    assert result["provenance"]["build"]["reference_tree_sha256"] == result["provenance"]["reference_tree_sha256"]
    assert "DAWNBENCH_GIT_COMMIT" not in result["provenance"]["overrides"]
    assert env["packages"]["torch"].startswith("2.13.0")
    # The image is the one built above: same ID, labelled with its reference and commit.
    inspect = json.loads(subprocess.run(["docker", "image", "inspect", default_image["tag"]], env=engine,
                                        capture_output=True, text=True).stdout)[0]
    assert inspect["Id"] == default_image["id"] and inspect["Config"]["User"] == "dawn"
    assert inspect["Config"]["Labels"]["org.dawnbench.reference"] == DEFAULT


def uid_processes() -> list[str]:
    """The host's processes of uid mode's worker uids (a container's included: no user namespace)."""
    uids = {base + 2 * slot for base in uid_mode.IMAGE_UIDS.values() for slot in range(uid_mode.UID_SLOTS)}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid in uids:
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:80].decode())
        except OSError:
            pass
    return found


@pytest.mark.parametrize("killed", ["launcher", "harness"])
def test_a_kill_9_on_the_host_takes_the_whole_container_run_along(engine, default_image, fashion_root, tmp_path, killed):
    """Issue 34, uid mode in a container. The launcher: on 3e196d1 a kill -9 of it left its detached
    container training, with nobody to read it and nothing to remove it; its lifeline now stops it
    (SIGTERM, so the harness writes its DNC result) and removes it. The harness (the container's
    PID 1): its death ends the container's PID namespace, workers and all, and the launcher says so."""
    results = tmp_path / "results"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "dawnbench.containers", "run", DEFAULT, "--base-image", BASE_TAG, "--data",
         str(fashion_root), "--results", str(results), "--", "--max-epochs", "20", "--no-progress"],
        cwd=REPO, env=engine, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    listed = ["docker", "ps", "-a", "-q", "--filter", f"label=org.dawnbench.run-of={DEFAULT}"]
    try:
        deadline = time.monotonic() + 300
        while not list(results.glob(f"{DEFAULT}/*/events.jsonl")):      # the run has started inside
            assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()[1][-3000:]
            time.sleep(0.2)
        (container,) = subprocess.run(listed, env=engine, capture_output=True, text=True).stdout.split()
        if killed == "launcher":
            launcher.kill()
            launcher.wait(timeout=30)
        else:
            harness = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", container], env=engine,
                                     capture_output=True, text=True).stdout.strip()
            os.kill(int(harness), signal.SIGKILL)
            assert launcher.wait(timeout=60) == 137, launcher.communicate()[1][-2000:]
        deadline = time.monotonic() + 60
        while subprocess.run(listed, env=engine, capture_output=True, text=True).stdout.split():
            assert time.monotonic() < deadline, "the container outlived its launcher by 60 s"
            time.sleep(0.5)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for container in subprocess.run(listed, env=engine, capture_output=True, text=True).stdout.split():
            subprocess.run(["docker", "rm", "-f", container], env=engine, capture_output=True)
    assert uid_processes() == []        # a host's uid-mode tests use other uids (uid_mode.HOST_UIDS)
    (run_dir,) = (results / DEFAULT).iterdir()
    if killed == "launcher":
        result = json.loads((run_dir / "result.json").read_text())       # stopped, not cut off
        assert result["status"] == "DNC" and result["dnc_reason"] == "error: Terminated: terminated by SIGTERM"


def test_docker_compose_service_runs(engine, default_image, subset_env, tmp_path):
    compose = shutil.which("docker-compose")
    if not compose:
        _missing("docker-compose (Debian's docker-compose) is not installed")
    results = tmp_path / "results"
    (results / DEFAULT).mkdir(parents=True)
    os.chown(results / DEFAULT, 10001, 10001)      # a host user's folder: the run folder is handed to it
    data, manifest = subset_env[0], Path(subset_env[1][datasets.MANIFEST_ENV])
    env = dict(engine, DAWNBENCH_TAG=default_image["tag"].split(":", 1)[1], DAWNBENCH_DATA=str(data),
               DAWNBENCH_RESULTS=str(results))
    made = make(engine, "compose")      # generated, git-ignored: a fresh clone has none until then
    assert made.returncode == 0, made.stderr
    config = subprocess.run([compose, "config"], cwd=REPO, env=env, capture_output=True, text=True)
    assert config.returncode == 0, config.stderr
    assert f"FROM_IMAGE_NAME: {BASE_TAG}" in config.stdout      # the base make base-image made, unasked
    assert f"{data}:/dawnbench-private/data:ro" in config.stdout
    assert "network_mode: none" in config.stdout     # so compose creates no network of its own either
    inside = f"{containers.MANIFEST_IN_CONTAINER}/{manifest.name}"      # the subset's checksums, as `make run` mounts them
    proc = subprocess.run([compose, "run", "--rm", "-v", f"{manifest}:{inside}:ro", "-e", f"{datasets.MANIFEST_ENV}={inside}",
                           DEFAULT, "run", DEFAULT, "--results", "/dawnbench-private/results", *SUBSET_RUN.split(),
                           "--no-save"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (results / DEFAULT).iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "converged" and result["image_digest"] is None   # compose passes no digest
    env_json = json.loads((run_dir / "env.json").read_text())
    assert env_json["process"]["uid"] == 0 and env_json["data"]["read_only"] is True
    assert env_json["network_interfaces"] == ["lo"]
    assert result["isolation"]["mode"] == "uid" and run_dir.stat().st_uid == 10001


def test_a_challenge_runs_each_side_in_its_image_and_verifies(default_image, subset_env, tmp_path, capsys, monkeypatch):
    """Issue 48: `dawnbench challenge --runtime docker`: one pair of the default against itself (named, and as its
    folder), one epoch of the subset to a lowered threshold, each run in the image default_image built (reused: the
    same ID), the runs where the challenge puts them; its folder verifies."""
    (data, env), out = subset_env, tmp_path / "c"
    proc = subprocess.run([sys.executable, "-m", "dawnbench.cli", "challenge", DEFAULT, "--against",
                           f"references/{DEFAULT}", "--pairs", "1", "--threshold", "0.5", "--max-epochs", "1",
                           "--runtime", "docker", "--base-image", BASE_TAG, "--data", str(data), "--out",
                           str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((out / "challenge.json").read_text())
    assert (record["runtime"], record["pairs"], record["pairs_timed"]) == ("docker", 1, 1)
    for o in record["order"]:
        result = json.loads((out / o["run"] / "result.json").read_text())
        assert result["status"] == "converged" and result["image_digest"] == default_image["id"]
        assert result["isolation"]["mode"] == "uid"
    from dawnbench.cli import main
    monkeypatch.setenv(datasets.MANIFEST_ENV, env[datasets.MANIFEST_ENV])
    capsys.readouterr()
    assert main(["verify", str(out), "--data", str(data)]) == 0, capsys.readouterr().out
    assert "ok   machine: every run on one machine" in capsys.readouterr().out


def test_the_tpu_image_carries_the_harness_and_starts(engine, tmp_path):
    """Dockerfile.tpu builds on the tests' base and its entrypoint starts the harness from /opt/harness
    (by hand, the file copied no /opt/harness: issue 49). Cheap: in a copy of the project the
    reference's requirements are the harness's own (numpy, tqdm; FRAMEWORK_PIN swaps numpy for itself),
    installed offline from the copy's wheelhouse, so no tensorflow-tpu is installed; every line of the
    Dockerfile is the generated one."""
    project = copy_project(tmp_path / "project")
    (project / "references" / TPU / "requirements.txt").write_text("-r ../../requirements/harness.txt\n")
    harness = REPO / "requirements" / "harness.txt"
    numpy = next(x for x in harness.read_text().splitlines() if x.startswith("numpy=="))
    # the harness's wheels in the copy's wheelhouse, from the host's index (pip's cache): the build is offline
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                          "--only-binary=:all:", "-r", str(harness), "--dest", str(project / "docker" / "wheelhouse")],
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    tag = "dawnbench-test/tpu-help:1"
    built = subprocess.run(["docker", "build", "-q", "-f", f"references/{TPU}/Dockerfile.tpu", "-t", tag,
                            "--build-arg", f"REFERENCE={TPU}", "--build-arg", f"FROM_IMAGE_NAME={BASE_TAG}",
                            "--build-arg", f"FRAMEWORK_PIN={numpy}", "."],
                           cwd=project, env=engine, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    try:
        def image(*args):
            return subprocess.run(["docker", "run", "--rm", "--network", "none", tag, *args], env=engine,
                                  capture_output=True, text=True, timeout=120)
        helped = image("--help")
        assert helped.returncode == 0, helped.stderr[-2000:]
        assert "run" in helped.stdout and "infer" in helped.stdout and "Traceback" not in helped.stderr
        listed = image("list")
        assert listed.returncode == 0 and listed.stdout.split()[0] == TPU, listed.stdout + listed.stderr
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], env=engine, capture_output=True)


def test_failed_build_is_one_line(engine):
    proc = make(engine, "build", f"REF={DEFAULT}", "BASE_IMAGE=dawnbench-test/no-such-base:1.0")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dawnbench: error:")]
    assert len(errors) == 1 and "dawnbench-test/no-such-base:1.0 is not on this engine" in errors[0]
    assert f"`sudo make base-image` makes {containers.LOCAL_BASE_IMAGE}" in errors[0]      # the way out without a registry


def test_image_tags_of_two_pins_differ():
    """A comparison's two images never share a tag, even for pins that differ in a local version
    only (the same CPU wheel named two ways); the whole `make compare` runs on a real engine in
    test_compare_tensorflow_versions_on_imagenet."""
    spec = registry.load_spec(DEFAULT)
    plain, local = containers.image_tag(spec, "torch==2.13.0"), containers.image_tag(spec, "torch==2.13.0+cpu")
    assert plain != local and local.endswith("-torch-2.13.0-cpu") and plain.endswith("-torch-2.13.0")


TF_IMAGENET = "imagenet-resnet50-tensorflow"
TF_PINS = ("tensorflow-cpu==2.20.0", "tensorflow-cpu==2.21.0")
# The fixture's images are tens of pixels: 32 px crops keep ResNet-50 fast on a small CPU; no XLA.
# A one-epoch schedule at a high rate without warm-up, so that three steps lift the fixture's four
# classes into the top five and the runs converge: the table then has times-to-accuracy.
TF_IMAGENET_SMALL = ["image_size_start=32", "image_size_end=32", "eval_resize=40", "eval_crop=32", "batch_size=4",
                     "eval_batch_size=6", "xla_inference=false", "epochs=1", "warmup_epochs=0", "lr=1.0",
                     "lr_batch=4"]


def test_compare_user_errors_are_one_line(tmp_path):
    """Mistakes found before any build: the same pin twice, an unknown reference, missing data."""
    def compare_err(*args):
        proc = subprocess.run([sys.executable, "-m", "bench.compare", *args], cwd=REPO, env=cli_env(),
                              capture_output=True, text=True, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("dawnbench compare: error: "), \
            proc.stderr
        return lines[0]
    assert "two different framework pins" in compare_err(TF_IMAGENET, "--versions", TF_PINS[0], TF_PINS[0])
    assert "unknown reference 'no-such-ref'" in compare_err("no-such-ref", "--versions", *TF_PINS)
    for data in (["--data", str(tmp_path)], ["--", "--data", str(tmp_path)]):   # ARGS="--data DIR" too
        line = compare_err(TF_IMAGENET, "--versions", *TF_PINS, *data)
        assert f"dataset 'imagenet' not found in {tmp_path}" in line and "dawnbench data prepare imagenet" in line


def test_a_pin_without_a_wheel_is_one_line(monkeypatch, tmp_path):
    """A framework pin that no index has: one line naming the pin and how to find a released one,
    before any build. (No network: the index is switched off, so nothing can be found.)"""
    root = tmp_path / "project"
    (root / "docker" / "wheelhouse").mkdir(parents=True)
    shutil.copy(REQUIREMENTS_TOOL, root / "docker" / "requirements.py")
    ref = root / "references" / "x-tensorflow"
    ref.mkdir(parents=True)
    (ref / "requirements.txt").write_text("tensorflow-cpu==2.21.0\n")
    monkeypatch.setattr(containers, "project_root", lambda: root)
    for name, value in {"DAWNBENCH_WHEELHOUSE": "1", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    spec = SimpleNamespace(name="x-tensorflow", directory=ref)
    with pytest.raises(containers.UsageError) as caught:
        containers.fill_wheelhouse(spec, "tensorflow-cpu==0.0.1")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("no wheel of tensorflow-cpu==0.0.1") and "pip index versions tensorflow-cpu" in message
    assert not list((root / "docker" / "wheelhouse").glob("*.txt"))      # the listing is cleaned up


def test_fork_builds_and_runs_in_docker(engine, default_image, subset_env, tmp_path):
    """cp -r of the default reference and an edit of its train.py, in a copy of the project: make
    run with the engine answering builds the fork's image from the copied Dockerfile untouched and
    runs the fork's code; make wrote the fork's compose service."""
    project = copy_project(tmp_path / "project")
    fork(project)
    results, (data, env_subset) = tmp_path / "results", subset_env
    env = {k: v for k, v in env_subset.items() if k != "PYTHONPATH"}
    proc = make(env, "run", f"REF={FORK}", f"ARGS={SUBSET_RUN} --no-save --data {data} --results {results}", cwd=project)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "runtime: docker (an engine answers" in proc.stdout
    assert MARKER in proc.stderr                                   # the fork's own code ran, in the image
    (run_dir,) = (results / FORK).iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["reference"] == FORK and result["status"] == "converged"
    tag = json.loads((run_dir / "env.json").read_text())["container"]
    assert tag.startswith(f"dawnbench/{FORK}:")
    inspect = json.loads(subprocess.run(["docker", "image", "inspect", tag], env=engine,
                                        capture_output=True, text=True).stdout)[0]
    assert inspect["Config"]["Labels"]["org.dawnbench.reference"] == FORK
    assert inspect["Config"]["Env"].count(f"DAWNBENCH_REFERENCE={FORK}") == 1
    assert f"  {FORK}:\n" in (project / "docker-compose.yml").read_text()


ENGINE_CHEATS = {
    # name: (cheat code, what the DNC reason must say[, the run's extra arguments])
    "labels": ('''
    class Cheat(Base):
        def predict(self):
            for path in ["/dawnbench-private/data/fashion-mnist/t10k-labels-idx1-ubyte",
                         "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"]:
                try:
                    return np.eye(10)[np.frombuffer(open(path, "rb").read()[8:], np.uint8)]
                except OSError:
                    pass
            raise RuntimeError("CHEAT-BLOCKED")
    ''', "CHEAT-BLOCKED"),
    "forge": ('''
    import glob

    class Cheat(Base):
        def train_epoch(self, epoch):
            for path in glob.glob("/dawnbench-private/results/**/*", recursive=True):
                open(path, "a").write("forged")
            return super().train_epoch(epoch)
    ''', "budget"),
    "predict-trains": ('''
    class Cheat(Base):
        def predict(self):
            from common.loaders import load_fashion_mnist
            try:
                load_fashion_mnist(self.ctx.data_root, "train")
            except Exception:
                raise RuntimeError("CHEAT-BLOCKED") from None
            return super().predict()
    ''', "CHEAT-BLOCKED"),
    "root": ('''
    class Cheat(Base):
        def train_epoch(self, epoch):
            if os.getuid() == 0 or os.access("/dawnbench-private", os.X_OK) or os.access("/proc/1/mem", os.R_OK):
                raise RuntimeError("CHEAT-SUCCEEDED")
            return super().train_epoch(epoch)
    ''', "budget"),
    "train-in-eval": (SMUGGLE.format(n=2000, where="load"), "past its bound of", ("--max-epochs", "1")),
    "smuggle-data": (SMUGGLE.format(n=60000, where="load"), "the snapshot is over its task's cap of 16 MiB",
                     ("--max-epochs", "1")),
    "hang": ('''
    import time

    class Cheat(Base):
        def train_epoch(self, epoch):
            time.sleep(600)
    ''', "budget: time budget exceeded during epoch 1", ("--max-seconds", "8")),
}


@pytest.mark.parametrize("cheat", sorted(ENGINE_CHEATS))
def test_cheats_fail_in_the_container(engine, default_image, fashion_root, tmp_path, cheat):
    """The container's isolation (the harness as root, the workers under their own uids): cheats of
    tests/test_cheats.py, run by the default image on references mounted beside it."""
    sys.path.insert(0, str(REPO / "tests"))
    from cheats import write_reference
    code, reason, *extra = ENGINE_CHEATS[cheat]
    write_reference(tmp_path / "refs", "cheat", code)
    results = tmp_path / "results"
    (results / "cheat").mkdir(parents=True)
    proc = subprocess.run(["docker", "run", "--rm", "--user", "0:0",
                           "-v", f"{tmp_path / 'refs'}:/cheats:ro",
                           "-v", f"{fashion_root}:/dawnbench-private/data:ro",
                           "-v", f"{results}:/dawnbench-private/results",
                           default_image["tag"], "run", "cheat", "--references", "/cheats", "--no-progress",
                           "--results", "/dawnbench-private/results", *(extra[0] if extra else ())],
                          env=engine, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (run_dir,) = (results / "cheat").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "DNC" and result["isolation"]["mode"] == "uid"
    assert reason in result["dnc_reason"], result["dnc_reason"]
    assert "forged" not in (run_dir / "events.jsonl").read_text()


# ------------------------------------------------------------------------------ the judge outside the entrant's image

# An entrant's Dockerfile line that reaches a judge running in its image (issue 46): a .pth file in the
# harness's own environment, which every interpreter of /opt/harness runs at start-up (-I does not stop
# site), says so and halves the judge's clock.
JUDGE_HOOK = ("import sys, time; sys.stderr.write('JUDGE-HIJACKED\\n'); "
              "time.perf_counter = (lambda real: lambda: real() / 2)(time.perf_counter)\n")
WORKER_LABEL = "org.dawnbench.worker-of"


def worker_containers(env) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label={WORKER_LABEL}"], env=env, capture_output=True,
                          text=True).stdout.split()


def test_the_judge_image_builds_from_the_projects_files_and_judges(engine):
    """docker/Dockerfile.judge on the engine's base: the harness from its own pins, -I, no reference in it."""
    from dawnbench import judge_image
    built = subprocess.run([sys.executable, "-m", "dawnbench.judge_image"], cwd=REPO, env=engine, capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    image = json.loads(built.stdout.strip().splitlines()[-1])
    assert image["tag"] == judge_image.tag() and image["id"].startswith("sha256:")
    listed = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", image["id"], "-c",
                             "ls /opt/dawnbench; /opt/harness/bin/python -I -c 'import numpy; print(numpy.__version__)'"],
                            env=engine, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["common", "docker", "harness", "requirements", "2.4.6"]
    # never the base a reference is built on, though it carries the made base's label
    import docker
    assert containers.local_images(docker.DockerClient(base_url=engine["DOCKER_HOST"])).made_base == BASE_TAG


def test_the_judge_here_runs_none_of_the_entrants_layers(engine, default_image, fashion_subset, tmp_path, monkeypatch,
                                                        capfd):
    """Before: the judge (the image's entrypoint, /opt/harness/bin/python) runs a .pth file the
    entrant's Dockerfile wrote into its environment. With --judge host (make run RUNTIME=docker JUDGE=host),
    the judge is this checkout's harness in this environment and each worker a container of the entrant's
    image (container mode): the hook never runs in the judge, the clock is honest, and the workers still
    ran in the entrant's image (its environment read there, its digest recorded)."""
    context = tmp_path / "entrant"
    context.mkdir()
    (context / "hook.pth").write_text(JUDGE_HOOK)
    (context / "Dockerfile").write_text(f"FROM {default_image['id']}\n"
                                        "COPY hook.pth /opt/harness/lib/python3.11/site-packages/\n")
    tag = "dawnbench-test/entrant-hooks-judge:1"
    built = subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], env=engine, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    entrant = built.stdout.strip()
    # the hook is live in the image's judge interpreter: a judge there is the entrant's
    hooked = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "/opt/harness/bin/python", tag,
                             "-I", "-B", "-c", "pass"], env=engine, capture_output=True, text=True)
    assert "JUDGE-HIJACKED" in hooked.stderr
    data, manifest = fashion_subset
    results = tmp_path / "results"
    for key in ("DOCKER_HOST", "PATH"):
        monkeypatch.setenv(key, engine[key])
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    started = time.monotonic()
    import docker
    status = containers.run(DEFAULT, ["--threshold", "0.5", "--max-epochs", "1", "--no-progress"], data_root=data,
                            results=results, image=docker.from_env().images.get(entrant), judge_at="host")
    wall = time.monotonic() - started
    (run_dir,) = (results / DEFAULT).iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    env = json.loads((run_dir / "env.json").read_text())
    assert status == 0 and result["status"] == "converged", result.get("dnc_reason")
    assert result["isolation"] == {"mode": "container", "reason": None}
    assert result["image_digest"] == entrant and result["provenance"]["judge_image"] is None   # judged here
    assert env["worker_environment"]["image"] == entrant and env["worker_environment"]["prefix"] == "/opt/venv"
    assert not env["worker_environment"]["shared_with_harness"]
    # the judge's clock: the train time is no more than the wall time the run took here (a halved clock is)
    assert 0 < result["train_seconds"] <= wall
    assert "JUDGE-HIJACKED" not in capfd.readouterr().err
    assert worker_containers(engine) == []           # every worker container removed with the run


def test_a_kill_9_of_the_judge_leaves_no_worker_container(engine, default_image, tmp_path):
    """Container mode: a `docker run` client killed with the judge leaves its container running (the engine
    holds it); the judge's reaper removes every container of its label the moment the judge dies."""
    (tmp_path / "ref").mkdir()
    script = ("import os, sys, time\nfrom pathlib import Path\nfrom harness.sandbox import launch, modes\n"
              f"w, _ = launch.start('predict', modes.probe(), reference_dir=Path({str(tmp_path / 'ref')!r}), "
              "data_files=[], snapshots=None)\nw.call('noop', timeout=120)\nprint('started', flush=True)\ntime.sleep(600)\n")
    env = dict(cli_env(**{k: engine[k] for k in ("DOCKER_HOST",)}), DAWNBENCH_ISOLATION="container",
               DAWNBENCH_WORKER_IMAGE=default_image["id"])
    judge = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert judge.stdout.readline().strip() == "started"
        assert len(worker_containers(engine)) == 1
        judge.kill()
        judge.wait(timeout=30)
        deadline = time.monotonic() + 60
        while worker_containers(engine):
            assert time.monotonic() < deadline, "a worker container outlived its judge by 60 s"
            time.sleep(0.2)
    finally:
        if judge.poll() is None:
            judge.kill()
        for left in worker_containers(engine):
            subprocess.run(["docker", "rm", "-f", left], env=engine, capture_output=True)


# ------------------------------------------------------------------------------ last: the version bump

def keep_only_the_base_image(env) -> None:
    """Remove every image of the module's engine but the base: each TensorFlow image holds its
    environment twice (the requirements stage and the final copy), and a CI disk once filled up
    building the second one with the default image and the forks' still there."""
    def docker(*args):
        return subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=300)
    base = docker("image", "inspect", "--format", "{{.Id}}", BASE_TAG).stdout.strip()
    tags = sorted(set(docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split())
                  - {BASE_TAG, "<none>:<none>"})
    for step in (["rmi", *tags] if tags else None, ["image", "prune", "--force"]):
        if step:
            done = docker(*step)
            assert done.returncode == 0, done.stderr[-2000:]
    left = set(docker("images", "--all", "--quiet", "--no-trunc").stdout.split())
    assert left == {base}, left


def cpu_fork_of_the_tensorflow_imagenet_reference(project: Path) -> str:
    """cp -r of imagenet-resnet50-tensorflow into `project` with tensorflow-cpu for its requirements, as an
    entrant without a GPU forks it: the same Dockerfile (its per-role ImageNet folders included), without the
    original's 1.9 GB of NVIDIA wheels, which a CPU comparison never loads and which each side's build sent to
    the engine, unpacked and copied into the final stage (653 s for this test in CI). The wheel cache is the
    checkout's, so a second run downloads nothing."""
    name = f"{TF_IMAGENET}-cpu"
    shutil.copytree(REPO / "references" / TF_IMAGENET, project / "references" / name)
    (project / "references" / name / "requirements.txt").write_text(f"-r ../../requirements/harness.txt\n{TF_PINS[1]}\n")
    cache = REPO / "docker" / "wheelhouse" / containers.WHEEL_CACHE
    cache.mkdir(exist_ok=True)
    (project / "docker" / "wheelhouse" / containers.WHEEL_CACHE).symlink_to(cache)
    return name


def test_compare_tensorflow_versions_on_imagenet(engine, imagenet_root, tmp_path):
    """The version bump on ImageNet: a CPU fork of imagenet-resnet50-tensorflow (the reference's own
    Dockerfile) built twice, differing only in the TensorFlow pin (2.20.0 and 2.21.0, CPU wheels, from the
    host's wheelhouse), one run each on the prepared fixture (its folders mounted per role, its checksums
    through the host's manifest override), the table and the plot. Each run reports the TensorFlow its image
    holds, and says it is unofficial: the fixture's eval set is not ImageNet's 50,000 images. Last in the
    module: it first removes the images the tests above built, to make room for two TensorFlow images."""
    keep_only_the_base_image(engine)
    project = copy_project(tmp_path / "project")
    ref = cpu_fork_of_the_tensorflow_imagenet_reference(project)
    val_count = len((imagenet_root / "imagenet" / "val_labels.txt").read_text().split())
    env = {k: v for k, v in engine.items() if k != "PYTHONPATH"}
    env.update({datasets.MANIFEST_ENV: os.environ[datasets.MANIFEST_ENV], "DAWNBENCH_WHEELHOUSE": "1"})
    run_options = ["--data", str(imagenet_root), "--threshold", "0.01", "--max-epochs", "1",
                   *[a for setting in TF_IMAGENET_SMALL for a in ("--set", setting)]]
    proc = make(env, "compare", f"REF={ref}", f"VERSIONS={' '.join(TF_PINS)}", "RUNS=1", f"BASE_IMAGE={BASE_TAG}",
                "RUNTIME=docker", f"ARGS={' '.join(run_options)}", cwd=project)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (out,) = (project / "bench-results").glob(f"compare-{ref}-*")        # under the checkout's bench-results/
    assert f"written: {out / 'compare.json'}" in proc.stdout
    summary = json.loads((out / "compare.json").read_text())
    built = summary["images"]
    assert built[TF_PINS[0]]["tag"] != built[TF_PINS[1]]["tag"] and built[TF_PINS[0]]["id"] != built[TF_PINS[1]]["id"]
    for label, pin in zip("AB", TF_PINS):
        version = pin.split("==")[1]
        assert built[pin]["tag"].endswith("-" + pin.replace("==", "-"))
        run_dir = out / "runs" / ref / f"{label}-seed0"
        result = json.loads((run_dir / "result.json").read_text())
        env_json = json.loads((run_dir / "env.json").read_text())
        assert result["status"] == "converged" and result["epochs"] == 1, (result["dnc_reason"], proc.stderr[-4000:])
        (run,) = summary["versions"][pin]["runs"]
        assert run["image_digest"] == built[pin]["id"]
        assert run["samples_per_second"] > 0, (result["history"], result["spans_seconds"])
        assert result["image_digest"] == env_json["image_digest"] == built[pin]["id"]
        assert env_json["container"] == built[pin]["tag"]
        # the TensorFlow that ran: the worker's own report, and the distribution the image installed
        assert env_json["framework_extra"]["tensorflow"] == version, env_json["framework_extra"]
        assert result["framework"] == f"TensorFlow {version}"
        assert env_json["packages"]["tensorflow-cpu"] == version
        assert result["seed"] == 0 and result["eval_examples"] == val_count
        reasons = " ".join(result["unofficial_reasons"])
        assert not result["official"] and f"the eval set has {val_count} examples, not the 50000" in reasons
        assert result["isolation"]["mode"] == "uid"
        # the container's path, by name only: result.json goes into a public entry (harness.paths.public)
        recorded = result["provenance"]["overrides"][datasets.MANIFEST_ENV]
        assert recorded.startswith("<outside the checkout>/") and recorded.count("/") == 1, recorded
    line = next(x for x in proc.stdout.splitlines() if x.startswith(f"A {TF_PINS[0]}"))
    assert "1/1" in line
    assert "speedup B/A: time-to-accuracy" in proc.stdout
    # one run a side: no verdict, said as such (and in compare.json)
    assert ("verdict: too few runs to compare: A has 1 converged run, B 1; 3 a side at least: run more (RUNS=4)"
            in proc.stdout.splitlines())
    assert summary["verdict"]["verdict"] == "too few runs" and summary["plot_y_limits"]["tta_seconds"][0] == 0.0
    assert "* unofficial: at a threshold (0.01) other than the task's (--threshold)" in proc.stdout   # --threshold 0.01
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_infer_runtimes_come_into_an_image_as_a_build_argument():
    """INFER_RUNTIMES (make build INFER_RUNTIMES=onnxruntime): the pinned runtimes of
    requirements/infer-<runtime>.txt join what the image installs, in a tag of their own; by
    default none, so every image stays light."""
    req = REPO / "references" / DEFAULT / "requirements.txt"
    plain = flatten(req).stdout.split()
    with_rt = subprocess.run([sys.executable, str(REQUIREMENTS_TOOL), "flatten", str(req)], capture_output=True,
                             text=True, env=dict(os.environ, INFER_RUNTIMES="openvino")).stdout.split()
    pins = [line for line in (REPO / "requirements" / "infer-onnxruntime.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert not any(p.startswith(("onnx", "openvino")) for p in plain)
    assert with_rt[:len(plain)] == plain and set(pins) < set(with_rt) and any(p.startswith("openvino==") for p in with_rt)
    spec = registry.load_spec(DEFAULT)
    assert containers.build_args(spec, "python:3.11.14-slim-bookworm")["INFER_RUNTIMES"] == ""
    assert "INFER_RUNTIMES" in containers.dockerfile_args(spec)
    assert containers.image_tag(spec, "", "onnxruntime").endswith("-onnxruntime") and containers.image_tag(spec) != \
        containers.image_tag(spec, "", "onnxruntime")
    with pytest.raises(DawnbenchError, match="INFER_RUNTIMES tensorrt: expected some of onnxruntime, openvino"):
        containers.check_infer_runtimes("onnxruntime tensorrt")
