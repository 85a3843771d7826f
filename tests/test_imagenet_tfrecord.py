"""`python -m dawnbench.pack_tfrecord`: the prepared ImageNet fixture packed into TFRecord shards and
read back with tf.data. The records hold the files' exact bytes, train labels are synsets.txt lines in
a fixed shuffled order, val records are in sorted file-name order without a label; an interrupted pack
leaves no tfrecord/ folder; a bad input is one line."""
from __future__ import annotations

import json

import pytest
import tensorflow as tf

from dawnbench import pack_tfrecord

FEATURES = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/filename": tf.io.FixedLenFeature([], tf.string)}


def read_split(folder):
    """[(filename, bytes, label or None)] of a split's shards in records.json's order."""
    index = json.loads((folder / pack_tfrecord.COUNTS_FILE).read_text())
    records = []
    for raw in tf.data.TFRecordDataset([str(folder / name) for name in index["shards"]]):
        example = tf.train.Example.FromString(raw.numpy()).features.feature
        label = example["image/class/label"].int64_list.value if "image/class/label" in example else None
        assert set(example) <= {*FEATURES, "image/class/label"}
        records.append((example["image/filename"].bytes_list.value[0].decode(),
                        example["image/encoded"].bytes_list.value[0], None if label is None else list(label)))
    return index, records


def run(capsys, *argv):
    code = pack_tfrecord.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_pack_and_read_back(imagenet_root, capsys):
    directory = imagenet_root / "imagenet"
    code, out, err = run(capsys, directory)            # the defaults: 1024 / 128 shards, capped at one per image
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["counts"] == {"train": 14, "val": 12} and summary["shards"] == {"train": 14, "val": 12}
    assert summary["tensorflow"] == tf.__version__
    assert summary["shuffle_seed"] == pack_tfrecord.SHUFFLE_SEED
    assert "pack_tfrecord: train 14/14 images" in err and "pack_tfrecord: val 12/12 images" in err
    assert not (directory / pack_tfrecord.PARTIAL).exists()
    on_disk = sorted(str(p.relative_to(directory)) for p in (directory / "tfrecord").rglob("*") if p.is_file())
    assert on_disk == sorted(summary["files"])

    synsets = (directory / "synsets.txt").read_text().split()
    index, train = read_split(directory / "tfrecord" / "train")
    assert index["records"] == 14 and sum(index["shards"].values()) == 14
    names = [name for name, _, _ in train]
    files = sorted(str(p.relative_to(directory / "train")) for p in (directory / "train").rglob("*.JPEG"))
    assert sorted(names) == files and names != files                  # every image once, shuffled
    for name, data, label in train:
        assert data == (directory / "train" / name).read_bytes()      # lossless: the file's bytes
        assert label == [synsets.index(name.split("/")[0])]

    index, val = read_split(directory / "tfrecord" / "val")
    assert [name for name, _, _ in val] == sorted(p.name for p in (directory / "val").iterdir())
    assert all(label is None for _, _, label in val)                  # the predictor never sees a label
    assert all(data == (directory / "val" / name).read_bytes() for name, data, _ in val)

    # Packing again gives the same records (the seed is fixed) and replaces the old pack whole.
    assert run(capsys, directory, "--train-shards", 3, "--val-shards", 2)[0] == 0
    index, again = read_split(directory / "tfrecord" / "train")
    assert [r[0] for r in again] == names and list(index["shards"].values()) == [4, 5, 5]
    assert sorted(p.name for p in (directory / "tfrecord" / "val").iterdir()) == [
        "records.json", "val-00000-of-00002", "val-00001-of-00002"]


def test_shard_slices():
    assert pack_tfrecord.shard_slices(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert pack_tfrecord.shard_slices(3, 1024) == [(0, 1), (1, 2), (2, 3)]


def test_interrupted_pack_leaves_no_tfrecord_folder(imagenet_root, monkeypatch, capsys):
    directory = imagenet_root / "imagenet"

    def interrupt(self, split, records):
        raise KeyboardInterrupt
    monkeypatch.setattr(pack_tfrecord.Progress, "__call__", interrupt)
    with pytest.raises(KeyboardInterrupt):
        pack_tfrecord.pack(directory, 3, 2)
    assert not (directory / "tfrecord").exists() and not (directory / pack_tfrecord.PARTIAL).exists()
    assert pack_tfrecord.main([str(directory)]) == 130                       # and from the command line
    assert capsys.readouterr().err == "dawnbench: error: interrupted; no tfrecord/ folder was written (run it again)\n"
    assert not (directory / "tfrecord").exists() and not (directory / pack_tfrecord.PARTIAL).exists()


def test_bad_input_is_one_line(imagenet_root, tmp_path, capsys):
    directory = imagenet_root / "imagenet"
    (directory / "train" / "n99999999").mkdir()
    (directory / "train" / "n99999999" / "x.JPEG").write_bytes(b"")
    cases = [((tmp_path / "nowhere",), "is not a folder"),
             ((directory, "--val-shards", 0), "--val-shards 0: give a whole number from 1 to"),
             ((directory,), "class n99999999 is not in"),
             ((tmp_path,), "synsets.txt not found")]
    for argv, message in cases:
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert err.startswith("dawnbench: error: ") and message in err and "Traceback" not in err
    assert not (directory / "tfrecord").exists()
