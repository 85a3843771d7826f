"""A reference's pinned requirements, flattened, with the framework pin swapped: used on the host
(to fill the wheelhouse with `pip download`) and inside the image build (to install), so both
resolve exactly the same list. Standard library only: it runs in a bare base image.

  python3 docker/requirements.py flatten REQUIREMENTS [FRAMEWORK_PIN] > flat.txt
  python3 docker/requirements.py install REQUIREMENTS [FRAMEWORK_PIN]   # into /opt/venv

$INFER_RUNTIMES (the image's build argument: onnxruntime, openvino, or both) adds the pinned
runtimes of `dawnbench infer --runtime` (requirements/infer-<runtime>.txt); none by default.

FRAMEWORK_PIN (e.g. `tensorflow-cpu==2.20.0`, `torch==2.13.0`, `tensorflow[and-cuda]==2.21.0`)
replaces the requirement of the reference's framework (the line naming torch or tensorflow*):
the only difference between the two images of a version-bump comparison.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

VENV = Path("/opt/venv")
WHEELHOUSE = Path("/wheelhouse")
FRAMEWORK_FAMILIES = ("torch", "tensorflow", "mxnet", "jax")   # a pin replaces its family's line
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def family(requirement: str) -> str | None:
    match = NAME.match(requirement)
    if not match:
        return None
    name = match.group(1).lower().replace("_", "-")
    for fam in FRAMEWORK_FAMILIES:
        if name == fam or name.startswith(fam + "-"):
            return fam
    return None


def read(path: Path) -> list[str]:
    """The requirement lines of `path`, with `-r` includes inlined (relative to the including file)."""
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            lines += read((path.parent / line.split(None, 1)[1]).resolve())
        else:
            lines.append(line)
    return lines


def flatten(path: Path, pin: str = "") -> list[str]:
    lines = read(path) + infer_runtimes()
    if not pin:
        return lines
    fam = family(pin)
    if fam is None:
        sys.exit(f"framework pin {pin!r}: expected a requirement of one of {', '.join(FRAMEWORK_FAMILIES)}, "
                 f"e.g. tensorflow-cpu==2.20.0")
    if "==" not in pin:
        sys.exit(f"framework pin {pin!r}: pin an exact version with ==, e.g. {pin.split('<')[0].split('>')[0]}==X.Y.Z")
    kept = [line for line in lines if family(line) != fam]
    if len(kept) == len(lines):
        sys.exit(f"framework pin {pin!r}: {path} has no {fam} requirement to replace")
    return kept + [pin]


def infer_runtimes() -> list[str]:
    """The pinned requirements of the runtimes $INFER_RUNTIMES names (the image's build argument, e.g.
    "onnxruntime openvino"): requirements/infer-<runtime>.txt, beside this script's docker/ folder."""
    requirements = Path(__file__).resolve().parent.parent / "requirements"
    lines = []
    for runtime in os.environ.get("INFER_RUNTIMES", "").replace(",", " ").split():
        if not (requirements / f"infer-{runtime}.txt").is_file():
            sys.exit(f"INFER_RUNTIMES {runtime!r}: expected onnxruntime, openvino or both")
        lines += [line for line in read(requirements / f"infer-{runtime}.txt") if line not in lines]
    return lines


def install(path: Path, pin: str = "") -> None:
    flat = Path("/tmp/requirements.flat.txt")
    flat.write_text("\n".join(flatten(path, pin)) + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    # A filled wheelhouse is the only source (offline builds); an empty one means the index.
    source = ["--no-index", "--find-links", str(WHEELHOUSE)] if any(WHEELHOUSE.glob("*.whl")) else []
    # A Dockerfile declares PIP_EXTRA_INDEX_URL= (empty) where PyPI's default build is the one it
    # wants; an empty setting is no setting.
    env = {k: v for k, v in os.environ.items() if not (k.startswith("PIP_") and not v.strip())}
    subprocess.run([str(VENV / "bin" / "pip"), "install", "--no-cache-dir", "--disable-pip-version-check",
                    *source, "-r", str(flat)], check=True, env=env)
    subprocess.run([str(VENV / "bin" / "pip"), "check"], check=True)


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3) or argv[0] not in ("flatten", "install"):
        sys.exit(__doc__)
    path, pin = Path(argv[1]), (argv[2] if len(argv) == 3 else "").strip()
    if argv[0] == "flatten":
        print("\n".join(flatten(path, pin)))
    else:
        install(path, pin)


if __name__ == "__main__":
    main(sys.argv[1:])
