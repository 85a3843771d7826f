"""Pack the prepared ImageNet folders into TFRecord shards: `dawnbench data prepare imagenet --format tfrecord`.

    python -m dawnbench.pack_tfrecord IMAGENET_DIR [--train-shards N] [--val-shards M] [--val-only]

IMAGENET_DIR is the prepared dataset folder (`<data root>/imagenet/`, what `prepare` wrote: train/<wnid>/,
val/, synsets.txt). This writes, beside them:

    tfrecord/train/train-00000-of-01024 ...   tf.train.Example records: image/encoded (the JPEG file's
                                              exact bytes), image/filename ("<wnid>/<file>"),
                                              image/class/label (int64: the WNID's line in synsets.txt),
                                              in one shuffled order fixed by SHUFFLE_SEED
    tfrecord/train/records.json               {"records": n, "shards": {shard name: records}, ...}:
                                              a reader knows an epoch's length without reading 140 GB
    tfrecord/val/val-00000-of-00128 ...       image/encoded and image/filename only (no label: the
                                              predictor never sees one), in sorted file-name order, the
                                              order the harness scores predictions in
    tfrecord/val/records.json

Lossless: the records hold the same bytes as the prepared files (already RGB JPEGs), so decoding and
augmentation are the reference's, whichever format it reads. Shards are contiguous slices of the
order, never more shards than images. Everything is written under `.tfrecord.partial/` and renamed
to `tfrecord/` only when complete: an interrupted pack leaves no `tfrecord/` folder behind.

``--val-only`` packs val/ alone: a fresh test set (ImageNetV2, dawnbench.fetch_imagenetv2) has no train/.

Runs in the TensorFlow environment with the standard library and tensorflow only (prepare_imagenet
starts it as a subprocess with the reference's interpreter). Progress goes to stderr; a bad input
is one line `dawnbench: error: ...` and exit status 2; the last line on stdout is a JSON summary.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.arguments import Parser, folder, reports_errors, whole

FORMAT = "tfrecord"
PARTIAL = ".tfrecord.partial"
COUNTS_FILE = "records.json"
SHUFFLE_SEED = 20180417         # fixed, and recorded in the summary: the same folders pack to the same bytes
TRAIN_SHARDS = 1024             # ~140 MB each for the 1,281,167 training images
VAL_SHARDS = 128                # ~50 MB each for the 50,000 validation images
MAX_SHARDS = 1_000_000
IMAGE_SUFFIXES = (".jpeg", ".jpg")
PREPARE_HINT = "prepare it first with `dawnbench data prepare imagenet --from DIR`"


class PackError(Exception):
    """A bad input: reported as one line."""


def _images(folder: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(folder) if e.is_file() and e.name.lower().endswith(IMAGE_SUFFIXES))


def list_train(directory: Path) -> list[tuple[str, int]]:
    """[("<wnid>/<file>", label)] of every training image, sorted; label = the WNID's line in synsets.txt."""
    synsets_file, train = directory / "synsets.txt", directory / "train"
    if not synsets_file.is_file():
        raise PackError(f"{synsets_file} not found: {PREPARE_HINT}")
    if not train.is_dir():
        raise PackError(f"{train} not found: {PREPARE_HINT}")
    synsets = synsets_file.read_text().split()
    index = {wnid: i for i, wnid in enumerate(synsets)}
    samples = []
    for wnid in sorted(e.name for e in os.scandir(train) if e.is_dir()):
        if wnid not in index:
            raise PackError(f"{train / wnid}: class {wnid} is not in {synsets_file}; {PREPARE_HINT}")
        samples += [(f"{wnid}/{name}", index[wnid]) for name in _images(train / wnid)]
    if not samples:
        raise PackError(f"{train} holds no .JPEG images: {PREPARE_HINT}")
    return samples


def list_val(directory: Path) -> list[str]:
    """The validation file names in sorted order: the order the harness scores predictions in."""
    val = directory / "val"
    if not val.is_dir():
        raise PackError(f"{val} not found: {PREPARE_HINT}")
    names = _images(val)
    if not names:
        raise PackError(f"{val} holds no .JPEG images: {PREPARE_HINT}")
    return names


def shard_slices(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) slices of n records over min(shards, n) shards, sizes within one."""
    shards = min(shards, n)
    return [(i * n // shards, (i + 1) * n // shards) for i in range(shards)]


def write_split(source: Path, out: Path, split: str, items: list[tuple[str, int | None]], shards: int,
                report) -> dict[str, int]:
    """Write `items` ((file name under `source`, label or None), in order) into shards under `out`;
    returns {shard name: records}. Shards are written by a few threads (reading files and the
    writer's I/O release the GIL)."""
    # Imported here, so that without TensorFlow main() can say so in one line.
    import tensorflow as tf

    def example(data: bytes, filename: str, label: int | None) -> bytes:
        feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                   "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=[filename.encode()]))}
        if label is not None:
            feature["image/class/label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    out.mkdir(parents=True)
    slices = shard_slices(len(items), shards)
    names = [f"{split}-{i:05d}-of-{len(slices):05d}" for i in range(len(slices))]

    def write(i: int) -> int:
        start, stop = slices[i]
        with tf.io.TFRecordWriter(str(out / names[i])) as writer:
            for name, label in items[start:stop]:
                writer.write(example((source / name).read_bytes(), name, label))
        report(split, stop - start)
        return stop - start

    pool = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1))
    try:
        counts = list(pool.map(write, range(len(slices))))
    except tf.errors.OpError as e:          # the writer's own I/O errors (full disk, no permission)
        raise PackError(f"writing {out}: {e.message}") from None
    finally:
        # On an error or Ctrl-C, the shards not started yet are dropped: only the running ones finish.
        pool.shutdown(wait=True, cancel_futures=True)
    summary = {"split": split, "records": len(items), "shards": dict(zip(names, counts)),
               **({"shuffle_seed": SHUFFLE_SEED} if split == "train" else {})}
    (out / COUNTS_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    return summary["shards"]


class Progress:
    """'pack_tfrecord: train 12,345/1,281,167 images' on stderr, at most every few seconds."""

    def __init__(self, totals: dict[str, int], every: float = 5.0):
        self.totals, self.done, self.every, self.last = totals, dict.fromkeys(totals, 0), every, 0.0

    def __call__(self, split: str, records: int) -> None:
        self.done[split] += records
        now = time.monotonic()
        if now - self.last >= self.every or self.done[split] == self.totals[split]:
            self.last = now
            print(f"pack_tfrecord: {split} {self.done[split]:,}/{self.totals[split]:,} images",
                  file=sys.stderr, flush=True)


def tf_version() -> str:
    import tensorflow as tf
    return tf.__version__


def pack(directory: str | os.PathLike, train_shards: int = TRAIN_SHARDS, val_shards: int = VAL_SHARDS,
         val_only: bool = False) -> dict:
    """Pack `directory`'s train/ and val/ (val/ alone with `val_only`) into `directory`/tfrecord/;
    returns the summary."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PackError(f"{directory} is not a folder: give the prepared ImageNet folder (<data root>/imagenet)")
    for flag, value in (("--train-shards", train_shards), ("--val-shards", val_shards)):
        if value < 1:
            raise PackError(f"{flag} {value}: give 1 or more")
    train = [] if val_only else list_train(directory)
    random.Random(SHUFFLE_SEED).shuffle(train)
    val = list_val(directory)

    partial, final = directory / PARTIAL, directory / FORMAT
    shutil.rmtree(partial, ignore_errors=True)          # a previous interrupted pack's leftovers
    report = Progress({"train": len(train), "val": len(val)})
    try:
        train_counts = {} if val_only else write_split(directory / "train", partial / "train", "train", train,
                                                       train_shards, report)
        val_counts = write_split(directory / "val", partial / "val", "val", [(n, None) for n in val], val_shards,
                                 report)
        # Replace an older pack only once the new one is whole.
        old = directory / ".tfrecord.old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        partial.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    splits = (("val", val_counts),) if val_only else (("train", train_counts), ("val", val_counts))
    files = [f"{FORMAT}/{split}/{name}" for split, counts in splits for name in [*counts, COUNTS_FILE]]
    if val_only:
        return {"format": FORMAT, "tensorflow": tf_version(), "counts": {"val": len(val)},
                "shards": {"val": len(val_counts)}, "files": files}
    return {"format": FORMAT, "tensorflow": tf_version(), "shuffle_seed": SHUFFLE_SEED,
            "counts": {"train": len(train), "val": len(val)},
            "shards": {"train": len(train_counts), "val": len(val_counts)}, "files": files}


@reports_errors("dawnbench")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m dawnbench.pack_tfrecord",
                    description="Pack the prepared ImageNet folders into TFRecord shards.")
    parser.add_argument("directory", type=folder("", "give the prepared ImageNet folder (<data root>/imagenet)"),
                        metavar="IMAGENET_DIR",
                        help="the prepared dataset folder, <data root>/imagenet")
    # More shards than images would leave empty files; a million is far above ImageNet's 1,024 + 128.
    parser.add_argument("--train-shards", type=whole("--train-shards", 1, MAX_SHARDS, TRAIN_SHARDS),
                        default=TRAIN_SHARDS, metavar="N")
    parser.add_argument("--val-shards", type=whole("--val-shards", 1, MAX_SHARDS, VAL_SHARDS), default=VAL_SHARDS,
                        metavar="M")
    parser.add_argument("--val-only", action="store_true", help="pack val/ alone (a fresh test set has no train/)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        summary = pack(args.directory, args.train_shards, args.val_shards, val_only=args.val_only)
    except PackError as e:
        print(f"dawnbench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dawnbench: error: interrupted; no {FORMAT}/ folder was written (run it again)", file=sys.stderr)
        return 130
    except OSError as e:       # unreadable image, full disk: say which file, not a traceback
        print(f"dawnbench: error: packing TFRecords failed: {e.strerror or e} ({e.filename or args.directory})",
              file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"dawnbench: error: packing TFRecords needs TensorFlow ({e}); run it with a TensorFlow "
              "reference's interpreter, e.g. `make setup REF=imagenet-resnet50-tensorflow`", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
