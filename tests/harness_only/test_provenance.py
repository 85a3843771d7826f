"""Provenance: what a run records about its code and data, and when it is official.

Real runs go through the CLI in a copy of the project committed to a fresh git repository, so the
state of this checkout never matters; the image's build record is simulated with a file the
harness is pointed at (DAWNBENCH_BUILD_INFO, which makes the run unofficial) or with the fixed
path swapped for a temporary one, and the Dockerfiles' own line that writes it is run with sh.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, SCRIPTED, SCRIPTED_TOML
from project_copy import commit_all, copy_project

from harness import datasets, eval_labels, provenance

pytestmark = pytest.mark.harness     # standard library and the harness: runs under numpy 1.23.5 too

LABELS = "t10k-labels-idx1-ubyte"


# ---------------------------------------------------------------- the reference tree's hash

def test_tree_hash_sees_every_file_but_pycache(tmp_path):
    ref = tmp_path / "ref"
    (ref / "sub").mkdir(parents=True)
    (ref / "train.py").write_text("x = 1\n")
    (ref / "sub" / "data.txt").write_text("a")
    outside = tmp_path / "outside.txt"
    outside.write_text("target")
    (ref / "link").symlink_to(outside)
    (ref / "__pycache__").mkdir()
    (ref / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    seen = {provenance.tree_hash(ref)}

    def changed() -> bool:
        h = provenance.tree_hash(ref)
        new = h not in seen
        seen.add(h)
        return new

    # __pycache__ is never read, and a symlink is its target's text, never the file it points at
    (ref / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\1\2")
    (ref / "sub" / "__pycache__").mkdir()
    (ref / "sub" / "__pycache__" / "x.pyc").write_bytes(b"\3")
    outside.write_text("other content")
    assert not changed()
    (ref / "train.py").write_text("x = 2\n")               # content
    assert changed()
    (ref / "untracked.py").write_text("")                  # a new (empty) file
    assert changed()
    (ref / "sub" / "data.txt").rename(ref / "sub" / "data2.txt")   # a name
    assert changed()
    (ref / "link").unlink()
    (ref / "link").symlink_to(tmp_path / "elsewhere")      # a link's target
    assert changed()
    (ref / "empty").mkdir()                                # a folder
    assert changed()
    shutil.copytree(ref, tmp_path / "copy", symlinks=True)  # a copy (other times, same bytes) hashes the same
    assert provenance.tree_hash(tmp_path / "copy") == provenance.tree_hash(ref)


# ---------------------------------------------------------------- real runs in a committed copy of the project

def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def project(tmp_path, fashion_root) -> Path:
    """This project (as git would commit it) plus the scripted reference, committed in a fresh repository."""
    import numpy as np
    root = copy_project(tmp_path / "project")
    ref = root / "references" / "scripted-test"
    ref.mkdir()
    (ref / "scripted.py").write_text(SCRIPTED)
    (ref / "reference.toml").write_text(SCRIPTED_TOML)
    np.save(ref / "labels.npy", eval_labels.load_eval_labels("fashion-mnist", fashion_root))
    commit_all(root)
    return root


def run_in(project: Path, data: Path, results: Path, **env) -> dict:
    """`python -m harness run scripted-test` from the project's own code; result.json."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(provenance.ENV_PREFIX)}
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "scripted-test", "--data", str(data),
                           "--results", str(results), "--no-progress", "--no-save"], cwd=project,
                          env={**base, "PYTHONPATH": str(project), **env}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (results / "scripted-test").iterdir()
    return json.loads((run_dir / "result.json").read_text())


def test_a_clean_checkout_is_official_with_its_provenance(project, fashion_root, tmp_path):
    result = run_in(project, fashion_root, tmp_path / "results")
    head = git(project, "rev-parse", "HEAD")
    assert result["official"] is True and result["unofficial_reasons"] == []
    assert result["git"] == {"commit": head, "dirty": False, "source": "git",
                             "paths": ["references/scripted-test", "harness", "common"]}
    assert result["commitHash"] == head
    prov = result["provenance"]
    assert prov["reference_tree_sha256"] == provenance.tree_hash(project / "references" / "scripted-test")
    files = datasets.manifest("fashion-mnist")["files"]      # every file, verified before the run folder
    assert prov["datasets"] == {"fashion-mnist": {name: {"sha256": f["sha256"], "size": f["size"]}
                                                  for name, f in files.items()}}
    assert prov["overrides"] == {} and prov["build"] is None
    assert git(project, "status", "--porcelain") == ""        # running left nothing git would see


@pytest.mark.parametrize("where", ["references/scripted-test/notes.txt", "harness/extra.py", "common/extra.py"])
def test_an_untracked_file_makes_the_run_dirty_and_unofficial(project, fashion_root, tmp_path, where):
    (project / where).write_text("not committed\n")
    result = run_in(project, fashion_root, tmp_path / "results")
    assert result["git"]["dirty"] is True and result["official"] is False
    (reason,) = result["unofficial_reasons"]
    assert where in reason and "not committed" in reason


def test_a_tracked_change_makes_the_run_dirty(project, fashion_root, tmp_path):
    path = project / "references" / "scripted-test" / "scripted.py"
    path.write_text(path.read_text() + "\n# tuned\n")
    result = run_in(project, fashion_root, tmp_path / "results")
    assert result["git"]["dirty"] is True and result["official"] is False
    assert "references/scripted-test/scripted.py" in result["unofficial_reasons"][0]


def test_a_reference_under_an_ignored_folder_is_not_committed_code(project, fashion_root, tmp_path):
    """/results/ is ignored by git: a reference there is in no commit, whatever git status says by default."""
    hidden = project / "results" / "refs"
    hidden.mkdir(parents=True)
    shutil.copytree(project / "references" / "scripted-test", hidden / "scripted-test")
    result = run_in(project, fashion_root, tmp_path / "results", DAWNBENCH_REFERENCES=str(hidden))
    assert result["git"]["dirty"] is True and result["official"] is False
    assert any("results/" in r for r in result["unofficial_reasons"])


def test_a_forged_commit_in_the_environment_is_not_recorded(project, fashion_root, tmp_path):
    forged = "f" * 40
    result = run_in(project, fashion_root, tmp_path / "results", DAWNBENCH_GIT_COMMIT=forged)
    head = git(project, "rev-parse", "HEAD")
    assert result["git"]["commit"] == head and result["commitHash"] == head
    assert result["official"] is False
    assert result["provenance"]["overrides"] == {"DAWNBENCH_GIT_COMMIT": forged}
    (reason,) = result["unofficial_reasons"]
    assert "DAWNBENCH_GIT_COMMIT is set" in reason


def test_a_manifest_override_with_a_fake_label_file_is_unofficial(project, fashion_root, tmp_path):
    """A fake eval-label file (every label 0) under a manifest that vouches for it: the run
    converges on its own labels, but it is not official, and what was checked is on record."""
    data = tmp_path / "data"
    (data / "fashion-mnist").mkdir(parents=True)
    fake = data / "fashion-mnist" / LABELS
    fake.write_bytes(bytes([0, 0, 8, 1]) + (10000).to_bytes(4, "big") + bytes(10000))
    digest = hashlib.sha256(fake.read_bytes()).hexdigest()
    manifest = tmp_path / "fake.toml"
    manifest.write_text(f'[fashion-mnist]\ndir = "fashion-mnist"\nfetch_command = "x"\neval_labels = "{LABELS}"\n'
                        f'[fashion-mnist.files]\n{LABELS} = {{ sha256 = "{digest}" }}\n')
    import numpy as np  # the scripted reference answers from its own copy of the labels: the fake ones
    np.save(project / "references" / "scripted-test" / "labels.npy", np.zeros(10000, dtype=np.int64))
    commit_all(project)
    result = run_in(project, data, tmp_path / "results", DAWNBENCH_DATASETS_MANIFEST=str(manifest))
    assert result["status"] == "converged" and result["official"] is False
    (reason,) = result["unofficial_reasons"]
    # the file is named, its folder of this machine is not (an entry is public: harness.paths.public)
    published = f"<outside the checkout>/{manifest.name}"
    assert f"DAWNBENCH_DATASETS_MANIFEST={published}" in reason and str(manifest) not in reason
    assert result["provenance"]["datasets"]["fashion-mnist"][LABELS] == {"sha256": digest, "size": 10008}
    assert result["provenance"]["overrides"] == {"DAWNBENCH_DATASETS_MANIFEST": published}


def test_a_lowered_threshold_is_a_reason(references_root, fashion_root, tmp_path):
    """In-process, from a folder outside git: the runner's own reason comes first, then provenance's."""
    from dawnbench.cli import main
    assert main(["run", "scripted-test", "--threshold", "0.5", "--data", str(fashion_root), "--results",
                 str(tmp_path / "r"), "--no-progress", "--no-save"]) == 0
    (run_dir,) = (tmp_path / "r" / "scripted-test").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["official"] is False and result["official_threshold"] is False
    assert result["unofficial_reasons"][0] == "--threshold 0.5 is not the task's 0.92 (a smoke test)"
    assert any("not in a git repository" in r for r in result["unofficial_reasons"][1:])
    assert result["git"]["commit"] is None


# ---------------------------------------------------------------- the image's build record

@dataclass
class Spec:
    name: str
    directory: Path


@pytest.fixture
def image_reference(tmp_path, monkeypatch) -> Spec:
    """A reference folder outside git, as in an image, and no override in the environment."""
    for name in list(os.environ):
        if name.startswith(provenance.ENV_PREFIX):
            monkeypatch.delenv(name)
    ref = tmp_path / "opt" / "references" / "scripted-test"
    ref.mkdir(parents=True)
    (ref / "scripted.py").write_text(SCRIPTED)
    (ref / "reference.toml").write_text(SCRIPTED_TOML)
    return Spec("scripted-test", ref)


def bake(path: Path, spec: Spec, commit="a" * 40, dirty="false", tree=None) -> Path:
    """/opt/dawnbench/build.json as the Dockerfiles write it: their own RUN line, run with sh."""
    text = (REPO / "references" / "fashion-mnist-cnn-pytorch" / "Dockerfile").read_text()
    (line,) = re.findall(r"^RUN (printf .*?build\.json)$", text.replace("\\\n", " "), re.M)
    env = {"PATH": os.environ["PATH"], "REFERENCE": spec.name, "GIT_COMMIT": commit, "GIT_DIRTY": dirty,
           "REFERENCE_TREE_SHA256": provenance.tree_hash(spec.directory) if tree is None else tree}
    subprocess.run(["sh", "-c", line.replace("/opt/dawnbench/build.json", str(path))], env=env, check=True)
    return path


def test_an_image_build_record_names_the_commit_while_the_tree_matches(image_reference, tmp_path, monkeypatch):
    spec = image_reference
    record = bake(tmp_path / "build.json", spec)
    monkeypatch.setattr(provenance, "BUILD_INFO", record)    # the image's fixed path
    fields = provenance.collect(spec, {})
    assert fields["official"] is True and fields["unofficial_reasons"] == []
    assert fields["git"] == {"commit": "a" * 40, "dirty": False, "source": "image", "paths": []}
    assert fields["provenance"]["build"]["reference_tree_sha256"] == fields["provenance"]["reference_tree_sha256"]

    (spec.directory / "scripted.py").write_text(SCRIPTED + "\n# changed after the build\n")
    fields = provenance.collect(spec, {})
    assert fields["git"]["commit"] is None and fields["official"] is False
    (reason,) = fields["unofficial_reasons"]
    assert "not the one the image was built with" in reason


def test_the_build_record_from_the_environment_is_never_official(image_reference, tmp_path, monkeypatch):
    spec = image_reference
    record = bake(tmp_path / "build.json", spec)
    monkeypatch.setenv(provenance.BUILD_INFO_ENV, str(record))
    fields = provenance.collect(spec, {})
    assert fields["git"]["commit"] == "a" * 40 and fields["official"] is False
    assert fields["unofficial_reasons"] == ["the build record is read from DAWNBENCH_BUILD_INFO=<outside the "
                                            "checkout>/build.json, not from the image (unset it)"]
    assert fields["provenance"]["overrides"] == {provenance.BUILD_INFO_ENV: "<outside the checkout>/build.json"}
    assert fields["provenance"]["build"]["path"] == "<outside the checkout>/build.json"


@pytest.mark.parametrize("commit,dirty,tree,expected", [
    ("unknown", "false", None, "built without a commit"),
    ("a" * 40, "true", None, "uncommitted changes"),
    ("a" * 40, "unknown", None, "uncommitted changes"),
    ("a" * 40, "false", "", "no reference tree hash"),
])
def test_a_build_record_without_a_clean_commit_is_unofficial(image_reference, tmp_path, monkeypatch,
                                                            commit, dirty, tree, expected):
    spec = image_reference
    monkeypatch.setattr(provenance, "BUILD_INFO", bake(tmp_path / "build.json", spec, commit, dirty, tree))
    fields = provenance.collect(spec, {})
    assert fields["official"] is False
    assert any(expected in r for r in fields["unofficial_reasons"]), fields["unofficial_reasons"]


def test_an_unreadable_build_record_is_one_reason(image_reference, tmp_path, monkeypatch):
    record = tmp_path / "build.json"
    record.write_text('{"commit": "a"quoted"}')
    monkeypatch.setattr(provenance, "BUILD_INFO", record)
    fields = provenance.collect(image_reference, {})
    assert fields["git"]["commit"] is None
    (reason,) = fields["unofficial_reasons"]
    assert f"build record {record} cannot be read" in reason and "\n" not in reason


# ---------------------------------------------------------------- prepared datasets: checked by their manifest

def test_prepared_manifest_catches_missing_extra_and_resized_files(tmp_path):
    root = tmp_path / "imagenet"
    for i in range(3):
        (root / "train" / f"n0{i}").mkdir(parents=True)
        for j in range(4):
            (root / "train" / f"n0{i}" / f"{j}.JPEG").write_bytes(bytes([i, j]) * (10 + j))
    (root / "val.txt").write_text("labels\n")
    manifest = datasets.write_prepared_manifest(root)
    assert manifest == root / datasets.PREPARED_MANIFEST
    ok = datasets.verify_prepared(root, name="imagenet-test")
    assert ok == {"manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest(), "count": 13,
                  "bytes": sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and p != manifest)}
    assert datasets.verified_files()["imagenet-test"] == {"prepared_manifest": ok}
    with pytest.raises(datasets.DatasetError, match="manifest .* has sha256 .* expected 0+; it is not the official"):
        datasets.verify_prepared(root, expected_sha256="0" * 64)

    def problem() -> str:
        with pytest.raises(datasets.DatasetError) as e:
            datasets.verify_prepared(root)
        assert "\n" not in str(e.value)
        return str(e.value)

    image = root / "train" / "n01" / "2.JPEG"
    stat = image.stat()
    image.write_bytes(image.read_bytes() + b"x")
    assert "1 of another size (first: train/n01/2.JPEG)" in problem()
    image.write_bytes(image.read_bytes()[:-1])
    assert "1 modified (mtime) (first: train/n01/2.JPEG)" in problem()      # same size, written again
    image.write_bytes(bytes(stat.st_size))                                   # other bytes, same size and mtime
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert datasets.verify_prepared(root) == ok                             # what the fast check cannot see...
    with pytest.raises(datasets.DatasetError, match=r"1 of other content \(sha256\)"):
        datasets.verify_prepared(root, full=True)                           # ...a full check can
    (root / "train" / "n00" / "0.JPEG").unlink()
    (root / "train" / "n02" / "extra.JPEG").write_bytes(b"")
    message = problem()
    assert "1 missing (first: train/n00/0.JPEG)" in message
    assert "1 not in the manifest (first: train/n02/extra.JPEG)" in message
    assert "re-run its prepare command" in message
