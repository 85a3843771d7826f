"""The shared entry reader: naming, eval-set sizes, logs with line numbers."""
from __future__ import annotations

import json

import pytest

from dawnbench import entries
from harness.tasks import TASKS


@pytest.mark.parametrize("text, part", [
    ("Jane Doe", "Jane-Doe"), ("a_b/c\\d", "a-b-c-d"), ("ResNet 164 (with bottleneck)", "ResNet-164-with-bottleneck"),
    ("../..", "unknown"), ("PyTorch 2.13.0", "PyTorch-2.13.0"), ("", "unknown"), ("Zoë", "Zo"),
    (".hidden", "hidden"), ("1 x NVIDIA H100 80GB HBM3", "1-x-NVIDIA-H100-80GB-HBM3")])
def test_name_part_keeps_letters_digits_dash_and_dot(text, part):
    assert entries.name_part(text) == part


def test_entry_stem_has_four_parts_split_by_underscores():
    stem = entries.entry_stem("Stanford DAWN", "ResNet_164", "1 K80 / 61 GB", "PyTorch v0.1.12")
    assert stem == "Stanford-DAWN_ResNet-164_1-K80-61-GB_PyTorch-v0.1.12"
    assert len(stem.split("_")) == 4


def test_eval_set_sizes_and_the_imagenet_blacklist():
    assert entries.BLACKLIST_EXAMPLES == {"imagenet": 1762}
    assert entries.eval_set_size(TASKS["imagenet"]) == 50000
    assert entries.eval_set_size(TASKS["imagenet"], used_blacklist=True) == 48238
    assert entries.eval_set_size(TASKS["cifar10"], used_blacklist=True) == 10000
    assert entries.eval_set_size(TASKS["squad"]) == 10570


def test_split_tsv_numbers_lines_and_skips_blank_ones():
    text = "epoch\thours\tf1Score\r\n1\t 0.5 \t0.61\r\n\r\n2\t1.0\t0.76\n"
    assert entries.split_tsv(text) == [(1, ["epoch", "hours", "f1Score"]), (2, ["1", "0.5", "0.61"]),
                                       (4, ["2", "1.0", "0.76"])]


def test_read_tsv_drops_a_bom(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_bytes("\ufeffepoch\thours\ttop1Accuracy\n1\t0.1\t94.5\n".encode("utf-8"))
    assert entries.read_tsv(path) == (["epoch", "hours", "top1Accuracy"], [["1", "0.1", "94.5"]])


def test_load_an_old_entry_without_log_filename(tmp_path):
    folder = tmp_path / "CIFAR10" / "train"
    folder.mkdir(parents=True)
    (folder / "dawn_x.json").write_text(json.dumps({"version": "v1.0", "author": "A", "costPerHour": 0.9}))
    (folder / "dawn_x.tsv").write_text("epoch\thours\ttop1Accuracy\n1\t0.5\t93.0\n2\t1.0\t94.1\n")
    entry = entries.load(folder / "dawn_x.json")
    assert (entry.task.name, entry.kind, entry.name) == ("cifar10", "train", "dawn_x")
    assert entry.first_at_threshold() == {"epoch": 2.0, "hours": 1.0, "top1Accuracy": 94.1}
    assert entries.find(tmp_path) == [folder / "dawn_x.json"]
