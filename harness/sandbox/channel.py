"""The narrow channel between the harness and a reference's worker process: framed messages on pipes.

A frame is a header (JSON length, array length), a JSON object, and optionally one numpy array in
.npy format. Nothing from the worker is ever unpickled: the harness reads JSON and plain arrays
(`allow_pickle=False`), with size limits, so a hostile worker can send wrong answers but never
run code in the harness or exhaust its memory.

Every request carries its sequence number and a random nonce, and its reply must echo both: a reply
written before its request was read (into a pipe the worker enlarged, say, so that a timed call
finds its answer waiting) cannot know the nonce, and one that answers another request names another
number. The harness also finds the reply pipe empty before it sends a request (`pending`).
"""
from __future__ import annotations

import fcntl
import io
import json
import os
import secrets
import struct
import termios
from typing import Any

import numpy as np

from harness.errors import DawnbenchError

HEADER = struct.Struct("<IQ")
MAX_JSON = 256 << 20           # SQuAD answers for 10,570 questions are ~1 MB; leave room
MAX_ARRAY = 8 << 30            # ImageNet scores (50,000 x 1,000 float64) are 400 MB


class ChannelClosed(DawnbenchError):
    """The other side closed the pipe (the worker exited or was killed)."""


class ProtocolError(DawnbenchError):
    """A frame that breaks the protocol: too large, not JSON, not a plain array."""


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            raise ChannelClosed("the worker closed its channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view[: 1 << 24])
        except BrokenPipeError:
            raise ChannelClosed("the worker closed its channel") from None
        view = view[written:]


def pending(fd: int) -> int:
    """The bytes waiting in the pipe `fd` (0 when it is empty or its writer has closed it)."""
    waiting = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, waiting)
    return int.from_bytes(waiting, "little")


def request(op: str, seq: int, fields: dict) -> dict:
    """Request number `seq`: its operation, its fields, and the nonce its reply must echo."""
    return {**fields, "op": op, "seq": seq, "nonce": secrets.token_hex(8)}


def check_reply(reply: dict, asked: dict, who: str) -> None:
    """Raise ProtocolError unless `reply` echoes the number and the nonce of the request `asked`."""
    if reply.get("seq") != asked["seq"]:
        got = reply.get("seq")
        raise ProtocolError(f"{who} answered request {asked['seq']} ({asked['op']}) with "
                            + (f"the reply to request {got}" if isinstance(got, int) else "a reply that names no request")
                            + ": each request is answered once, in turn")
    if reply.get("nonce") != asked["nonce"]:
        raise ProtocolError(f"{who} answered request {asked['seq']} ({asked['op']}) with a reply written before it "
                            f"read the request (its nonce is not the request's)")


def send(fd: int, message: dict, array: np.ndarray | None = None) -> None:
    body = json.dumps(message, allow_nan=True).encode("utf-8")
    blob = b""
    if array is not None:
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
        blob = buf.getvalue()
    _write_all(fd, HEADER.pack(len(body), len(blob)) + body)
    if blob:
        _write_all(fd, blob)


def receive(fd: int, max_array: int = MAX_ARRAY) -> tuple[dict, np.ndarray | None]:
    n_json, n_blob = HEADER.unpack(_read_exact(fd, HEADER.size))
    if n_json > MAX_JSON or n_blob > max_array:
        raise ProtocolError(f"the worker sent a frame of {n_json} + {n_blob} bytes, over the limit")
    try:
        message: Any = json.loads(_read_exact(fd, n_json))
    except ValueError:
        raise ProtocolError("the worker sent a frame that is not JSON") from None
    if not isinstance(message, dict):
        raise ProtocolError("the worker sent a JSON frame that is not an object")
    array = None
    if n_blob:
        try:
            array = np.load(io.BytesIO(_read_exact(fd, n_blob)), allow_pickle=False)
        except ValueError as e:
            raise ProtocolError(f"the worker sent an array that is not a plain .npy array: {e}") from None
    return message, array
