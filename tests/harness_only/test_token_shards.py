"""harness.token_shards: llm.c's `.bin` token shards (the speedrun's FineWeb-10B), their header checked.

The shards are tests/fineweb_fixture.py's, written as llm.c's write_datafile writes them.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from harness import token_shards
from harness.datasets import DatasetError
from tests.fineweb_fixture import shard_bytes

pytestmark = pytest.mark.harness     # numpy only: runs under numpy 1.23.5 too

FIX = "re-fetch with: dawnbench data fetch fineweb10B"


def write(tmp_path, data: bytes, name: str = "fineweb_val_000000.bin"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_a_shard_reads_back_its_tokens_read_only(tmp_path):
    tokens = np.array([50256, 0, 1, 65535, 464, 2068], dtype=np.uint16)
    path = write(tmp_path, shard_bytes(tokens))
    assert path.stat().st_size == 1024 + 2 * len(tokens)       # the format's size, byte for byte
    assert token_shards.shard_tokens(path) == len(tokens)
    read = token_shards.read_shard(path)
    assert read.dtype == np.uint16 and read.tolist() == tokens.tolist()
    with pytest.raises(ValueError):
        read[0] = 1                                             # mapped read-only: the harness's bytes stay
    assert token_shards.read_shard(write(tmp_path, shard_bytes([]), "empty.bin")).tolist() == []


@pytest.mark.parametrize("data, problem", [
    (shard_bytes(range(10), magic=20240801), "has magic 20240801, not 20240520"),      # llm.c's Llama-3 shards
    (shard_bytes(range(10), version=7), "has version 7, not 1"),
    (shard_bytes(range(10), count=-1), "claims -1 tokens"),
    (shard_bytes(range(10))[:1000], "is truncated: 1,000 bytes, shorter than its 1,024-byte header"),
    (shard_bytes(range(10))[:-2], "is truncated: 1,042 bytes, its header's 10 tokens need 1,044"),
    (shard_bytes(range(10), count=11), "is truncated: 1,044 bytes, its header's 11 tokens need 1,046"),
    (shard_bytes(range(10)) + b"\0\0", "has 2 bytes after its header's 10 tokens"),
])
def test_a_bad_shard_is_one_line_naming_the_file_and_the_fix(tmp_path, data, problem):
    path = write(tmp_path, data)
    for check in (token_shards.shard_tokens, token_shards.read_shard):
        with pytest.raises(DatasetError) as err:
            check(path, FIX)
        message = str(err.value)
        assert problem in message and str(path) in message and message.endswith(FIX) and "\n" not in message


def test_a_path_that_is_no_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    with pytest.raises(DatasetError, match="a FIFO, not a token shard file"):
        token_shards.shard_tokens(fifo, FIX)
    with pytest.raises(DatasetError, match="cannot read token shard .*missing.bin"):
        token_shards.shard_tokens(tmp_path / "missing.bin", FIX)
