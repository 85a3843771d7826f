"""`dawnbench data fetch fineweb10B [--shards N] [--allow-unverified]`: token shards, each checked.

A host tool (standard library and numpy, through harness.token_shards). Files are downloaded one by
one from ``url_base`` (or ``$<url_env>``: a mirror, ``file:///path/to/`` a folder of them) as the
speedrun's data/cached_fineweb10B.py names them: the val shard, then train shards first..first+N-1.
Each goes to a temp file in the work folder, is hashed on the way, must pass the header checks
(harness.token_shards: magic, version, the token count against the size) and, where datasets.toml
pins it (the val shard in ``files``, train shards in ``pins``), its sha256; only then is it renamed
into place. A shard that is not pinned is refused, unless ``--allow-unverified``: then its sha256 is
recorded ("pinned on first fetch", printed) and the dataset and every run on it are unofficial.
The record (``dawnbench-prepared.json``: each shard's sha256, size, tokens, source and whether it
was pinned) and the prepared manifest that every run checks are written last.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from harness import token_shards
from harness.datasets import (
    CHUNK_SIZE,
    DatasetError,
    dataset_dir,
    manifest,
    sha256_file,
    verify_prepared,
    write_prepared_manifest,
)

RECORD_FORMAT = "dawnbench-token-shards-1"


def _say(name: str, message: str) -> None:
    print(f"{name}: {message}", file=sys.stderr, flush=True)


def shard_names(entry: dict, train: int | None) -> list[str]:
    """The val shard(s), then the first `train` train shards (all of them when None)."""
    spec = entry["splits"]["train"]
    count = spec["count"] if train is None else train
    return list(entry["splits"]["test"]) + [spec["pattern"] % i for i in range(spec["first"], spec["first"] + count)]


def pin(entry: dict, filename: str) -> str | None:
    """The sha256 datasets.toml pins for `filename` (``files``, else ``pins``), or None."""
    for table in ("files", "pins"):
        if filename in entry.get(table, {}):
            return entry[table][filename].get("sha256")
    return None


def _read_record(path: Path) -> dict:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and isinstance(record.get("shards"), dict) else {}


def _kept(name: str, directory: Path, record: dict, intact: bool) -> dict:
    """The record's shards still there and still what it says (re-hashed unless the folder verified
    against its manifest): they are not downloaded again."""
    kept = {}
    for filename, spec in record.get("shards", {}).items():
        path = directory / filename
        if not isinstance(spec, dict) or path.parent != directory or not path.is_file():
            continue
        if intact or sha256_file(path) == spec.get("sha256"):
            kept[filename] = spec
        else:
            _say(name, f"{filename} no longer matches its record; fetching it again")
    return kept


def _download(name: str, url: str, work: Path, filename: str, progress: bool, download) -> tuple[Path, str, int]:
    """(temp path, sha256, size) of `url`, downloaded into `work`."""
    target = work / filename
    digest, size = hashlib.sha256(), 0
    with download(name, url, filename, progress) as stream, open(target, "xb") as out:
        while chunk := stream.read(CHUNK_SIZE):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return target, digest.hexdigest(), size


def fetch(name: str, data_root, url_base: str, progress: bool, download, *, shards: int | None = None,
          allow_unverified: bool = False) -> Path:
    """Make ``<data root>/<dir>`` hold the val shard and the first `shards` train shards (all when
    None), each checked; returns the folder. `download` is dawnbench.fetch's downloader."""
    entry = manifest(name)
    total = entry["splits"]["train"]["count"]
    if shards is not None and not 1 <= shards <= total:
        raise DatasetError(f"--shards {shards}: {name} has train shards 1 to {total}; give a number in that range")
    wanted = shard_names(entry, shards)
    fix = f"re-fetch with: {entry['fetch_command']}"
    unpinned = [f for f in wanted if pin(entry, f) is None]
    if unpinned and not allow_unverified:
        more = f" and {len(unpinned) - 1} more" if len(unpinned) > 1 else ""
        raise DatasetError(
            f"no sha256 is pinned for {unpinned[0]}{more} in harness/data/datasets.toml ([{name}.files] for the "
            f"val shard, [{name}.pins] for train shards), so what is downloaded cannot be proven the published "
            f"file; pin each from its SHA256 on {entry.get('page') or entry['url_base']}, or add "
            f"--allow-unverified to record the sha256 of what is downloaded (the dataset and every run on it "
            f"are then unofficial)")
    directory = dataset_dir(name, data_root)
    record_path = directory / entry["record"]
    record = _read_record(record_path)
    try:
        verify_prepared(directory, name=name)
        intact = True
    except DatasetError:
        intact = False
    kept = _kept(name, directory, record, intact)
    # A kept shard counts only when it is what the manifest pins now (a pin added since is checked).
    kept = {f: {**s, "pinned": pin(entry, f) is not None} for f, s in kept.items()
            if pin(entry, f) in (None, s.get("sha256"))}
    needed = [f for f in wanted if f not in kept]
    repinned = kept != record.get("shards")          # a pin added (or a shard dropped) since the record was written
    if not needed and intact and not repinned:
        _say(name, f"all {len(wanted)} shards present and verified in {directory}; nothing to do")
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(".fetch-*"):      # left by a fetch killed outright: never in the manifest
        _say(name, f"removing {stale.name}, left by an interrupted fetch")
        shutil.rmtree(stale, ignore_errors=True)
    base = url_base.rstrip("/") + "/"
    if needed:
        _say(name, f"source: download from {base} ({len(needed)} of {len(wanted)} shards)")
    with tempfile.TemporaryDirectory(dir=directory, prefix=".fetch-") as work:
        for filename in needed:
            url = base + filename
            path, sha256, size = _download(name, url, Path(work), filename, progress, download)
            tokens = token_shards.shard_tokens(path, f"the download from {url} is not the published shard; "
                                                     f"nothing was written to {directory}; {fix}")
            expected = pin(entry, filename)
            if expected is not None and sha256 != expected:
                raise DatasetError(f"checksum mismatch for {filename} from {url}: expected sha256 {expected}, got "
                                   f"{sha256} (size {size:,}); nothing was written to {directory}; {fix}")
            if expected is None:
                _say(name, f"pinned on first fetch: {filename} sha256 {sha256} ({size:,} bytes): not in "
                           f"datasets.toml; compare it with the published SHA256 before pinning it")
            os.chmod(path, 0o644)
            os.replace(path, directory / filename)
            kept[filename] = {"sha256": sha256, "size": size, "tokens": tokens, "url": url,
                              "pinned": expected is not None}
            _say(name, f"wrote {filename} ({tokens:,} tokens)")
        unpinned = sorted(f for f, spec in kept.items() if not spec["pinned"])
        reasons = [f"{len(unpinned)} shard(s) of {name} have no sha256 pinned in datasets.toml (first: "
                   f"{unpinned[0]}); their sha256 were recorded on first fetch"] if unpinned else []
        staged = Path(work) / entry["record"]
        staged.write_text(json.dumps({"format": RECORD_FORMAT, "official": not reasons, "unofficial_reasons": reasons,
                                      "shards": dict(sorted(kept.items()))}, indent=1) + "\n", encoding="utf-8")
        os.replace(staged, record_path)
    write_prepared_manifest(directory, extend=True)     # last: it lists every file, the record included
    _say(name, f"ready in {directory}" + (" (unofficial: shards not pinned)" if reasons else ""))
    return directory
