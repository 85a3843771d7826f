"""A tiny ImageNet in exactly the official file formats, for `dawnbench data prepare imagenet` and the
tests that run the harness on a prepared ImageNet.

`write_imagenet_fixture(folder)` writes the three files a user brings:
- ILSVRC2012_img_train.tar: a tar of per-class tars <wnid>.tar of <wnid>_<n>.JPEG, among them a
  CMYK JPEG (n04596742_4225, one of the 22 of the real set) and a PNG named n02105855_2933.JPEG (as
  in the real set);
- ILSVRC2012_img_val.tar: ILSVRC2012_val_<8 digits>.JPEG, not in name order;
- ILSVRC2012_devkit_t12.tar.gz: data/meta.mat (a MATLAB struct array `synsets` with non-leaf
  synsets, leaf ILSVRC2012_IDs not in WNID order) and data/ILSVRC2012_validation_ground_truth.txt.

`fixture_manifest` writes a $DAWNBENCH_DATASETS_MANIFEST override whose [imagenet] entry carries the
fixture's label-file checksums, so the harness accepts a prepared fixture.
"""
from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cifar10_fixture import _toml_value, builtin_entry

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
DEVKIT_DATA = "ILSVRC2012_devkit_t12/data"
SYNSET_FIELDS = ("ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children", "wordnet_height",
                 "num_train_images")

# Real WNIDs: tench, Shetland sheepdog, wok (has a CMYK image), guacamole; given ILSVRC2012_IDs out of
# WNID order, as the devkit's are.
LEAVES = {"n01440764": 3, "n02105855": 1, "n04596742": 4, "n07583066": 2}
NON_LEAVES = {"n00001740": ("entity", [5]), "n02084071": ("dog", [1])}   # WNID: (words, child IDs)
CMYK_IMAGE = "n04596742_4225.JPEG"
PNG_IMAGE = "n02105855_2933.JPEG"


@dataclass
class ImagenetFixture:
    folder: Path
    wnids: list[str]                         # the classes, sorted: synsets.txt
    train: dict[str, dict[str, bytes]]       # wnid -> {file name: the tar member's bytes}
    val: dict[str, bytes]                    # val file name -> bytes
    val_labels: list[str]                    # the WNID of each val image, in file-name order
    md5s: dict[str, str]                     # source file name -> md5
    cmyk: list[str] = field(default_factory=list)   # train/<wnid>/<file> paths stored re-encoded
    png: list[str] = field(default_factory=list)

    @property
    def train_count(self) -> int:
        return sum(len(files) for files in self.train.values())

    def labels_bytes(self) -> dict[str, bytes]:
        """What prepare must write: synsets.txt and val_labels.txt."""
        return {"synsets.txt": "".join(f"{w}\n" for w in self.wnids).encode(),
                "val_labels.txt": "".join(f"{w}\n" for w in self.val_labels).encode()}


def jpeg(seed: int, mode: str = "RGB", size=(40, 30), fmt: str = "JPEG", pixels: np.ndarray | None = None) -> bytes:
    """An image file of random pixels from `seed` (or of `pixels`, uint8 (H, W, 3)) in `mode`."""
    from PIL import Image

    if pixels is None:
        pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_300_000_000
    tar.addfile(info, io.BytesIO(data))


def tar_bytes(members: list[tuple[str, bytes]], mode: str = "w") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode, format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            _add(tar, name, data)
    return out.getvalue()


def meta_mat(leaves: dict[str, int], non_leaves: dict[str, tuple[str, list[int]]] | None = None) -> bytes:
    """A devkit meta.mat: `synsets`, a struct array (n x 1, as the devkit's) of every field the
    devkit has; the leaves first, then the non-leaf synsets (num_children > 0)."""
    import scipy.io

    non_leaves = NON_LEAVES if non_leaves is None else non_leaves
    rows = [(ilsvrc_id, wnid, f"class {wnid}", "a leaf", 0, [], 0, 3) for wnid, ilsvrc_id in leaves.items()]
    next_id = max(leaves.values()) + 1
    for wnid, (words, children) in non_leaves.items():
        rows.append((next_id, wnid, words, "an inner synset", len(children), children, 1, 0))
        next_id += 1
    synsets = np.zeros((len(rows), 1), dtype=[(name, object) for name in SYNSET_FIELDS])
    for i, (ilsvrc_id, wnid, words, gloss, n_children, children, height, n_train) in enumerate(rows):
        synsets[i, 0] = (np.uint16(ilsvrc_id), wnid, words, gloss, np.uint16(n_children),
                         np.array(children, dtype=np.uint16).reshape(1, -1), np.int16(height), np.uint16(n_train))
    out = io.BytesIO()
    scipy.io.savemat(out, {"synsets": synsets})
    return out.getvalue()


def devkit_bytes(leaves: dict[str, int], ground_truth: list[int],
                 non_leaves: dict[str, tuple[str, list[int]]] | None = None) -> bytes:
    """ILSVRC2012_devkit_t12.tar.gz: meta.mat and the val ground truth (one ID a line), with the
    devkit's folder entries."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for folder in ("ILSVRC2012_devkit_t12", DEVKIT_DATA):
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        _add(tar, f"{DEVKIT_DATA}/meta.mat", meta_mat(leaves, non_leaves))
        _add(tar, f"{DEVKIT_DATA}/ILSVRC2012_validation_ground_truth.txt",
             "".join(f"{i}\n" for i in ground_truth).encode())
        _add(tar, "ILSVRC2012_devkit_t12/readme.txt", b"the ILSVRC2012 development kit (fixture)\n")
    return out.getvalue()


def write_imagenet_fixture(folder: Path, *, per_class: int = 3, val_count: int = 12,
                           seed: int = 0, draw=None) -> ImagenetFixture:
    """Write the three official files of a tiny ImageNet into `folder`. The images are random
    pixels, or with `draw` (a function of the class index, the position of its WNID in sorted
    order, and a numpy Generator, returning uint8 (H, W, 3) pixels) pictures of their class, so
    that a model can learn them (tests/test_learns_imagenet.py)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    wnids = sorted(LEAVES)
    pictures = np.random.default_rng(seed)

    def picture(wnid: str) -> np.ndarray | None:
        return None if draw is None else draw(wnids.index(wnid), pictures)

    train: dict[str, dict[str, bytes]] = {}
    counter = 0
    for wnid in wnids:
        files = {}
        for n in range(per_class):
            counter += 1
            # the second of each class grayscale, kept as it is
            files[f"{wnid}_{1000 + n}.JPEG"] = jpeg(counter, "L" if n == 1 else "RGB", pixels=picture(wnid))
        train[wnid] = files
    train["n04596742"][CMYK_IMAGE] = jpeg(101, "CMYK", pixels=picture("n04596742"))
    train["n02105855"][PNG_IMAGE] = jpeg(102, "RGB", fmt="PNG", pixels=picture("n02105855"))
    inner = [(f"{wnid}.tar", tar_bytes(list(files.items()))) for wnid, files in train.items()]
    rng.shuffle(inner)
    (folder / TRAIN_TAR).write_bytes(tar_bytes(inner))

    val_labels = [wnids[i % len(wnids)] for i in range(val_count)]
    rng.shuffle(val_labels)
    val = {f"ILSVRC2012_val_{i:08d}.JPEG": jpeg(200 + i, pixels=picture(val_labels[i - 1]))
           for i in range(1, val_count + 1)}
    order = list(val.items())
    rng.shuffle(order)
    if [name for name, _ in order] == sorted(val):
        order.reverse()
    (folder / VAL_TAR).write_bytes(tar_bytes(order))
    (folder / DEVKIT).write_bytes(devkit_bytes(LEAVES, [LEAVES[w] for w in val_labels]))

    md5s = {name: hashlib.md5((folder / name).read_bytes()).hexdigest() for name in (TRAIN_TAR, VAL_TAR, DEVKIT)}
    return ImagenetFixture(folder=folder, wnids=wnids, train=train, val=val, val_labels=val_labels, md5s=md5s,
                           cmyk=[f"train/n04596742/{CMYK_IMAGE}"], png=[f"train/n02105855/{PNG_IMAGE}"])


def fixture_manifest(path: Path, fixture: ImagenetFixture | None = None, *, sources: dict | None = None,
                     blacklist_count: int | None = None) -> Path:
    """A $DAWNBENCH_DATASETS_MANIFEST override: the built-in [imagenet] entry with the fixture's
    label-file sha256s (when `fixture` is given), `sources` merged into its sources, and the
    blacklist's count set. What is not given keeps its official value."""
    entry = builtin_entry("imagenet")
    if fixture is not None:
        for name, data in fixture.labels_bytes().items():
            entry["files"][name] = {"sha256": hashlib.sha256(data).hexdigest()}
    for name, spec in (sources or {}).items():
        entry["sources"][name] = spec
    if blacklist_count is not None:
        entry["blacklist"]["count"] = blacklist_count
    lines = ["# Test override of harness/data/datasets.toml, written by tests/imagenet_fixture.py", "[imagenet]"]
    lines += [f"{json.dumps(key)} = {_toml_value(value)}" for key, value in entry.items()]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)
