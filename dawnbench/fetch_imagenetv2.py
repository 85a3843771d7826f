"""`dawnbench data fetch imagenetv2`: ImageNetV2's published tar, checked, unpacked safely and laid out
as the ImageNet eval set is, so that the harness's own predictor path reads it unchanged.

What the manifest's [imagenetv2] entry pins: the tar (size and sha256, checked before a byte of it is
unpacked), its layout (one top folder of class folders named by class INDEX, each of `per_class` JPEGs),
the synsets.txt it is paired with (the prepared ImageNet's, whose line `c` is folder `c`'s WNID), and the
label file the layout gives. What this writes under ``<data root>/imagenetv2/``:

    val/ImageNetV2_<5 digits>.JPEG   flat, in a fixed order that says nothing of the class (sorted by the
                                     sha256 of "<class>/<rank of the image in its folder>")
    val_labels.txt, synsets.txt      the WNID of each val image in file-name order, and the 1,000 WNIDs:
                                     for the harness only, as [imagenet]'s
    dawnbench-prepared.json          what was read (URL, size, sha256), each flat file's source member
    dawnbench-manifest.json          last: every file's size and sha256 (harness.datasets)

The tar is refused whole on a member that is a link or a device, has an absolute or ``..`` path, or lies
outside the top folder; members are copied out by hand (never ``tar.extract``), so nothing of the
archive's metadata reaches the disk. Everything is staged in a temp folder inside the dataset folder and
moved into place only once the labels matched their pin: a failed fetch leaves what was there before.

``pack`` packs val/ for a framework's reader (RecordIO, TFRecord) with the packer ImageNet's prepare uses
(dawnbench.prepare_imagenet.PACKERS), run with ``--val-only`` in the framework's environment.

Standard library only at import (Pillow only if an image must be re-encoded as prepare does), so that
``dawnbench.fetch`` can hand this the download in any environment.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zlib
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from dawnbench import prepare_imagenet
from harness.datasets import (
    CHUNK_SIZE,
    PREPARED_MANIFEST,
    DatasetError,
    check_prepared,
    checksum_mismatch,
    dataset_dir,
    file_matches,
    manifest,
    verified_checksums,
    verify_file,
    write_prepared_manifest,
)

RECORD_FORMAT = "dawnbench-imagenetv2-1"
FLAT_NAME = "ImageNetV2_{:05d}.JPEG"
CLASS_FOLDER = re.compile(r"0|[1-9][0-9]{0,5}")        # a class index as the tar names it: no sign, no leading 0
IMAGE_NAME = re.compile(r"[^./][^/]*\.jpe?g", re.IGNORECASE)


def _say(name: str, message: str) -> None:
    print(f"{name}: {message}", file=sys.stderr, flush=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def flat_order(counts: dict[int, int]) -> list[tuple[int, int]]:
    """(class index, rank of the image among its folder's sorted names) in the flat folder's order.
    Fixed by the layout alone, so the label file can be pinned before the tar is read, and not the
    class order: a predictor's position in the set is no hint of its class."""
    return sorted(((c, k) for c, n in counts.items() for k in range(n)),
                  key=lambda ck: hashlib.sha256(f"{ck[0]}/{ck[1]}".encode()).digest())


def _paired_synsets(name: str, data_root) -> tuple[Path, list[str]]:
    """The paired ImageNet's synsets.txt, checked against its pin, and its WNIDs; one line when it is
    missing, not the official one, or not the one this entry pins."""
    entry = manifest(name)
    paired = entry["fresh_for"]
    classes = manifest(paired)["classes"]
    if entry["files"].get(classes) != manifest(paired)["files"].get(classes):
        raise DatasetError(f"datasets.toml pins another {classes} for {name} than for {paired}: its folders are "
                           f"class indices into {paired}'s; fix the manifest so the two agree")
    try:
        path = verify_file(paired, data_root, classes)
    except DatasetError as exc:
        raise DatasetError(f"{name}'s folders are class indices into {paired}'s {classes}, which is not usable "
                           f"here: {exc}") from None
    return path, path.read_text("ascii").split()


def _refuse(tarball: str, member: tarfile.TarInfo, why: str, fix: str) -> DatasetError:
    return DatasetError(f"refusing to unpack {tarball}: member {member.name!r} {why}; nothing was written; {fix}")


def _unpack(name: str, tarball: Path, staging: Path, n_classes: int) -> tuple[dict[int, list[str]], list[str]]:
    """Copy every image of the top folder's class folders into ``staging/<class>/<name>``; returns
    ({class: sorted image names}, members skipped: regular files that are not images of a class folder)."""
    entry = manifest(name)
    top = entry["archive"]["top"]
    fix = f"the tar is not the published one; re-fetch with: {entry['fetch_command']}"
    images: dict[int, list[str]] = {}
    skipped: list[str] = []
    try:
        with tarfile.open(tarball, "r|gz") as tar:
            for member in tar:
                path = PurePosixPath(member.name)
                parts = [p for p in path.parts if p != "."]
                if path.is_absolute():
                    raise _refuse(tarball.name, member, "has an absolute path", fix)
                if ".." in parts:
                    raise _refuse(tarball.name, member, "points outside the archive (..)", fix)
                if member.issym() or member.islnk():
                    raise _refuse(tarball.name, member, f"is a link (to {member.linkname!r})", fix)
                if not parts or parts[0] != top:
                    raise _refuse(tarball.name, member, f"is outside the published top folder {top}/", fix)
                if not (member.isdir() or member.isfile()):
                    raise _refuse(tarball.name, member, "is neither a file nor a folder", fix)
                folder = parts[1] if len(parts) > 1 else None
                if folder is not None and not (CLASS_FOLDER.fullmatch(folder) and int(folder) < n_classes):
                    raise _refuse(tarball.name, member, f"is not in a class folder 0..{n_classes - 1}", fix)
                if member.isdir():
                    if len(parts) > 2:
                        raise _refuse(tarball.name, member, "is a folder inside a class folder", fix)
                    continue
                if len(parts) != 3 or not IMAGE_NAME.fullmatch(parts[2]):
                    skipped.append(member.name)     # no path of it is written: nothing to fear, and recorded
                    continue
                target = staging / folder / parts[2]
                target.parent.mkdir(exist_ok=True)
                try:
                    with tar.extractfile(member) as source, open(target, "xb") as out:
                        shutil.copyfileobj(source, out, CHUNK_SIZE)
                except FileExistsError:
                    raise _refuse(tarball.name, member, "appears twice", fix) from None
                images.setdefault(int(folder), []).append(parts[2])
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot unpack {tarball.name}: {_one_line(exc)}; {fix}") from exc
    return {c: sorted(names) for c, names in images.items()}, skipped


def _check_layout(name: str, images: dict[int, list[str]]) -> None:
    archive = manifest(name)["archive"]
    want_classes, want_each = archive["classes"], archive["per_class"]
    odd = {c: len(n) for c, n in images.items() if len(n) != want_each}
    if len(images) != want_classes or odd:
        first = next(iter(sorted(odd.items())), None)
        raise DatasetError(
            f"{archive['name']} holds {len(images)} class folders of images, expected {want_classes} of {want_each} "
            f"each" + (f" (folder {first[0]} holds {first[1]})" if first else "")
            + f"; it is not the published layout; nothing was written; re-fetch with: {manifest(name)['fetch_command']}")


def _lay_out(name: str, raw: Path, images: dict[int, list[str]], synsets: list[str], val: Path) -> tuple[
        dict[str, str], list[str], bytes]:
    """Move the images into the flat ``val`` in flat_order; ({flat name: source member}, names
    re-encoded, the label file's bytes)."""
    top = manifest(name)["archive"]["top"]
    val.mkdir()
    sources, converted, labels = {}, [], []
    for position, (c, rank) in enumerate(flat_order({c: len(n) for c, n in images.items()}), 1):
        flat, source = FLAT_NAME.format(position), raw / str(c) / images[c][rank]
        data = source.read_bytes()
        if prepare_imagenet._kind(data):       # CMYK or PNG: the references' decoders expect RGB JPEG
            (val / flat).write_bytes(prepare_imagenet._rgb_jpeg(data, f"{c}/{images[c][rank]}"))
            converted.append(flat)
            source.unlink()
        else:
            os.replace(source, val / flat)
        sources[flat] = f"{top}/{c}/{images[c][rank]}"
        labels.append(synsets[c])
    return sources, converted, "".join(f"{w}\n" for w in labels).encode("ascii")


def _already_there(name: str, data_root) -> bool:
    try:
        check_prepared(name, data_root)
        verified_checksums(name, data_root)
    except DatasetError:
        return False
    return True


def _remove_unrecorded_packs(name: str, directory: Path) -> None:
    """What a killed pack left (its .<format>.partial/, or a <format>/ the record does not list yet)
    would fail the manifest check and cost a second download."""
    try:
        packed = json.loads((directory / manifest(name)["record"]).read_text("utf-8")).get("packed") or {}
    except (OSError, ValueError, AttributeError):
        return
    for folder in [f".{fmt}.partial" for fmt in prepare_imagenet.PACKERS] + \
                  [fmt for fmt in prepare_imagenet.PACKERS if fmt not in packed]:
        if (directory / folder).is_dir() and not (directory / folder).is_symlink():
            shutil.rmtree(directory / folder)
            _say(name, f"removed {directory / folder}, left by an interrupted pack")


def _make_dirs(directory: Path) -> list[Path]:
    created = [p for p in [directory, *directory.parents] if not p.exists()][::-1]
    directory.mkdir(parents=True, exist_ok=True)
    return created


def fetch(name: str, data_root, url: str, progress: bool, download) -> Path:
    """Make ``<data root>/<dir>`` hold the fresh set laid out as ImageNet's val; returns the folder.
    ``download(name, url, label, progress)`` is dawnbench.fetch's reader of a URL (one-line errors)."""
    entry = manifest(name)
    archive = entry["archive"]
    directory = dataset_dir(name, data_root)
    if directory.is_dir():
        _remove_unrecorded_packs(name, directory)
    if _already_there(name, data_root):
        _say(name, f"present and verified in {directory}; nothing to do")
        return directory
    synsets_path, synsets = _paired_synsets(name, data_root)     # before 1.2 GB are downloaded
    created = _make_dirs(directory)
    for stale in directory.glob(".fetch-*"):          # a fetch killed outright (SIGKILL, power)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        with tempfile.TemporaryDirectory(dir=directory, prefix=".fetch-") as work:
            work = Path(work)
            tarball = work / archive["name"]
            _say(name, f"source: download {url}")
            digest, size = hashlib.sha256(), 0
            with download(name, url, archive["name"], progress) as stream, open(tarball, "xb") as out:
                while chunk := stream.read(CHUNK_SIZE):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            mismatch = checksum_mismatch({"sha256": archive["sha256"]}, {"sha256": digest.hexdigest()})
            if mismatch or size != archive["size"]:
                raise DatasetError(
                    f"{archive['name']} from {url} is not the published tar: {mismatch or 'sha256 matches'} (size "
                    f"{size:,}, expected {archive['size']:,}); nothing was unpacked or written to {directory}; "
                    f"re-fetch with: {entry['fetch_command']}")
            (work / "raw").mkdir()
            images, skipped = _unpack(name, tarball, work / "raw", len(synsets))
            tarball.unlink()
            _check_layout(name, images)
            stage = work / "stage"
            stage.mkdir()
            sources, converted, labels = _lay_out(name, work / "raw", images, synsets, stage / "val")
            (stage / entry["eval_labels"]).write_bytes(labels)
            if mismatch := file_matches(stage / entry["eval_labels"], entry["files"][entry["eval_labels"]]):
                raise DatasetError(
                    f"the labels laid out from {archive['name']} do not match the manifest's {entry['eval_labels']} "
                    f"({mismatch}), though the tar is the published one: the pin in harness/data/datasets.toml "
                    f"assumes {archive['classes']} folders of {archive['per_class']}; nothing was written")
            shutil.copyfile(synsets_path, stage / entry["classes"])
            record = {"format": RECORD_FORMAT, "official": True, "unofficial_reasons": [],
                      "archive": {"name": archive["name"], "url": url, "size": size, "sha256": digest.hexdigest()},
                      "synsets": {"from": str(synsets_path), "sha256": entry["files"][entry["classes"]]["sha256"]},
                      "counts": {"classes": len(images), "images": len(sources)},
                      "converted": converted, "skipped": skipped, "sources": sources,
                      "created": datetime.now(UTC).isoformat(timespec="seconds")}
            (stage / entry["record"]).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            # From here the folder is rewritten: without its manifest no check passes until it is whole.
            (directory / PREPARED_MANIFEST).unlink(missing_ok=True)
            for old in [*prepare_imagenet.PACKERS, "val"]:
                if (directory / old).is_dir():
                    os.replace(directory / old, work / f"old-{old}")
            for item in ("val", entry["eval_labels"], entry["classes"], entry["record"]):
                os.replace(stage / item, directory / item)
        if hasattr(os, "sync"):
            os.sync()
        write_prepared_manifest(directory)    # last, once the temp folder is gone: it lists every file
    except BaseException as exc:
        for path in reversed(created):        # only folders this call made, and only if empty
            with contextlib.suppress(OSError):
                path.rmdir()
        if isinstance(exc, OSError):          # the disk, not the tar: a full disk, a permission
            raise DatasetError(f"cannot write {name} into {directory} ({exc.strerror or _one_line(exc)}); check "
                               f"its free space (1.3 GB, twice while unpacking) and permissions, then re-run: "
                               f"{entry['fetch_command']}") from None
        raise
    _say(name, f"ready in {directory}: {len(sources):,} images of {len(images)} classes, labels from {synsets_path}"
               + (f"; {len(converted)} re-encoded as RGB JPEG" if converted else "")
               + (f"; {len(skipped)} other members skipped" if skipped else ""))
    paired = manifest(entry["fresh_for"])
    try:
        packed = json.loads((dataset_dir(entry["fresh_for"], data_root) / paired["record"]).read_text("utf-8"))
        for fmt in packed.get("packed") or {}:
            _say(name, f"{entry['fresh_for']} is packed as {fmt}: pack this set too, "
                       f"{entry['fetch_command']} --format {fmt}")
    except (OSError, ValueError, AttributeError, KeyError):
        pass
    return directory


def pack(name: str, data_root, fmt: str, python: str | None = None) -> dict:
    """Pack the fetched set's val/ as `fmt` (prepare_imagenet.PACKERS), record it and rewrite the
    manifest; returns the record."""
    entry = manifest(name)
    directory = dataset_dir(name, data_root)
    check_prepared(name, data_root)
    record_path = directory / entry["record"]
    record = json.loads(record_path.read_text("utf-8"))
    packed = record.get("packed") or {}
    if fmt in packed and (directory / fmt).is_dir():
        _say(name, f"already packed as {fmt} in {directory / fmt}; nothing to do")
        return record
    interpreter = prepare_imagenet.packer_python(fmt, python)
    summary = prepare_imagenet._run_packer(directory, fmt, interpreter, ["--val-only"])
    if not (directory / fmt / "val").is_dir():
        raise DatasetError(f"{prepare_imagenet.PACKERS[fmt].module} reported success but left no {directory / fmt}/val")
    record["packed"] = {**packed, fmt: summary}
    tmp = record_path.with_name(f".{record_path.name}.part")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, record_path)
    write_prepared_manifest(directory, extend=True)      # the packed files are part of the set from now on
    _say(name, f"packed as {fmt} in {directory / fmt}: {summary.get('counts')}")
    return record
