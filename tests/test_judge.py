"""Issue 46, "the judge's code": every run records the hash of the code that judged it (harness.judge_hash),
and `validate` and the board accept only the validating checkout's own judge and the released ones
(dawnbench/data/judges.toml); a run of any other judge is "judged by modified code", never official."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from leaderboard_fixture import edit_json, make_run
from test_submit import cifar10_eval, labels_here  # noqa: F401  (fixtures: the labels every run here is scored against)

from dawnbench import judges, submit, validate_entries
from dawnbench.cli import main as cli_main
from harness import judge_hash

STEM = "dawnbench_ResNet-56_1-x-NVIDIA-H100-80GB-HBM3_PyTorch-2.13.0"


@pytest.fixture
def judge_copy(tmp_path) -> Path:
    """The judge's files (harness.judge_hash.JUDGE_PATHS) copied as a fork has them, and one file beside them."""
    root = tmp_path / "fork"
    for name in judge_hash.JUDGE_PATHS:
        source = judge_hash.ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, root / name)
    (root / "dawnbench").mkdir()
    (root / "dawnbench" / "site.py").write_text("# the board's code is not the judge's\n")
    return root


def test_the_judge_hash_is_of_the_harness_its_launchers_and_the_pins(judge_copy):
    assert judge_hash.sha256(judge_copy) == judge_hash.sha256()            # a copy of the same judge is the same judge
    (judge_copy / "harness" / "__pycache__").mkdir(exist_ok=True)
    (judge_copy / "harness" / "__pycache__" / "x.pyc").write_bytes(b"cache")
    (judge_copy / "dawnbench" / "site.py").write_text("# edited\n")
    assert judge_hash.sha256(judge_copy) == judge_hash.sha256()            # neither a cache nor the board is the judge
    for name, edit in (("harness/__init__.py", "\nimport time  # half-speed clock\n"),
                       ("harness/judge.py", "\n# edited\n"), ("requirements/harness.txt", "numpy==2.0.0\n"),
                       ("docker/entrypoint.sh", "\n# edited\n")):
        before = judge_hash.sha256(judge_copy)
        with open(judge_copy / name, "a") as f:
            f.write(edit)
        assert judge_hash.sha256(judge_copy) != before, name
    (judge_copy / "requirements" / "tools.txt").unlink()
    assert judge_hash.parts(judge_copy)["requirements/tools.txt"] == "absent"


def test_a_run_judged_by_a_forks_harness_is_never_official(judge_copy, tmp_path, capsys):
    """Attack 1's run: a fork's harness/__init__.py halves the clock; the run it judges says official. Its
    judge hash is the fork's (or none at all): validate refuses it in one line, and the board lists it as
    invalid, "judged by modified code", never ranked."""
    with open(judge_copy / "harness" / "__init__.py", "a") as f:
        f.write("\nimport time\n_real = time.perf_counter\ntime.perf_counter = lambda: _real() / 2\n")
    forked = judge_hash.sha256(judge_copy)
    tree = tmp_path / "entries"
    honest = make_run(tmp_path / "honest")
    assert submit.main([str(honest), "--out", str(tree)]) == 0
    path = tree / "CIFAR10" / "train" / f"{STEM}.json"
    assert validate_entries.main([str(path)]) == 0                # this checkout's judge: official
    capsys.readouterr()

    result = path.with_suffix(".run") / "result.json"
    for recorded, shown in ((forked, f"{forked[:16]}..."), (None, "none (a run before issue 46)")):
        provenance = json.loads(result.read_text())["provenance"]
        edit_json(result, provenance={**provenance, "judge_sha256": recorded})
        assert validate_entries.main([str(path)]) == 1
        lines = capsys.readouterr().out.splitlines()
        (line,) = [x for x in lines if "judged by modified code" in x]
        assert f": official: {STEM}.run/result.json: judged by modified code: the run's judge sha256 is {shown}, " \
               f"not this checkout's nor a released judge's ({judge_hash.sha256()[:16]}... this checkout's)" in line
        assert cli_main(["leaderboard", str(tree), "--format", "json"]) == 0
        board = json.loads(capsys.readouterr().out)
        assert not any(rows for rows in board["tasks"]["CIFAR10"].values())
        (invalid,) = board["invalid"]
        assert "judged by modified code" in invalid["reason"]
    # a smoke test may still be written down, marked unofficial
    assert validate_entries.main(["--allow-unofficial", str(path)]) == 0


def test_a_released_judge_is_accepted(tmp_path, monkeypatch):
    released = "ab" * 32
    listed = tmp_path / "judges.toml"
    listed.write_text(f'[[judge]]\nrelease = "v1.0"\nrules_version = "dawnbench-1.0"\nsha256 = "{released}"\n')
    monkeypatch.setattr(judges, "RELEASED", listed)
    judges.accepted.cache_clear()
    try:
        assert judges.accepted() == {judge_hash.sha256(): "this checkout's", released: "release v1.0 (dawnbench-1.0)"}
        assert judges.problem({"provenance": {"judge_sha256": released}}) is None
        assert judges.problem({"provenance": {"judge_sha256": "cd" * 32}}).startswith("judged by modified code: ")
    finally:
        judges.accepted.cache_clear()


def test_the_released_judges_file_reads():
    judges.accepted.cache_clear()
    assert judge_hash.sha256() in judges.accepted()


def test_a_real_run_records_its_judge(default_run):
    result = json.loads((default_run / "result.json").read_text())
    assert result["provenance"]["judge_sha256"] == judge_hash.sha256()


def test_an_image_holds_the_whole_judge():
    """A run in an image hashes its judge under /opt/dawnbench: every path of the hash is in the build
    context (.dockerignore) and copied there by the template every reference's Dockerfile is written
    from (docker/flavours.py checks those), or an image's runs would all be "judged by modified code"."""
    template = (judge_hash.ROOT / "docker" / "Dockerfile.template").read_text()
    ignore = (judge_hash.ROOT / ".dockerignore").read_text().splitlines()
    copied = {}
    for line in re.findall(r"^COPY (?!--from)(.+)$", template, re.M):
        *sources, dest = line.split()
        for source in sources:
            copied[source.rstrip("/")] = dest.rstrip("/") if source.endswith("/") or not dest.endswith("/") \
                else dest + Path(source).name
    for name in judge_hash.JUDGE_PATHS:
        assert any((name == s or name.startswith(s + "/")) and d == f"/opt/dawnbench/{s}" for s, d in copied.items()), name
        assert any(line.startswith("!") and (name + "/").startswith(line[1:].rstrip("/") + "/") for line in ignore), name
