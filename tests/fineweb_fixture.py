"""FineWeb-10B token shards in the speedrun's exact `.bin` format, tiny, for tests.

Written as karpathy/llm.c's dev/data/data_common.py ``write_datafile`` writes them (and
modded-nanogpt's data/fineweb.py): a header of 256 int32, ``[20240520, 1, count, 0, ...]``, then
``count`` uint16 tokens; never through the reader under test. The names are the published
repository's (kjj0/fineweb10B-gpt2): ``fineweb_val_000000.bin``, ``fineweb_train_000001.bin``, ...
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

NAME = "fineweb10B"
VAL = "fineweb_val_000000.bin"


def train_name(index: int) -> str:
    return f"fineweb_train_{index:06d}.bin"        # the speedrun's own naming (cached_fineweb10B.py)


def shard_bytes(tokens, *, magic: int = 20240520, version: int = 1, count: int | None = None) -> bytes:
    """One shard's bytes; `magic`, `version` and `count` may be set wrong on purpose."""
    header = np.zeros(256, dtype="<i4")
    header[0], header[1] = magic, version
    header[2] = len(tokens) if count is None else count
    return header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes()


def fixture_shards(train: int = 2, tokens: int = 1000, seed: int = 0) -> dict[str, bytes]:
    """{file name: bytes}: the val shard and `train` train shards of `tokens` GPT-2 ids each (below 50257,
    with the end-of-text id 50256 between documents, as the tokenizer writes them)."""
    rng = np.random.default_rng(seed)
    shards = {}
    for name in [VAL] + [train_name(i) for i in range(1, train + 1)]:
        ids = rng.integers(0, 50256, size=tokens)
        ids[::97] = 50256
        shards[name] = shard_bytes(ids)
    return shards


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fixture_manifest(path: Path, shards: dict[str, bytes], *, train: int, pinned: bool = True) -> Path:
    """A $DAWNBENCH_DATASETS_MANIFEST file: the [fineweb10B] entry with `train` train shards, and the
    fixture's sha256s pinned (the val shard's in files, the train shards' in pins) unless `pinned` is false."""
    val = {VAL: {"sha256": sha256(shards[VAL])}} if pinned else {}
    pins = {n: {"sha256": sha256(b)} for n, b in shards.items() if n != VAL} if pinned else {}

    def table(values: dict) -> str:
        return "".join(f"{json.dumps(k)} = {{ sha256 = {json.dumps(v['sha256'])} }}\n" for k, v in values.items())

    path.write_text(
        "# Test override of harness/data/datasets.toml, written by tests/fineweb_fixture.py\n"
        f"[{NAME}]\n"
        f'dir = "{NAME}"\nformat = "token-shards"\nfetch_command = "dawnbench data fetch {NAME}"\n'
        f'eval_labels = "{VAL}"\nrecord = "dawnbench-prepared.json"\n'
        'url_base = "https://huggingface.co/datasets/kjj0/fineweb10B-gpt2/resolve/main/"\n'
        'url_env = "DAWNBENCH_FINEWEB10B_URL"\n'
        f"[{NAME}.splits]\ntest = [{json.dumps(VAL)}]\n"
        f'train = {{ pattern = "fineweb_train_%06d.bin", first = 1, count = {train} }}\n'
        f"[{NAME}.files]\n{table(val)}"
        f"[{NAME}.pins]\n{table(pins)}",
        encoding="utf-8")
    return path
