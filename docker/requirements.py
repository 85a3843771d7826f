"""A reference's pinned requirements, flattened, with the framework pin swapped: used on the host
(to fill the wheelhouse with `pip download`) and inside the image build (to install), so both
resolve exactly the same list. Standard library only: it runs in a bare base image.

  python3 docker/requirements.py check REQUIREMENTS                     # the one-line refusal, or nothing
  python3 docker/requirements.py flatten REQUIREMENTS [FRAMEWORK_PIN] > flat.txt
  python3 docker/requirements.py install REQUIREMENTS [FRAMEWORK_PIN]   # into /opt/venv, and /opt/harness
  python3 docker/requirements.py pip-install PIP [PIP INSTALL ARGS...]  # wheels only (make setup's install)

/opt/venv is the reference's environment, where only the sandboxed workers run; /opt/harness holds
the harness's own requirements (the shared file the reference includes: requirements/harness.txt, or
harness-numpy1.txt), which nothing of the reference's reaches, and the image's entrypoint runs the
harness from it (docker/entrypoint.sh; docs/RULES.md, "The harness's environment").

A reference's requirements are checked before anything is installed (`check`, and `flatten` and
`install` first): only pinned releases from the package index (`name[extras]==version[; marker]`,
optionally with `--hash=sha256:...`), wheels by https URL with their sha256 (`name @ https://...whl
--hash=sha256:...`), and `-r` of the repository's shared files under requirements/. A local path, a URL
without its hash, `-e`, an index or find-links option, an unpinned name: each can bring code (a `.pth`
file runs in every interpreter of the environment) that nobody reviewed from the pins, so each is
refused in one line naming the line and the fix.

They install as wheels only (`pip install --only-binary :all:`): a source distribution runs its build
code (setup.py) on the machine that installs it, the host natively, before any sandbox exists. A
requirement that has no wheel for this platform and Python is refused in one line.

$INFER_RUNTIMES (the image's build argument: onnxruntime, openvino, or both) adds the pinned
runtimes of `dawnbench infer --runtime` (requirements/infer-<runtime>.txt) to /opt/harness, where the
harness's timing process runs them; none by default.

FRAMEWORK_PIN (e.g. `tensorflow-cpu==2.20.0`, `torch==2.13.0`, `tensorflow[and-cuda]==2.21.0`)
replaces the requirement of the reference's framework (the line naming torch or tensorflow*), or, for
another package (`numpy==2.3.5`), that package's line: the only difference between the two images (or
native environments) of a version-bump comparison.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

VENV = Path("/opt/venv")
HARNESS_VENV = Path("/opt/harness")
HARNESS_FILES = ("harness-numpy1.txt", "harness.txt")   # the shared harness pins a reference may include
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


# name[extras]==version[; marker]: one exact release of the index (no wildcard, no `===`).
PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?\s*==\s*[A-Za-z0-9.+!_-]+\s*(;.+)?$")
# name[extras] @ https://.../file.whl[; marker]: a wheel by URL, allowed only with its --hash.
WHEEL_URL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?\s*@\s*https://\S+\.whl\s*(;.+)?$")
COMMENT = re.compile(r"(^|\s)#.*$")     # pip's: a # at the start or after white space
HASH = re.compile(r"^--hash[= ]sha256:[0-9a-f]{64}$")
INCLUDE = ("-r", "--requirement")
SHARED = "requirements"     # the repository's shared requirement files (beside references/ and docker/)


WHEELS_ONLY = ("--only-binary", ":all:")
NO_WHEEL = re.compile(r"No matching distribution found for (\S+)")


class Refused(ValueError):
    """A requirement line that could bring unreviewed code into the environment; its one-line reason."""


def _logical_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) without comments and blank lines, a trailing backslash joining the next."""
    found, pending, start = [], "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = COMMENT.sub("", raw)
        if not pending:
            start = number
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        line = (pending + text).strip()
        pending = ""
        if line:
            found.append((start, line))
    return found


def _shared_root(path: Path) -> Path:
    """The shared requirements folder a file may include from: <root>/requirements, where a reference's
    file is <root>/references/<name>/requirements.txt and a shared file is <root>/requirements/<file>."""
    path = path.resolve()
    root = path.parent.parent if path.parent.name == SHARED else path.parent.parent.parent
    return root / SHARED


def check_line(line: str) -> None:
    """Nothing, or Refused with what is wrong with `line` and how to fix it."""
    words = line.split()
    if words[0] in INCLUDE or words[0].startswith("--requirement="):
        return
    first = words[0]
    hashes = [w for w in words if w.startswith("--hash")]
    requirement = " ".join(w for w in words if not w.startswith("--hash"))
    if first.startswith("-"):
        option = first.split("=", 1)[0]
        raise Refused(f"option {option} is not allowed: packages come from the index by exact pin "
                      f"(name==version), or from an https wheel URL with --hash=sha256:...")
    bad_hash = [w for w in hashes if not HASH.match(w)]
    if bad_hash:
        raise Refused(f"{bad_hash[0]}: give the wheel's sha256 as --hash=sha256:<64 hex digits>")
    if PINNED.match(requirement):
        return
    if WHEEL_URL.match(requirement):
        if hashes:
            return
        raise Refused("a wheel URL without its sha256: add --hash=sha256:<the wheel's sha256>")
    if requirement.startswith("https://") and requirement.split(";")[0].strip().endswith(".whl"):
        raise Refused("name the wheel's project: name @ https://.../file.whl --hash=sha256:<the wheel's sha256>")
    if "://" in requirement or requirement.startswith((".", "/", "~")) or "/" in requirement.split(";")[0] \
            or requirement.split(";")[0].strip().endswith((".whl", ".tar.gz", ".zip")):
        raise Refused("a local path or URL is not allowed: publish the package and pin it (name==version), or "
                      "name an https wheel URL with --hash=sha256:...")
    raise Refused("not pinned: name one release exactly, name==version (e.g. numpy==2.4.6)")


def check(path: Path, shared: Path | None = None) -> list[tuple[Path, int, str]]:
    """Every requirement line of `path` and of the shared files it includes, checked: (file, line
    number, text) in order; Refused, naming the file and line, at the first that is not allowed."""
    shared = (shared or _shared_root(path)).resolve()
    found = []
    for number, line in _logical_lines(path):
        where = f"{path}:{number}: {line}"
        try:
            check_line(line)
        except Refused as e:
            raise Refused(f"{where}: {e}") from None
        words = line.split(None, 1)
        if words[0] in INCLUDE or words[0].startswith("--requirement="):
            target = words[1].strip() if words[0] in INCLUDE and len(words) > 1 else words[0].partition("=")[2]
            included = (path.parent / target).resolve()
            if included.parent != shared or not included.is_file():
                raise Refused(f"{where}: -r may include only the repository's shared files ({shared}/*.txt)")
            found += check(included, shared)
        else:
            found.append((path, number, line))
    return found


def read(path: Path) -> list[str]:
    """The requirement lines of `path`, checked (`check`), with `-r` includes inlined."""
    return [line for _, _, line in check(path)]


def flatten(path: Path, pin: str = "", runtimes: bool = True) -> list[str]:
    """The reference's lines with the framework pin swapped; with `runtimes`, $INFER_RUNTIMES's too (all that
    the image installs: the wheelhouse downloads them all)."""
    lines = read(path) + (infer_runtimes() if runtimes else [])
    if not pin:
        return lines
    fam = family(pin)
    if "==" not in pin:
        sys.exit(f"framework pin {pin!r}: pin an exact version with ==, e.g. {pin.split('<')[0].split('>')[0]}==X.Y.Z")
    if not NAME.match(pin):
        sys.exit(f"framework pin {pin!r}: expected name==version, e.g. tensorflow-cpu==2.20.0")
    # a framework's pin replaces its family's line (tensorflow-cpu for tensorflow); any other package's, its own
    # (numpy==2.3.5: a version-bump comparison of a library the framework runs on)
    same = (lambda line: family(line) == fam) if fam else (lambda line: project(line) == project(pin))
    kept = [line for line in lines if not same(line)]
    if len(kept) == len(lines):
        sys.exit(f"framework pin {pin!r}: {path} has no {fam or project(pin)} requirement to replace")
    return kept + [pin]


def project(requirement: str) -> str | None:
    """A requirement's project name, normalized (PEP 503): numpy, pyyaml, tensorflow-cpu."""
    match = NAME.match(requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None


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


def harness_requirements(path: Path) -> Path:
    """The shared harness pins `path` includes (the MXNet reference's numpy 1 ones, else
    requirements/harness.txt): what the harness's own environment is made of."""
    included = {file.name: file for file, _, _ in check(path) if file.parent == _shared_root(path).resolve()}
    return next((included[name] for name in HARNESS_FILES if name in included), _shared_root(path) / "harness.txt")


def pip_install(pip: list[str], args: list[str], env: dict | None = None) -> None:
    """`pip install` of `args` as wheels only; Refused, in one line, naming a requirement that has no
    wheel here; CalledProcessError for any other failure (pip's own lines said why)."""
    done = subprocess.run([*pip, "install", *WHEELS_ONLY, *args], stdout=None, stderr=subprocess.PIPE, text=True,
                          errors="replace", env=env)
    if done.returncode == 0:
        sys.stderr.write(done.stderr)
        return
    missing = NO_WHEEL.search(done.stderr)
    if missing:
        raise Refused(f"{missing.group(1)} has no wheel for this platform and Python on the package index: "
                      f"requirements install as wheels only, so that no package's build code runs on the host "
                      f"(pin a release that has one, or build the wheel and name it by https URL with "
                      f"--hash=sha256:...)")
    sys.stderr.write(done.stderr)
    raise subprocess.CalledProcessError(done.returncode, done.args)


def _venv(venv: Path, requirements: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # A filled wheelhouse is the only source (offline builds); an empty one means the index.
    source = ["--no-index", "--find-links", str(WHEELHOUSE)] if any(WHEELHOUSE.glob("*.whl")) else []
    # A Dockerfile declares PIP_EXTRA_INDEX_URL= (empty) where PyPI's default build is the one it
    # wants; an empty setting is no setting.
    env = {k: v for k, v in os.environ.items() if not (k.startswith("PIP_") and not v.strip())}
    pip_install([str(venv / "bin" / "pip")], ["--no-cache-dir", "--disable-pip-version-check", *source, "-r",
                                            str(requirements)], env)
    subprocess.run([str(venv / "bin" / "pip"), "check"], check=True)


def install(path: Path, pin: str = "") -> None:
    flat = Path("/tmp/requirements.flat.txt")
    flat.write_text("\n".join(flatten(path, pin, runtimes=False)) + "\n", encoding="utf-8")
    _venv(VENV, flat)
    # The harness's own environment: its pins only, never the reference's requirements, and the runtimes of
    # `infer --runtime`, whose timing process is the harness's (a judge process: docs/RULES.md, "Inference")
    judge = Path("/tmp/requirements.harness.txt")
    judge.write_text("\n".join(dict.fromkeys([*read(harness_requirements(path)), *infer_runtimes()])) + "\n",
                     encoding="utf-8")
    _venv(HARNESS_VENV, judge)


def main(argv: list[str]) -> None:
    if argv[:1] == ["pip-install"] and len(argv) >= 2:
        try:
            pip_install([argv[1]], argv[2:])
        except Refused as e:
            sys.exit(f"requirements refused: {e}")
        except subprocess.CalledProcessError as e:
            sys.exit(e.returncode)
        return
    if len(argv) not in (2, 3) or argv[0] not in ("check", "flatten", "install"):
        sys.exit(__doc__)
    path, pin = Path(argv[1]), (argv[2] if len(argv) == 3 else "").strip()
    try:
        check(path)
    except (Refused, OSError, UnicodeDecodeError) as e:
        sys.exit(f"requirements refused: {e}")
    if argv[0] == "check":
        return
    if argv[0] == "flatten":
        print("\n".join(flatten(path, pin)))
    else:
        try:
            install(path, pin)
        except Refused as e:
            sys.exit(f"requirements refused: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])
