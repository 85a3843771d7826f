"""`dawnbench data prepare imagenet`: the official ILSVRC2012 files a user brings, turned into the
prepared dataset the harness and the ImageNet references read.

ImageNet cannot be downloaded by a program. The user puts ILSVRC2012_img_train.tar,
ILSVRC2012_img_val.tar and ILSVRC2012_devkit_t12.tar.gz in one folder (``--from DIR``); this module
writes, under ``<data root>/imagenet/``:

    train/<wnid>/<file>.JPEG            every training image, byte-identical to its tar member, except
                                        the CMYK JPEGs and the PNG, re-encoded as RGB JPEGs
    val/ILSVRC2012_val_<8 digits>.JPEG  flat: a reference never sees a val label
    val_labels.txt, synsets.txt         for the harness only; byte-identical to tensorflow-datasets'
    blacklist.txt                       with --blacklist
    dawnbench-prepared.json             what was read, and whether it was official
    dawnbench-manifest.json             last: every file's size and sha256 (harness.datasets)

Each tar is read once, as a stream, its md5 computed on the way (148 GB are not read twice). Each
image goes to a temp name in its folder and is renamed into place, so a killed prepare resumes
(an image already in place with the right bytes is kept) and never leaves a half-written image under
a final name. The manifest is written last: without it the dataset is incomplete, and the harness
refuses it. Every problem is a one-line DatasetError.

scipy (reads meta.mat) and Pillow (re-encodes) are imported only when prepare runs; they are host
tools, pinned in requirements/tools.txt.

``--format recordio|tfrecord`` then packs the prepared folders for a framework's own reader
(PACKERS): the packer is a module of this package run as a subprocess in that framework's
environment (MXNet needs numpy 1.23, the host tools numpy 2), writing ``<format>/train/`` and
``<format>/val/`` beside the folders; its JSON summary goes into the record under "packed", and the
manifest is rewritten last, so `data verify` and every run check the packed files too.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import harness
from harness.datasets import (
    PREPARED_MANIFEST,
    DatasetError,
    dataset_dir,
    manifest,
    verify_prepared,
    write_prepared_manifest,
)
from harness.errors import command

__all__ = ["Devkit", "prepare", "read_devkit", "parse_meta", "parse_ground_truth", "write_label_files",
           "check_blacklist", "PINS"]

NAME = "imagenet"
RECORD_FORMAT = "dawnbench-imagenet-1"
LAYOUT = "folders"   # what a later --format (RecordIO, TFRecord) adds beside, under its own key
TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
META_MEMBER = "ILSVRC2012_devkit_t12/data/meta.mat"
GROUND_TRUTH_MEMBER = "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt"
VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG")
WNID = re.compile(r"n\d{8}")
PINS = {"scipy.io": "scipy==1.17.1", "PIL.Image": "pillow==13.0.0"}   # requirements/tools.txt has the same
JPEG_QUALITY = 95
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TEMP_SUFFIX = ".part"
CHUNK = 1 << 20
UNVERIFIED_HINT = "re-download it, or pass --allow-unverified for fixtures or subsets"


@dataclass(frozen=True)
class Packer:
    module: str          # run as `python -m <module> IMAGENET_DIR`, prints its JSON summary last
    framework: str       # the import the interpreter must have
    reference: str       # whose .venv/<reference>/bin/python has it


FOLDERS = "folders"
PACKERS = {"recordio": Packer("dawnbench.pack_recordio", "mxnet", "imagenet-resnet152-mxnet"),
           "tfrecord": Packer("dawnbench.pack_tfrecord", "tensorflow", "imagenet-resnet50-tensorflow")}
FORMATS = (FOLDERS, *PACKERS)
REPO_ROOT = Path(__file__).resolve().parents[1]


def _say(message: str) -> None:
    print(f"{NAME}: {message}", file=sys.stderr, flush=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _require(module: str):
    """Import one of the host-tool dependencies, or say in one line how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DatasetError(f"prepare needs {PINS[module].split('==')[0]}: run it with "
                           f"{command('data prepare')} from the checkout (it runs in the tools environment, "
                           f"which `make tools` sets up), or "
                           f"pip install {' '.join(PINS.values())}") from None


# --- the devkit -----------------------------------------------------------------------------------

@dataclass
class Devkit:
    """What prepare takes from the devkit: the classes and the val ground truth."""

    leaves: dict[int, str]      # ILSVRC2012_ID -> WNID, the 1,000 classes (synsets without children)
    ground_truth: list[int]     # the ILSVRC2012_ID of each val image, in file-name order

    @property
    def synsets(self) -> list[str]:
        """The WNIDs sorted: a class's index is its position (torchvision's and TFDS's convention)."""
        return sorted(self.leaves.values())


def parse_meta(data: bytes) -> dict[int, str]:
    """{ILSVRC2012_ID: WNID} of the leaf synsets (num_children == 0) of the devkit's meta.mat."""
    scipy_io = _require("scipy.io")
    bad = f"{DEVKIT}: {META_MEMBER} is not the devkit's meta.mat"
    try:
        synsets = scipy_io.loadmat(io.BytesIO(data), squeeze_me=True)["synsets"]
    except Exception as exc:  # scipy raises ValueError, TypeError, KeyError... on a file that is not a .mat
        raise DatasetError(f"{bad} ({_one_line(exc)}); {UNVERIFIED_HINT.split(',')[0]}") from exc
    missing = {"ILSVRC2012_ID", "WNID", "num_children"} - set(getattr(synsets.dtype, "names", None) or ())
    if missing:
        raise DatasetError(f"{bad}: its synsets lack {', '.join(sorted(missing))}")
    leaves: dict[int, str] = {}
    for synset in synsets.reshape(-1):
        if int(synset["num_children"]) != 0:
            continue
        ilsvrc_id, wnid = int(synset["ILSVRC2012_ID"]), str(synset["WNID"])
        if not WNID.fullmatch(wnid) or ilsvrc_id in leaves or wnid in leaves.values():
            raise DatasetError(f"{bad}: leaf synset {ilsvrc_id} {wnid!r} is malformed or repeated")
        leaves[ilsvrc_id] = wnid
    if not leaves:
        raise DatasetError(f"{bad}: it has no leaf synsets (num_children == 0)")
    return leaves


def parse_ground_truth(text: str, leaves: dict[int, str]) -> list[int]:
    """The ILSVRC2012_ID of each val image, one per line, each one of the leaf classes."""
    ids = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            value = int(line)
        except ValueError:
            raise DatasetError(f"{DEVKIT}: line {number} of {GROUND_TRUTH_MEMBER} is {line!r}, not a class ID") from None
        if value not in leaves:
            raise DatasetError(f"{DEVKIT}: line {number} of {GROUND_TRUTH_MEMBER} is class ID {value}, not one of the "
                               f"devkit's {len(leaves)} leaf classes ({min(leaves)}..{max(leaves)})")
        ids.append(value)
    return ids


class _HashingReader:
    """A file read through this is md5-hashed as it goes, and a progress bar fed: tarfile's stream
    mode reads it once, front to back, so the md5 costs no second read."""

    def __init__(self, raw, bar):
        self.raw, self.bar, self.size = raw, bar, 0
        self.md5 = hashlib.md5(usedforsecurity=False)

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.md5.update(data)
        self.size += len(data)
        if self.bar is not None:
            self.bar.update(len(data))
        return data

    def drain(self) -> None:
        """Read what tarfile left after the end-of-archive blocks (record padding): the md5 is the file's."""
        while self.read(CHUNK):
            pass


def _bar(path: Path, progress: bool):
    from tqdm import tqdm  # pinned for the harness too (requirements/harness.txt)

    return tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=path.name, file=sys.stderr,
                disable=None if progress else True, leave=False)   # None: no bar unless a terminal


def _refuse(archive: str, member: tarfile.TarInfo, why: str) -> DatasetError:
    return DatasetError(f"refusing {archive}: member {member.name!r} {why}; it is not an official ImageNet file")


def _member_parts(member: tarfile.TarInfo, archive: str, *, allow_dirs: bool = False) -> list[str] | None:
    """The path parts of a safe regular-file member; None for a directory (where allowed); refuses
    an absolute path, ``..``, a link or any other kind of member."""
    path = PurePosixPath(member.name)
    parts = [part for part in path.parts if part != "."]
    if path.is_absolute():
        raise _refuse(archive, member, "has an absolute path")
    if ".." in parts:
        raise _refuse(archive, member, "points outside the archive (..)")
    if member.issym() or member.islnk():
        raise _refuse(archive, member, f"is a link (to {member.linkname!r})")
    if member.isdir() and allow_dirs:
        return None
    if not member.isfile():
        raise _refuse(archive, member, "is not a regular file")
    return parts


def _flat_name(member: tarfile.TarInfo, archive: str) -> str:
    parts = _member_parts(member, archive)
    if len(parts) != 1 or parts[0].startswith("."):
        raise _refuse(archive, member, "is not a plain file name")
    return parts[0]


def _reading(path: Path):
    """Errors of a tar being read become one line that names the file."""
    return _Wrap(f"cannot read {path}", "it is truncated or not the right file; re-download it",
                 (tarfile.TarError, EOFError, zlib.error, OSError))


class _Wrap:
    def __init__(self, what: str, fix: str, kinds: tuple):
        self.what, self.fix, self.kinds = what, fix, kinds

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None and isinstance(exc, self.kinds) and not isinstance(exc, DatasetError):
            raise DatasetError(f"{self.what} ({_one_line(exc)}); {self.fix}") from exc
        return False


def read_devkit(path: str | os.PathLike, *, progress: bool = False) -> tuple[Devkit, str, int]:
    """(the devkit's classes and ground truth, its md5, its size), reading the tar.gz once."""
    path = Path(path)
    wanted = {META_MEMBER: None, GROUND_TRUTH_MEMBER: None}
    with _bar(path, progress) as bar, _reading(path), open(path, "rb") as raw:
        reader = _HashingReader(raw, bar)
        with tarfile.open(fileobj=reader, mode="r|gz") as tar:
            for member in tar:
                parts = _member_parts(member, DEVKIT, allow_dirs=True)
                if parts is not None and "/".join(parts) in wanted:
                    wanted["/".join(parts)] = tar.extractfile(member).read()
        reader.drain()
    if missing := [name for name, data in wanted.items() if data is None]:
        raise DatasetError(f"{path} lacks {', '.join(missing)}; it is not the ILSVRC2012 devkit, re-download it")
    leaves = parse_meta(wanted[META_MEMBER])
    try:
        text = wanted[GROUND_TRUTH_MEMBER].decode("ascii")
    except UnicodeDecodeError:
        raise DatasetError(f"{DEVKIT}: {GROUND_TRUTH_MEMBER} is not text; re-download the devkit") from None
    return Devkit(leaves, parse_ground_truth(text, leaves)), reader.md5.hexdigest(), reader.size


# --- writing files --------------------------------------------------------------------------------

def _temp(target: Path) -> Path:
    return target.with_name(f".{target.name}{TEMP_SUFFIX}")


def _write_atomic(target: Path, data: bytes) -> None:
    tmp = _temp(target)
    try:
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DatasetError(f"cannot write {target} ({exc.strerror or exc}); check the free space and "
                           f"permissions of the data root, then run prepare again: it resumes") from exc


def _same_bytes(target: Path, data: bytes) -> bool:
    try:
        if target.stat().st_size != len(data):
            return False
        return target.read_bytes() == data
    except OSError:
        return False


def _jpeg_components(data: bytes) -> int | None:
    """The colour components of a JPEG (4: CMYK or YCCK), from its frame header; None if unreadable.
    A walk over the markers, not Pillow: it runs on every one of 1.33 M images."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:                       # fill byte
            i += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD9:   # markers without a segment
            i += 2
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):   # SOFn: length, precision, h, w, Nf
            return data[i + 9]
        else:
            i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return None


def _kind(data: bytes) -> str | None:
    """'png' or 'cmyk' for an image the references' decoders would get wrong; None for the rest."""
    if data.startswith(PNG_MAGIC):
        return "png"
    if data.startswith(b"\xff\xd8") and _jpeg_components(data) == 4:
        return "cmyk"
    return None


def _rgb_jpeg(data: bytes, name: str) -> bytes:
    image_module = _require("PIL.Image")
    try:
        with image_module.open(io.BytesIO(data)) as image:
            rgb = image.convert("RGB")
    except Exception as exc:
        raise DatasetError(f"cannot re-encode {name} as an RGB JPEG ({_one_line(exc)}); re-download its tar") from exc
    out = io.BytesIO()
    rgb.save(out, "JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


class _Writer:
    """Stores images under the dataset folder: re-encoded where needed, atomically, kept when the
    same bytes are already in place (a resumed prepare rewrites nothing it finished)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.converted: dict[str, list[str]] = {"cmyk": [], "png": []}
        self.written = self.kept = 0

    def store(self, target: Path, data: bytes) -> None:
        kind = _kind(data)
        if kind:
            data = _rgb_jpeg(data, target.name)
            self.converted[kind].append(target.relative_to(self.directory).as_posix())
        if _same_bytes(target, data):
            self.kept += 1
            return
        _write_atomic(target, data)
        self.written += 1


def _remove_strays(folder: Path, names: set[str]) -> int:
    """Delete what a folder of ours holds beyond `names`: temp files of a killed run, or images of
    another source prepared here before. The manifest must list exactly the dataset."""
    removed = 0
    for entry in os.scandir(folder):
        if entry.name in names:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
        removed += 1
    return removed


def _mkdir(folder: Path) -> None:
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise DatasetError(f"{folder} is not a folder; remove it and run prepare again")
    folder.mkdir(parents=True, exist_ok=True)


def _extract_val(path: Path, directory: Path, writer: _Writer, progress: bool) -> tuple[list[str], str, int]:
    """(the val file names sorted, md5, size): every member into val/, flat."""
    val = directory / "val"
    _mkdir(val)
    names: set[str] = set()
    with _bar(path, progress) as bar, _reading(path), open(path, "rb") as raw:
        reader = _HashingReader(raw, bar)
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for member in tar:
                name = _flat_name(member, VAL_TAR)
                if not VAL_NAME.fullmatch(name):
                    raise _refuse(VAL_TAR, member, "is not named ILSVRC2012_val_<8 digits>.JPEG")
                if name in names:
                    raise _refuse(VAL_TAR, member, "appears twice")
                names.add(name)
                writer.store(val / name, tar.extractfile(member).read())
        reader.drain()
    if removed := _remove_strays(val, names):
        _say(f"removed {removed} file(s) from {val} that {VAL_TAR} does not hold (an earlier, killed or other run)")
    return sorted(names), reader.md5.hexdigest(), reader.size


def _extract_train(path: Path, directory: Path, leaves: set[str], writer: _Writer,
                   progress: bool) -> tuple[dict[str, int], str, int]:
    """({wnid: image count}, md5, size): the tar of per-class tars into train/<wnid>/."""
    train = directory / "train"
    _mkdir(train)
    classes: dict[str, int] = {}
    with _bar(path, progress) as bar, _reading(path), open(path, "rb") as raw:
        reader = _HashingReader(raw, bar)
        with tarfile.open(fileobj=reader, mode="r|") as outer:
            for member in outer:
                name = _flat_name(member, TRAIN_TAR)
                wnid = name.removesuffix(".tar")
                if not name.endswith(".tar") or wnid not in leaves:
                    raise _refuse(TRAIN_TAR, member, f"is not <wnid>.tar of one of the devkit's {len(leaves)} classes")
                if wnid in classes:
                    raise _refuse(TRAIN_TAR, member, "appears twice")
                folder = train / wnid
                _mkdir(folder)
                archive = f"{TRAIN_TAR}:{name}"
                names: set[str] = set()
                with outer.extractfile(member) as inner_file, tarfile.open(fileobj=inner_file, mode="r|") as inner:
                    for image in inner:
                        image_name = _flat_name(image, archive)
                        if image_name in names:
                            raise _refuse(archive, image, "appears twice")
                        names.add(image_name)
                        writer.store(folder / image_name, inner.extractfile(image).read())
                _remove_strays(folder, names)
                classes[wnid] = len(names)
        reader.drain()
    if removed := _remove_strays(train, set(classes)):
        _say(f"removed {removed} class folder(s) from {train} that {TRAIN_TAR} does not hold")
    return classes, reader.md5.hexdigest(), reader.size


# --- label files, blacklist -----------------------------------------------------------------------

def label_texts(devkit: Devkit, val_names: list[str]) -> dict[str, bytes]:
    """{file name: bytes} of synsets.txt and val_labels.txt: one WNID a line, LF, a final newline,
    exactly as tensorflow-datasets' labels.txt and validation_labels.txt."""
    if len(val_names) != len(devkit.ground_truth):
        raise DatasetError(f"{VAL_TAR} holds {len(val_names)} images but the devkit's ground truth has "
                           f"{len(devkit.ground_truth)} lines; the two are not from the same release, re-download them")
    for position, name in enumerate(sorted(val_names), 1):
        match = VAL_NAME.fullmatch(name)
        if not match or int(match.group(1)) != position:
            raise DatasetError(f"{VAL_TAR}: image {position} in name order is {name}, not ILSVRC2012_val_{position:08d}.JPEG; "
                               "the ground truth cannot be matched to it, re-download the tar")
    files = {"synsets.txt": devkit.synsets, "val_labels.txt": [devkit.leaves[i] for i in devkit.ground_truth]}
    return {name: "".join(f"{wnid}\n" for wnid in lines).encode("ascii") for name, lines in files.items()}


def write_label_files(directory: str | os.PathLike, devkit: Devkit, val_names: list[str]) -> dict[str, Path]:
    """Write synsets.txt and val_labels.txt into `directory` (see :func:`label_texts`)."""
    directory = Path(directory)
    written = {}
    for name, data in label_texts(devkit, val_names).items():
        _write_atomic(directory / name, data)
        written[name] = directory / name
    return written


def check_blacklist(path: str | os.PathLike, val_count: int, spec: dict) -> tuple[bytes, list[str]]:
    """(the file's bytes, unofficial reasons) of a blacklist: distinct one-based val indices, one a
    line. An index outside 1..val_count or repeated is refused; a count other than ``spec['count']``
    or a sha256 other than ``spec['sha256']`` (when the manifest has one) comes back as a reason."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read --blacklist {path} ({exc.strerror or exc})") from exc
    seen: set[int] = set()
    for number, line in enumerate(raw.decode("ascii", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            index = int(line)
        except ValueError:
            raise DatasetError(f"--blacklist {path}: line {number} is {line!r}, not a val image index") from None
        if not 1 <= index <= val_count:
            raise DatasetError(f"--blacklist {path}: index {index} on line {number} is outside 1..{val_count}, "
                               "the one-based indices of the val images")
        if index in seen:
            raise DatasetError(f"--blacklist {path}: index {index} appears twice (line {number})")
        seen.add(index)
    reasons = []
    if len(seen) != spec.get("count", len(seen)):
        reasons.append(f"blacklist {path.name} has {len(seen)} indices, the official one {spec['count']}")
    digest = hashlib.sha256(raw).hexdigest()
    if spec.get("sha256") and digest != spec["sha256"]:
        reasons.append(f"blacklist {path.name} has sha256 {digest}, the official one {spec['sha256']}")
    return raw, reasons


# --- the command ----------------------------------------------------------------------------------

def _check_sources_present(source_dir: Path, sources: dict) -> None:
    if not source_dir.is_dir():
        raise DatasetError(f"--from {source_dir}: no such folder; give the folder that holds {', '.join(sources)}")
    missing = [name for name in sources if not (source_dir / name).is_file()]
    if missing:
        raise DatasetError(f"{source_dir} lacks {', '.join(missing)}: --from DIR must hold the official "
                           f"{', '.join(sources)} (from image-net.org)")


def _tree_bytes(directory: Path) -> int:
    total = 0
    for folder, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _check_space(directory: Path, needed: int) -> None:
    """The images take about what their tars take; what an earlier run wrote counts as done."""
    probe = directory
    while not probe.exists():
        probe = probe.parent
    present = _tree_bytes(directory) if directory.is_dir() else 0
    free = shutil.disk_usage(probe).free
    short = needed - present - free
    if short > 0:
        raise DatasetError(f"not enough free space for ImageNet in {probe}: {free / 1e9:.1f} GB free, "
                           f"{(needed - present) / 1e9:.1f} GB more needed ({free} and {needed - present} bytes; "
                           "the images take about what the tars "
                           f"take{f', {present / 1e9:.1f} GB already prepared' if present else ''}); "
                           "free some space or choose another --data")


def _already_prepared(directory: Path, blacklist_sha256: str | None) -> dict | None:
    """The verified manifest of a complete earlier prepare of the same request; None to prepare."""
    if not (directory / PREPARED_MANIFEST).is_file():
        return None
    try:
        verified = verify_prepared(directory, name=NAME)
        record = json.loads((directory / manifest(NAME)["record"]).read_text("utf-8"))
    except (DatasetError, OSError, ValueError) as exc:
        _say(f"{directory} was prepared but no longer verifies ({_one_line(exc)}); preparing it again")
        return None
    if (record.get("blacklist") or {}).get("sha256") != blacklist_sha256:
        _say(f"{directory} was prepared with another blacklist; preparing it again")
        return None
    return {**verified, "record": record}


def _clean_top(directory: Path, keep: set[str]) -> None:
    """The dataset folder holds what prepare writes, nothing else: the manifest would list it."""
    entry = manifest(NAME)
    # A packed format of images about to be rewritten would be stale: it goes too.
    ours = {"train", "val", *entry["files"], entry["blacklist"]["file"], PREPARED_MANIFEST, entry["record"],
            *PACKERS, *(_partial(fmt) for fmt in PACKERS)}
    for entry in os.scandir(directory):
        if entry.name in keep:
            continue
        if entry.name in ours or (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)) \
                or entry.name.endswith(".tmp"):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        else:
            raise DatasetError(f"{directory} holds {entry.name}, which prepare does not write; move it out "
                               "(every file there is part of the dataset)")


def prepare(source_dir: str | os.PathLike, data_root: str | os.PathLike | None = None, *,
            blacklist: str | os.PathLike | None = None, allow_unverified: bool = False,
            progress: bool = True, format: str = FOLDERS, python: str | os.PathLike | None = None) -> Path:
    """Prepare ImageNet from the official files in `source_dir` into ``<data_root>/imagenet``;
    returns that folder. Files that are not the official ones are refused (one line, nothing usable
    written) unless `allow_unverified`, which marks the dataset ``"official": false``. A `format`
    other than folders then packs the folders (:func:`pack`), with `python` if given."""
    if format not in FORMATS:
        raise DatasetError(f"--format {format!r} is not one of {', '.join(FORMATS)}")
    interpreter = None if format == FOLDERS else packer_python(format, python)   # before hours of work
    directory = _prepare_folders(source_dir, data_root, blacklist=blacklist, allow_unverified=allow_unverified,
                                 progress=progress)
    if format != FOLDERS:
        pack(directory, format, interpreter)
    return directory


def _prepare_folders(source_dir, data_root, *, blacklist, allow_unverified: bool, progress: bool) -> Path:
    entry = manifest(NAME)
    sources: dict = entry["sources"]
    source_dir = Path(source_dir).expanduser()
    directory = dataset_dir(NAME, data_root)
    record_name = entry["record"]
    blacklist_sha256 = None
    if blacklist is not None:
        try:
            blacklist_sha256 = hashlib.sha256(Path(blacklist).read_bytes()).hexdigest()
        except OSError as exc:
            raise DatasetError(f"cannot read --blacklist {blacklist} ({exc.strerror or exc})") from exc
    _remove_partials(directory)     # a killed pack's leftovers would fail the verification below
    if done := _already_prepared(directory, blacklist_sha256):
        state = "official" if done["record"].get("official") else \
            f"unofficial: {'; '.join(done['record'].get('unofficial_reasons', []))}"
        _say(f"already prepared in {directory} ({done['count']} files verified against its manifest; {state})")
        return directory
    _check_sources_present(source_dir, sources)

    reasons: list[str] = []
    read: dict[str, dict] = {}

    def checked(name: str, md5: str, size: int) -> None:
        expected = sources[name]
        official = md5 == expected["md5"] and expected.get("size", size) == size
        read[name] = {"md5": md5, "size": size, "official": official}
        if not official:
            if not allow_unverified:
                raise DatasetError(f"{source_dir / name} is not the official file: md5 {md5}, expected "
                                   f"{expected['md5']}; {UNVERIFIED_HINT}")
            reasons.append(f"{name} is not the official file (md5 {md5}, expected {expected['md5']})")

    devkit, md5, size = read_devkit(source_dir / DEVKIT, progress=progress)
    checked(DEVKIT, md5, size)
    blacklist_bytes = None
    if blacklist is not None:
        blacklist_bytes, why = check_blacklist(blacklist, len(devkit.ground_truth), entry.get("blacklist", {}))
        if why and not allow_unverified:
            raise DatasetError(f"{why[0]}; give the official ILSVRC2014_clsloc_validation_blacklist.txt, "
                               "or pass --allow-unverified for fixtures or subsets")
        reasons += why
        blacklist_sha256 = hashlib.sha256(blacklist_bytes).hexdigest()

    tars = [VAL_TAR, TRAIN_TAR]
    for name in tars:   # a tar of the wrong size is refused before its bytes are read
        size = (source_dir / name).stat().st_size
        expected = sources[name].get("size")
        if expected is not None and size != expected and not allow_unverified:
            raise DatasetError(f"{source_dir / name} is not the official file: {size} bytes, expected {expected} "
                               f"(md5 {sources[name]['md5']}); {UNVERIFIED_HINT}")
    # 2% over the tars: 1.33 M files each round up to a block (about 2 KB apiece), and the manifest.
    _check_space(directory, int(1.02 * sum((source_dir / name).stat().st_size for name in tars)))

    # From here on the folder is being rewritten: no manifest until it is whole again.
    directory.mkdir(parents=True, exist_ok=True)    # may be a link to a bigger disk
    (directory / PREPARED_MANIFEST).unlink(missing_ok=True)
    _clean_top(directory, keep={"train", "val"})
    writer = _Writer(directory)
    val_names, md5, size = _extract_val(source_dir / VAL_TAR, directory, writer, progress)
    checked(VAL_TAR, md5, size)
    labels = label_texts(devkit, val_names)    # the val checks, before 148 GB of train are read
    classes, md5, size = _extract_train(source_dir / TRAIN_TAR, directory, set(devkit.leaves.values()), writer,
                                        progress)
    checked(TRAIN_TAR, md5, size)
    if len(classes) != len(devkit.leaves):
        reasons.append(f"train holds {len(classes)} of the devkit's {len(devkit.leaves)} classes")

    for name, data in labels.items():
        _write_atomic(directory / name, data)
    if blacklist_bytes is not None:
        _write_atomic(directory / entry["blacklist"]["file"], blacklist_bytes)
    record = {
        "format": RECORD_FORMAT,
        "layout": LAYOUT,
        "official": not reasons,
        "unofficial_reasons": reasons,
        "sources": read,
        "counts": {"classes": len(devkit.leaves), "train": sum(classes.values()), "val": len(val_names)},
        "converted": {kind: sorted(names) for kind, names in writer.converted.items()},
        "blacklist": None if blacklist_bytes is None else
        {"sha256": blacklist_sha256, "count": sum(1 for line in blacklist_bytes.splitlines() if line.strip())},
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    _write_atomic(directory / record_name, (json.dumps(record, indent=1) + "\n").encode("utf-8"))
    if hasattr(os, "sync"):
        os.sync()   # every image on disk before the manifest says the dataset is whole
    write_prepared_manifest(directory)
    _say(f"prepared in {directory}: {record['counts']['train']} train and {record['counts']['val']} val images "
         f"({writer.written} written, {writer.kept} already in place), "
         + ("official" if not reasons else f"unofficial: {'; '.join(reasons)}"))
    return directory


# --- packed formats --------------------------------------------------------------------------------

def _partial(fmt: str) -> str:
    return f".{fmt}.partial"


def _remove_partials(directory: Path) -> None:
    """Remove what an interrupted pack left: its .<format>.partial/, or a <format>/ that the record
    does not list yet (killed between the packer's rename and the record). Either would fail the
    manifest check, and the folders would be prepared again from the tars."""
    try:
        packed = json.loads((directory / manifest(NAME)["record"]).read_text("utf-8")).get("packed") or {}
    except (OSError, ValueError, AttributeError):
        return       # no usable record: prepare starts over and _clean_top removes them
    for name in [_partial(fmt) for fmt in PACKERS] + [fmt for fmt in PACKERS if fmt not in packed]:
        if (directory / name).is_dir() and not (directory / name).is_symlink():
            shutil.rmtree(directory / name)
            _say(f"removed {directory / name}, left by an interrupted pack")


def packer_python(fmt: str, python: str | os.PathLike | None = None) -> str:
    """The interpreter that packs `fmt`: --python, else this one when it has the framework, else the
    environment of the reference that reads the format, made by `make setup`."""
    packer = PACKERS[fmt]
    if python is not None:
        path = Path(python).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise DatasetError(f"--python {python}: no such executable; give the Python of an environment with "
                               f"{packer.framework}, e.g. .venv/{packer.reference}/bin/python")
        return str(path)
    if importlib.util.find_spec(packer.framework) is not None:
        return sys.executable
    venv = REPO_ROOT / ".venv" / packer.reference / "bin" / "python"
    if venv.is_file():
        return str(venv)
    raise DatasetError(f"--format {fmt} packs with {_FRAMEWORK_NAMES.get(packer.framework, packer.framework)}, "
                       f"which this environment lacks: run `make setup REF={packer.reference}` and prepare again, "
                       "or pass --python PATH")


_FRAMEWORK_NAMES = {"mxnet": "MXNet", "tensorflow": "TensorFlow"}


def _run_packer(directory: Path, fmt: str, python: str, options: list[str] = ()) -> dict:
    """Run the packer (with `options`: a fresh set's ``--val-only``); its progress lines pass through,
    its one-line error becomes ours."""
    packer = PACKERS[fmt]
    with tempfile.TemporaryDirectory(prefix="dawnbench-pack-") as path:
        # PYTHONPATH gets a folder holding only this package and the harness's (links; the packer's parser
        # is harness.arguments'): the repository root, or the site-packages they were installed into,
        # would put this environment's numpy before the framework's.
        (Path(path) / "package").mkdir()
        (Path(path) / "package" / "dawnbench").symlink_to(Path(__file__).resolve().parent, target_is_directory=True)
        (Path(path) / "package" / "harness").symlink_to(Path(harness.__file__).resolve().parent,
                                                        target_is_directory=True)
        env = {**os.environ, "PYTHONPATH": str(Path(path) / "package")}
        _say(f"packing {directory} as {fmt} with {python} -m {packer.module}")
        # stdout to a file: the summary lists every file (tens of MB), more than a pipe holds while
        # stderr is being read
        with open(Path(path) / "summary.json", "w+", encoding="utf-8") as stdout:
            try:
                process = subprocess.Popen([python, "-m", packer.module, str(directory), *options], stdout=stdout,
                                           stderr=subprocess.PIPE, env=env, text=True)
            except OSError as exc:
                raise DatasetError(f"cannot run {python} ({exc.strerror or exc}); pass --python PATH") from exc
            error = None
            for line in process.stderr:
                if line.startswith("dawnbench: error: "):
                    error = line.removeprefix("dawnbench: error: ").strip()
                else:
                    sys.stderr.write(line)
                    sys.stderr.flush()
            code = process.wait()
            stdout.seek(0)
            out = stdout.read()
    if code != 0:
        raise DatasetError(error or f"{python} -m {packer.module} {directory} failed (exit status {code}); "
                                    "its messages are above")
    try:
        summary = json.loads(out.strip().splitlines()[-1])
        if not isinstance(summary, dict):
            raise ValueError("not an object")
    except (ValueError, IndexError) as exc:
        raise DatasetError(f"{python} -m {packer.module} printed no JSON summary last ({_one_line(exc)}); "
                           "is that interpreter running this version of dawnbench?") from None
    return summary


def pack(directory: str | os.PathLike, fmt: str, python: str | None = None) -> dict:
    """Pack the prepared, verified ImageNet in `directory` as `fmt` (unless it already is), then
    record it and rewrite the manifest; returns the record."""
    directory = Path(directory)
    record_path = directory / manifest(NAME)["record"]
    record = json.loads(record_path.read_text("utf-8"))
    packed = record.get("packed") or {}
    if fmt in packed and (directory / fmt).is_dir():
        # prepare verified the whole folder against its manifest, packed files included
        _say(f"already packed as {fmt} in {directory / fmt} ({packed[fmt].get('counts')}, verified); nothing to do")
        return record
    summary = _run_packer(directory, fmt, python or packer_python(fmt))
    if not (directory / fmt / "train").is_dir() or not (directory / fmt / "val").is_dir():
        raise DatasetError(f"{PACKERS[fmt].module} reported success but left no {directory / fmt}/train and /val")
    record["packed"] = {**packed, fmt: summary}
    _write_atomic(record_path, (json.dumps(record, indent=1) + "\n").encode("utf-8"))
    if hasattr(os, "sync"):
        os.sync()
    # last: the packed files are part of the dataset from now on (the verified files keep their hashes)
    write_prepared_manifest(directory, extend=True)
    _say(f"packed as {fmt} in {directory / fmt}: {summary.get('counts')}")
    return record
