"""Token shards in llm.c's `.bin` format, the one the nanoGPT speedrun reads (FineWeb-10B, GPT-2 tokens).

The format, as karpathy/llm.c's dev/data/data_common.py ``write_datafile`` writes it and
KellerJordan/modded-nanogpt's train_gpt.py ``_load_data_shard`` reads it: a header of 256 int32
(little-endian): ``[0]`` the magic 20240520, ``[1]`` the version 1, ``[2]`` the token count; the
other 253 are zero. Then the tokens, uint16 each. The speedrun's reader asserts the magic, the
version and that the count's tokens can be read; this one also refuses bytes past them, so a shard
is exactly ``1024 + 2 * count`` bytes and a truncated or padded download cannot pass as whole.

numpy only (the harness runs in every reference's environment); a shard is memory-mapped, never
read whole (one is 200 MB).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from harness.datasets import DatasetError, not_regular

MAGIC = 20240520                 # llm.c's GPT-2 token files (its Llama-3 files are 20240801, version 7, uint32)
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
HEADER_DTYPE = np.dtype("<i4")
TOKEN_DTYPE = np.dtype("<u2")

__all__ = ["MAGIC", "VERSION", "HEADER_BYTES", "TOKEN_DTYPE", "shard_header", "shard_tokens", "read_shard"]


def shard_header(path: str | os.PathLike) -> np.ndarray:
    """The 256 header ints of ``path``; DatasetError (one line, naming the file) when there are fewer."""
    path = Path(path)
    if kind := not_regular(path):       # a FIFO would block the read
        raise DatasetError(f"{path} is {kind}, not a token shard file")
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as exc:
        raise DatasetError(f"cannot read token shard {path}: {exc.strerror or exc}") from None
    if len(raw) < HEADER_BYTES:
        raise DatasetError(f"token shard {path} is truncated: {len(raw):,} bytes, shorter than its "
                           f"{HEADER_BYTES:,}-byte header")
    return np.frombuffer(raw, dtype=HEADER_DTYPE)


def shard_tokens(path: str | os.PathLike, fix: str = "fetch it again") -> int:
    """The token count of the shard ``path`` after checking its header against its size: the magic,
    the version, a count >= 0 and exactly ``1024 + 2 * count`` bytes. DatasetError otherwise: one
    line naming the file, what is wrong and ``fix``."""
    path = Path(path)
    try:
        header = shard_header(path)
        magic, version, count = (int(v) for v in header[:3])
        if magic != MAGIC:
            raise DatasetError(f"token shard {path} has magic {magic}, not {MAGIC}: it is not a GPT-2 token "
                               f"shard of llm.c's format")
        if version != VERSION:
            raise DatasetError(f"token shard {path} has version {version}, not {VERSION}")
        if count < 0:
            raise DatasetError(f"token shard {path} claims {count} tokens")
        size = path.stat().st_size
    except (DatasetError, OSError) as exc:
        raise DatasetError(f"{exc}; {fix}") from None
    expected = HEADER_BYTES + count * TOKEN_DTYPE.itemsize
    if size < expected:
        raise DatasetError(f"token shard {path} is truncated: {size:,} bytes, its header's {count:,} tokens need "
                           f"{expected:,}; {fix}")
    if size > expected:
        raise DatasetError(f"token shard {path} has {size - expected:,} bytes after its header's {count:,} tokens "
                           f"({size:,} bytes, expected {expected:,}); {fix}")
    return count


def read_shard(path: str | os.PathLike, fix: str = "fetch it again") -> np.ndarray:
    """The shard's tokens, uint16, memory-mapped read-only, after :func:`shard_tokens`'s checks."""
    count = shard_tokens(path, fix)
    if count == 0:
        return np.zeros(0, dtype=TOKEN_DTYPE)       # numpy cannot map zero bytes
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(count,))
