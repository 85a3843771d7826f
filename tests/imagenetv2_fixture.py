"""A small ImageNetV2 in the exact published on-disk format, for tests.

The published imagenetv2-matched-frequency.tar.gz (tensorflow-datasets' checksums.tsv; its builder reads
`<top>/<class index>/<file>`) holds one top folder, imagenetv2-matched-frequency-format-val/, with a folder
per class named by its INDEX in the sorted WNIDs (0..999), each of 10 JPEGs named `<n>.jpeg`. The fixture
writes the same: the top folder's entry, the class folders' entries, then `<n>.jpeg` members, gzipped;
only the folders (a subset), the count per folder and the pixels differ. `manifest_lines` writes the
built-in [imagenetv2] entry with the fixture tar's sha256, size and layout, and the label-file pin the
layout gives (computed here from the published order's definition, as datasets.toml's comment states it).
"""
from __future__ import annotations

import hashlib
import io
import json
import tarfile

from cifar10_fixture import _toml_value, builtin_entry

TOP = "imagenetv2-matched-frequency-format-val"
TAR = "imagenetv2-matched-frequency.tar.gz"


def _info(name: str, kind=tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname, info.mtime = kind, size, link, 1_550_000_000
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def tar_gz(folders: dict[int, list[bytes]], extra: list[tarfile.TarInfo | tuple[str, bytes]] = ()) -> bytes:
    """The published layout: TOP/, TOP/<c>/, TOP/<c>/<n>.jpeg for each folder's images, then `extra`
    members (a TarInfo without data, or (name, bytes))."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(_info(TOP, tarfile.DIRTYPE))
        for c, images in folders.items():
            tar.addfile(_info(f"{TOP}/{c}", tarfile.DIRTYPE))
            for n, data in enumerate(images):
                tar.addfile(_info(f"{TOP}/{c}/{n}.jpeg", size=len(data)), io.BytesIO(data))
        for member in extra:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                tar.addfile(_info(member[0], size=len(member[1])), io.BytesIO(member[1]))
    return out.getvalue()


def labels_text(folders: dict[int, list[bytes]], synsets: list[str]) -> bytes:
    """val_labels.txt for these folders: the flat order is by sha256 of "<class>/<rank in its folder>"."""
    order = sorted(((c, k) for c, images in folders.items() for k in range(len(images))),
                   key=lambda ck: hashlib.sha256(f"{ck[0]}/{ck[1]}".encode()).digest())
    return "".join(f"{synsets[c]}\n" for c, _ in order).encode()


def manifest_lines(tar: bytes, folders: dict[int, list[bytes]], synsets: list[str]) -> list[str]:
    """TOML lines of the [imagenetv2] entry pinned to this fixture (its synsets.txt: `synsets`)."""
    entry = builtin_entry("imagenetv2")
    counts = {len(images) for images in folders.values()}
    assert len(counts) == 1, "the published layout has the same count in every folder"
    entry["archive"].update(sha256=hashlib.sha256(tar).hexdigest(), size=len(tar), classes=len(folders),
                            per_class=counts.pop())
    entry["files"] = {"val_labels.txt": {"sha256": hashlib.sha256(labels_text(folders, synsets)).hexdigest()},
                      "synsets.txt": {"sha256": hashlib.sha256("".join(f"{w}\n" for w in synsets).encode()).hexdigest()}}
    return ["[imagenetv2]"] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in entry.items()]


def imagenet_lines(synsets: list[str]) -> list[str]:
    """TOML lines of the built-in [imagenet] entry with `synsets` as its synsets.txt."""
    entry = builtin_entry("imagenet")
    entry["files"]["synsets.txt"] = {"sha256": hashlib.sha256("".join(f"{w}\n" for w in synsets).encode()).hexdigest()}
    return ["[imagenet]"] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in entry.items()]
