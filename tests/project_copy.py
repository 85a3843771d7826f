"""A copy of this project in a temporary folder, and a fork made in it the way the README says:
`cp -r` of one reference directory and an edit of its Python file, nothing else."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORIGINAL = "fashion-mnist-cnn-pytorch"
FORK = "fashion-mnist-mynet-pytorch"
# The edit: a line at import that shows the fork's own code ran (and a new description).
MARKER = "mynet: the forked recipe is running"


def copy_project(dest: Path) -> Path:
    """The files git would commit (tracked, and untracked but not ignored): a fresh clone of the
    working tree, without its virtual environments, data or results."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (x.decode() for x in listed)):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def commit_all(project: Path, message: str = "the project") -> str:
    """git init (once), add everything and commit, in `project`; returns the commit. A run from the
    copy is then of committed code, whatever the state of this checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=dawnbench", "-c", "user.email=dev@dawnbench", *args],
                              cwd=project, capture_output=True, text=True, check=True).stdout.strip()
    if not (project / ".git").exists():
        git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "--allow-empty", "-m", message)
    return git("rev-parse", "HEAD")


def fork(project: Path) -> Path:
    """cp -r references/ORIGINAL references/FORK, then edit FORK's train.py."""
    subprocess.run(["cp", "-r", f"references/{ORIGINAL}", f"references/{FORK}"], cwd=project, check=True)
    train = project / "references" / FORK / "train.py"
    text = train.read_text(encoding="utf-8")
    anchor = "\nimport numpy as np\n"
    assert anchor in text, "the default reference's train.py changed: update tests/project_copy.py"
    train.write_text(text.replace(anchor, f"\nimport sys\n\nprint({MARKER!r}, file=sys.stderr)\n{anchor[1:]}", 1),
                     encoding="utf-8")
    toml = project / "references" / FORK / "reference.toml"
    text = toml.read_text(encoding="utf-8")
    start = text.index("\ndescription = ") + 1
    end = text.index("\n", start)
    toml.write_text(text[:start] + 'description = "My network: the default CNN, forked."' + text[end:], encoding="utf-8")
    return project / "references" / FORK
