"""The dataset formats: each one object that reads a dataset's official files, its eval labels, and
what each role of a run is shown of it (the trainer's files, the predictor's label-free view).

harness/data/datasets.toml gives each dataset its `format`: a name of FORMATS (`idx` when none is
given) or `harness.<module>:<Class>`, a class of the harness's own (harness.plugins). Code outside
this module never branches on which format a dataset has; it asks the format. Everything here runs
in the harness's process before the clock starts (harness.plan: the labels; harness.roles: the views),
after the files' checksums matched (harness.datasets).

The interface, for a new format (docs/TASKS.md, "Adding a task"):

- `eval_labels(ds)`: what the task's kind scores against, read from checksummed files only; the
  harness keeps it, no worker ever sees it.
- `train_view(ds)`: (host path, path under the view's data root) of each file or folder the trainer sees.
- `predict_view(ds, derived_dir)`: the same for the predictor: the eval inputs without their labels,
  as the official files hold them where they hold no label (`derives_view = False`), else a
  label-free copy the harness writes into `derived_dir` (`derives_view = True`).
- `count_train_examples(ds)`: the training examples on disk (the eval bound's denominator where the
  data are not the official ones).
- `eval_image_files(ds)`: the eval set as image files, one per example, where the format stores it so
  (an inference's latency is then timed from the file); None for any other.

A language model's format (`utf8-text`, `token-shards`) is one of these: its eval "labels" are the
validation stream itself (each position's label is the next token), and the predictor's view holds no
file of the task: the harness hands a causal model the windows of the stream it predicts (the `lm` kind,
harness.lm_eval), and a predictor that held the stream could look each prefix up and answer from it in
both passes of the kind's audit.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from harness import datasets, lm_eval, metrics, official_readers, plugins, token_shards
from harness.datasets import DatasetError

DEFAULT = "idx"
DERIVED_SUFFIX = ".images.npy"        # a label-free copy of an eval file that holds labels
QUESTIONS_SUFFIX = ".questions.json"  # SQuAD's answer-free copy of its dev file: contexts, questions, ids
# The packed formats of `dawnbench data prepare imagenet --format` (dawnbench.prepare_imagenet.PACKERS),
# each <format>/train/ and <format>/val/ beside the folders. Only these names: anything else in the
# dataset folder (the label files, the record) stays with the harness.
PACKED_FORMATS = ("recordio", "tfrecord")
IMAGE_SUFFIXES = (".jpeg", ".jpg")     # the prepared ImageNet's val images (common.imagenet_files), compared lower-case

View = list[tuple[Path, str]]


@dataclass(frozen=True)
class Dataset:
    """One dataset as a format reads it: its name, manifest entry and data root."""
    name: str
    entry: dict
    data_root: Path | None

    @property
    def files_dir(self) -> Path:
        return datasets.files_dir(self.name, self.data_root)

    @property
    def relative(self) -> Path:
        """Where its files are under a view's data root, as under the host's."""
        return Path(self.entry["dir"]) / self.entry.get("subdir", "")

    def verify(self, filename: str) -> Path:
        return datasets.verify_file(self.name, self.data_root, filename)

    def split(self, role: str) -> Any:
        return self.entry.get("splits", {}).get(role, [])

    def names(self, role: str) -> list[str]:
        """The file names of split `role` (a list, or a table of named files)."""
        split = self.split(role)
        if isinstance(split, dict):
            return [v for v in split.values() if isinstance(v, str)]
        return [split] if isinstance(split, str) else list(split)

    def shown(self, filename: str) -> tuple[Path, str]:
        return self.files_dir / filename, str(self.relative / filename)

    def refetch(self) -> str:
        return f"re-fetch it with: {self.entry['fetch_command']}"


class DataFormat:
    """The base every format fills in; stateless: a dataset's own files come as a Dataset."""

    name: ClassVar[str]
    derives_view: ClassVar[bool] = False   # the predictor sees a label-free copy the harness writes
    folders: ClassVar[bool] = False        # the roles see whole folders (a container mounts each)

    def eval_labels(self, ds: Dataset) -> Any:
        raise DatasetError(f"dataset {ds.name!r} (format {self.name}) has no eval labels: it is no task's eval set")

    def train_view(self, ds: Dataset) -> View:
        """Every file of the dataset that is neither an eval input nor the eval labels."""
        held = set(ds.names("test")) | {ds.entry.get("eval_labels")}
        return [ds.shown(f) for f in ds.entry.get("files", {}) if f not in held]

    def predict_view(self, ds: Dataset, derived_dir: Path) -> View:
        """The eval inputs as the official files hold them (a format whose eval files hold their labels
        derives a copy instead)."""
        return [ds.shown(f) for f in ds.names("test") if f != ds.entry.get("eval_labels")]

    def count_train_examples(self, ds: Dataset) -> int:
        raise DatasetError(f"datasets.toml entry [{ds.name}] has no training split the harness can count ({self.name!r})")

    def eval_image_files(self, ds: Dataset) -> list[Path] | None:
        """The eval set as image files, one per example in the canonical order, where the format stores its
        eval examples so; None for a format whose eval examples are records inside files."""
        return None


def _int_labels(labels: np.ndarray, path: Path, ds: Dataset) -> np.ndarray:
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise DatasetError(f"malformed labels {path}: expected 1-D integers, got {labels.dtype} {labels.shape}; "
                           f"{ds.refetch()}")
    return labels.astype(np.int64)


class Idx(DataFormat):
    """LeCun's IDX files (Fashion-MNIST): images and labels in separate files, the images shown as they are."""
    name = "idx"

    def eval_labels(self, ds):
        path = ds.verify(ds.entry["eval_labels"])
        labels = official_readers.read_idx(path)
        if labels.ndim != 1:
            raise DatasetError(f"malformed IDX file {path}: eval labels must be 1-D, got shape {labels.shape}")
        return labels.astype(np.int64)

    def count_train_examples(self, ds):
        images = ds.files_dir / ds.split("train")["images"]
        with open(images, "rb") as f:        # the header: magic, then the count, big-endian
            header = f.read(8)
        if len(header) < 8:
            raise DatasetError(f"{images}: not an idx file (no header)")
        return struct.unpack(">I", header[4:8])[0]


class CifarPickle(DataFormat):
    """CIFAR-10's Python pickles: each batch holds its images with their labels, so the predictor is
    shown a copy of the images alone (`<batch>.images.npy`)."""
    name = "cifar-pickle"
    derives_view = True

    def eval_labels(self, ds):
        return official_readers.read_cifar_batch(ds.verify(ds.entry["eval_labels"]))[1]

    def predict_view(self, ds, derived_dir):
        derived_dir.mkdir(parents=True, exist_ok=True)
        out = []
        for f in ds.names("test"):
            target = derived_dir / (f + DERIVED_SUFFIX)
            images, _ = official_readers.read_cifar_batch(ds.verify(f))
            np.save(target, images, allow_pickle=False)
            out.append((target, str(ds.relative / target.name)))
        return out

    def count_train_examples(self, ds):
        return sum(len(official_readers.read_cifar_batch(ds.files_dir / f)[1]) for f in ds.names("train"))


class Npy(DataFormat):
    """Plain .npy arrays (CIFAR-10.1): images and integer labels in separate files."""
    name = "npy"

    def eval_labels(self, ds):
        path = ds.verify(ds.entry["eval_labels"])
        return _int_labels(official_readers.read_npy(path, ds.name), path, ds)


class ImagenetFolders(DataFormat):
    """ImageNet as `dawnbench data prepare imagenet` lays it out: the trainer sees train/ (class
    folders), the predictor the flat val/; the label files and the record stay with the harness. A
    packed copy (`--format recordio|tfrecord`) is split the same way: <format>/train/ (records with their
    class) to the trainer, <format>/val/ (records without a label) to the predictor."""
    name = "imagenet-folders"
    folders = True

    def eval_labels(self, ds):
        return _class_indices(ds, ds.verify(ds.entry["eval_labels"]), ds.verify(ds.entry["classes"]))

    def _folders(self, ds, split: str) -> View:
        folder = ds.split(split)["dir"]
        found = [folder] + [f"{packed}/{folder}" for packed in PACKED_FORMATS if (ds.files_dir / packed / folder).is_dir()]
        return [ds.shown(f) for f in found]

    def train_view(self, ds):
        return self._folders(ds, "train")

    def predict_view(self, ds, derived_dir):
        return self._folders(ds, "test")

    def count_train_examples(self, ds):
        return sum(len(files) for _, _, files in os.walk(ds.files_dir / ds.split("train")["dir"]))

    def eval_image_files(self, ds):
        """The flat val/ folder's images in sorted order (ImageNet, ImageNetV2); None where the folder is
        not there or holds none."""
        folder = ds.files_dir / ds.split("test")["dir"]
        try:
            with os.scandir(folder) as found:
                names = sorted(e.name for e in found if e.name.lower().endswith(IMAGE_SUFFIXES) and e.is_file())
        except OSError:
            return None
        return [folder / n for n in names] or None


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc


def _class_indices(ds: Dataset, labels_path: Path, classes_path: Path) -> np.ndarray:
    """The eval labels as class indices: each line of `labels_path` names a class (a WordNet id), and
    a class's index is its line in `classes_path` (sorted: torchvision's and TFDS's convention)."""
    fix = f"re-run: {ds.entry['fetch_command']}"
    classes = read_lines(classes_path)
    if not classes or classes != sorted(set(classes)):
        raise DatasetError(f"malformed {classes_path}: the class names must be sorted and distinct, one per line; {fix}")
    index = {c: i for i, c in enumerate(classes)}
    names = read_lines(labels_path)
    unknown = [n for n in names if n not in index]
    if unknown or not names:
        raise DatasetError(f"malformed {labels_path}: {len(unknown)} labels name no class of {classes_path.name} "
                           f"(first: {unknown[0] if unknown else 'the file is empty'!r}); {fix}")
    return np.array([index[n] for n in names], dtype=np.int64)


def answer_free(dataset: dict) -> dict:
    """A SQuAD file with every "answers" list removed: the titles, contexts, questions and ids, in
    the official layout and order."""
    return {"version": dataset.get("version"), "data": [
        {"title": article.get("title"), "paragraphs": [
            {"context": paragraph["context"],
             "qas": [{"question": qa["question"], "id": qa["id"]} for qa in paragraph["qas"]]}
            for paragraph in article["paragraphs"]]}
        for article in dataset["data"]]}


class SquadJson(DataFormat):
    """SQuAD v1.1's JSON: the dev file holds the answers, so the predictor is shown an answer-free copy
    (`<file>.questions.json`: contexts, questions and ids)."""
    name = "squad-json"
    derives_view = True

    def eval_labels(self, ds):
        try:
            return metrics.SquadLabels(metrics.load_squad_dataset(ds.verify(ds.entry["eval_labels"]))["data"])
        except metrics.MetricInputError as exc:
            raise DatasetError(f"{exc}; {ds.refetch()}") from None

    def predict_view(self, ds, derived_dir):
        out = []
        for f in ds.names("test"):
            source = ds.verify(f)
            target = derived_dir / (Path(f).stem + QUESTIONS_SUFFIX)
            derived_dir.mkdir(parents=True, exist_ok=True)
            with open(source, encoding="utf-8") as fh:
                text = json.dumps(answer_free(json.load(fh)), separators=(",", ":"))
            target.write_text(text, encoding="ascii")
            out.append((target, str(Path(ds.entry["dir"]) / target.name)))
        return out

    def count_train_examples(self, ds):
        count = 0
        for f in ds.names("train"):
            with open(ds.files_dir / f, encoding="utf-8") as fh:
                data = json.load(fh)["data"]
            count += sum(len(p["qas"]) for article in data for p in article["paragraphs"])
        return count


class WordVectors(DataFormat):
    """A public, label-free companion of another dataset (GloVe beside SQuAD): every role sees its
    vector files whole (harness.data_views.companion_files); it is no task's eval set."""
    name = "word-vectors"

    def train_view(self, ds):
        return []

    def predict_view(self, ds, derived_dir):
        return []


class Stream(DataFormat):
    """A language model's validation stream: position i's label is the stream's token i + 1. The predictor
    is shown no file of it: the harness hands it the windows of the stream (the `lm` kind, harness.lm_eval),
    and a predictor that held the stream could look each prefix up and answer from it consistently in both
    passes of the kind's look-ahead audit (docs/RULES.md, "Language-model tasks")."""

    def predict_view(self, ds, derived_dir):
        return []


class Utf8Text(Stream):
    """UTF-8 text a byte-level language model reads as it is (the King James Bible): the eval labels are
    the validation text's bytes, the stream whose next tokens the `lm` kind scores (a token is a byte)."""
    name = "utf8-text"

    def eval_labels(self, ds):
        path = ds.verify(ds.entry["eval_labels"])
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); {ds.refetch()}") from None
        return lm_eval.TokenStream(np.frombuffer(data, dtype=np.uint8))

    def count_train_examples(self, ds):
        return sum((ds.files_dir / f).stat().st_size for f in ds.names("train"))     # a token is a byte


class TokenShards(Stream):
    """llm.c's `.bin` token shards (FineWeb-10B in GPT-2 tokens, harness.token_shards): the eval labels
    are the validation shard's tokens, the predictor is shown no shard (Stream), the trainer the train
    shards fetched (`splits.train`'s pattern, the first N)."""
    name = "token-shards"

    def eval_labels(self, ds):
        return lm_eval.TokenStream(token_shards.read_shard(ds.verify(ds.entry["eval_labels"]), ds.refetch()))

    def _train_shards(self, ds) -> list[str]:
        train = ds.split("train")
        if not isinstance(train, dict):
            return ds.names("train")
        names = (train["pattern"] % (train.get("first", 0) + i) for i in range(int(train.get("count", 0))))
        return [n for n in names if (ds.files_dir / n).is_file()]

    def train_view(self, ds):
        return [ds.shown(f) for f in self._train_shards(ds)]

    def count_train_examples(self, ds):
        return sum(token_shards.shard_tokens(ds.files_dir / f, ds.refetch()) for f in self._train_shards(ds))


FORMATS: dict[str, type[DataFormat]] = {f.name: f for f in (
    Idx, CifarPickle, Npy, ImagenetFolders, SquadJson, WordVectors, Utf8Text, TokenShards)}


def resolve(spec: str, dataset: str) -> DataFormat:
    """The format datasets.toml names for `dataset`: a name of FORMATS, or `harness.<module>:<Class>`."""
    try:
        return plugins.load_class(spec, DataFormat, what="format", where=f"datasets.toml [{dataset}]", known=FORMATS)()
    except ValueError as exc:
        raise DatasetError(str(exc)) from None


def of(name: str, data_root: str | os.PathLike | None = None) -> tuple[DataFormat, Dataset]:
    """(the format of dataset `name`, the dataset as it reads it)."""
    entry = datasets.manifest(name)
    fmt = resolve(entry.get("format", DEFAULT), name)
    return fmt, Dataset(name, entry, None if data_root is None else Path(data_root))


def eval_labels(name: str, data_root: str | os.PathLike | None = None) -> Any:
    fmt, ds = of(name, data_root)
    return fmt.eval_labels(ds)


def eval_image_files(name: str, data_root: str | os.PathLike | None = None) -> list[Path] | None:
    """The eval set of dataset `name` as image files, one per example in the canonical order (sorted names),
    where its format stores its eval examples so (`imagenet-folders`: ImageNet, ImageNetV2); None for a
    dataset whose eval examples are records inside files, or whose eval folder is not there."""
    fmt, ds = of(name, data_root)
    return fmt.eval_image_files(ds)


def count_train_examples(name: str, data_root: str | os.PathLike | None = None) -> int:
    """The training examples of the dataset on disk, counted by the harness from files it checked: the
    eval bound's denominator where the data are not the official ones (a fixture, a subset), whose
    size tasks.toml does not give. Never a count a reference reports (docs/RULES.md, "The eval span")."""
    fmt, ds = of(name, data_root)
    try:
        return fmt.count_train_examples(ds)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{name}: its training examples cannot be counted: {exc}") from None
