"""`dawnbench validate --level strict|v1`: one hand-written v1-style entry per quirk the official
DAWNBench v1 board tolerated, each checked at both levels (strict refuses it, v1 ranks it with one
warning at the same file:line, read as v1 read it), what v1 refused too still refused at v1, and
the normalization shown on the entry's page."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from leaderboard_fixture import archived, inference, train
from test_validate import FUZZ, LINE, NEW_INFERENCE, NEW_TRAIN, _fresh, inference_entry, json_values, train_entry

from dawnbench import leaderboard, ranking, validate_entries

SQUAD_DRQA = "epoch\tf1Score\thours\n1\t0.61\t  0.137     \n2\t0.7584\t  1.365      \n"
IMAGENET_SEED = "hours\tepoch\ttop1Accuracy\ttop5Accuracy\n2.29\t1\t15.8\t36.5\n9.5\t2\t76.1\t93.1\n"


def _log(path: Path, text: str) -> Path:
    log = path.with_suffix(".tsv")
    log.write_text(text)
    return log


def no_code_url(root):
    return train(root, "ImageNet", "alibabacloud_resnet50_gn6e_tensorflow", [(1, 0.05, 76.0, 93.1)],
                 codeURL=None), "json", "codeURL", 1


def misc_a_string(root):
    path = train(root, "ImageNet", "ppwwyyxx_resnet152_dgx1_tensorpack", [(1, 1.0, 76.0, 93.1)],
                 misc="CUDA version: 8.0; total batch size: 256")
    return path, "json", "misc", _line(path, "misc")


def log_filename_a_url(root):
    path = train(root, "ImageNet", "Intel_Resnet50_ec2_intelcaffe", [(1, 1.0, 76.0, 93.1)],
                 logFilename="https://github.com/intel/caffe/tree/DAWN_Bench/outputCluster-skx-64.txt.tgz")
    return path, "json", "logFilename", _line(path, "logFilename")


def columns_by_name_squad(root):
    path = train(root, "SQuAD", "dawn_drqa_1k80-ec2", [])
    _log(path, SQUAD_DRQA)
    return path, "tsv", "header", 1


def columns_by_name_imagenet(root):
    path = train(root, "ImageNet", "dawn_resnet152_8k80_mxnet", [])
    _log(path, IMAGENET_SEED)
    return path, "tsv", "header", 1


def repeated_epoch(root):
    path = train(root, "ImageNet", "google_resnet50_tpu_tensorflow", [(17, 0.64, 46.1, 71.8), (18, 0.67, 33.4, 59.3),
                                                                     (18, 0.69, 34.9, 60.9), (19, 0.78, 76.0, 93.2)])
    return path, "tsv", "epoch", 4


def unpadded_timestamp(root):
    path = inference(root, "ImageNet", "Intel_resnet50_c5_intelcaffe", latency=9.96, top5Accuracy=93.1,
                     timestamp="2018-4-20")
    return path, "json", "timestamp", _line(path, "timestamp")


def blacklist_in_inference(root):
    path = inference(root, "ImageNet", "GammaLab_resnet50_PingAnCloud_Caffe", latency=0.82, top5Accuracy=93.2,
                     usedBlacklist=False)
    return path, "json", "usedBlacklist", _line(path, "usedBlacklist")


def f1_in_percent(root):
    path = inference(root, "SQuAD", "dawn_fastfusionnet-1080ti", latency=7.9, cost=None, f1Score=82.52085997573373)
    return path, "json", "f1Score", _line(path, "f1Score")


QUIRKS = [no_code_url, misc_a_string, log_filename_a_url, columns_by_name_squad, columns_by_name_imagenet,
          repeated_epoch, unpadded_timestamp, blacklist_in_inference, f1_in_percent]


def _line(path: Path, key: str) -> int:
    # the fixture writes one line of JSON: rewrite it one key a line, as the published entries are
    fields = json.loads(path.read_text())
    path.write_text(json.dumps(fields, indent=4) + "\n")
    return next(n for n, text in enumerate(path.read_text().splitlines(), 1) if f'"{key}"' in text)


def _lines(capsys, level: str, root: Path) -> tuple[int, list[str]]:
    code = validate_entries.main(["--level", level, str(root)])
    return code, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("quirk", QUIRKS, ids=[q.__name__ for q in QUIRKS])
def test_each_quirk_refused_strict_and_a_warning_at_v1(tmp_path, capsys, quirk):
    path, suffix, field, line = quirk(tmp_path)
    where = f"{path.with_suffix('.' + suffix)}:{line}: {field}: "
    code, out = _lines(capsys, "strict", tmp_path)
    assert code == 1 and len(out) == 2, out                  # one problem line, the count line
    assert out[0].startswith(where) and ": warning: " not in out[0]
    code, out = _lines(capsys, "v1", tmp_path)
    assert code == 0 and len(out) == 2, out                  # one warning, then "all valid (1 warning...)"
    assert out[0].startswith(where + "warning: ")
    assert out[1].endswith("checked: all valid (1 warning: v1 quirks, read as v1 read them)")
    entry, warnings = validate_entries.load_entry(path, level="v1")
    assert entry is not None and entry.notes == out[:1] and [str(w) for w in warnings] == out[:1]
    assert validate_entries.load_entry(path)[0] is None              # strict: load_entry's default
    result = ranking.rank(*ranking.load_all(tmp_path), archived=archived(tmp_path))      # the leaderboard's default: v1
    assert result["invalid"] == [] and [w["warning"] for w in result["warnings"]] == out[:1]
    table = "train_time_archive" if entry.kind == "train" else "inference_latency_archive"
    assert [r["file"] for r in result["tasks"][entry.task.display_name][table]] == [str(path)]


def test_columns_are_read_by_name(tmp_path):
    path, *_ = columns_by_name_imagenet(tmp_path)
    entry, _ = validate_entries.load_entry(path, level="v1")
    assert [list(r) for r in entry.rows] == [["epoch", "hours", "top1Accuracy", "top5Accuracy"]] * 2
    assert entry.rows[1] == {"epoch": 2, "hours": 9.5, "top1Accuracy": 76.1, "top5Accuracy": 93.1}
    squad, *_ = columns_by_name_squad(tmp_path)
    (row,) = ranking.rank(*ranking.load_all(tmp_path), archived=archived(tmp_path))["tasks"]["SQuAD"]["train_time_archive"]
    assert (row["hours"], row["accuracy"], row["file"]) == (1.365, 0.7584, str(squad))


def test_a_url_log_filename_reads_the_log_of_the_same_name(tmp_path):
    path, *_ = log_filename_a_url(tmp_path)
    (row,) = ranking.rank(*ranking.load_all(tmp_path), archived=archived(tmp_path))["tasks"]["ImageNet"]["train_time_archive"]
    assert row["hours"] == 1.0
    path.with_suffix(".tsv").unlink()          # no log by the JSON's name: invalid at v1 too
    (invalid,) = ranking.load_all(tmp_path)[1]
    assert "logFilename: the training log" in invalid["reason"] and "missing" in invalid["reason"]


def test_the_repeated_epoch_ranks_by_the_first_row_at_the_threshold(tmp_path):
    repeated_epoch(tmp_path)
    (row,) = ranking.rank(*ranking.load_all(tmp_path), archived=archived(tmp_path))["tasks"]["ImageNet"]["train_time_archive"]
    assert (row["hours"], row["epoch"]) == (0.78, 19)


def test_normalized_values_rank(tmp_path):
    f1_path, *_ = f1_in_percent(tmp_path)
    unpadded_timestamp(tmp_path)
    entry, _ = validate_entries.load_entry(f1_path, level="v1")
    assert entry.fields["f1Score"] == pytest.approx(0.8252085997573373)
    assert entry.written["f1Score"] == 82.52085997573373            # the file as written, kept for its page
    assert "read as the fraction 0.825209 (divided by 100)" in entry.notes[0]
    result = ranking.rank(*ranking.load_all(tmp_path), archived=archived(tmp_path))
    assert result["tasks"]["SQuAD"]["inference_latency_archive"][0]["accuracy"] == pytest.approx(0.8252085997573373)
    assert result["tasks"]["ImageNet"]["inference_latency_archive"][0]["timestamp"] == "2018-04-20"


@pytest.mark.parametrize("make, words", [
    (lambda root: inference(root, "ImageNet", "a_b_c_d", latency=1.0, top5Accuracy=93.1, timestamp="2018-02-30"),
     "timestamp: must be a real date"),
    (lambda root: inference(root, "ImageNet", "a_b_c_d", latency=1.0, top5Accuracy=93.1, timestamp="20-4-2018"),
     "timestamp: must be a real date"),
    (lambda root: inference(root, "SQuAD", "a_b_c_d", latency=1.0, f1Score=182.5), "f1Score: 182.5 is above 1"),
    (lambda root: inference(root, "SQuAD", "a_b_c_d", latency=1.0, f1Score=70.1), "f1Score: "),   # 0.701 at v1
    (lambda root: train(root, "SQuAD", "a_b_c_d", [(1, 0.5, 61.2), (2, 1.0, 75.1)]), "f1Score: 61.2 is above 1"),
    (lambda root: train(root, "ImageNet", "a_b_c_d", [(1, 1.0, 76.0, 93.1)], logFilename="../x.tsv"),
     "must be a .tsv file name"),
    (lambda root: _log(train(root, "SQuAD", "a_b_c_d", []), "epoch\tf1\thours\n1\t0.8\t1\n"), "header: is"),
    (lambda root: train(root, "ImageNet", "a_b_c_d", [(1, 1.0, 76.0, 93.1), (2, 0.5, 76.0, 93.2)]),
     "hours: 0.5 goes backwards"),
    (lambda root: train(root, "ImageNet", "a_b_c_d", [(1, 1.0, 76.0, 92.9)], version="v2.0"), "version: must be"),
    (lambda root: train(root, "ImageNet", "a_b_c_d", [(1, 1.0, 76.0, 92.9)], author=None), "author: required"),
], ids=["no-such-date", "not-v1-date-order", "f1-over-100", "f1-percent-under-threshold", "f1-percent-in-log",
        "log-path", "unknown-column", "hours-backwards", "version", "no-author"])
def test_what_v1_refused_is_refused_at_both_levels(tmp_path, capsys, make, words):
    make(tmp_path)
    for level in ("strict", "v1"):
        code, out = _lines(capsys, level, tmp_path)
        assert code == 1 and any(words in line and ": warning: " not in line for line in out), (level, out)


def test_validate_help_names_both_levels(capsys):
    with pytest.raises(SystemExit):
        validate_entries.build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--level {strict,v1}" in text and "default strict" in text and "v1: every entry the DAWNBench v1" in text


def test_the_entry_page_shows_the_normalization(tmp_path):
    _, _, _, line = f1_in_percent(tmp_path / "entries")
    columns_by_name_squad(tmp_path / "entries")
    assert leaderboard.main([str(tmp_path / "entries"), "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "SQuAD" / "inference" / "dawn_fastfusionnet-1080ti.html").read_text()
    assert "Read as DAWNBench v1 read it" in page
    assert (f"dawn_fastfusionnet-1080ti.json:{line}: f1Score: warning: 82.5209 is above 1: a percent, read as the "
            "fraction 0.825209 (divided by 100)") in page
    assert "82.52085997573373" in page and "<th>F1</th><td>0.825209</td>" in page      # written, and as ranked
    log_page = (tmp_path / "site" / "SQuAD" / "train" / "dawn_drqa_1k80-ec2.html").read_text()
    assert "columns in another order: epoch f1Score hours; read by name" in log_page
    assert "<th>epoch</th><th>hours</th><th>f1Score</th>" in log_page
    plain = (tmp_path / "site" / "index.html").read_text()
    assert "Read as DAWNBench v1" not in plain


COUNT_V1 = re.compile(r"^(\d+ problems? in \d+ of \d+ files|\d+ files? checked: all valid)"
                      r"( \(\d+ warnings?: v1 quirks, read as v1 read them\))?$")


@FUZZ
@given(field=st.sampled_from(["codeURL", "misc", "timestamp", "logFilename", "usedBlacklist", "f1Score", "latency",
                              "cost", "top1Accuracy"]),
       value=json_values | st.sampled_from(["2018-4-2", "0999-1-1", "https://x/y.log", "https://x/../y.tsv"])
       | st.floats(0, 200), kind=st.sampled_from(["train", "inference"]), drop=st.booleans())
def test_fuzz_v1_level_keeps_one_line_per_problem(tmp_path_factory, capsys, field, value, kind, drop):
    root = _fresh(tmp_path_factory.getbasetemp(), "v1")
    fields = json.loads(json.dumps(NEW_TRAIN if kind == "train" else NEW_INFERENCE))
    if drop:
        fields.pop(field, None)
    else:
        fields[field] = value
    text = json.dumps(fields, allow_nan=True)
    (train_entry if kind == "train" else inference_entry)(root, text, task="SQuAD" if field == "f1Score" else "CIFAR10")
    try:
        code = validate_entries.main(["--level", "v1", str(root)])
    except BaseException as e:          # noqa: BLE001 -- the point is that nothing escapes
        pytest.fail(f"validate raised {type(e).__name__}: {e}")
    out = capsys.readouterr().out.splitlines()
    assert code in (0, 1) and out and COUNT_V1.match(out[-1]), out
    assert all(LINE.match(line) for line in out[:-1]), out
    assert (code == 0) == all(": warning: " in line for line in out[:-1])
