"""Where a run's code and data came from, and whether the run can be an official result.

The runner calls :func:`collect` once, before any of the reference's code runs, and puts what it
returns into result.json:

    git                 {"commit", "dirty", "source": "git" | "image" | null, "paths"}
    provenance          {"reference_tree_sha256", "datasets", "overrides", "build"}
    official            true only when unofficial_reasons is empty
    unofficial_reasons  one line each; the runner adds its own (a lowered threshold, ...)

The commit is never taken from the environment. Natively it is git's, of the repository holding
the reference directory, and the run is dirty when `git status` shows any change there, in
harness/ or in common/: tracked, untracked or ignored (only `__pycache__` is let through). In an
image, git is absent: the build wrote /opt/dawnbench/build.json from the host's build arguments
(commit, dirty, the reference tree's hash), and it is believed only while the reference
directory still hashes to what the build recorded. `DAWNBENCH_GIT_COMMIT` in the environment is
recorded as an override and makes the run unofficial, as does a datasets manifest override.

Standard library only: this module runs in every image, whatever the framework.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from harness import paths
from harness.arguments import path_problem
from harness.datasets import MANIFEST_ENV
from harness.errors import PROG_ENV
from harness.sandbox import kernel

BUILD_INFO = Path("/opt/dawnbench/build.json")     # written by every reference image's build
BUILD_INFO_ENV = "DAWNBENCH_BUILD_INFO"            # tests only: another build record (never official)
GIT_COMMIT_ENV = "DAWNBENCH_GIT_COMMIT"
ENV_PREFIX = "DAWNBENCH_"
SKIPPED_DIRS = ("__pycache__",)                    # never read: references run with PYTHONPYCACHEPREFIX
COMMIT_RE = re.compile(r"[0-9a-f]{7,64}")
# What `dawnbench fork` writes where the fork's own words are still to come (its model's text, its README):
# an entry must not describe the original's network under the fork's name, so a run is unofficial while
# reference.toml's `model` begins with it.
FORK_TODO = "TODO(fork)"

# Overrides that change what a run is measured against or what it says it is.
UNOFFICIAL_OVERRIDES = {
    MANIFEST_ENV: "the datasets manifest is replaced by {name}={value}: the eval data is not checked against "
                  "the official checksums (unset it)",
    GIT_COMMIT_ENV: "{name} is set: an environment variable cannot name the commit (unset it; the commit comes "
                    "from git or the image's build)",
    BUILD_INFO_ENV: "the build record is read from {name}={value}, not from the image (unset it)",
}


# ---------------------------------------------------------------- the reference tree's hash

def tree_hash(directory: str | os.PathLike) -> str:
    """sha256 over every entry under `directory`, tracked by git or not, in a fixed order: each
    file's relative path and content hash, each symlink's path and target text (never followed),
    each directory's path. `__pycache__` directories are skipped. Modes and times are not hashed,
    so a copy (`COPY` into an image, a fresh clone) hashes the same."""
    root = Path(directory)
    if not root.is_dir():
        raise OSError(f"{root} is not a directory")
    total = hashlib.sha256()

    def add(kind: bytes, rel: str, digest: str) -> None:
        total.update(kind + b"\0" + os.fsencode(rel) + b"\0" + digest.encode() + b"\n")

    def walk(folder: Path, prefix: str) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: os.fsencode(e.name))
        for entry in entries:
            rel = prefix + entry.name
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                add(b"l", rel, hashlib.sha256(os.fsencode(os.readlink(entry.path))).hexdigest())
            elif stat.S_ISDIR(mode):
                if entry.name in SKIPPED_DIRS:
                    continue
                add(b"d", rel, "")
                walk(Path(entry.path), rel + "/")
            elif stat.S_ISREG(mode):
                digest = hashlib.sha256()
                with open(entry.path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        digest.update(chunk)
                add(b"f", rel, digest.hexdigest())
            else:       # a fifo or socket: its presence, not its content
                add(b"o", rel, "")

    walk(root, "")
    return total.hexdigest()


# ---------------------------------------------------------------- git, natively

def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=30,
                              preexec_fn=kernel.dies_with_harness())
    except (OSError, subprocess.TimeoutExpired):
        return None


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def _pycache_only(status_path: str) -> bool:
    return any(part in SKIPPED_DIRS for part in status_path.rstrip("/").split("/"))


def git_state(reference_dir: Path, code_dirs: list[Path]) -> tuple[dict, list[str]]:
    """({"commit", "dirty", "source", "paths"}, reasons) of the git repository holding
    `reference_dir`; dirtiness over it and those of `code_dirs` inside the same repository."""
    reference_dir = Path(reference_dir).resolve()
    none = {"commit": None, "dirty": None, "source": None, "paths": []}
    top = _git(["rev-parse", "--show-toplevel"], reference_dir)
    head = _git(["rev-parse", "HEAD"], reference_dir)
    if top is None or top.returncode or head is None or head.returncode:
        return none, [f"the code is not in a git repository ({paths.public(str(reference_dir))}), so no commit names it "
                      f"(commit it, or run an image built by `make build`)"]
    root = Path(top.stdout.strip()).resolve()
    reasons = []
    checked = [reference_dir]
    for code in (Path(d).resolve() for d in code_dirs):
        if _inside(code, root):
            checked.append(code)
        else:
            reasons.append(f"{paths.public(str(code))} is outside the reference's git repository "
                           f"{paths.public(str(root))}, so its commit does not "
                           f"name that code (run from one checkout)")
    status = _git(["status", "--porcelain", "-z", "--untracked-files=all", "--ignored=matching", "--",
                   *(str(p) for p in checked)], root)
    if status is None or status.returncode:
        detail = (status.stderr.strip().splitlines() or ["no answer"])[0] if status else "git did not answer"
        return {**none, "commit": head.stdout.strip()}, [f"git status failed in {paths.public(str(root))}: {detail}"]
    changed = [entry[3:] for entry in status.stdout.split("\0") if entry]
    changed = [p for p in changed if not _pycache_only(p)]
    git = {"commit": head.stdout.strip(), "dirty": bool(changed), "source": "git",
           "paths": [os.path.relpath(p, root) for p in checked]}
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        reasons.append(f"the code differs from commit {git['commit'][:12]}: {changed[0]}{more} changed or not "
                       f"committed (git status; commit every change, untracked files included)")
    return git, reasons


# ---------------------------------------------------------------- the image's build record

def build_state(info_path: Path, spec_name: str, tree: str | None) -> tuple[dict, dict | None, list[str]]:
    """(git fields, the build record as read, reasons) from an image's build record."""
    none = {"commit": None, "dirty": None, "source": "image", "paths": []}
    problem = path_problem(info_path, ("a file",))      # a FIFO would block the read for ever
    if problem:
        return none, None, [f"the image's build record {info_path} {problem}; rebuild the image with `make build`"]
    try:
        info = json.loads(Path(info_path).read_text(encoding="utf-8"))
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return none, None, [f"the image's build record {info_path} cannot be read ({exc}); rebuild the image "
                            f"with `make build`"]
    record = {"path": paths.public(str(info_path)), **info}
    reasons = []
    commit = info.get("commit")
    commit = commit if isinstance(commit, str) and COMMIT_RE.fullmatch(commit) else None
    dirty = {True: True, False: False, "true": True, "false": False}.get(info.get("dirty"))
    baked = info.get("reference_tree_sha256")
    if info.get("reference") not in (None, spec_name):
        reasons.append(f"the image was built for {info.get('reference')!r}, not {spec_name!r} (build this "
                       f"reference's image)")
    if not baked:
        reasons.append(f"the image's build record {info_path} has no reference tree hash, so its commit cannot "
                       f"be checked (build the image with `make build`)")
        return none, record, reasons
    if baked != tree:
        reasons.append(f"the reference directory is not the one the image was built with (tree sha256 {tree} "
                       f"now, {baked} at build); rebuild the image")
        return none, record, reasons
    if commit is None:
        reasons.append(f"the image was built without a commit ({info.get('commit')!r}); build it from a git "
                       f"checkout with `make build`")
    if dirty is not False:
        reasons.append("the image was built from a tree with uncommitted changes (dirty: "
                       f"{json.dumps(info.get('dirty'))}); commit them and rebuild")
    return {"commit": commit, "dirty": dirty, "source": "image", "paths": []}, record, reasons


# ---------------------------------------------------------------- everything together

def overrides() -> dict[str, str]:
    """Every DAWNBENCH_* variable in this process's environment: name -> value, a path of this machine as
    paths.public writes it (result.json goes into a public entry: $DAWNBENCH_WORKER_PYTHON, the data or a
    manifest's folder name the machine, not the run). Not $DAWNBENCH_PROG: how the user typed the command
    (harness.errors.command) changes nothing a run measures."""
    return {k: paths.public(v) for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIX) and k != PROG_ENV}


def code_dirs() -> list[Path]:
    """harness/ and, next to it, common/ (absent from a bare harness install)."""
    harness = Path(__file__).resolve().parent
    return [harness] + [d for d in (harness.parent / "common",) if d.is_dir()]


def collect(spec, verified_files: dict, reasons: list[str] | tuple = ()) -> dict:
    """result.json's provenance fields for a run of `spec` (a registry.ReferenceSpec):
    {"git", "provenance", "official", "unofficial_reasons"}. `verified_files` is what the harness
    checked ({dataset: {file: {"sha256"|"md5", "size"}}}, harness.datasets.verified_files());
    `reasons` are the runner's own reasons this run is not official, listed first."""
    reasons = list(reasons)
    env = overrides()
    try:
        tree = tree_hash(spec.directory)
    except OSError as exc:
        tree = None
        reasons.append(f"the reference directory {paths.public(str(spec.directory))} cannot be hashed "
                       f"({exc.strerror or type(exc).__name__}); make it readable")
    info_path = Path(os.environ.get(BUILD_INFO_ENV) or BUILD_INFO)      # the file itself: env holds what is published
    build = None
    if BUILD_INFO_ENV in env or info_path.is_file():
        git, build, found = build_state(info_path, spec.name, tree)
    else:
        git, found = git_state(spec.directory, code_dirs())
    for name, why in UNOFFICIAL_OVERRIDES.items():
        if name in env:
            reasons.append(why.format(name=name, value=env[name]))
    if str(getattr(spec, "model", "")).startswith(FORK_TODO):      # a stand-in spec may have none
        reasons.append(f"reference.toml's model still reads {FORK_TODO} (as `dawnbench fork` left it): describe "
                       f"the fork's model there (model = \"...\", its entries' name) and commit")
    reasons += found
    reasons = [r.replace("\r", "\\r").replace("\n", "\\n") for r in reasons]     # one line each, whatever a file is called
    return {
        "git": git,
        "provenance": {"reference_tree_sha256": tree, "datasets": verified_files, "overrides": env, "build": build},
        "official": not reasons,
        "unofficial_reasons": reasons,
    }


def official_line(result: dict) -> str:
    """The run's verdict in one line: `official: yes`, or `unofficial: ` and every reason, "; " between
    them (result.json's unofficial_reasons), so that one rerun can fix them all."""
    reasons = result.get("unofficial_reasons")
    listed = [r for r in reasons if isinstance(r, str)] if isinstance(reasons, list) else []
    if result.get("official") is True and not listed:
        return "official: yes"
    return f"unofficial: {'; '.join(listed) or 'result.json records no reason (rerun with this harness)'}"


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "tree-hash":
        print(tree_hash(argv[1]))
        return 0
    print("usage: python -m harness.provenance tree-hash DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
