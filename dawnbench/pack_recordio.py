"""`python -m dawnbench.pack_recordio IMAGENET_DIR`: the prepared ImageNet folders packed as MXNet
RecordIO, for `mx.io.ImageRecordIter` (references/imagenet-resnet152-mxnet).

`dawnbench data prepare imagenet --format recordio` runs this module in MXNet's own environment
(mxnet 1.9.1 needs numpy 1.23.5, the host tools numpy 2), so it imports only the standard library,
MXNet and numpy: nothing of the harness. It writes, under IMAGENET_DIR:

    recordio/train/train.rec, train.idx   every train/<wnid>/*.JPEG, header label = the WNID's line
                                          of synsets.txt, in a shuffled order fixed by SHUFFLE_SEED
    recordio/val/val.rec, val.idx         every val/*.JPEG in sorted file-name order (the order the
                                          harness scores), header label -1: no label
    recordio/<split>/names.txt            the file names in record order

Lossless: a record's payload is the file's bytes (`mx.recordio.pack`, never `pack_img`, which
would decode and re-encode). A record's header id is its position, and its line in names.txt;
the summary printed last on stdout (JSON: counts, seed, MXNet's version) goes into prepare's record.

``--val-only`` packs val/ alone: a fresh test set (ImageNetV2, dawnbench.fetch_imagenetv2) has no train/.

Everything is written into IMAGENET_DIR/.recordio.partial/ and renamed to recordio/ only once
complete: an interrupted pack leaves nothing that counts. A bad input is one line
`dawnbench: error: ...` on stderr and exit status 2.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path

from harness.arguments import Parser, folder, reports_errors

FORMAT = "recordio"
NAMES = "names.txt"           # each split's file names in record order (the record id is the line)
SHUFFLE_SEED = 0              # the train order; recorded in the summary
IMAGE_SUFFIXES = (".jpeg", ".jpg")
PROGRESS_EVERY = 10_000


class PackError(Exception):
    """A problem with the input or the output folder: one line for the user."""


def _say(message: str) -> None:
    print(f"{FORMAT}: {message}", file=sys.stderr, flush=True)


def _images(folder: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(folder) if e.is_file() and e.name.lower().endswith(IMAGE_SUFFIXES))


def listing(directory: Path, seed: int = SHUFFLE_SEED) -> tuple[list[tuple[str, int]], list[str]]:
    """([(train path relative to `directory`, class index)] in the shuffled record order,
    [val path relative to `directory`] sorted): what the two .rec files will hold."""
    hint = "prepare it first: dawnbench data prepare imagenet --from DIR"
    if not (directory / "synsets.txt").is_file() or not (directory / "train").is_dir() \
            or not (directory / "val").is_dir():
        raise PackError(f"{directory} is not a prepared ImageNet (it needs synsets.txt, train/ and val/); {hint}")
    synsets = (directory / "synsets.txt").read_text("ascii").split()
    index = {wnid: i for i, wnid in enumerate(synsets)}
    train: list[tuple[str, int]] = []
    for entry in sorted(os.scandir(directory / "train"), key=lambda e: e.name):
        if entry.name not in index or not entry.is_dir():
            raise PackError(f"{directory / 'train' / entry.name} is not a class folder of synsets.txt; {hint}")
        train += [(f"train/{entry.name}/{name}", index[entry.name]) for name in _images(Path(entry.path))]
    val = val_listing(directory)
    if not train:
        raise PackError(f"{directory} holds no train images; {hint}")
    # Shuffled once here, with a fixed seed: ImageRecordIter reads a .rec from its start, and a
    # class-sorted file would fill its shuffle buffer with one class.
    random.Random(seed).shuffle(train)
    return train, val


def val_listing(directory: Path) -> list[str]:
    """[val path relative to `directory`], sorted: the order the harness scores."""
    if not (directory / "val").is_dir():
        raise PackError(f"{directory} has no val/ folder to pack; prepare it first: dawnbench data prepare "
                        "imagenet --from DIR (or, for a fresh set, dawnbench data fetch imagenetv2)")
    val = [f"val/{name}" for name in _images(directory / "val")]
    if not val:
        raise PackError(f"{directory} holds no val images; prepare it first: dawnbench data prepare imagenet --from DIR")
    return val


def _write(mx, directory: Path, folder: Path, split: str, items: list[tuple[str, int]]) -> None:
    folder.mkdir(parents=True)
    record = mx.recordio.MXIndexedRecordIO(str(folder / f"{split}.idx"), str(folder / f"{split}.rec"), "w")
    try:
        for position, (relative, label) in enumerate(items):
            # flag 0: one float label in the header; id: the position, which the .idx maps to an offset.
            header = mx.recordio.IRHeader(0, float(label), position, 0)
            record.write_idx(position, mx.recordio.pack(header, (directory / relative).read_bytes()))
            if (position + 1) % PROGRESS_EVERY == 0:
                _say(f"{split} {position + 1}/{len(items)}")
    finally:
        record.close()
    # The record order by file name, beside the records (1.28 M names are 40 MB: too much for the
    # dataset's record, which every run reads); the val list names files, never a label.
    (folder / NAMES).write_text("".join(relative + "\n" for relative, _ in items), encoding="utf-8")
    _say(f"{split}: {len(items)} records")


def pack(directory: str | os.PathLike, seed: int = SHUFFLE_SEED, val_only: bool = False) -> dict:
    """Pack the prepared ImageNet in `directory` into `directory`/recordio (val/ alone with
    `val_only`); returns the summary."""
    directory = Path(directory)
    try:
        import mxnet as mx
    except ImportError as exc:
        raise PackError(f"--format recordio packs with MXNet, which {sys.executable} cannot import ({exc}); "
                        "run `make setup REF=imagenet-resnet152-mxnet` or pass --python PATH") from None
    train, val = ([], val_listing(directory)) if val_only else listing(directory, seed)
    partial, final = directory / f".{FORMAT}.partial", directory / FORMAT
    shutil.rmtree(partial, ignore_errors=True)      # what a killed pack left
    if not val_only:
        _write(mx, directory, partial / "train", "train", train)
    _write(mx, directory, partial / "val", "val", [(name, -1) for name in val])   # -1: no label
    if final.exists():
        shutil.rmtree(final)
    os.rename(partial, final)
    if val_only:
        return {"format": FORMAT, "mxnet": mx.__version__, "counts": {"val": len(val)}}
    return {"format": FORMAT, "mxnet": mx.__version__, "shuffle_seed": seed,
            "counts": {"train": len(train), "val": len(val)}}


@reports_errors("dawnbench")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m dawnbench.pack_recordio",
                    description="pack a prepared ImageNet as MXNet RecordIO")
    parser.add_argument("directory", type=folder("", "give the prepared ImageNet folder (<data root>/imagenet)"),
                        metavar="IMAGENET_DIR", help="<data root>/imagenet, prepared")
    parser.add_argument("--val-only", action="store_true", help="pack val/ alone (a fresh test set has no train/)")
    args = parser.parse_args(argv)
    try:
        summary = pack(args.directory, val_only=args.val_only)
    except (PackError, OSError) as exc:
        message = " ".join(str(exc).split())
        print(f"dawnbench: error: {message}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
