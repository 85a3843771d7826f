"""`dawnbench validate`: hand-written v1 entries, valid and broken in each known way, and fuzzing."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dawnbench import schemas, validate_entries
from dawnbench.cli import main as cli_main
from harness import safe_read

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^(?P<file>.+?):(?P<line>[1-9][0-9]*): (?P<field>[A-Za-z0-9_.]+): (?P<message>\S.*)$")
COUNT = re.compile(r"^(\d+ problems? in \d+ of \d+ files|\d+ files? checked: all valid)$")

# A 2017 CIFAR10 training entry as Stanford DAWN wrote them: no logFilename, so the log has its stem.
OLD_TRAIN = {
    "version": "v1.0",
    "author": "Stanford DAWN",
    "authorEmail": "dawn-benchmark@lists.stanford.edu",
    "framework": "PyTorch v0.1.12",
    "codeURL": "https://github.com/stanford-futuredata/dawn-bench-models/tree/master/pytorch/CIFAR10",
    "model": "ResNet 164 (with bottleneck)",
    "hardware": "1 K80 / 61 GB / 4 CPU (Amazon EC2 [p2.xlarge])",
    "costPerHour": 0.9,
    "timestamp": "2017-10-11",
    "misc": {"CUDA version": "8.0", "CuDNN version": "5.1", "ordering": "full preactivation"},
}
OLD_INFERENCE = {
    "version": "v1.0",
    "author": "Stanford DAWN",
    "authorEmail": "dawn-benchmark@lists.stanford.edu",
    "framework": "PyTorch v0.1.12",
    "codeURL": "https://github.com/stanford-futuredata/dawn-bench-models/tree/master/pytorch/CIFAR10",
    "model": "ResNet 164 (with bottleneck)",
    "hardware": "1 K80 / 61 GB / 4 CPU (Amazon EC2 [p2.xlarge])",
    "latency": 28.688002700200006,
    "cost": 7.172000675050001e-06,
    "top1Accuracy": 94.97,
    "timestamp": "2017-10-11",
    "misc": {"CUDA version": "8.0", "CuDNN version": "5.1"},
}


def cifar_log(rows: int = 181, final: float = 94.03) -> str:
    """A CIFAR10 log of `rows` epochs, 0.0725 h each, the last one first at 94%."""
    lines = ["epoch\thours\ttop1Accuracy"]
    for epoch in range(1, rows + 1):
        acc = final if epoch == rows else min(93.9, 30 + 63.9 * epoch / (rows - 1))
        lines.append(f"{epoch}\t{0.0725 * epoch:.6f}\t{acc:.2f}")
    return "\n".join(lines) + "\n"


def write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content, indent=4) + "\n", encoding="utf-8")
    return path


def train_entry(root: Path, fields=None, log=None, task="CIFAR10", stem="dawn_resnet164_1k80-ec2_pytorch"):
    json_path = write(root / task / "train" / f"{stem}.json", OLD_TRAIN if fields is None else fields)
    if log is not False:
        name = (fields or {}).get("logFilename") if isinstance(fields, dict) else None
        write(root / task / "train" / (name if isinstance(name, str) else f"{stem}.tsv"),
              cifar_log() if log is None else log)
    return json_path


def inference_entry(root: Path, fields=None, task="CIFAR10", stem="dawn_resnet164_1k80-ec2_pytorch"):
    return write(root / task / "inference" / f"{stem}.json", OLD_INFERENCE if fields is None else fields)


def run_validate(capsys, *paths, flags=()):
    code = validate_entries.main([*flags, *map(str, paths)])
    out = capsys.readouterr().out.splitlines()
    assert out, "validate prints at least its count line"
    assert COUNT.match(out[-1]), out[-1]
    for line in out[:-1]:
        assert LINE.match(line), line
    return code, out[:-1]


def problems_of(capsys, *paths, flags=()):
    code, lines = run_validate(capsys, *paths, flags=flags)
    assert code == (1 if lines else 0)
    return [LINE.match(line).groupdict() for line in lines]


def line_of(path: Path, key: str) -> int:
    for n, text in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        if f'"{key}"' in text:
            return n
    raise AssertionError(key)


# ---------------------------------------------------------------- valid entries

def test_old_v1_entries_without_log_filename_are_valid(tmp_path, capsys):
    train_entry(tmp_path)
    inference_entry(tmp_path)
    code, lines = run_validate(capsys, tmp_path)
    assert (code, lines) == (0, [])
    assert capsys.readouterr().out == ""


def test_count_line_names_the_files(tmp_path, capsys):
    train_entry(tmp_path)
    inference_entry(tmp_path)
    validate_entries.main([str(tmp_path)])
    assert capsys.readouterr().out.strip() == "3 files checked: all valid"


def test_new_entry_with_explicit_units_is_valid(tmp_path, capsys):
    tta = 181 * 0.0725 * 3600
    fields = {**OLD_TRAIN, "logFilename": "me_resnet9_1-x-V100_pytorch.tsv", "commitHash": "3f2a9c1",
              "reference": "cifar10-resnet9-pytorch",
              "tta_seconds": round(tta, 3), "cost_usd": 0.9 * tta / 3600, "nodes": 1, "instance": "aws:p2.xlarge",
              "price": {"instance": "aws:p2.xlarge", "usd_per_hour": 0.9, "source": "https://aws.amazon.com/ec2/pricing/",
                        "date": "2026-11-01"},
              "image_digest": "sha256:" + "a" * 64, "git_commit": "3f2a9c1", "eval_examples": 10000,
              "runs": {"n": 5, "converged": 4, "median_tta_seconds": 47000.0},
              "threshold": 0.94, "official_threshold": True}
    train_entry(tmp_path, fields, stem="me_resnet9_1-x-V100_pytorch")
    inference_entry(tmp_path, {**OLD_INFERENCE, "costPerHour": 0.9, "eval_examples": 10000,
                               "latency_ms": {"mean": 28.688002700200006, "p50": 28.1, "p90": 30.2, "p99": 35.0},
                               "cost_per_10k_items_usd": 7.172000675050001e-02})
    assert problems_of(capsys, tmp_path) == []
    # `rules_version` says `dawnbench submit` wrote it: then its run must be beside it (tests/test_entry_trust.py)
    train_entry(tmp_path, {**fields, "rules_version": "dawnbench-1.0"}, stem="me_resnet9_1-x-V100_pytorch")
    (problem,) = problems_of(capsys, tmp_path)
    assert problem["field"] == "rules_version" and "its run me_resnet9_1-x-V100_pytorch.run/ is not beside it" \
        in problem["message"]


def test_consistent_v1_inference_cost(tmp_path, capsys):
    # 0.9 USD/h x 28.688 ms / 3.6e6 = 7.172e-06 USD per item: the v1 formula
    inference_entry(tmp_path, {**OLD_INFERENCE, "costPerHour": 0.9})
    assert problems_of(capsys, tmp_path) == []


def test_utf8_bom_in_log_and_json_is_tolerated(tmp_path, capsys):
    json_path = train_entry(tmp_path, log=("\ufeff" + cifar_log()).encode("utf-8"))
    json_path.write_bytes(b"\xef\xbb\xbf" + json_path.read_bytes())
    assert problems_of(capsys, tmp_path) == []


def test_squad_and_imagenet_entries(tmp_path, capsys):
    squad = {**OLD_TRAIN, "framework": "TensorFlow v1.2", "model": "BiDAF"}
    log = "epoch\thours\tf1Score\n1\t0.5\t0.61\n2\t1.0\t0.7533\n"
    train_entry(tmp_path, squad, log=log, task="SQuAD", stem="dawn_bidaf_1k80-ec2_tensorflow")
    inference_entry(tmp_path, {**{k: v for k, v in OLD_INFERENCE.items() if k != "top1Accuracy"},
                               "latency": 705.9, "cost": 0.000176475, "f1Score": 0.7533331513},
                    task="SQuAD", stem="dawn_bidaf_1k80-ec2_tensorflow")
    imagenet = {**OLD_TRAIN, "usedBlacklist": True, "misc": {"eval_samples": 48238}}
    log = "epoch\thours\ttop1Accuracy\ttop5Accuracy\n1\t0.3\t60.1\t82.0\n2\t0.6\t76.2\t93.1\n"
    train_entry(tmp_path, imagenet, log=log, task="ImageNet", stem="fast_resnet50_8v100_pytorch")
    assert problems_of(capsys, tmp_path) == []


# ---------------------------------------------------------------- each quirk, with file, line and field

def test_swapped_columns_are_reported_as_another_order(tmp_path, capsys):
    # a real 2018 SQuAD log: f1Score before hours, cells padded with spaces
    log = "epoch\tf1Score\thours\n1\t0.6126923155084571\t  0.13735185055555554     \n" \
          "2\t0.7584450310827428\t  1.3650755286111111      \n"
    train_entry(tmp_path, {**OLD_TRAIN, "model": "DrQA"}, log=log, task="SQuAD", stem="dawn_drqa_1k80-ec2")
    (p,) = problems_of(capsys, tmp_path)
    assert p["file"].endswith("SQuAD/train/dawn_drqa_1k80-ec2.tsv")
    assert (p["line"], p["field"]) == ("1", "header")
    assert "another order" in p["message"] and "epoch, hours, f1Score in this order" in p["message"]


def test_wrong_header_says_the_expected_one(tmp_path, capsys):
    train_entry(tmp_path, log="epoch hours top1Accuracy\n1 0.1 94.5\n")
    (p,) = problems_of(capsys, tmp_path)
    assert p["field"] == "header" and "separate the columns with tabs" in p["message"]


def test_f1_written_as_percent(tmp_path, capsys):
    log = "epoch\thours\tf1Score\n1\t0.5\t61.2\n2\t1.0\t75.1\n"
    train_entry(tmp_path, {**OLD_TRAIN, "model": "BiDAF"}, log=log, task="SQuAD")
    inference_entry(tmp_path, {**{k: v for k, v in OLD_INFERENCE.items() if k != "top1Accuracy"},
                               "f1Score": 75.1}, task="SQuAD")
    found = problems_of(capsys, tmp_path)
    inference = tmp_path / "SQuAD/inference/dawn_resnet164_1k80-ec2_pytorch.json"
    assert [(p["file"], p["field"], p["line"]) for p in found] == [
        (str(inference), "f1Score", str(line_of(inference, "f1Score"))),
        (str(tmp_path / "SQuAD/train/dawn_resnet164_1k80-ec2_pytorch.tsv"), "f1Score", "2")]
    assert all("percent in a fraction column" in p["message"] for p in found)
    assert "0.751" in found[0]["message"]


def test_accuracy_written_as_fraction(tmp_path, capsys):
    log = "epoch\thours\ttop1Accuracy\n1\t0.5\t0.61\n2\t1.0\t0.9403\n"
    train_entry(tmp_path, log=log)
    inference_entry(tmp_path, {**OLD_INFERENCE, "top1Accuracy": 0.9497})
    found = problems_of(capsys, tmp_path)
    assert sorted((p["file"].rsplit("/", 2)[-2], p["field"]) for p in found) == [
        ("inference", "top1Accuracy"), ("train", "top1Accuracy")]
    assert any("fraction in a percent column" in p["message"] and p["line"] == "2" for p in found)
    assert not any("never reached" in p["message"] for p in found)    # one cause, one line


def test_timestamp_that_is_not_a_date(tmp_path, capsys):
    path = train_entry(tmp_path, {**OLD_TRAIN, "timestamp": "2018-02-30"})
    (p,) = problems_of(capsys, tmp_path)
    assert p["file"] == str(path)
    assert (int(p["line"]), p["field"]) == (line_of(path, "timestamp"), "timestamp")
    assert '"2018-02-30"' in p["message"] and "yyyy-mm-dd" in p["message"]


def test_hours_going_backwards_and_epochs_repeating(tmp_path, capsys):
    log = "epoch\thours\ttop1Accuracy\n1\t0.2\t80\n2\t0.1\t90\n\n2\t0.3\t94.2\n"
    train_entry(tmp_path, log=log)
    found = problems_of(capsys, tmp_path)
    assert [(p["line"], p["field"]) for p in found] == [("3", "hours"), ("5", "epoch")]
    assert "goes backwards" in found[0]["message"]


def test_threshold_not_reached(tmp_path, capsys):
    train_entry(tmp_path, log=cifar_log(final=93.95))
    inference_entry(tmp_path, {**OLD_INFERENCE, "top1Accuracy": 93.1})
    found = problems_of(capsys, tmp_path)
    assert len(found) == 2
    train_p = next(p for p in found if p["file"].endswith(".tsv"))
    assert train_p["line"] == "182" and "threshold 94 is never reached (best 93.95)" in train_p["message"]
    infer_p = next(p for p in found if "/inference/" in p["file"])
    assert infer_p["field"] == "top1Accuracy" and "below the threshold 94" in infer_p["message"]


def test_cost_inconsistent(tmp_path, capsys):
    inference_entry(tmp_path, {**OLD_INFERENCE, "costPerHour": 0.9, "cost": 7.3e-06})
    tta = 181 * 0.0725 * 3600
    train_entry(tmp_path, {**OLD_TRAIN, "tta_seconds": tta, "cost_usd": 0.9 * tta / 3600 * 1.02})
    found = problems_of(capsys, tmp_path)
    assert sorted(p["field"] for p in found) == ["cost", "cost_usd"]
    assert any("costPerHour x latency / 3.6e6 = 7.172e-06" in p["message"] for p in found)


def test_cost_within_one_percent_passes(tmp_path, capsys):
    inference_entry(tmp_path, {**OLD_INFERENCE, "costPerHour": 0.9, "cost": 7.172e-06 * 1.009})
    assert problems_of(capsys, tmp_path) == []


def test_tta_seconds_must_match_the_log(tmp_path, capsys):
    train_entry(tmp_path, {**OLD_TRAIN, "tta_seconds": 1000.0})
    (p,) = problems_of(capsys, tmp_path)
    assert p["field"] == "tta_seconds" and "13.1225 h" in p["message"]


def test_wrong_eval_counts(tmp_path, capsys):
    path = train_entry(tmp_path, {**OLD_TRAIN, "eval_examples": 9000, "misc": {"eval_samples": 10000}})
    imagenet = {**OLD_TRAIN, "usedBlacklist": True, "misc": {"eval_samples": 50000}}
    log = "epoch\thours\ttop1Accuracy\ttop5Accuracy\n1\t0.6\t76.2\t93.1\n"
    inet = train_entry(tmp_path, imagenet, log=log, task="ImageNet")
    found = problems_of(capsys, tmp_path)
    assert [(p["file"], p["field"]) for p in found] == [(str(path), "eval_examples"),
                                                        (str(inet), "misc.eval_samples")]
    assert "10,000 examples" in found[0]["message"]
    assert int(found[1]["line"]) == line_of(inet, "eval_samples")
    assert "48,238 examples with usedBlacklist: true" in found[1]["message"]


def test_training_json_without_its_log(tmp_path, capsys):
    train_entry(tmp_path, log=False)
    train_entry(tmp_path, {**OLD_TRAIN, "logFilename": "elsewhere.tsv"}, log=False, stem="other")
    found = problems_of(capsys, tmp_path)
    assert [p["field"] for p in found] == ["logFilename", "logFilename"]
    assert "dawn_resnet164_1k80-ec2_pytorch.tsv is missing" in found[0]["message"]
    assert "elsewhere.tsv is missing" in found[1]["message"]


def test_required_fields_types_and_version(tmp_path, capsys):
    fields = {k: v for k, v in OLD_TRAIN.items() if k != "hardware"}
    path = train_entry(tmp_path, {**fields, "version": "v2", "costPerHour": "0.9", "misc": [],
                                  "usedBlacklist": True})
    found = {p["field"]: p for p in problems_of(capsys, tmp_path)}
    assert set(found) == {"hardware", "version", "costPerHour", "misc", "usedBlacklist"}
    assert found["hardware"]["line"] == "1" and "required field missing" in found["hardware"]["message"]
    for key in ("version", "costPerHour", "misc", "usedBlacklist"):
        assert int(found[key]["line"]) == line_of(path, key)


def test_inference_needs_latency_and_the_task_metric(tmp_path, capsys):
    fields = {k: v for k, v in OLD_INFERENCE.items() if k not in ("latency", "top1Accuracy")}
    inference_entry(tmp_path, {**fields, "top5Accuracy": 99.0})
    assert sorted(p["field"] for p in problems_of(capsys, tmp_path)) == ["latency", "top1Accuracy"]


def test_unofficial_entries_need_the_flag(tmp_path, capsys):
    log = "epoch\thours\ttop1Accuracy\n1\t0.01\t55.0\n"
    train_entry(tmp_path, {**OLD_TRAIN, "threshold": 0.5, "official_threshold": False}, log=log)
    # without the flag: not an entry, and the official 94% is not reached either
    assert {p["field"] for p in problems_of(capsys, tmp_path)} == {"official_threshold", "top1Accuracy"}
    assert problems_of(capsys, tmp_path, flags=["--allow-unofficial"]) == []
    train_entry(tmp_path, {**OLD_TRAIN, "threshold": 0.6, "official_threshold": False}, log=log)
    (p,) = problems_of(capsys, tmp_path, flags=["--allow-unofficial"])
    assert p["field"] == "top1Accuracy" and "threshold 60 is never reached" in p["message"]


def test_official_entry_with_another_threshold(tmp_path, capsys):
    train_entry(tmp_path, {**OLD_TRAIN, "threshold": 0.9})
    (p,) = problems_of(capsys, tmp_path)
    assert p["field"] == "threshold"


def test_entries_outside_the_tree_layout_and_stray_logs(tmp_path, capsys):
    write(tmp_path / "cifar10" / "train" / "x.json", OLD_TRAIN)
    write(tmp_path / "CIFAR10" / "train" / "orphan.tsv", cifar_log())
    found = problems_of(capsys, tmp_path)
    assert {(Path(p["file"]).name, p["field"]) for p in found} == {("x.json", "path"), ("orphan.tsv", "path")}


def test_log_filename_never_leaves_the_entry_folder(tmp_path, capsys):
    secret = write(tmp_path / "secret.tsv", "epoch\thours\ttop1Accuracy\n1\t0.1\t99\n")
    train_entry(tmp_path / "e", {**OLD_TRAIN, "logFilename": "../../../secret.tsv"}, log=False)
    link = tmp_path / "e" / "CIFAR10" / "train" / "linked.tsv"
    link.symlink_to(secret)
    train_entry(tmp_path / "e", {**OLD_TRAIN, "logFilename": "linked.tsv"}, log=False, stem="b")
    found = problems_of(capsys, tmp_path / "e")
    assert [p["field"] for p in found if p["file"].endswith(".json")] == ["logFilename", "logFilename"]
    assert not any("secret" in p["file"] for p in found)


def test_logs_no_entry_names_read_each_json_once(tmp_path, capsys, monkeypatch):
    """Issue 47: for each log no JSON names, validate read every JSON of its folder again (quadratic: 2,000
    such entries took 66 s, 5,000 over 300 s, a stalled site build). Each JSON is read at most twice now
    (its own check, and once to index the folder's logFilenames); quadratic would be N * N reads."""
    n = 40
    for i in range(n):
        write(tmp_path / "CIFAR10" / "train" / f"e{i}.json", OLD_TRAIN)
        write(tmp_path / "CIFAR10" / "train" / f"log{i}.tsv", cifar_log(rows=3))
    reads = []
    real = validate_entries.read_json
    monkeypatch.setattr(validate_entries, "read_json", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    found = problems_of(capsys, tmp_path)
    assert sum(p["file"].endswith(".tsv") for p in found) == n           # each log still said to be unnamed
    assert len(reads) <= 2 * n + 2, len(reads)


def test_a_tsv_given_alone_checks_its_entry(tmp_path, capsys):
    path = train_entry(tmp_path, {**OLD_TRAIN, "timestamp": "2017-13-01"})
    found = problems_of(capsys, path.with_suffix(".tsv"))
    assert [p["field"] for p in found] == ["timestamp"]


# ---------------------------------------------------------------- inputs that must not crash

@pytest.mark.parametrize("content, field, words", [
    (b"\xff\xfe{\x00", "json", "not UTF-8"),
    (b"[1, 2, 3]", "json", "a JSON list, not an object"),
    (b"42", "json", "a JSON int, not an object"),
    (b"null", "json", "a JSON null, not an object"),
    (b"[" * 200000 + b"]" * 200000, "json", "nested too deeply"),
    (b"", "json", "empty file"),
    (b"  \n", "json", "empty file"),
    (b'{"version": "v1.0",\n "latency": ', "json", "not valid JSON"),
])
def test_malformed_json_files(tmp_path, capsys, content, field, words):
    path = inference_entry(tmp_path, content)
    (p,) = problems_of(capsys, tmp_path)
    assert (p["file"], p["field"]) == (str(path), field) and words in p["message"]


def test_nan_infinity_and_huge_numbers(tmp_path, capsys):
    text = json.dumps(OLD_INFERENCE, indent=4)
    text = text.replace('"latency": 28.688002700200006', '"latency": NaN')
    text = text.replace('"cost": 7.172000675050001e-06', '"cost": ' + "9" * 5000)
    text = text.replace('"top1Accuracy": 94.97', '"top1Accuracy": 1e400')
    text = text.replace('"CUDA version": "8.0"', '"CUDA version": -Infinity')
    path = inference_entry(tmp_path, text)
    found = problems_of(capsys, tmp_path)
    assert {p["field"]: int(p["line"]) for p in found} == {
        "latency": line_of(path, "latency"), "cost": line_of(path, "cost"),
        "top1Accuracy": line_of(path, "top1Accuracy"), "misc.CUDA_version": line_of(path, "CUDA version")}
    assert len(found) == 4       # the NaN in latency is one problem, not two
    assert "NaN/Infinity is not a JSON number" in found[-1]["message"]


def test_bad_tsv_bytes_and_cells(tmp_path, capsys):
    train_entry(tmp_path, log=b"epoch\thours\ttop1Accuracy\n1\t0.1\t\xff\n", stem="a")
    train_entry(tmp_path, log="epoch\thours\ttop1Accuracy\n1\tnan\t94.5\n2\t0.2\n3\t0.3\t1e999\n", stem="b")
    found = problems_of(capsys, tmp_path)
    assert [(Path(p["file"]).name, p["line"], p["field"]) for p in found] == [
        ("a.tsv", "2", "tsv"), ("b.tsv", "2", "hours"), ("b.tsv", "3", "row"), ("b.tsv", "4", "top1Accuracy")]
    assert "not UTF-8" in found[0]["message"] and "has 2 cells, the header 3" in found[2]["message"]


def test_directories_links_fifos_and_unreadable_files(tmp_path, capsys, monkeypatch):
    (tmp_path / "CIFAR10" / "inference" / "dir.json").mkdir(parents=True)
    (tmp_path / "CIFAR10" / "inference" / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    os.mkfifo(tmp_path / "CIFAR10" / "inference" / "fifo.json")
    locked = inference_entry(tmp_path, stem="locked")
    real_open = os.open

    def deny(path, *a, **k):
        if Path(path) == locked.resolve():
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)
    monkeypatch.setattr(safe_read.os, "open", deny)
    found = problems_of(capsys, tmp_path)      # (a path given that is not there: tests/test_bounds.py)
    assert {(Path(p["file"]).name, p["field"]) for p in found} == {
        ("dir.json", "json"), ("dangling.json", "json"), ("fifo.json", "json"), ("locked.json", "json")}
    assert any("Permission denied" in p["message"] for p in found)


# ---------------------------------------------------------------- through the command line

def test_through_dawnbench_cli(tmp_path, capsys):
    train_entry(tmp_path)
    assert cli_main(["validate", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == "2 files checked: all valid"
    train_entry(tmp_path, {**OLD_TRAIN, "timestamp": "2018-02-30"}, stem="bad")
    assert cli_main(["validate", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 problem in 1 of 4 files"


def test_usage_error_is_one_line(capsys):
    assert cli_main(["validate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dawnbench validate: error:")


def test_as_a_subprocess(tmp_path):
    good = train_entry(tmp_path)
    bad = train_entry(tmp_path, {**OLD_TRAIN, "version": "1.0"}, stem="bad")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "dawnbench", "validate", str(good)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "1 file checked: all valid\n", "")
    done = subprocess.run([sys.executable, "-m", "dawnbench.validate_entries", str(bad)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stdout.splitlines()[0] == f"{bad}:2: version: must be the string \"v1.0\", not \"1.0\" " \
                                          f"(write e.g. \"v1.0\")"


# ---------------------------------------------------------------- fuzzing

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**30) | st.floats()
    | st.text(max_size=20) | st.sampled_from(["v1.0", "2018-02-30", "2018-02-28", "x.tsv", "../x.tsv", ""]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)


def _fresh(base: Path, name: str) -> Path:
    folder = base / name
    n = 0
    while folder.exists():
        n += 1
        folder = base / f"{name}{n}"
    return folder


def _checked(capsys, root: Path) -> None:
    try:
        code = validate_entries.main([str(root)])
    except BaseException as e:          # noqa: BLE001 -- the point is that nothing escapes
        pytest.fail(f"validate raised {type(e).__name__}: {e}")
    out = capsys.readouterr().out.splitlines()
    assert code in (0, 1)
    assert out and COUNT.match(out[-1])
    for line in out[:-1]:
        assert LINE.match(line), line
    assert (code == 0) == (len(out) == 1)


@FUZZ
@given(data=st.binary(max_size=300), log=st.binary(max_size=300))
def test_fuzz_arbitrary_bytes(tmp_path_factory, capsys, data, log):
    root = _fresh(tmp_path_factory.getbasetemp(), "bytes")
    train_entry(root, data, log=log)
    inference_entry(root, data)
    _checked(capsys, root)


NEW_TRAIN = {**OLD_TRAIN, "tta_seconds": 47241.0, "cost_usd": 11.81025, "eval_examples": 10000,
             "nodes": 1, "instance": "aws:p2.xlarge", "threshold": 0.94, "official_threshold": True,
             "price": {"instance": "aws:p2.xlarge", "usd_per_hour": 0.9, "source": "https://x", "date": "2026-11-01"},
             "runs": {"n": 3, "converged": 3, "median_tta_seconds": 47241.0}}
NEW_INFERENCE = {**OLD_INFERENCE, "costPerHour": 0.9, "eval_examples": 10000, "cost_per_10k_items_usd": 0.07172,
                 "latency_ms": {"mean": 28.688002700200006, "p50": 28.0, "p90": 30.0, "p99": 35.0}}


def test_fuzz_bases_are_valid(tmp_path, capsys):
    train_entry(tmp_path, NEW_TRAIN)
    inference_entry(tmp_path, NEW_INFERENCE)
    assert problems_of(capsys, tmp_path) == []


SUBFIELDS = [f"{name}.{sub}" for name, subs in schemas.SUBFIELDS.items() for sub in subs] + ["misc.eval_samples"]


@FUZZ
@given(field=st.sampled_from(sorted(schemas.FIELDS) + SUBFIELDS + ["extra"]), value=json_values,
       kind=st.sampled_from(["train", "inference"]))
def test_fuzz_any_json_value_in_any_field(tmp_path_factory, capsys, field, value, kind):
    root = _fresh(tmp_path_factory.getbasetemp(), "values")
    fields = json.loads(json.dumps(NEW_TRAIN if kind == "train" else NEW_INFERENCE))
    outer, _, inner = field.partition(".")
    if inner:
        fields[outer] = {**(fields.get(outer) or {}), inner: value}
    else:
        fields[outer] = value
    text = json.dumps(fields, allow_nan=True)
    (train_entry if kind == "train" else inference_entry)(root, text)
    _checked(capsys, root)


@FUZZ
@given(value=json_values)
def test_fuzz_any_json_document(tmp_path_factory, capsys, value):
    root = _fresh(tmp_path_factory.getbasetemp(), "docs")
    inference_entry(root, json.dumps(value, allow_nan=True))
    train_entry(root, json.dumps(value, allow_nan=True), stem="t")
    _checked(capsys, root)


@FUZZ
@given(data=st.data())
def test_fuzz_mutated_valid_entries(tmp_path_factory, capsys, data):
    root = _fresh(tmp_path_factory.getbasetemp(), "mutants")
    text = json.dumps(OLD_TRAIN, indent=4)
    log = cifar_log(rows=6)
    for _ in range(data.draw(st.integers(1, 4))):
        target = data.draw(st.sampled_from(["json", "log"]))
        source = text if target == "json" else log
        at = data.draw(st.integers(0, len(source)))
        how = data.draw(st.sampled_from(["delete", "insert", "replace"]))
        piece = data.draw(st.sampled_from(["\t", "\n", '"', "{", "}", "[", ",", ":", "-", "1e999", "NaN",
                                           "\ufeff", "\x00", "é", "0", "."]) | st.text(max_size=3))
        if how == "delete":
            source = source[:at] + source[at + 1:]
        elif how == "insert":
            source = source[:at] + piece + source[at:]
        else:
            source = source[:at] + piece + source[at + len(piece):]
        text, log = (source, log) if target == "json" else (text, source)
    train_entry(root, text, log=log)
    _checked(capsys, root)
