"""An entry's code URL: where a reader of the leaderboard finds the code that ran.

`dawnbench submit` takes, in this order: `--code-url URL` as given; else the URL of the run's code on
a remote of its git repository, `<remote>/tree/<the run's commit>/<the reference's folder>` (each
host's form), when a remote-tracking branch holds that commit (pushed: the link then opens); else the
reference's own `code_url` when it is an http(s) URL (reference.toml). Nothing of these: the entry
cannot name its code, and submit says how to give it (a smoke test's entry, `--allow-unofficial`,
keeps the reference's text, warned). An entry whose URL is no http(s) link (an explicit
`--code-url ''`) is written with one warning line: the leaderboard shows it as text.

A remote's credentials (`https://user:token@host/...`) never reach the entry: an entry is public.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from dawnbench.entries import is_http_url
from harness import registry
from harness.errors import UsageError, command

COMMIT = re.compile(r"[0-9a-f]{7,64}")
SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?([^:/\s]+):(?!//)(.+)$")     # git@host:owner/repo.git


def web_base(remote: str) -> str | None:
    """A git remote's URL as the web page of its repository (https, no credentials, no `.git`), or None
    for a remote that is no web host (a local path, file://)."""
    try:
        return _web_base(remote.strip())
    except ValueError:          # urlsplit's: a malformed URL or port
        return None


def _web_base(remote: str) -> str | None:
    if "://" in remote:
        parts = urlsplit(remote)
        if parts.scheme not in ("http", "https", "ssh", "git", "git+ssh", "ssh+git") or not parts.hostname:
            return None
        host, path = parts.hostname, parts.path
        # a port is the web server's only over http(s); over ssh it is the ssh server's
        if parts.port and parts.scheme in ("http", "https"):
            host = f"{host}:{parts.port}"
        scheme = "http" if parts.scheme == "http" else "https"
    else:
        match = SCP_LIKE.match(remote)
        if not match or remote.startswith((".", "/", "~")):
            return None
        scheme, host, path = "https", match.group(1), "/" + match.group(2)
    path = path.strip("/")
    path = path[:-4] if path.endswith(".git") else path
    if not path:
        return None
    return f"{scheme}://{host}/{path}"


def browse_url(base: str, commit: str, folder: str) -> str:
    """The page of `folder` at `commit` on the host of `base` (GitHub's form unless the host is known
    to use another)."""
    host = urlsplit(base).hostname or ""
    folder = folder.strip("/")
    if "bitbucket" in host:
        return f"{base}/src/{commit}/{folder}"
    if "gitlab" in host:
        return f"{base}/-/tree/{commit}/{folder}"
    if "gitea" in host or "codeberg" in host or "forgejo" in host:
        return f"{base}/src/commit/{commit}/{folder}"
    return f"{base}/tree/{commit}/{folder}"


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def derived(record: dict) -> tuple[str | None, str]:
    """(the URL of the run's code on a remote, or None, and why not: one clause for the refusal)."""
    git = record.get("git") if isinstance(record.get("git"), dict) else {}
    commit, reference = git.get("commit"), record.get("reference")
    if not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
        return None, "the run records no git commit"
    if not isinstance(reference, str) or not reference:
        return None, "the run names no reference"
    local = registry.references_root() / reference
    folder = local if local.is_dir() else Path.cwd()
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top is None:
        return None, f"{folder} is in no git repository"
    if _git(folder, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        return None, f"the run's commit {commit[:12]} is not in the repository at {top}"
    paths = git.get("paths") if isinstance(git.get("paths"), list) else []
    inside = paths[0] if paths and isinstance(paths[0], str) and not os.path.isabs(paths[0]) and ".." not in paths[0] \
        else os.path.relpath(local, top) if local.is_dir() else f"references/{reference}"
    branches = (_git(folder, "branch", "-r", "--contains", commit, "--format=%(refname:short)") or "").split()
    remotes = (_git(folder, "remote") or "").split()
    # a remote whose branch holds the commit (pushed), origin first
    holding = [r for r in sorted(remotes, key=lambda r: r != "origin")
               if any(b.startswith(f"{r}/") and b != f"{r}/HEAD" for b in branches)]
    if not remotes:
        return None, f"the repository at {top} has no remote (git remote -v)"
    if not holding:
        return None, (f"the run's commit {commit[:12]} is on no branch of a remote ({', '.join(remotes)}): push it "
                      f"(git push) so that the link opens")
    for remote in holding:
        base = web_base(_git(folder, "remote", "get-url", remote) or "")
        if base is not None:
            return browse_url(base, commit, inside), ""
    return None, f"no remote of {top} that holds commit {commit[:12]} is a web host ({', '.join(holding)})"


def for_entry(record: dict, given: str | None, required: bool = True) -> tuple[str, str | None]:
    """(the entry's codeURL, the warning line when it will show no link); see the module's docstring. When
    none can be had: UsageError if `required` (an official entry), else the record's own text, warned."""
    if given is not None:
        return given, warning(given)
    url, why = derived(record)
    if url is not None:
        return url, None
    own = record.get("codeURL")
    if is_http_url(own):
        return own, None
    if not required:
        text = own if isinstance(own, str) else ""
        return text, warning(text, why)
    raise UsageError(f"the entry would name no code: {why}, and reference.toml gives no http(s) code_url: give "
                     f"{command('submit')} --code-url URL (where the code of this run can be read), or "
                     f"--code-url '' for an entry without a link")


def warning(url: str, why: str = "") -> str | None:
    """The one line said when the entry will show no link to its code."""
    if is_http_url(url):
        return None
    return (f"warning: the entry will show no link to its code: its codeURL {url!r} is not an http(s) URL"
            f"{f' ({why})' if why else ''}; --code-url https://... gives one")
