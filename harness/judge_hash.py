"""The judge's code and its hash: what every run records, and what `validate` and the board compare.

The judge is the code that times, scores, verifies and reproduces a run. Its hash covers, under the
checkout (or the image's /opt/dawnbench) that the harness is imported from, exactly JUDGE_PATHS:

    harness/                       the harness, its data (tasks, checksums, schema) included, __pycache__
                                   aside; with it the launcher of every judge process (harness/judge.py:
                                   -I, no inherited start-up hook) and of the ranks (harness/local_ranks.py)
    docker/entrypoint.sh, docker/python.sh the image's launcher of the harness
    requirements/<the judge's pins>        the environments it runs in: the tools environment's pins (and
                                           what they include) and the image's /opt/harness pins

The user's dispatcher (bin/dawnbench, dawnbench/launcher.py) is not in it: it picks the environment a
command runs in and starts the harness as a judge process through harness/judge.py, which hands it
nothing but the command line; and it is a host tool, which images leave out.

Each path is hashed with its content (a folder as harness.provenance.tree_hash does: every file's path
and content, symlinks by their target text), an absent one as absent; the judge's sha256 is the
sha256 of those lines in JUDGE_PATHS' order. The list of the released judges a validator accepts beside
its own lives outside this set (dawnbench/data/judges.toml), or listing one would change it.

What the hash is not: a proof. A harness that was modified can write any hash it likes; the record
makes the honest fork and the naive one visible, and `dawnbench reproduce` (which runs the
maintainer's judge and names every file a fork's commit changes outside its reference folder) is
what shows that a run happened as claimed. Standard library only: an image's harness runs it.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from harness import provenance

JUDGE_PATHS = (
    "harness",
    "docker/entrypoint.sh",
    "docker/python.sh",
    "requirements/tools.txt",
    "requirements/dawnbench.txt",
    "requirements/energy-nvml.txt",
    "requirements/harness.txt",
    "requirements/harness-numpy1.txt",
    "requirements/infer-onnxruntime.txt",
    "requirements/infer-openvino.txt",
)
ROOT = Path(__file__).resolve().parent.parent       # the checkout, or the image's /opt/dawnbench
MODIFIED = "judged by modified code"


def _digest(path: Path) -> str:
    """A path's content hash: a folder's tree hash, a file's sha256, 'absent'."""
    if path.is_symlink():
        return "link:" + hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()
    if path.is_dir():
        return "tree:" + provenance.tree_hash(path)
    if path.is_file():
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return "absent"


def parts(root: Path | None = None) -> dict[str, str]:
    """{path of JUDGE_PATHS: its content hash} under `root` (default: the judge that is running)."""
    root = Path(root) if root is not None else ROOT
    return {name: _digest(root / name) for name in JUDGE_PATHS}


def sha256(root: Path | None = None) -> str:
    """The judge's hash: of JUDGE_PATHS' contents under `root` (default: the judge that is running)."""
    lines = "".join(f"{name}\0{digest}\n" for name, digest in parts(root).items())
    return hashlib.sha256(lines.encode()).hexdigest()


def verdict(recorded: object, accepted: dict[str, str]) -> str | None:
    """None when `recorded` (a run's provenance.judge_sha256) is one of the `accepted` judges ({sha256:
    what it is}); else the one line that says the run was judged by modified code."""
    if isinstance(recorded, str) and recorded in accepted:
        return None
    shown = f"{recorded[:16]}..." if isinstance(recorded, str) else "none (a run before issue 46)"
    return (f"{MODIFIED}: the run's judge sha256 is {shown}, not this checkout's nor a released judge's "
            f"({', '.join(f'{h[:16]}... {what}' for h, what in accepted.items())}); run it again with the "
            f"maintainer's harness, or `dawnbench reproduce` it")


if __name__ == "__main__":      # `python -m harness.judge_hash`: the hash to list as a released judge
    print(sha256(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
