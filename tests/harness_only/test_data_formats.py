"""The dataset formats (harness/data_formats.py): each one object, chosen by datasets.toml's `format`, that
reads the eval labels and says what each role is shown; a language model's stream is one of them."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from harness import data_formats, data_views, datasets, lm_eval
from harness.datasets import DatasetError
from tests.fineweb_fixture import VAL, fixture_manifest, fixture_shards, train_name

pytestmark = pytest.mark.harness     # numpy only: runs under numpy 1.23.5 too


@pytest.mark.parametrize("spec", ["os:system", "references.mine.train:Format", "harness.tasks:Task",
                                  "harness.nothing_here:Format", "cifar-pickles", "harness..x:Y"])
def test_a_format_is_the_harness_own_and_a_wrong_one_is_one_line(spec):
    with pytest.raises(DatasetError, match=r"^datasets\.toml \[toy\]: format ") as caught:
        data_formats.resolve(spec, "toy")
    assert "\n" not in str(caught.value)


def test_every_format_of_the_manifest_is_a_class_of_the_registry():
    """datasets.toml's formats are each a DataFormat (a dataset without `format` is IDX)."""
    for name in datasets.dataset_names():
        fmt, ds = data_formats.of(name)
        assert isinstance(fmt, data_formats.DataFormat) and fmt.name == ds.entry.get("format", data_formats.DEFAULT)


def views(name: str, root: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {role: [rel for _, rel in data_views.view_files(name, root, role, tmp_path / "derived")]
            for role in data_views.ROLES}


def test_utf8_text_is_a_stream_its_labels_the_validation_bytes(tmp_path, monkeypatch):
    """The King James Bible's format on a two-file corpus: the labels are the validation text's bytes (the
    lm kind's stream), the trainer sees the train text only, the predictor no file (the harness hands it
    the stream's windows: a predictor that held the text could look each prefix up)."""
    folder = tmp_path / "data" / "kjv"
    folder.mkdir(parents=True)
    texts = {"kjv-train.txt": "In the beginning God created the heaven and the earth.\n",
             "kjv-val.txt": "Jesus wept.\n"}
    pins = ""
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
        pins += f'"{name}" = {{ sha256 = "{hashlib.sha256(text.encode()).hexdigest()}" }}\n'
    manifest = tmp_path / "datasets.toml"
    manifest.write_text('[kjv]\ndir = "kjv"\nformat = "utf8-text"\nfetch_command = "dawnbench data fetch kjv"\n'
                        'eval_labels = "kjv-val.txt"\n[kjv.splits]\ntrain = ["kjv-train.txt"]\ntest = ["kjv-val.txt"]\n'
                        f"[kjv.files]\n{pins}", encoding="utf-8")
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    labels = data_formats.eval_labels("kjv", tmp_path / "data")
    assert isinstance(labels, lm_eval.TokenStream) and len(labels) == len(texts["kjv-val.txt"]) - 1
    assert labels.tokens.dtype == np.uint8 and labels.tokens.tobytes() == texts["kjv-val.txt"].encode()
    assert views("kjv", tmp_path / "data", tmp_path) == {"train": ["kjv/kjv-train.txt"], "predict": []}
    assert data_formats.count_train_examples("kjv", tmp_path / "data") == len(texts["kjv-train.txt"])
    # a changed byte is the checksum's refusal, in one line, before anything reads it
    (folder / "kjv-val.txt").write_text("Jesus slept.\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="checksum mismatch"):
        data_formats.eval_labels("kjv", tmp_path / "data")


def test_token_shards_are_a_stream_the_trainer_sees_the_fetched_train_shards(tmp_path, monkeypatch):
    shards = fixture_shards(train=2, tokens=300)
    folder = tmp_path / "data" / "fineweb10B"
    folder.mkdir(parents=True)
    for name, data in shards.items():
        (folder / name).write_bytes(data)
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(fixture_manifest(tmp_path / "datasets.toml", shards, train=3)))
    labels = data_formats.eval_labels("fineweb10B", tmp_path / "data")
    # the same stream type as utf8-text's (the runner treats both alike), GPT-2's ids as uint16
    assert isinstance(labels, lm_eval.TokenStream) and len(labels) == (len(shards[VAL]) - 1024) // 2 - 1
    assert labels.tokens.dtype == np.dtype("<u2") and labels.tokens.tobytes() == shards[VAL][1024:]
    # two of the three train shards the manifest names are fetched: the trainer sees those two; the
    # predictor no shard (a stream's windows are the harness's to hand it)
    assert views("fineweb10B", tmp_path / "data", tmp_path) == {
        "train": [f"fineweb10B/{train_name(1)}", f"fineweb10B/{train_name(2)}"], "predict": []}
    assert data_formats.count_train_examples("fineweb10B", tmp_path / "data") == 600
