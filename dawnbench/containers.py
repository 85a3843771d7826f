"""Reference images: the compose file, building them, running them.

  python -m dawnbench.containers build REF [--base-image IMG] [--framework-pin PIN] [--rebuild]
  python -m dawnbench.containers run REF [--nproc N] [--gpus auto|all|none] [-- DAWNBENCH RUN OPTIONS]
  python -m dawnbench.containers engine                  # does an engine answer? exit 0 / 1
  python -m dawnbench.containers runtime REF [--base-image IMG]   # docker or native for `make run`: exit 0 / 3
  python -m dawnbench.containers compose                 # write docker-compose.yml (git-ignored) for today's references
  python -m dawnbench.containers base-image [--tag TAG]  # a base image from Debian's packages, no registry

Each reference directory holds its own Dockerfile (the project's are written from a flavour:
docker/flavours.py; an entrant's may be its own, built the same way): its base pinned by tag in
`ARG FROM_IMAGE_NAME=...` (for GPU references, a base that names the CUDA and cuDNN its
framework build uses: docker/cuda.toml), its pinned requirements in /opt/venv, the harness,
`common/` and the reference copied from the project, the non-root user `dawn`, and the harness
as entrypoint. The reference is the build argument REFERENCE, so `cp -r` of a directory gives a
fork whose Dockerfile builds the fork. A CPU reference whose pinned base is not on the engine builds
on the base `make base-image` made there, if any (choose_base): the engine's own images are the
record, so no later command needs BASE_IMAGE=. A run starts the container as root (the harness drops the
reference to uids of its own) and mounts the data read-only and the results folder under
/dawnbench-private, which those uids cannot enter; it leaves the same result folder as a native one; the image's
tag and ID (its digest) go into result.json and env.json. Uses the Docker SDK
(requirements/tools.txt); every failure is one line.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dawnbench import prices
from harness import data_views, datasets, environment, errors, judge, paths, provenance, registry, worker_env
from harness.arguments import DATA_FOLDER, RESULTS_FOLDER, Parser, reports_errors, whole
from harness.errors import UsageError
from harness.sandbox import uid_mode

# Under a folder only root may enter (the images make it 0700): the harness, root in the container,
# reads the labels and writes the results there; the reference's workers, dropped to their own uids,
# cannot reach either (docs/RULES.md, "Isolation").
PRIVATE_IN_CONTAINER = "/dawnbench-private"
RESULTS_IN_CONTAINER = f"{PRIVATE_IN_CONTAINER}/results"
DATA_IN_CONTAINER = f"{PRIVATE_IN_CONTAINER}/data"
MANIFEST_IN_CONTAINER = f"{PRIVATE_IN_CONTAINER}/manifest"   # a host $DAWNBENCH_DATASETS_MANIFEST, read-only
CONTAINER_USER = "0:0"      # the harness; it drops each worker to an unprivileged uid of its own
HARNESS_PYTHON = "/opt/harness/bin/python"     # the image's harness environment (docker/requirements.py)
CODE_IN_IMAGE = "/opt/dawnbench"               # harness/ and common/ in the image (the Dockerfile's COPY)
# A run needs no network (the data is mounted; torchrun --standalone and gloo use loopback), and in a
# container the workers cannot be given a namespace without one: so the container has none at all.
# It also means the engine never has to find an address pool for a network of the run's.
NETWORK_MODE = "none"
BASE_ARG = "FROM_IMAGE_NAME"          # the build argument naming a Dockerfile's base, MLPerf style
# The base of the CPU references: a base is pinned by tag (or digest), never `latest`; a reference's
# base is its Dockerfile's `ARG FROM_IMAGE_NAME=` default, which `make build BASE_IMAGE=...` overrides.
DEFAULT_BASE_IMAGE = "python:3.11.14-slim-bookworm"
# What `make base-image` makes where no registry answers: Debian bookworm's Python 3.11, from
# Debian's packages (make_base_image). No CUDA: for the CPU references.
LOCAL_BASE_IMAGE = "dawnbench/debian-python:bookworm"


def project_root() -> Path:
    """The folder holding references/, harness/, common/ and docker/: the build context."""
    root = registry.references_root().resolve().parent
    missing = [d for d in ("harness", "common", "docker", "requirements") if not (root / d).is_dir()]
    if missing:
        raise UsageError(f"{root} has no {', '.join(missing)}: building images needs a dawnbench checkout; "
                         f"run from one, or point DAWNBENCH_REFERENCES at its references/ folder")
    return root


# ----------------------------------------------------------------------------------------------
# A reference's Dockerfile, and the compose file

def dockerfile_path(spec: registry.ReferenceSpec) -> Path:
    return spec.directory / "Dockerfile"


def dockerfile_args(spec: registry.ReferenceSpec) -> dict[str, str]:
    """The Dockerfile's `ARG NAME=default` defaults (an ARG without one maps to "")."""
    path = dockerfile_path(spec)
    if not path.is_file():
        raise UsageError(f"{spec.name} has no Dockerfile ({path}); name its flavour in reference.toml "
                         f"([container] flavour = \"cpu-pytorch\", say) and run `python3 docker/flavours.py generate "
                         f"{spec.name}`, or copy one from a reference of the same framework")
    args: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*ARG\s+(\w+)(?:=(\S*))?\s*$", line)
        if match:
            args.setdefault(match.group(1), match.group(2) or "")
    return args


def default_base(spec: registry.ReferenceSpec) -> str:
    base = dockerfile_args(spec).get(BASE_ARG, "")
    if not base:
        raise UsageError(f"{dockerfile_path(spec)}: no `ARG {BASE_ARG}=<image:tag>` default; name the pinned base "
                         f"there, e.g. ARG {BASE_ARG}=python:3.11.14-slim-bookworm")
    return base


def compose(specs: list[registry.ReferenceSpec], bases: dict[str, str] | None = None) -> str:
    """The compose file of `specs`; `bases` maps a reference to the base its service builds on where
    that is not its Dockerfile's (choose_base)."""
    bases = bases or {}
    lines = [
        "# One service per reference; written by `make compose` (python -m dawnbench.containers compose),",
        "# which `make build` and `make run RUNTIME=docker` also run, so a fork is listed once it is built.",
        "# Generated and ignored by git: it depends on the references there are and the engine's images.",
        "#   docker compose run --rm fashion-mnist-cnn-pytorch [run fashion-mnist-cnn-pytorch ...]",
        f"# The data is mounted read-only and the results writable, both under {PRIVATE_IN_CONTAINER} (0700): the",
        "# harness runs as the container's root and drops the reference to uids that cannot enter it; the run",
        "# folder is given to the owner of results/<reference>/. `make run RUNTIME=docker` does the same.",
        "x-reference: &reference",
        f"  user: \"{CONTAINER_USER}\"",
        "  shm_size: 1gb",
        f"  network_mode: {NETWORK_MODE}",
        "  volumes:",
        f"    - ${{DAWNBENCH_DATA:-./data}}:{DATA_IN_CONTAINER}:ro",
        f"    - ${{DAWNBENCH_RESULTS:-./results}}:{RESULTS_IN_CONTAINER}",
        "",
        "services:",
    ]
    for spec in specs:
        lines += [
            f"  {spec.name}:",
            "    <<: *reference",
            f"    image: dawnbench/{spec.name}:${{DAWNBENCH_TAG:-compose}}",
            "    build:",
            "      context: .",
            f"      dockerfile: references/{spec.name}/Dockerfile",
            "      args:",
            f"        REFERENCE: {spec.name}",
            f"        {BASE_ARG}: ${{BASE_IMAGE:-{bases.get(spec.name) or default_base(spec)}}}",
            "        GIT_COMMIT: ${GIT_COMMIT:-unknown}",
        ]
        if spec.gpus:
            lines += ["    deploy:", "      resources:", "        reservations:", "          devices:",
                      "            - driver: nvidia", "              count: all", "              capabilities: [gpu]"]
    return "\n".join(lines) + "\n"


COMPOSE_FILE = "docker-compose.yml"     # at the project's root, where `docker compose` looks; git-ignored


def write_compose(client=None) -> Path:
    """docker-compose.yml for the references there are now (a fork included), each service on the base
    a build here would use (the engine's, when one answers); written only when it changes. The file is
    git-ignored: no command rewrites a tracked file."""
    path = project_root() / COMPOSE_FILE
    specs = [registry.load_spec(name) for name in registry.available()]
    bases, notes = {}, set()
    if client is None:
        try:
            client = engine()
        except UsageError:
            client = None       # no engine: the Dockerfiles' pinned bases
    if client is not None:
        local = local_images(client)
        for spec in specs:
            base, why = choose_base(spec, None, local)
            if why:
                bases[spec.name] = base
                notes.add(base)
    text = compose(specs, bases)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
        _say(f"wrote {path}" + (f" (the CPU references' services on {', '.join(sorted(notes))}, which `make "
                                 f"base-image` made: their pinned base is not on this engine)" if notes else ""))
    return path


# ----------------------------------------------------------------------------------------------
# The engine

def engine():
    """A Docker SDK client whose engine answers, or one UsageError line saying what to do."""
    try:
        import docker
    except ImportError:
        raise UsageError("the Docker SDK is not installed in this environment; `make build` sets up "
                         ".venv/tools from requirements/tools.txt") from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as e:
        detail = " ".join(str(e).split())[:200]
        raise UsageError(f"no Docker engine answers at {where} ({detail}); start one (`sudo systemctl start "
                         f"docker`, or dockerd), point DOCKER_HOST at it, or run natively: make run RUNTIME=native") from None
    return client


def engine_answers() -> bool:
    try:
        engine()
        return True
    except UsageError:
        return False


# ----------------------------------------------------------------------------------------------
# Which base an image is built on

# On the base `make base-image` imports (docker import --change LABEL). Images built on it inherit
# its labels, so a reference's image (org.dawnbench.reference) or the judge's is never taken for a base.
LOCAL_BASE_LABEL = "org.dawnbench.local-base"
REFERENCE_LABEL = "org.dawnbench.reference"
JUDGE_LABEL = "org.dawnbench.judge"     # the judge's image (docker/Dockerfile.judge), built on a base: never one itself
# How long the engine may take to ask a registry for a base's manifest: without a registry the
# engine's own dial can hang far longer, and `make run` decides before anything is built.
REGISTRY_TIMEOUT_S = 20


@dataclass
class LocalImages:
    """What the engine holds that choosing a base needs: every tag, and the base `make base-image`
    made last (None when it made none)."""
    tags: set[str]
    made_base: str | None


def _labels(image) -> dict:
    # An imported image may have no Config at all; the SDK's Image.labels then fails.
    return (image.attrs.get("Config") or {}).get("Labels") or {}


def local_images(client) -> LocalImages:
    listed = client.images.list()
    made = [image for image in listed
            if (LOCAL_BASE_LABEL in _labels(image) or LOCAL_BASE_IMAGE in image.tags)
            and REFERENCE_LABEL not in _labels(image) and JUDGE_LABEL not in _labels(image)]
    made.sort(key=lambda image: image.attrs.get("Created") or "", reverse=True)
    for image in made:
        pinned = sorted(tag for tag in image.tags if pinned_image(tag))
        if pinned:
            return LocalImages({tag for i in listed for tag in i.tags},
                               LOCAL_BASE_IMAGE if LOCAL_BASE_IMAGE in pinned else pinned[0])
    return LocalImages({tag for i in listed for tag in i.tags}, None)


def choose_base(spec: registry.ReferenceSpec, asked: str | None, local: LocalImages) -> tuple[str, str | None]:
    """(the base to build `spec` on, why when it is not the one asked for or the Dockerfile's): what
    was asked (BASE_IMAGE); else the Dockerfile's pinned base when the engine has it; else, for a CPU
    reference, the base `make base-image` made on this engine (it has no CUDA, so a GPU reference
    never gets it unasked); else the pinned base, which the build pulls."""
    if asked:
        return asked, None
    pinned = default_base(spec)
    if pinned in local.tags or spec.gpus or not local.made_base:
        return pinned, None
    return local.made_base, (f"base {local.made_base}, which `make base-image` made: {spec.name}'s pinned base "
                             f"{pinned} is not on this engine (docker pull {pinned}, and it is used instead)")


def base_problem(client, base: str) -> str | None:
    """None when the engine has `base` or a registry has it for the build to pull; else why not, a
    phrase that begins with the base's name. Asks the registry for the manifest only (nothing is
    downloaded)."""
    import docker
    try:
        client.images.get(base)
        return None
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.DockerException as e:
        return f"{base} cannot be looked up on this engine ({' '.join(str(e).split())[:200]})"
    timeout, client.api.timeout = client.api.timeout, REGISTRY_TIMEOUT_S
    try:
        client.images.get_registry_data(base)
        return None
    except Exception as e:      # the registry's refusal, no route to it, or no answer in time
        detail = " ".join(str(getattr(e, "explanation", None) or e).split())
        if "timed out" in detail.lower():
            detail = f"no registry answered in {REGISTRY_TIMEOUT_S} s"
        return f"{base} is not on this engine and cannot be pulled ({detail[:200]})"
    finally:
        client.api.timeout = timeout


RUNTIME_NATIVE = 3      # the `runtime` command's exit status for native: not 1, which a crash could give


def docker_or_why(name: str, base_image: str | None = None, references: Path | None = None) -> str | None:
    """None when a run of `name` can go in Docker here (an engine answers and has, or can pull, the
    base its image is built on); else why not, in a few words. What `make run` chooses by."""
    try:
        client = engine()
    except UsageError:
        return "no Docker engine answers"
    spec = registry.load_spec(name, references)
    base, _ = choose_base(spec, base_image, local_images(client))
    problem = base_problem(client, base)
    if problem:
        return f"a Docker engine answers, but the base {problem}; `sudo make base-image` makes a local one"
    return None


# ----------------------------------------------------------------------------------------------
# A base image without a registry

DEBIAN_MIRROR_ENV = "DAWNBENCH_DEBIAN_MIRROR"
DEBIAN_MIRROR = "http://deb.debian.org/debian"


def pinned_image(ref: str) -> bool:
    """`name:tag` with a tag other than latest, or `name@sha256:...`: a base that cannot move."""
    if "@sha256:" in ref:
        return True
    name, _, tag = ref.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest")


def make_base_image(tag: str = LOCAL_BASE_IMAGE, mirror: str | None = None) -> str:
    """Debian bookworm with Python 3 and venv (debootstrap, minbase), `docker import`ed as `tag`:
    a base for the CPU references' Dockerfiles (BASE_IMAGE=tag) where no registry can be reached.
    Needs root, debootstrap and the docker command; takes minutes."""
    if not pinned_image(tag):
        raise UsageError(f"--tag {tag!r}: pin it by a tag other than latest, e.g. {LOCAL_BASE_IMAGE}")
    if os.geteuid() != 0:
        raise UsageError("debootstrap needs root: run sudo make base-image")
    for command, package in (("debootstrap", "debootstrap"), ("docker", "docker.io")):
        if not shutil.which(command):
            raise UsageError(f"no {command} command here: install it (sudo apt-get install {package})")
    engine()
    mirror = mirror or os.environ.get(DEBIAN_MIRROR_ENV) or DEBIAN_MIRROR
    with tempfile.TemporaryDirectory(prefix="dawnbench-base-") as tmp:
        rootfs = Path(tmp) / "debian"
        _say(f"debootstrap of Debian bookworm with python3 from {mirror} into {rootfs} (minutes)")
        started = time.monotonic()
        try:
            boot = subprocess.Popen(["debootstrap", "--variant=minbase", "--include=python3,python3-venv", "bookworm",
                                     str(rootfs), mirror], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            last = debootstrap_progress(boot.stdout, started)
            if boot.wait():
                raise UsageError(f"debootstrap failed: {last or boot.returncode}; "
                                 f"check the mirror ({DEBIAN_MIRROR_ENV}=URL) and the disk")
            _say(f"importing it into the engine as {tag}")
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            # The label is the record later builds find it by (local_images): no BASE_IMAGE= after this.
            imported = subprocess.run(["docker", "import", "--change", f"LABEL {LOCAL_BASE_LABEL}=debian-bookworm",
                                       "-", tag], stdin=tar.stdout, capture_output=True, text=True)
            tar.stdout.close()
            tar.wait()
            if imported.returncode or tar.returncode:
                detail = " ".join(imported.stderr.split())[:300] or f"tar exited {tar.returncode}"
                raise UsageError(f"docker import of {rootfs} as {tag} failed: {detail}")
        finally:
            # A failed debootstrap may leave its chroot's mounts: never delete through them.
            for mount in ("dev/pts", "proc", "sys"):
                if os.path.ismount(rootfs / mount):
                    subprocess.run(["umount", "-l", str(rootfs / mount)], capture_output=True)
    _say(f"built {tag} in {time.monotonic() - started:.0f} s; the CPU references build on it from now on, when "
         f"their pinned base is not on this engine (make run, make build, make compare: no BASE_IMAGE= needed)")
    return tag


DEBOOTSTRAP_EVERY_S = 15     # at least one line this often while debootstrap goes on


def debootstrap_progress(lines, started: float) -> str:
    """Say each stage of debootstrap the first time it comes (retrieving, validating, extracting,
    unpacking, configuring...), and otherwise a line every DEBOOTSTRAP_EVERY_S seconds, rather than
    its 250 lines, one a package and stage; returns its last line, for an error."""
    seen, said_at, last = set(), started, ""
    for line in lines:
        line = " ".join(line.split())
        if not line:
            continue
        last = line
        words = line.split()
        now = time.monotonic()
        if words[0] in ("I:", "W:", "E:") and len(words) > 1 and (words[1] not in seen or now - said_at >= DEBOOTSTRAP_EVERY_S):
            seen.add(words[1])
            said_at = now
            _say(f"debootstrap: {line[3:][:150]} ({now - started:.0f} s)")
    return last


# ----------------------------------------------------------------------------------------------
# Building

def image_paths(spec: registry.ReferenceSpec) -> list[Path]:
    """What an image of `spec` is built from: a change there (untracked files included) makes it dirty."""
    root = project_root()
    return [spec.directory, *(root / d for d in ("harness", "common", "docker", "requirements"))]


INFER_RUNTIMES = ("onnxruntime", "openvino")     # requirements/infer-<runtime>.txt


def check_infer_runtimes(text: str) -> str:
    """--infer-runtimes 'onnxruntime openvino' (or comma-separated): the runtimes an image adds for
    `infer --runtime`; none by default, so what runs in every image stays light."""
    names = text.replace(",", " ").split()
    unknown = [n for n in names if n not in INFER_RUNTIMES]
    if unknown:
        raise UsageError(f"INFER_RUNTIMES {' '.join(unknown)}: expected some of {', '.join(INFER_RUNTIMES)}, "
                         f"e.g. INFER_RUNTIMES=onnxruntime")
    return " ".join(sorted(set(names)))


def build_args(spec: registry.ReferenceSpec, base: str, framework_pin: str = "", infer_runtimes: str = "") -> dict[str, str]:
    """The build arguments of the reference's image: its base and reference, and the host's record
    of the code, which the build bakes into /opt/dawnbench/build.json (harness/provenance.py): the
    commit, whether the tree had changes, and the reference directory's hash as it is now."""
    git = environment.git_commit(project_root(), image_paths(spec))
    try:
        tree = provenance.tree_hash(spec.directory)
    except OSError as e:
        raise UsageError(f"cannot hash {spec.directory} for the image's build record ({e}); make it readable") from None
    return {BASE_ARG: base, "REFERENCE": spec.name, "FRAMEWORK_PIN": framework_pin, "INFER_RUNTIMES": infer_runtimes,
            "GIT_COMMIT": git["commit"] or "unknown",
            "GIT_DIRTY": {True: "true", False: "false"}.get(git["dirty"], "unknown"),
            "REFERENCE_TREE_SHA256": tree}


def image_tag(spec: registry.ReferenceSpec, framework_pin: str = "", infer_runtimes: str = "") -> str:
    """dawnbench/<reference>:<commit>[-dirty][-<pin>][-<runtime>...]: the reference, the code, the
    framework, the inference runtimes added."""
    git = environment.git_commit(project_root(), image_paths(spec))
    tag = (git["commit"] or "nogit")[:12] + ("-dirty" if git["dirty"] else "")
    if framework_pin:
        tag += "-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", framework_pin).strip("-")
    for runtime in infer_runtimes.split():
        tag += f"-{runtime}"
    return f"dawnbench/{spec.name}:{tag[:128]}"


WHEEL_CACHE = "cache"       # docker/wheelhouse/cache/: every wheel downloaded, kept between builds


def check_requirements(spec: registry.ReferenceSpec) -> None:
    """The reference's requirements refused in one line before anything is built (docker/requirements.py
    check: exact pins, hashed wheels and the shared files only), as `make setup` refuses them natively."""
    done = subprocess.run([sys.executable, str(project_root() / "docker" / "requirements.py"), "check",
                           str(spec.directory / "requirements.txt")], capture_output=True, text=True)
    if done.returncode:
        raise UsageError(done.stderr.strip() or f"cannot read {spec.directory / 'requirements.txt'}")


def fill_wheelhouse(spec: registry.ReferenceSpec, framework_pin: str, infer_runtimes: str = "") -> int:
    """Put exactly the reference's wheels (its requirements with `framework_pin` swapped in) into
    docker/wheelhouse/, which the image installs from offline. The wheels come from
    docker/wheelhouse/cache/ (git- and docker-ignored, kept between builds, so a second build or
    a second pin sharing dependencies downloads nothing); what the cache lacks is downloaded there
    first, on the host, through its PIP_FIND_LINKS and index. Skipped, leaving the folder empty
    (the image then uses the index), when the host has no PIP_FIND_LINKS (DAWNBENCH_WHEELHOUSE=1
    gathers the wheels anyway)."""
    wheelhouse = project_root() / "docker" / "wheelhouse"
    for old in list(wheelhouse.glob("*.whl")) + list(wheelhouse.glob("*.tar.gz")):
        old.unlink()
    if not os.environ.get("PIP_FIND_LINKS") and os.environ.get("DAWNBENCH_WHEELHOUSE") != "1":
        return 0
    flat = subprocess.run([sys.executable, str(project_root() / "docker" / "requirements.py"), "flatten",
                           str(spec.directory / "requirements.txt"), framework_pin],
                          capture_output=True, text=True, env=dict(os.environ, INFER_RUNTIMES=infer_runtimes))
    if flat.returncode:
        raise UsageError(flat.stderr.strip() or f"cannot read {spec.directory / 'requirements.txt'}")
    cache = wheelhouse / WHEEL_CACHE
    cache.mkdir(exist_ok=True)
    listing = wheelhouse / "requirements.flat.txt"
    listing.write_text(flat.stdout, encoding="utf-8")
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
           "-r", str(listing)]
    try:
        # From the cache alone first (no network); what it lacks, from the index into the cache.
        offline = [*pip, "--no-index", "--find-links", str(cache), "--dest", str(wheelhouse)]
        proc = subprocess.run(offline, capture_output=True, text=True)
        if proc.returncode:
            _say(f"downloading the wheels of {spec.name} that {cache} lacks (once; minutes for a framework)")
            proc = subprocess.run([*pip, "--dest", str(cache)], capture_output=True, text=True)
            if proc.returncode == 0:
                proc = subprocess.run(offline, capture_output=True, text=True)
    finally:
        listing.unlink()
    if proc.returncode:
        last = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        detail = " ".join(last[-1].split()) if last else "pip failed"
        if framework_pin and detail.endswith(f"found for {framework_pin}"):
            name = framework_pin.split("==")[0]
            raise UsageError(f"no wheel of {framework_pin} for this Python on the host's index ({detail}); pin a "
                             f"released version that has one (pip index versions {name})")
        raise UsageError(f"cannot gather the wheels of {spec.name} for the build ({detail}); "
                         f"check the pins in {spec.directory / 'requirements.txt'}")
    return len(list(wheelhouse.glob("*.whl")))


def build(name: str, base_image: str | None = None, framework_pin: str = "", rebuild: bool = False,
          progress: str = "lines", infer_runtimes: str = ""):
    """Build (or reuse) the image of reference `name`; returns the SDK Image. `progress`: "lines"
    shows every line of the build as it comes, "steps" one line as each Dockerfile step starts (a
    comparison's two builds), so a build of minutes is never silent."""
    import docker

    spec = registry.load_spec(name)
    infer_runtimes = check_infer_runtimes(infer_runtimes)
    check_requirements(spec)
    client = engine()
    tag = image_tag(spec, framework_pin, infer_runtimes)
    if base_image and not pinned_image(base_image):
        raise UsageError(f"BASE_IMAGE {base_image!r}: pin it by a tag other than latest, e.g. {DEFAULT_BASE_IMAGE}")
    local = local_images(client)
    base, why = choose_base(spec, base_image, local)
    if why:
        _say(why)
    root = project_root()
    write_compose(client)
    # An image of committed code is reused; one of uncommitted code (or of no git) is built again.
    if not rebuild and not re.search(r":nogit|-dirty(-|$)", tag):
        try:
            image = client.images.get(tag)
            if _labels(image).get("org.dawnbench.base-image", base) == base:
                _say(f"image {tag} exists ({image.id[:19]}); --rebuild to build again")
                return image
        except docker.errors.ImageNotFound:
            pass
    # Before the wheels (minutes): a base the build could not get fails in seconds, in one line.
    problem = None if base in local.tags else base_problem(client, base)
    if problem:
        raise UsageError(f"cannot build {tag}: the base {problem}: pull it, or pass BASE_IMAGE=<a local image>; "
                         f"`sudo make base-image` makes {LOCAL_BASE_IMAGE} from Debian's packages, which the "
                         f"CPU references then build on")
    started = time.monotonic()
    wheels = fill_wheelhouse(spec, framework_pin, infer_runtimes)
    gathered = time.monotonic()
    _say(f"building {tag} from {base}" + (f", {framework_pin}" if framework_pin else "")
         + (f", with {infer_runtimes}" if infer_runtimes else "")
         + (f", {wheels} wheels from the host's wheelhouse" if wheels else ", packages from the index"))
    last, error, steps = [], None, []     # steps: [Dockerfile step, its start], to say where the time went
    try:
        stream = client.api.build(path=str(root), dockerfile=f"references/{name}/Dockerfile", tag=tag,
                                  rm=True, forcerm=True, decode=True, pull=False,
                                  buildargs=build_args(spec, base, framework_pin, infer_runtimes),
                                  labels={"org.dawnbench.base-image": base})
        for chunk in stream:
            if "error" in chunk:
                error = chunk["error"].strip()
            text = chunk.get("stream", "").rstrip()
            if text.startswith("Step "):
                steps.append([text.split(" : ", 1)[-1], time.monotonic()])
                if progress == "steps":
                    _say(f"{' '.join(text.split())[:150]} ({steps[-1][1] - gathered:.0f} s)")
            if text:
                last = (last + [text])[-5:]
                if progress == "lines":
                    print(text, file=sys.stderr, flush=True)
            # A base pulled by the build: its stages (a layer's byte counts carry a progressDetail).
            elif "status" in chunk and "progressDetail" not in chunk:
                _say(" ".join(f"{chunk.get('id', '')} {chunk['status']}".split())[:150])
    except Exception as e:
        error = " ".join(str(e).split())
    finally:
        for old in (root / "docker" / "wheelhouse").glob("*.whl"):
            old.unlink()
    if error:
        pulling = any(s in error for s in ("pull access denied", "not found", "manifest unknown", "registry", "dial tcp"))
        hint = (f"the base {base} is not on this engine and cannot be pulled: pull it, or pass BASE_IMAGE=<a local "
                f"image>; `sudo make base-image` makes {LOCAL_BASE_IMAGE} from Debian's packages, which the "
                f"CPU references then build on" if pulling else "the lines above say which step")
        raise UsageError(f"building {tag} failed: {error[:300]} ({hint})")
    image = client.images.get(tag)
    done = time.monotonic()
    spans = sorted(((end - begin, step) for (step, begin), end in zip(steps, [t for _, t in steps[1:]] + [done])),
                   reverse=True)
    slowest = ", ".join(f"{' '.join(step.split())[:40]} {seconds:.0f} s" for seconds, step in spans[:3])
    _say(f"built {tag} ({image.id[:19]}) in {done - started:.0f} s: wheels {gathered - started:.0f} s"
         + (f"; slowest steps: {slowest}" if slowest else ""))
    return image


# ----------------------------------------------------------------------------------------------
# Running

def host_has_gpus() -> bool:
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0


def check_data(spec: registry.ReferenceSpec, data_root: Path | None) -> Path:
    """The host's data root (resolved) holding the reference's dataset folder, or one UsageError line."""
    data_root = Path(data_root or datasets.default_data_root()).resolve()
    try:
        datasets.check_present(spec.task.dataset, data_root)
    except datasets.DatasetError as e:
        raise UsageError(f"{e}; or give --data DIR") from None
    return data_root


def run(name: str, args: list[str], *, nproc: int = 1, gpus: str = "auto", data_root: Path | None = None,
        results: Path | None = None, base_image: str | None = None, framework_pin: str = "",
        image=None, infer_runtimes: str = "", judge_at: str = "image") -> int:
    """`dawnbench run NAME ARGS` in the reference's image; returns its exit status. `judge_at`: "image",
    the harness in the reference's image (its entrypoint); "host", the harness here, from this checkout
    and environment, and each worker a container of the image (run_judged_here)."""
    import docker

    spec = registry.load_spec(name)
    # The image holds no price table: an --instance is priced here, on the host.
    args = prices.resolve_instance_args(list(args))
    # --data and --results name host folders, as in a native run: they become the mounts.
    for option in ("--data", "--results"):
        for i, arg in enumerate(args):
            if arg == option or arg.startswith(option + "="):
                value = arg.partition("=")[2] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
                if not value:
                    raise UsageError(f"{option} needs a folder")
                del args[i:i + (1 if "=" in arg else 2)]
                if option == "--data":
                    data_root = Path(value)
                else:
                    results = Path(value)
                break
    for i, arg in enumerate(args):     # refused here, before a build of minutes, not in the container
        if arg == "--run-id" or arg.startswith("--run-id="):
            paths.check_name(arg.partition("=")[2] if "=" in arg else (args[i + 1] if i + 1 < len(args) else ""),
                             "--run-id")
    client = engine()
    image = image or build(name, base_image=base_image, framework_pin=framework_pin, infer_runtimes=infer_runtimes)
    data_root = check_data(spec, data_root)
    results = Path(results or paths.results_root()).resolve()
    runs_dir = results / name
    runs_dir.mkdir(parents=True, exist_ok=True)
    # The harness runs as the container's root so that it can drop the reference to uids of its own
    # (Docker's seccomp profile forbids the namespaces bubblewrap uses); it gives the run folder it
    # writes to the owner of results/<reference>/ on this host.
    user = CONTAINER_USER
    use_gpus = {"all": True, "none": False}.get(gpus, host_has_gpus())
    command = ["run", name, "--results", RESULTS_IN_CONTAINER, *args]
    entrypoint = rank_entrypoint(nproc)
    tag = image.tags[0] if image.tags else image.id
    if judge_at == "host":
        return run_judged_here(name, args, image_id=image.id, tag=tag, nproc=nproc, data_root=data_root,
                               results=results)
    before = set(runs_dir.iterdir())
    _say(f"runtime: docker, image {tag}, {'GPUs: all' if use_gpus else 'no GPUs'}, data {data_root} (read-only), "
         f"results {results}")
    volumes = {str(data_root): {"bind": DATA_IN_CONTAINER, "mode": "ro"},
               str(results): {"bind": RESULTS_IN_CONTAINER, "mode": "rw"}}
    # A dataset too big to copy per run (ImageNet) is mounted a second time per role, where only
    # that role's sandboxed uid may enter (the image makes those folders; harness.sandbox, uid mode).
    for role, folder, relative in data_views.folder_views(spec.task.dataset, data_root):
        volumes[str(folder)] = {"bind": str(uid_mode.ROLE_MOUNTS / role / relative), "mode": "ro"}
    environment_vars = {"DAWNBENCH_IMAGE": tag, "DAWNBENCH_IMAGE_DIGEST": image.id,
                        # the harness ranks' shared secret (harness.collective); the workers never see it
                        "DAWNBENCH_RUN_TOKEN": secrets.token_hex(16),
                        # the harness's messages name commands the user runs here, on the host
                        errors.PROG_ENV: errors.command(),
                        # no library of the image's ENV loaded into the judge's processes (harness/judge.py)
                        **{hook: "" for hook in judge.LOADER_HOOKS}}
    # A datasets manifest override on the host (the checksums of a fixture, or of a mirror's files)
    # goes along, as in a native run: the harness records it and says the run is unofficial.
    override = os.environ.get(datasets.MANIFEST_ENV)
    if override:
        manifest = Path(override).resolve()
        if not manifest.is_file():
            raise UsageError(f"${datasets.MANIFEST_ENV}={override} is not a file; fix the path or unset the variable")
        volumes[str(manifest)] = {"bind": f"{MANIFEST_IN_CONTAINER}/{manifest.name}", "mode": "ro"}
        environment_vars[datasets.MANIFEST_ENV] = f"{MANIFEST_IN_CONTAINER}/{manifest.name}"
    # Named before it exists, so that its lifeline holds it from the first instant.
    container_name = f"dawnbench-{name}-{secrets.token_hex(6)}"
    lifeline = _lifeline(container_name)
    try:
        container = client.containers.run(
            image.id, command=command, entrypoint=entrypoint, detach=True, user=user, shm_size="1g",
            volumes=volumes, network_mode=NETWORK_MODE, name=container_name,
            # No commit here: the image's build record names it (an environment variable could name any).
            environment=environment_vars,
            device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if use_gpus else None,
            labels={"org.dawnbench.run-of": name})
        said: set[str] = set()      # the host folders the harness's own `results:` lines named
        try:
            try:
                relay(container.logs(stream=True, follow=True), results, sys.stderr.buffer, said)
                status = container.wait()["StatusCode"]
            except KeyboardInterrupt:
                container.stop(timeout=30)      # SIGTERM: the harness ends the run as DNC and writes its files
                status = container.wait()["StatusCode"]
        finally:
            container.remove(force=True)
    finally:
        lifeline.stdin.close()       # nothing left to stop: it finds no container and ends
        lifeline.wait()
    # A harness stopped before its last line left a folder it never named.
    for run_dir in sorted(set(runs_dir.iterdir()) - before):
        if str(run_dir) not in said:
            print(f"results: {run_dir}", file=sys.stderr, flush=True)
    return status


def run_judged_here(name: str, args: list[str], *, image_id: str, tag: str, nproc: int, data_root: Path,
                    results: Path) -> int:
    """The judge here (this checkout's harness/ in this environment, a judge process: harness/judge.py),
    each worker a container of the image (harness.sandbox.container_mode): nothing of the image's
    layers runs in the judge (docs/RULES.md, "The judge in an image"). One rank: several would need
    their trainers on the judge's network (--network container:JUDGE), not built yet."""
    if nproc > 1:
        raise UsageError("--judge host runs one rank: give --nproc 1 (several ranks' trainers would need the "
                         "judge's network, which container mode does not give yet), or --judge image")
    _say(f"runtime: docker, the judge here, each worker a container of {tag}; data {data_root} (read-only), "
         f"results {results}")
    env = judge.environment(None, DAWNBENCH_ISOLATION="container", DAWNBENCH_WORKER_IMAGE=image_id,
                            DAWNBENCH_WORKER_PYTHON=worker_env.IMAGE_PYTHON, DAWNBENCH_IMAGE=tag,
                            DAWNBENCH_IMAGE_DIGEST=image_id, **{errors.PROG_ENV: errors.command()})
    command = judge.command("harness", "run", name, "--data", str(data_root), "--results", str(results), *args)
    return subprocess.run(command, env=env).returncode


# Run as `python -c _STOP_AT_EOF CONTAINER_NAME`, its stdin the launcher's pipe. At end of file, which
# the kernel gives it the moment the launcher ends, whatever ended it (a kill -9 included), the
# container is stopped (SIGTERM: the harness writes its DNC result; SIGKILL 30 s later) and removed:
# a detached container would otherwise train on, and hold its GPUs, with nobody to read it (issue 34).
_STOP_AT_EOF = """
import signal, sys
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_IGN)      # the launcher's own Ctrl-C handling stops the container
sys.stdin.buffer.read()
import docker
try:
    container = docker.from_env().containers.get(sys.argv[1])
except docker.errors.DockerException:
    sys.exit(0)                             # never started, or removed by the launcher
try:
    container.stop(timeout=30)
finally:
    container.remove(force=True)
"""


def rank_entrypoint(nproc: int) -> list[str] | None:
    """The container's entrypoint for `nproc` ranks (None: the image's own, one harness): the rank launcher
    and each rank's harness are judge processes of the image's harness environment, as the entrypoint runs
    the harness (issue 33), never the reference's torchrun in /opt/venv (issue 46)."""
    if nproc <= 1:
        return None
    return [HARNESS_PYTHON, "-I", "-u", f"{CODE_IN_IMAGE}/harness/judge.py", "harness.local_ranks",
            "--nproc-per-node", str(nproc), "-m", "harness"]


def _lifeline(container_name: str) -> subprocess.Popen:
    """A process that stops and removes `container_name` once this one has ended (_STOP_AT_EOF)."""
    return subprocess.Popen([sys.executable, "-c", _STOP_AT_EOF, container_name], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


RESULTS_MARK = b"results: "    # how the harness's last line names its run folder (harness.runner)


def relay(chunks, results: Path, out, said: set[str]) -> None:
    """Write the container's output to `out` line by line, each `results:` line naming the host
    folder (:func:`host_results_line`), and add the folders named to `said`. Lines, not chunks:
    a chunk may end inside a line."""
    pending = b""
    try:
        for chunk in chunks:
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                line = host_results_line(line, results)
                if line.startswith(RESULTS_MARK):
                    said.add(line[len(RESULTS_MARK):].rstrip(b"\r").decode(errors="replace"))
                out.write(line + b"\n")
            # A line that cannot be a `results:` one goes out at once: a progress bar ends its
            # updates with \r, not \n.
            if pending[:len(RESULTS_MARK)] != RESULTS_MARK[:len(pending)]:
                out.write(pending)
                pending = b""
            out.flush()
    finally:
        out.write(host_results_line(pending, results))
        out.flush()


def host_results_line(line: bytes, results: Path) -> bytes:
    """The harness's `results: <folder>` line with the folder as this host sees it: the results
    mount's host side in place of its path in the container. Any other line as it is."""
    prefix = f"results: {RESULTS_IN_CONTAINER}".encode()
    if line.startswith(prefix) and line[len(prefix):len(prefix) + 1] in (b"/", b"\r", b""):
        return f"results: {results}".encode() + line[len(prefix):]
    return line


def _say(message: str) -> None:
    print(f"dawnbench: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------

@reports_errors("dawnbench")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m dawnbench.containers", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="build a reference's image")
    p.add_argument("reference")
    p.add_argument("--base-image", default=None, help=f"default: the {BASE_ARG} of the reference's Dockerfile")
    p.add_argument("--framework-pin", default="", help="replace the framework requirement, e.g. tensorflow-cpu==2.20.0")
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--infer-runtimes", default="", metavar="|".join(INFER_RUNTIMES),
                   help="add the pinned runtimes of `infer --runtime` (requirements/infer-<runtime>.txt); default none")
    p = sub.add_parser("run", help="dawnbench run, in the reference's image")
    p.add_argument("reference")
    p.add_argument("--base-image", default=None)
    p.add_argument("--framework-pin", default="")
    p.add_argument("--infer-runtimes", default="", metavar="|".join(INFER_RUNTIMES))
    # one process a GPU (or a share of the cores): a thousand is beyond any one machine
    p.add_argument("--nproc", type=whole("--nproc", 1, 1024, 2), default=1,
                   help="processes under torchrun (PyTorch references)")
    p.add_argument("--gpus", choices=["auto", "all", "none"], default="auto")
    p.add_argument("--data", type=DATA_FOLDER, default=None)
    p.add_argument("--results", type=RESULTS_FOLDER, default=None)
    p.add_argument("--judge", choices=["image", "host"], default="image",
                   help="where the harness runs: in the image (default), or here with each worker a container "
                        "of the image, so that nothing of the image's layers runs in the judge")
    sub.add_parser("engine", help="exit 0 when a Docker engine answers")
    p = sub.add_parser("runtime", help=f"`make run`'s choice for a reference: say it; exit 0 for docker, "
                                       f"{RUNTIME_NATIVE} for native")
    p.add_argument("reference")
    p.add_argument("--base-image", default=None)
    sub.add_parser("compose", help="write docker-compose.yml: one service per reference there is now")
    p = sub.add_parser("base-image", help="a base image without a registry: Debian with Python (debootstrap, root)")
    p.add_argument("--tag", default=LOCAL_BASE_IMAGE, help=f"default: {LOCAL_BASE_IMAGE}")
    p.add_argument("--mirror", default=None, help=f"Debian mirror (default: ${DEBIAN_MIRROR_ENV} or {DEBIAN_MIRROR})")
    argv = sys.argv[1:] if argv is None else list(argv)
    forwarded = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.command == "engine":
        return 0 if engine_answers() else 1
    if args.command == "runtime":
        if args.base_image and not pinned_image(args.base_image):
            raise UsageError(f"BASE_IMAGE {args.base_image!r}: pin it by a tag other than latest, "
                             f"e.g. {DEFAULT_BASE_IMAGE}")
        why = docker_or_why(args.reference, args.base_image)
        if why is None:
            print("runtime: docker (an engine answers; RUNTIME=native to run here)", flush=True)
            return 0
        print(f"runtime: native ({why}; RUNTIME=docker to insist)", flush=True)
        return RUNTIME_NATIVE
    if args.command == "compose":
        write_compose()
        return 0
    if args.command == "base-image":
        make_base_image(args.tag, args.mirror)
        return 0
    if args.command == "build":
        image = build(args.reference, args.base_image, args.framework_pin, args.rebuild,
                      infer_runtimes=args.infer_runtimes)
        print(json.dumps({"tag": image.tags[0] if image.tags else None, "id": image.id}))
        return 0
    return run(args.reference, forwarded, nproc=args.nproc, gpus=args.gpus, data_root=args.data,
               results=args.results, base_image=args.base_image, framework_pin=args.framework_pin,
               infer_runtimes=args.infer_runtimes, judge_at=args.judge)


if __name__ == "__main__":
    sys.exit(main())
