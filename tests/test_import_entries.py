"""`dawnbench entries import-v1` (issue 47): the bundled DAWNBench v1 entries onto a board in one command,
merged with what the board holds, never replacing a file."""
from __future__ import annotations

import json
from pathlib import Path

from dawnbench import import_entries
from dawnbench.cli import main

BUNDLED = Path(__file__).resolve().parent / "data" / "dawn-bench-entries"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dawnbench entries: error: "), err
    return err[0]


def test_the_bundled_entries_go_onto_a_board_beside_its_own(tmp_path, capsys):
    out = tmp_path / "entries"
    own = out / "CIFAR10" / "train" / "mine.json"
    own.parent.mkdir(parents=True)
    own.write_text("{}")                                       # the board's own entry: kept as it is
    assert main(["entries", "import-v1", "--out", str(out)]) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith(f"imported 187 files of DAWNBench v1 entries from {BUNDLED} into {out}; rank them: ")
    assert tree(out) == {**tree(BUNDLED), "CIFAR10/train/mine.json": b"{}"}
    # again: the same files are there, nothing changes
    assert main(["entries", "import-v1", "--out", str(out)]) == 0
    again = capsys.readouterr().out
    assert "imported 0 files" in again and "(187 already there, the same)" in again
    ranked = main(["leaderboard", str(out), "--format", "json"])
    assert ranked == 0
    tables = json.loads(capsys.readouterr().out)["tasks"]["ImageNet"]
    # entries without a run rank as the v1 archive's, matched by their files' sha256, never in the verified tier
    assert len(tables["train_time_archive"]) > 20 and tables["train_time"] == []


def test_a_same_named_file_of_other_content_stops_the_import(tmp_path, capsys):
    out = tmp_path / "entries"
    name = sorted(tree(BUNDLED))[0]
    (out / name).parent.mkdir(parents=True)
    (out / name).write_text('{"author": "someone else"}')
    before = tree(out)
    assert main(["entries", "import-v1", "--out", str(out)]) == 2
    line = one_line(capsys)
    assert f"{out / name} exists with other content than {BUNDLED / name}: an import never replaces a file" in line
    assert line.endswith("(nothing was written)") and tree(out) == before


def test_a_source_without_entries_and_a_target_inside_it_are_one_line(tmp_path, capsys):
    assert main(["entries", "import-v1", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no DAWNBench v1 entries there" in one_line(capsys)
    assert main(["entries", "import-v1", str(BUNDLED), "--out", str(BUNDLED / "x")]) == 2
    assert "is inside the entries imported" in one_line(capsys)
    assert import_entries.files(BUNDLED) and all(p.suffix in (".json", ".tsv") for p in import_entries.files(BUNDLED))
