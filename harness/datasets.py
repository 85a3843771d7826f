"""Checksummed datasets: where they live, and whether their files are the ones ``datasets.toml`` names.

The harness scores every run against eval labels it loads itself, so it must be
able to prove those labels are the official ones: every file is checked against
the checksum (sha256, md5 or git's blob id) recorded in ``harness/data/datasets.toml``
before it is read, and a prepared tree (ImageNet) against the manifest written when it
was prepared. Fetching is a host tool (``dawnbench.fetch``); reading the files' formats is
``harness.official_readers``, the eval labels and blacklist ``harness.eval_labels``.

The standard library only: this module is installed into every reference's environment,
whatever its framework.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.resources
import json
import os
from pathlib import Path

from harness import paths, safe_read
from harness.arguments import path_kind, path_problem
from harness.errors import DawnbenchError, command

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 has no tomllib; tomli is the same parser.
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "DatasetError",
    "default_data_root",
    "manifest",
    "dataset_names",
    "dataset_dir",
    "files_dir",
    "sha256_file",
    "md5_file",
    "file_matches",
    "verify_file",
    "verify_dataset",
    "verified_files",
    "verified_checksums",
    "write_prepared_manifest",
    "verify_prepared",
    "check_prepared",
    "fetch_fix",
    "check_present",
    "record_verified",
]

CHUNK_SIZE = 1 << 20


class DatasetError(DawnbenchError):
    """A dataset is missing, corrupt or malformed.

    The message is one line that says what is wrong and how to fix it, because
    it is what a user sees at the end of a failed run.
    """

    def __init__(self, message: str):
        # One line even when an OS or parser message carries newlines.
        super().__init__(" ".join(str(message).split()))


def default_data_root() -> Path:
    """``$DAWNBENCH_DATA`` if set, else ``./data``, else the source checkout's ``data/``
    (see :mod:`harness.paths`)."""
    return paths.data_root()


MANIFEST_ENV = "DAWNBENCH_DATASETS_MANIFEST"

CHECKSUMS = ("sha256", "md5", "git_sha1")  # the algorithms a file entry may name; every one given is checked
# "git_sha1": git's object id of the file (sha1 of "blob <size>\0" + the bytes): what a repository
# that publishes a file without a checksum (CIFAR-10.1's data on GitHub) still proves about it.
GIT_BLOB = "git_sha1"


def new_digest(algo: str, size: int):
    """A hash object for `algo`; git's object id starts with its header, so it needs the size."""
    if algo == GIT_BLOB:
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(b"blob %d\0" % size)
        return digest
    return hashlib.new(algo, usedforsecurity=False)


@functools.lru_cache(maxsize=1)
def _builtin_manifests() -> dict:
    text = importlib.resources.files("harness").joinpath("data", "datasets.toml").read_text("utf-8")
    return tomllib.loads(text)


@functools.lru_cache(maxsize=4)
def _override_manifests(path: str, mtime_ns: int, size: int) -> dict:
    # Keyed on the file's identity, so a new path or an edited file is read afresh.
    try:
        manifests = tomllib.loads(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise DatasetError(f"cannot read ${MANIFEST_ENV}={path}: {exc}; fix the file or unset the variable") from None
    # tomllib's other failures: a whole number Python will not make (over 4,300 digits), arrays nested
    # thousands deep (it recurses per level)
    except (ValueError, RecursionError):
        raise DatasetError(f"cannot read ${MANIFEST_ENV}={path}: it holds a number too long or arrays nested too "
                           f"deeply for a manifest; fix the file or unset the variable") from None
    for name, entry in manifests.items():
        _check_shape(name, entry, f"${MANIFEST_ENV}={path}")
    return manifests


# The shape of a manifest entry, so that a hand-written override ("files" = "oops") is one line here
# rather than an AttributeError wherever the key is read: the keys that hold text, tables, lists of text.
_TEXT_KEYS = ("dir", "fetch_command", "eval_labels", "format", "subdir", "record", "classes", "compression",
              "debian_package", "debian_dir", "url_base", "url_env", "default", "fresh_for", "wheel_env", "page")
_TABLE_KEYS = ("files", "splits", "archive", "archives", "blacklist", "sources", "pins", "package")


def _check_shape(name: str, entry, where: str) -> None:
    """DatasetError (one line, naming the field and `where` the manifest came from) unless `entry` is
    a table whose known keys have their types: text, tables, `with` a list of text, each file a table
    of checksums (text) and a size (a whole number)."""
    def refuse(field: str, want: str, value) -> None:
        raise DatasetError(f"{where}: [{name}] {field} is {type(value).__name__} {value!r:.40}, not {want}; write it "
                           f"as harness/data/datasets.toml does")
    if not isinstance(entry, dict):
        refuse("", "a table", entry)
    for key in _TEXT_KEYS:
        if key in entry and not isinstance(entry[key], str):
            refuse(key, "text", entry[key])
    for key in _TABLE_KEYS:
        if key in entry and not isinstance(entry[key], dict):
            refuse(key, "a table", entry[key])
    if "with" in entry and not (isinstance(entry["with"], list) and all(isinstance(w, str) for w in entry["with"])):
        refuse("with", "a list of dataset names", entry["with"])
    for filename, spec in entry.get("files", {}).items():
        if not isinstance(spec, dict):
            refuse(f"files.{filename}", "a table of checksums", spec)
        for algo in CHECKSUMS:
            if algo in spec and not isinstance(spec[algo], str):
                refuse(f"files.{filename}.{algo}", "a hex digest (text)", spec[algo])
        if "size" in spec and (type(spec["size"]) is not int or spec["size"] < 0):
            refuse(f"files.{filename}.size", "a whole number of bytes", spec["size"])


def _load_manifests() -> dict:
    """The built-in manifest, with entries of ``$DAWNBENCH_DATASETS_MANIFEST`` replacing
    same-named ones. The variable is read on every call."""
    manifests = dict(_builtin_manifests())
    override = os.environ.get(MANIFEST_ENV)
    if override:
        try:
            info = os.stat(override)
        except OSError as exc:
            raise DatasetError(
                f"${MANIFEST_ENV}={override} cannot be read ({exc.strerror or exc}); fix the path or unset the variable"
            ) from exc
        problem = path_problem(override, ("a file",))     # a FIFO would block the open for ever (issue 34's probe)
        if problem:
            raise DatasetError(f"${MANIFEST_ENV}={override}: {problem}; give a manifest file (TOML or JSON, as "
                               f"harness/data/datasets.toml), or unset the variable")
        manifests.update(_override_manifests(override, info.st_mtime_ns, info.st_size))
    return manifests


def dataset_names() -> list[str]:
    return sorted(_load_manifests())


def manifest(name: str) -> dict:
    """The ``[name]`` table of datasets.toml (a copy: callers may not alter the cached one)."""
    manifests = _load_manifests()
    if name not in manifests:
        known = ", ".join(sorted(manifests)) or "none"
        raise DatasetError(f"unknown dataset {name!r}; known datasets: {known}")
    entry = manifests[name]
    # A companion dataset (word vectors: format "word-vectors") has no eval split, and a prepared one
    # may name no file: its prepared manifest lists them.
    required = ("dir", "fetch_command") if entry.get("format") == "word-vectors" else (
        "dir", "files", "eval_labels", "fetch_command")
    missing = [key for key in required if key not in entry]
    if missing:
        raise DatasetError(f"datasets.toml entry [{name}] lacks {', '.join(missing)}; fix harness/data/datasets.toml")
    entry.setdefault("files", {})
    unchecked = [f for f, spec in entry["files"].items() if not any(algo in spec for algo in CHECKSUMS)]
    if unchecked:
        raise DatasetError(
            f"datasets.toml entry [{name}] gives no checksum ({' or '.join(CHECKSUMS)}) for {', '.join(unchecked)}; "
            "fix harness/data/datasets.toml"
        )
    entry = copy.deepcopy(entry)
    # datasets.toml writes `dawnbench data fetch ...`; messages name the command as the user calls it
    if entry["fetch_command"].startswith("dawnbench "):
        entry["fetch_command"] = command(entry["fetch_command"].removeprefix("dawnbench "))
    return entry


def dataset_dir(name: str, data_root: str | os.PathLike | None = None) -> Path:
    """``<data root>/<dir>``: everything of the dataset lives under it."""
    root = default_data_root() if data_root is None else Path(data_root)
    return root / manifest(name)["dir"]


def files_dir(name: str, data_root: str | os.PathLike | None = None) -> Path:
    """Where the dataset's files are: ``<data root>/<dir>[/<subdir>]``."""
    return dataset_dir(name, data_root) / manifest(name).get("subdir", "")


def _hash_file(path: str | os.PathLike, algorithms) -> dict[str, str]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        digests = {algo: new_digest(algo, size) for algo in algorithms}
        while chunk := f.read(CHUNK_SIZE):
            for digest in digests.values():
                digest.update(chunk)
    return {algo: digest.hexdigest() for algo, digest in digests.items()}


def sha256_file(path: str | os.PathLike) -> str:
    return _hash_file(path, ["sha256"])["sha256"]


def md5_file(path: str | os.PathLike) -> str:
    return _hash_file(path, ["md5"])["md5"]


def checksum_mismatch(expected: dict, actual: dict[str, str]) -> str | None:
    """``None`` when every checksum ``expected`` gives matches ``actual``; else
    "expected <algo> <hex>, got <hex>" for the first that does not."""
    for algo in CHECKSUMS:
        if algo in expected and actual.get(algo) != expected[algo]:
            return f"expected {algo} {expected[algo]}, got {actual.get(algo)}"
    return None


def file_matches(path: str | os.PathLike, expected: dict) -> str | None:
    """Hash ``path`` with every algorithm ``expected`` names; as :func:`checksum_mismatch`."""
    return checksum_mismatch(expected, _hash_file(path, [a for a in CHECKSUMS if a in expected]))


def _verify(name: str, data_root: str | os.PathLike | None, filename: str) -> tuple[Path, dict[str, str]]:
    """(path, {algorithm: hex digest}) of one file of the dataset, after checking its checksum(s); the
    file is read once, whatever the number of algorithms."""
    entry = manifest(name)
    fix = fetch_fix(name)
    if filename not in entry["files"]:
        raise DatasetError(
            f"{filename!r} is not a file of dataset {name!r}; its files are: {', '.join(entry['files'])}"
        )
    expected = entry["files"][filename]
    directory = files_dir(name, data_root)
    if not directory.is_dir():
        raise DatasetError(f"dataset {name!r} not found in {directory}; {fix}")
    path = directory / filename
    kind = not_regular(path)
    if kind:        # checked before it is opened: a FIFO would block the read, /dev/zero never end it
        raise DatasetError(f"{path} is {kind}, not a regular file: replace it with the file itself "
                           f"(remove it and {fix})")
    if not path.is_file():
        raise DatasetError(f"{filename} of dataset {name!r} not found in {directory}; {fix}")
    try:
        digests = _hash_file(path, [a for a in CHECKSUMS if a in expected])
    except PermissionError:
        raise DatasetError(f"cannot read {path}: permission denied (a container's user needs read access); "
                           f"fix with: chmod -R a+rX {directory}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror or exc}; {fix}") from None
    mismatch = checksum_mismatch(expected, digests)
    if mismatch:
        size = f"size {path.stat().st_size}" + (f", expected {expected['size']}" if "size" in expected else "")
        raise DatasetError(
            f"checksum mismatch for {path}: {mismatch} ({size}); the file is corrupt or not the official one, "
            f"re-fetch it with: {entry['fetch_command']}"
        )
    _VERIFIED.setdefault(name, {})[filename] = {**digests, "size": path.stat().st_size}
    return path, digests


def not_regular(path: Path) -> str | None:
    """What `path` is when it is there but is no regular file (links followed): 'a FIFO', 'a device',
    'a folder', 'a socket', 'a link to nothing'; None for a regular file or nothing at all (what
    cannot be looked at is left to the read, which says why)."""
    kind = path_kind(path)
    return None if kind in (None, "a file", "a path that cannot be looked at") else kind


def fetch_fix(name: str) -> str:
    """How to get dataset `name`: its fetch command and, for a tarball the user may hold already
    (CIFAR-10), the file:// form of its URL variable that the README documents."""
    entry = manifest(name)
    fix = f"run: {entry['fetch_command']}"
    if "archive" in entry and entry.get("url_env"):
        fix += (f" (or, with the tarball at hand: {entry['url_env']}=file:///path/to/{entry['archive']['name']} "
                f"{entry['fetch_command']})")
    return fix


def _absent(name: str, data_root: str | os.PathLike | None) -> tuple[Path, list[str]]:
    """(the folder, what of dataset `name` is not in it): its files, or for word vectors the file
    of the default vectors."""
    entry = manifest(name)
    if entry.get("format") != "word-vectors":
        directory = files_dir(name, data_root)
        # A path that is there but no regular file (a FIFO, a link to /dev/zero) is not absent: the
        # checks after say what it is (not_regular) rather than "not found".
        return directory, [f for f in entry["files"] if not os.path.lexists(directory / f)]
    directory = dataset_dir(name, data_root)
    default = entry.get("default", "")
    # Vectors copied in by hand, without the manifest: check_prepared says what to run.
    if (directory / PREPARED_MANIFEST).is_file() or (directory / f"{default}.txt").is_file():
        return directory, []
    archive = next(((a, spec) for a, spec in entry.get("archives", {}).items() if default in spec["vectors"]), None)
    return directory, [f"{default}.txt" + (f" from {archive[0]}, {archive[1]['size'] / 2**20:.0f} MB"
                                           if archive and "size" in archive[1] else "")]


def check_present(name: str, data_root: str | os.PathLike | None = None) -> None:
    """Raise one DatasetError naming everything a run on `name` lacks, its own files and its
    companions' (SQuAD's GloVe), each dataset with its fix: a user who fetches what one message
    names should not fail next on another. Presence only; the checksums are checked after."""
    problems = []
    for each in [name, *manifest(name).get("with", [])]:
        directory, absent = _absent(each, data_root)
        if not absent:
            continue
        # A prepared dataset's few listed files would mislead: it is the whole tree `prepare` makes.
        entry = manifest(each)
        prepared = "record" in entry and entry.get("format") != "word-vectors"
        listed = absent if len(absent) <= 3 and not prepared else []
        if directory.is_dir():
            what = f"dataset {each!r} in {directory} lacks {', '.join(absent)}"
        else:
            what = f"dataset {each!r} not found in {directory}" + (f" ({', '.join(listed)})" if listed else "")
        problems.append(f"{what}; {fetch_fix(each)}")
    if problems:
        raise DatasetError("; and ".join(problems))


def verify_file(name: str, data_root: str | os.PathLike | None, filename: str) -> Path:
    """Path of one file of the dataset, after checking its checksum(s)."""
    return _verify(name, data_root, filename)[0]


# What this process verified, for result.json's provenance: {dataset: {file: {checksums, "size"}}}.
_VERIFIED: dict[str, dict[str, dict]] = {}


def verified_files() -> dict[str, dict[str, dict]]:
    """The checksums of every dataset file this process has verified (a copy)."""
    return copy.deepcopy(_VERIFIED)


def record_verified(name: str, filename: str, checksums: dict) -> None:
    """Note a file of dataset `name` checked elsewhere (the blacklist), for :func:`verified_files`."""
    _VERIFIED.setdefault(name, {})[filename] = checksums


def verify_dataset(name: str, data_root: str | os.PathLike | None = None) -> list[Path]:
    """Paths of every file of the dataset; raises DatasetError on the first bad one."""
    return [verify_file(name, data_root, filename) for filename in manifest(name)["files"]]


# --- prepared datasets ----------------------------------------------------------
#
# A large dataset (ImageNet: 1.28 M files, 140 GB) is checked once, when `prepare` writes it:
# every file is hashed then, and the list of (path, size, mtime, sha256) is written as its
# manifest. A run checks the tree against that manifest in time proportional to the file count
# (one stat per file, no reading), and records the manifest's own sha256. docs/RULES.md says what
# this catches and what it does not.

PREPARED_MANIFEST = "dawnbench-manifest.json"
PREPARED_FORMAT = "dawnbench-prepared-1"


def _prepared_listing(directory: Path, skip: Path | None) -> dict[str, os.stat_result]:
    """{relative posix path: stat} of every file under `directory` (symlinks followed to files)."""
    listing = {}
    for folder, dirs, files in os.walk(directory, onerror=_raise):
        dirs.sort()
        for name in files:
            path = Path(folder) / name
            if skip is not None and path == skip:
                continue
            listing[path.relative_to(directory).as_posix()] = path.stat()
    return listing


def _raise(exc: OSError) -> None:
    raise exc


def _known_hashes(path: Path) -> dict[tuple[str, int, int], str]:
    """(path, size, mtime_ns) -> sha256 of the rows of an existing manifest that recorded mtimes."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["files"]
        return {(rel, size, mtime): digest for rel, size, mtime, digest in rows if mtime is not None}
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return {}


def write_prepared_manifest(directory: str | os.PathLike, manifest_path: str | os.PathLike | None = None,
                            *, record_mtimes: bool = True, extend: bool = False) -> Path:
    """Hash every file under `directory` (once) and write its manifest, by default
    ``<directory>/dawnbench-manifest.json``; returns the manifest's path. With `extend` (files were
    added to a dataset that has just verified), a file with the size and mtime its old manifest
    recorded keeps its hash: only the new files are read (a packed ImageNet, not its 150 GB again)."""
    directory = Path(directory)
    path = Path(manifest_path) if manifest_path else directory / PREPARED_MANIFEST
    known = _known_hashes(path) if extend and record_mtimes else {}
    try:
        listing = _prepared_listing(directory, path)
        files = [[rel, st.st_size, st.st_mtime_ns if record_mtimes else None,
                  known.get((rel, st.st_size, st.st_mtime_ns)) or sha256_file(directory / rel)]
                 for rel, st in sorted(listing.items())]
    except OSError as exc:
        raise DatasetError(f"cannot list {directory} for its manifest: {exc}") from exc
    text = json.dumps({"format": PREPARED_FORMAT, "count": len(files), "bytes": sum(f[1] for f in files),
                       "columns": ["path", "size", "mtime_ns", "sha256"], "files": files}, indent=0)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def verify_prepared(directory: str | os.PathLike, manifest_path: str | os.PathLike | None = None, *,
                    name: str | None = None, expected_sha256: str | None = None, full: bool = False) -> dict:
    """Check the files under `directory` against its manifest: the same names (none missing, none
    extra), the same sizes and, where the manifest has them, the same mtimes; with `full`, every
    file's sha256 too (reads everything). Returns {"manifest_sha256", "count", "bytes"}, also
    recorded as dataset `name` in :func:`verified_files`; DatasetError (one line) otherwise."""
    directory = Path(directory)
    path = Path(manifest_path) if manifest_path else directory / PREPARED_MANIFEST
    label = name or str(directory)
    fix = "re-run its prepare command"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"dataset {label}: its manifest {path} cannot be read ({exc.strerror or exc}); {fix}") from exc
    digest = hashlib.sha256(raw).hexdigest()
    if expected_sha256 and digest != expected_sha256:
        raise DatasetError(f"dataset {label}: manifest {path} has sha256 {digest}, expected {expected_sha256}; "
                           f"it is not the official one, {fix}")
    try:
        manifest_data = json.loads(raw)
        if manifest_data.get("format") != PREPARED_FORMAT:
            raise ValueError(f"format is {manifest_data.get('format')!r}, not {PREPARED_FORMAT!r}")
        recorded = {rel: (size, mtime, sha) for rel, size, mtime, sha in manifest_data["files"]}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise DatasetError(f"dataset {label}: manifest {path} is malformed ({type(exc).__name__}: {exc}); {fix}") from None
    try:
        listing = _prepared_listing(directory, path)
    except OSError as exc:
        raise DatasetError(f"dataset {label}: cannot list {directory} ({exc}); check the data root") from exc
    missing = sorted(set(recorded) - set(listing))
    extra = sorted(set(listing) - set(recorded))
    resized, touched, changed = [], [], []
    for rel in sorted(set(recorded) & set(listing)):
        size, mtime, sha = recorded[rel]
        st = listing[rel]
        if st.st_size != size:
            resized.append(rel)
        elif mtime is not None and st.st_mtime_ns != mtime:
            touched.append(rel)
        elif full and sha256_file(directory / rel) != sha:
            changed.append(rel)
    problems = [(what, names) for what, names in (("missing", missing), ("not in the manifest", extra),
                                                  ("of another size", resized), ("modified (mtime)", touched),
                                                  ("of other content (sha256)", changed)) if names]
    if problems:
        summary = ", ".join(f"{len(names)} {what} (first: {names[0]})" for what, names in problems)
        raise DatasetError(f"dataset {label} in {directory} does not match its manifest {path}: {summary}; {fix}")
    result = {"manifest_sha256": digest, "count": len(recorded), "bytes": sum(v[0] for v in recorded.values())}
    _VERIFIED[label] = {"prepared_manifest": dict(result)}
    return result


def verified_checksums(name: str, data_root: str | os.PathLike | None = None) -> dict[str, dict]:
    """Every file of the dataset verified, each read once: ``{filename: {"file": filename, "sha256"
    and/or "md5": hex}}`` with the algorithms its manifest entry gives, for a run to record what it
    read. Raises DatasetError (one line) on the first missing or bad file."""
    verified = {}
    for filename in manifest(name)["files"]:
        verified[filename] = {"file": filename, **_verify(name, data_root, filename)[1]}
    return verified


def check_companions(name: str, data_root: str | os.PathLike | None = None) -> list[str]:
    """Check the datasets `name` names under `with` (SQuAD's GloVe) as :func:`check_prepared` does;
    why they make a run unofficial (none: official). Raises DatasetError with the fetch command
    when one is missing or does not match its manifest."""
    reasons = []
    for companion in manifest(name).get("with", []):
        reasons += check_prepared(companion, data_root)[1]
        # The provenance names each vector file by the sha256 its manifest (just checked) gives it.
        directory = dataset_dir(companion, data_root)
        try:
            record = safe_read.parse_json((directory / manifest(companion)["record"]).read_text(encoding="utf-8"),
                                          "a dataset record")
            rows = json.loads((directory / PREPARED_MANIFEST).read_text(encoding="utf-8"))["files"]
            listed = {rel: (size, sha) for rel, size, _, sha in rows}
            for vectors in record["vectors"].values():
                size, sha = listed[vectors["file"]]
                _VERIFIED.setdefault(companion, {})[vectors["file"]] = {"sha256": sha, "size": size}
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, safe_read.Refused) as exc:
            raise DatasetError(f"dataset {companion!r}: its record or manifest in {directory} is unreadable ({exc}); "
                               f"run: {manifest(companion)['fetch_command']}") from None
    return reasons


def check_all(name: str, data_root: str | os.PathLike | None = None) -> tuple[dict[str, dict], list[str]]:
    """What a run and an inference check of their dataset before any reference code runs: every
    file (:func:`verified_checksums`), the prepared manifest and the companions. Returns the verified
    files and why the data makes the result unofficial; raises DatasetError (one line) when any fails."""
    check_present(name, data_root)
    files = verified_checksums(name, data_root)
    _, reasons = check_prepared(name, data_root)
    return files, reasons + check_companions(name, data_root)


def check_prepared(name: str, data_root: str | os.PathLike | None = None) -> tuple[dict | None, list[str]]:
    """For a prepared dataset (one whose manifest entry names a `record`): check its files against
    its prepared manifest (names and sizes; :func:`verify_prepared`) and return what that checked
    ({"manifest_sha256", "count", "bytes"}) and why the dataset is not official, from the record
    `prepare` wrote (no reason: official). (None, []) for other datasets."""
    entry = manifest(name)
    if "record" not in entry:
        return None, []
    directory = dataset_dir(name, data_root)
    fix = f"run: {entry['fetch_command']}"
    if not (directory / PREPARED_MANIFEST).is_file():
        raise DatasetError(f"dataset {name!r} is not prepared in {directory} (no {PREPARED_MANIFEST}); {fix}")
    checked = verify_prepared(directory, name=f"{name} (prepared)")
    try:
        record = safe_read.parse_json((directory / entry["record"]).read_text(encoding="utf-8"), "a dataset record")
        official, reasons = record["official"], record.get("unofficial_reasons") or []
        if not isinstance(official, bool) or not all(isinstance(r, str) for r in reasons):
            raise ValueError("official must be true or false, unofficial_reasons a list of text")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, safe_read.Refused) as exc:
        raise DatasetError(f"dataset {name!r}: its record {directory / entry['record']} is unreadable ({exc}); {fix}") from exc
    if official and not reasons:
        return checked, []
    why = "; ".join(" ".join(r.split()) for r in reasons) or "its record says it is not official"
    return checked, [f"the {name} dataset was prepared from unverified files ({why})"]
