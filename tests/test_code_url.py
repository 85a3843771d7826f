"""An entry's code URL (dawnbench/code_url.py, issue 47): the run's commit on a remote that holds it, in the
host's form and without the remote's credentials; a one-line refusal, naming --code-url, when no URL can be
had; one warning line when the entry will show no link."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from leaderboard_fixture import REF, cifar10_labels, edit_json, make_run

from dawnbench import code_url, submit
from harness import datasets


@pytest.mark.parametrize("remote, base", [
    ("https://github.com/ann/dawnbench.git", "https://github.com/ann/dawnbench"),
    ("https://ann:ghp_secret@github.com/ann/dawnbench.git", "https://github.com/ann/dawnbench"),
    ("http://git.example.org:8080/ann/dawnbench/", "http://git.example.org:8080/ann/dawnbench"),
    ("git@github.com:ann/dawnbench.git", "https://github.com/ann/dawnbench"),
    ("ssh://git@gitlab.com:2222/group/sub/dawnbench.git", "https://gitlab.com/group/sub/dawnbench"),
    ("/srv/git/dawnbench.git", None), ("file:///srv/git/dawnbench.git", None), ("../dawnbench", None),
    ("https://github.com/", None), ("http://[::1", None), ("", None),
])
def test_a_remote_is_its_repository_s_web_page_without_credentials(remote, base):
    assert code_url.web_base(remote) == base


@pytest.mark.parametrize("base, url", [
    ("https://github.com/a/d", "https://github.com/a/d/tree/abc123/references/r"),
    ("https://gitlab.com/a/d", "https://gitlab.com/a/d/-/tree/abc123/references/r"),
    ("https://bitbucket.org/a/d", "https://bitbucket.org/a/d/src/abc123/references/r"),
    ("https://codeberg.org/a/d", "https://codeberg.org/a/d/src/commit/abc123/references/r"),
])
def test_each_host_s_form_of_a_folder_at_a_commit(base, url):
    assert code_url.browse_url(base, "abc123", "references/r/") == url


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch) -> tuple[Path, str]:
    """A repository holding references/mine, one commit, no remote yet."""
    root = tmp_path / "repo"
    (root / "references" / "mine").mkdir(parents=True)
    (root / "references" / "mine" / "reference.toml").write_text("model = 'x'\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "mine")
    monkeypatch.setenv("DAWNBENCH_REFERENCES", str(root / "references"))
    return root, _git(root, "rev-parse", "HEAD")


def record(commit: str, **more) -> dict:
    return {"reference": "mine", "git": {"commit": commit, "paths": ["references/mine"]},
            "codeURL": "references/mine", **more}


def test_the_url_is_derived_only_from_a_remote_that_holds_the_commit(repo):
    root, commit = repo
    assert code_url.derived(record(commit)) == (None, f"the repository at {root} has no remote (git remote -v)")
    _git(root, "remote", "add", "origin", "https://ann:token@github.com/ann/dawnbench.git")
    url, why = code_url.derived(record(commit))
    assert url is None and why.startswith(f"the run's commit {commit[:12]} is on no branch of a remote (origin): "
                                          "push it (git push)")
    _git(root, "update-ref", "refs/remotes/origin/main", commit)           # as `git push` leaves it
    assert code_url.derived(record(commit)) == (f"https://github.com/ann/dawnbench/tree/{commit}/references/mine", "")
    assert code_url.derived(record("0" * 40))[1] == f"the run's commit {'0' * 12} is not in the repository at {root}"
    assert code_url.derived(record(None))[1] == "the run records no git commit"
    # --code-url wins; a derived URL before the reference's own; the reference's http(s) one when none is derived
    assert code_url.for_entry(record(commit), "https://example.org/x") == ("https://example.org/x", None)
    assert code_url.for_entry(record(commit, codeURL="https://o.org/r"), None)[0].startswith("https://github.com/ann/")
    assert code_url.for_entry(record("0" * 40, codeURL="https://o.org/r"), None) == ("https://o.org/r", None)
    # a smoke test's entry (submit --allow-unofficial) keeps the reference's text, and is told why it is no link
    assert code_url.for_entry(record("0" * 40), None, required=False) == (
        "references/mine", "warning: the entry will show no link to its code: its codeURL 'references/mine' is not "
        f"an http(s) URL (the run's commit {'0' * 12} is not in the repository at {root}); --code-url https://... "
        "gives one")


@pytest.fixture
def cifar10_eval(tmp_path, monkeypatch):
    data, manifest = cifar10_labels(tmp_path / "cifar10")
    monkeypatch.setenv("DAWNBENCH_DATA", str(data))
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))


def test_submit_refuses_an_entry_without_code_and_warns_when_it_shows_no_link(tmp_path, cifar10_eval, capsys):
    run = make_run(tmp_path / "run")
    edit_json(run / "result.json", codeURL=f"references/{REF}")       # reference.toml's default: no link
    out = tmp_path / "entries"
    assert submit.main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dawnbench submit: error: the entry would name no code: ") and \
        "--code-url URL" in err[0] and "--code-url '' for an entry without a link" in err[0], err
    assert not out.exists()
    assert submit.main([str(run), "--out", str(out), "--code-url", ""]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: the entry will show no link to its code: its codeURL '' is not an http(s) URL; "
                   "--code-url https://... gives one"]
    (entry,) = (out / "CIFAR10" / "train").glob("*.json")
    assert json.loads(entry.read_text())["codeURL"] == ""
    assert submit.main([str(run), "--out", str(out), "--code-url", "https://example.org/code", "--force"]) == 0
    assert capsys.readouterr().err == "" and json.loads(entry.read_text())["codeURL"] == "https://example.org/code"


def test_submit_never_publishes_a_path_of_this_machine(tmp_path, cifar10_eval, capsys):
    """A run recorded by an older harness named the workers' Python by its path: refused, nothing written."""
    run = make_run(tmp_path / "results" / REF / "run")
    result = json.loads((run / "result.json").read_text())
    python = str(Path(sys.prefix) / "bin" / "python")        # as bin/dawnbench named the reference's environment
    result["provenance"]["overrides"]["DAWNBENCH_WORKER_PYTHON"] = python
    (run / "result.json").write_text(json.dumps(result, indent=2))
    out = tmp_path / "entries"
    assert submit.main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "would publish" in err[0] and "a path of this machine: an entry is public" in err[0], err
    assert f"would publish {python!r}" in err[0] or f"would publish {sys.prefix!r}" in err[0], err
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))
    # the same record with the path as the harness now writes it (harness.paths.public) is an entry
    result["provenance"]["overrides"]["DAWNBENCH_WORKER_PYTHON"] = "<outside the checkout>/python"
    (run / "result.json").write_text(json.dumps(result, indent=2))
    assert submit.main([str(run), "--out", str(out)]) == 0


def test_a_path_is_published_as_the_checkout_s_or_by_its_name(tmp_path):
    from harness import paths
    assert paths.public(str(paths.PACKAGE_PARENT / ".venv" / "x" / "bin" / "python")) == "<checkout>/.venv/x/bin/python"
    assert paths.public(str(tmp_path / "a" / "manifest.toml")) == "<outside the checkout>/manifest.toml"
    assert paths.public("relative/model") == "relative/model" and paths.public("1") == "1"
