"""The published DAWNBench v1 entries (a copy of stanford-futuredata/dawn-bench-entries' 187 data files
in tests/data/dawn-bench-entries/) rank as the official board ranked them.

The expected order is tests/data/dawn-bench-entries-expected.json, written by tests/v1_official_order.py
from the entries alone by the v1 README's rules, without the leaderboard's code."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import v1_official_order

from dawnbench import leaderboard, ranking, validate_entries

ENTRIES = v1_official_order.ENTRIES


@pytest.fixture(scope="module")
def v1():
    loaded, invalid = ranking.load_all(ENTRIES, level="v1")
    return ranking.rank(loaded, invalid)


def test_the_committed_order_is_the_derivation_of_the_copy():
    # the expected file is the script's output, not an edit by hand
    assert json.loads(v1_official_order.EXPECTED.read_text()) == v1_official_order.derive()


def test_the_copy_holds_every_published_data_file():
    files = [p for p in ENTRIES.rglob("*") if p.is_file() and p.suffix in (".json", ".tsv")]
    assert len(files) == 187


def test_every_published_entry_ranks_at_v1(v1):
    assert v1["invalid"] == [] and v1["unranked"] == []
    ranked = {r["file"] for tables in v1["tasks"].values() for rows in tables.values() for r in rows}
    assert ranked == {str(p) for p in ENTRIES.rglob("*.json")}


def test_an_archived_entry_edited_by_one_byte_is_not_the_archives(v1, tmp_path):
    """The archive is the published files, byte for byte: a v1 entry's log edited to a faster time (or a
    copy under another name) has no run behind it and is no published entry, so it ranks nowhere."""
    tree = tmp_path / "entries"
    shutil.copytree(ENTRIES, tree)
    first = v1["tasks"]["ImageNet"]["train_time_archive"][0]["entry"]
    log = tree / "ImageNet" / "train" / f"{first}.tsv"
    log.write_bytes(log.read_bytes().replace(b"\n", b"\r\n", 1))     # the same figures, another file
    shutil.copy(tree / "ImageNet" / "train" / f"{first}.json", tree / "ImageNet" / "train" / "copy.json")
    shutil.copy(log, tree / "ImageNet" / "train" / "copy.tsv")
    loaded, invalid = ranking.load_all(tree, level="v1")
    ranked = ranking.rank(loaded, invalid)
    names = {r["entry"] for rows in ranked["tasks"]["ImageNet"].values() for r in rows}
    assert first not in names and "copy" not in names and len(names) > 10
    reasons = {u["entry"]: u["reason"] for u in ranked["unranked"]}
    assert reasons[first] == reasons["copy"] == ranking.NOT_ARCHIVED


# v1's entries have no run: they rank in the DAWNBench v1 archive's tables (matched by their files' hashes,
# dawnbench/data/v1-archive.sha256), never in the verified tier's or the submitted table.
OURS = {"train_time": "train_time_archive", "train_cost": "train_cost_archive",
        "inference_latency": "inference_latency_archive", "inference_cost": "inference_cost_archive"}


@pytest.mark.parametrize("task", sorted(v1_official_order.METRIC))
@pytest.mark.parametrize("table", v1_official_order.TABLES)
def test_each_table_in_the_official_order(v1, task, table):
    expected = json.loads(v1_official_order.EXPECTED.read_text())[task][table]
    rows = v1["tasks"][task][OURS[table]]
    assert [r["entry"] for r in rows] == [name for name, _ in expected]
    value = {"train_time": "hours", "train_cost": "cost_usd", "inference_latency": "latency_ms",
             "inference_cost": "cost_per_10000_usd"}[table]
    assert all(math.isclose(r[value], v, rel_tol=1e-9) for r, (_, v) in zip(rows, expected))


def test_no_v1_entry_ranks_outside_the_archive(v1):
    assert all(not v1["tasks"][task][table] for task in v1["tasks"]
               for table in set(ranking.TABLES) - set(OURS.values()))


def test_imagenet_training_time_starts_with_alibabas_158_seconds(v1):
    first = v1["tasks"]["ImageNet"]["train_time_archive"][0]
    assert first["entry"] == "alibabacloud_resnet50_gn6e_16_machine_tensorflow"
    assert round(first["hours"] * 3600) == 158


def test_strict_refuses_exactly_the_entries_v1_ranks_with_warnings(v1):
    loaded, invalid = ranking.load_all(ENTRIES, level="strict")
    refused = {(u["task"], u["kind"], u["entry"]) for u in invalid}
    warned = {(w["task"], w["kind"], w["entry"]) for w in v1["warnings"]}
    assert len(refused) == 25 and refused == warned
    # each warning is one line with its file and line, and says how the entry was read
    assert all(w["warning"].startswith(w["file"].rsplit(".", 1)[0]) and ": warning: " in w["warning"]
               for w in v1["warnings"])


def test_validate_levels_on_the_copy(capsys):
    assert validate_entries.main(["--level", "v1", str(ENTRIES)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("187 files checked: all valid (31 warnings")
    assert validate_entries.main([str(ENTRIES)]) == 1                     # strict is validate's default
    assert capsys.readouterr().out.splitlines()[-1].startswith("30 problems in 25 of 187 files")


def test_leaderboard_defaults_to_v1(capsys):
    assert leaderboard.main([str(ENTRIES), "--format", "json"]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert printed["invalid"] == [] and len(printed["warnings"]) == 31
    assert captured.err.count(": warning: ") == 31
    assert leaderboard.main([str(ENTRIES), "--format", "json", "--level", "strict"]) == 0
    assert len(json.loads(capsys.readouterr().out)["invalid"]) == 25
