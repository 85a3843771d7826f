"""The judge's image (docker/Dockerfile.judge): the maintainer's harness and its pins, built from the
project's own files only, never from a reference's Dockerfile (docs/RULES.md, "The judge in an image").

  python -m dawnbench.judge_image [--base-image IMAGE:TAG]    # build (or reuse); prints {"tag", "id"}

Its tag names the judge's code hash (harness/judge_hash.py), so a changed harness builds a new one and an
unchanged one is reused; its ID is what a run it judges records (provenance.judge_image, from
$DAWNBENCH_JUDGE_IMAGE, which the launcher sets to it).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dawnbench import containers
from harness import judge_hash
from harness.arguments import Parser, reports_errors
from harness.errors import UsageError

DOCKERFILE = "docker/Dockerfile.judge"
REPOSITORY = "dawnbench/judge"


def tag() -> str:
    """The judge image's tag: its code's hash, so a tag names one judge."""
    return f"{REPOSITORY}:{judge_hash.sha256()[:16]}"


def default_base(local: containers.LocalImages) -> str:
    """The CPU references' pinned base where the engine has it, else the one `make base-image` made there,
    else the pinned one (which the build pulls): the judge needs no CUDA."""
    if containers.DEFAULT_BASE_IMAGE in local.tags or not local.made_base:
        return containers.DEFAULT_BASE_IMAGE
    return local.made_base


def fill_wheelhouse(root: Path) -> int:
    """requirements/harness.txt's wheels into docker/wheelhouse/ (on the host, through its own index and
    PIP_FIND_LINKS): the build then installs offline. Returns how many."""
    wheelhouse = root / "docker" / "wheelhouse"
    for old in wheelhouse.glob("*.whl"):
        old.unlink()
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                           "--only-binary=:all:", "--dest", str(wheelhouse), "-r",
                           str(root / "requirements" / "harness.txt")], capture_output=True, text=True)
    if done.returncode:
        last = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        raise UsageError(f"cannot gather the judge's wheels (requirements/harness.txt): "
                         f"{' '.join(last[-1].split()) if last else 'pip failed'}")
    return len(list(wheelhouse.glob("*.whl")))


def build(base_image: str | None = None, rebuild: bool = False) -> dict[str, str]:
    """Build (or reuse) the judge image; returns {"tag", "id"}."""
    import docker

    client = containers.engine()
    name = tag()
    base = base_image or default_base(containers.local_images(client))
    if not containers.pinned_image(base):
        raise UsageError(f"--base-image {base!r}: pin it by a tag other than latest, e.g. {containers.DEFAULT_BASE_IMAGE}")
    if not rebuild:
        try:
            image = client.images.get(name)
            if image.labels.get("org.dawnbench.base-image") == base:
                return {"tag": name, "id": image.id}
        except docker.errors.ImageNotFound:
            pass
    root = containers.project_root()
    error = None
    try:
        fill_wheelhouse(root)
        for chunk in client.api.build(path=str(root), dockerfile=DOCKERFILE, tag=name, rm=True, forcerm=True,
                                      decode=True, pull=False, buildargs={containers.BASE_ARG: base},
                                      labels={"org.dawnbench.base-image": base}):
            error = chunk["error"].strip() if "error" in chunk else error
    except docker.errors.DockerException as e:
        error = " ".join(str(e).split())
    finally:
        for old in (root / "docker" / "wheelhouse").glob("*.whl"):
            old.unlink()
    if error:
        raise UsageError(f"building the judge image {name} on {base} failed: {error[:300]}")
    return {"tag": name, "id": client.images.get(name).id}


@reports_errors("dawnbench")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m dawnbench.judge_image", description="Build the judge's image.")
    parser.add_argument("--base-image", help="the base (pinned by tag); default: the CPU references' base on this engine")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(build(args.base_image, args.rebuild)), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
