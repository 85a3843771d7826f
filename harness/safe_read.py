"""The one way the tools read a file that came from someone else (an entry, a run folder to verify):
as untrusted bytes, bounded. (The entry tools in dawnbench/ import it from here; it lives in the
harness so that `harness verify` can read a run folder the same way, standard library only.)

An entries tree, or a run folder, is someone else's upload. A file in it may be a link to /dev/zero or to a secret, a
FIFO that never delivers, gigabytes of padding, or JSON nested a million deep; reading it must still
end quickly with one reason. So a file is read only when it is a regular file (opened with O_NOFOLLOW
and O_NONBLOCK, then checked with fstat: opening a FIFO or a device never blocks), only when its real
path stays inside the tree's root (a link inside the tree to a file inside the tree is followed; a
link out of it is refused), only up to a size cap, and JSON only up to a nesting depth, checked
before parsing so that no input reaches Python's recursion limit.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

from harness.errors import DawnbenchError

MAX_JSON_BYTES = 2**20           # an entry JSON is a few kB
MAX_TSV_BYTES = 4 * 2**20        # a log is one short row per epoch: 4 MiB is tens of thousands of rows
MAX_DEPTH = 64                   # an entry nests three or four levels; json and jsonschema recurse per level
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')     # a string (its brackets do not nest) or a bracket


class Refused(DawnbenchError):
    """A file the tools will not read, or whose bytes are not what an entry holds. `reason` is the
    one-line why and fix; `line` the line of the file it concerns (1 when it is the whole file)."""

    def __init__(self, reason: str, line: int = 1):
        super().__init__(reason)
        self.reason, self.line = reason, line


def _why(e: BaseException) -> str:
    return getattr(e, "strerror", None) or type(e).__name__


def inside(path: Path, root: Path) -> bool:
    """Whether `path`, every link in it followed, stays under `root` (also resolved)."""
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or os.path.commonpath([real, base]) == base


def read_bytes(path: Path, root: Path, limit: int, tree: str = "entries tree", owner: str = "an entry") -> bytes:
    """The bytes of a regular file under `root`, at most `limit` of them; Refused otherwise.
    `tree` and `owner` name the root and what the file belongs to in the messages."""
    try:
        if not inside(path, root):
            raise Refused(f"is a link out of the {tree} (put the file itself in the {tree})")
        fd = os.open(os.path.realpath(path), _FLAGS)
    except (OSError, ValueError) as e:
        raise Refused(f"cannot be read ({_why(e)}) (check the path and its permissions)") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise Refused("is a directory, not a file (rename or remove it)")
        if not stat.S_ISREG(st.st_mode):
            raise Refused("is not a regular file (replace it with the file itself)")
        if st.st_size > limit:
            raise Refused(f"is {st.st_size} bytes, over the {limit} a file of {owner} may have "
                          f"(is this the right file?)")
        chunks, size = [], 0
        while size <= limit:       # the file may grow after fstat: read no more than the cap allows
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise Refused(f"grew over the {limit} bytes a file of {owner} may have (is this the right file?)")
        return b"".join(chunks)
    except OSError as e:
        raise Refused(f"cannot be read ({_why(e)}) (check its permissions)") from None
    finally:
        os.close(fd)


def decode(data: bytes) -> str:
    """UTF-8 text (a BOM dropped); Refused, at the line of the first bad byte, otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Refused(f"not UTF-8 text (byte {e.start}) (save the file as UTF-8)",
                      data[:e.start].count(b"\n") + 1) from None


def depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The bracket nesting depth of a JSON text, counted up to `limit` + 1 (then it stops looking)."""
    level = deepest = 0
    for token in _TOKENS.finditer(text):
        c = token.group()
        if c in "[{":
            level += 1
            deepest = max(deepest, level)
            if deepest > limit:
                break
        elif c in "]}":
            level -= 1
    return deepest


def _parse_int(text: str):
    """A JSON whole number; one that no float can hold (over about 1.8e308: 309 digits) is as good as
    infinite, and parses as the infinity every reader's finiteness check refuses, where float() of it
    would raise OverflowError (and Python makes no int of over 4,300 digits at all)."""
    if len(text) > 320:
        return math.inf if not text.startswith("-") else -math.inf
    value = int(text)
    try:
        float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    return value


class _Duplicate(Exception):       # not a ValueError: json.loads lets it through as it is
    pass


def _unique_keys(pairs: list) -> dict:
    """json.loads' object hook: a key given twice is refused. Python keeps the later value, other
    readers the first, so one file would be two entries (an author, a price swapped by a second key)."""
    if len({key for key, _ in pairs}) != len(pairs):
        raise _Duplicate
    return dict(pairs)


_KEY_TOKENS = re.compile(r'["{}\[\],]')


def _duplicate_key(text: str) -> tuple[str, int]:
    """(the first key given twice in one object, the line of its second occurrence) of a JSON text
    that json.loads accepted but for that key."""
    stack: list = []        # per open container: [keys seen, expecting a key] for an object, None for an array
    pos = 0
    while (m := _KEY_TOKENS.search(text, pos)) is not None:
        c, pos = m.group(), m.end()
        if c == '"':
            key, pos = json.decoder.scanstring(text, pos)
            top = stack[-1] if stack else None
            if top is not None and top[1]:
                if key in top[0]:
                    return key, text.count("\n", 0, m.start()) + 1
                top[0].add(key)
                top[1] = False
        elif c == "{":
            stack.append([set(), True])
        elif c == "[":
            stack.append(None)
        elif c in "]}":
            stack.pop()
        elif stack and stack[-1] is not None:     # a comma in an object: a key comes next
            stack[-1][1] = True
    return "?", 1


def parse_json(text: str, what: str = "an entry"):
    """The JSON value of a text (NaN and Infinity parse as floats, and so does a whole number no float
    holds: callers report them); Refused for an empty text, bad syntax, a key given twice in one
    object, or nesting deeper than MAX_DEPTH. The one bounded JSON reader of the house: whatever
    parses JSON that someone else wrote (a file, an option, a worker's message) parses it here.
    `what` names the document in the messages."""
    if not text.strip():
        raise Refused(f"empty file (write {what} as a JSON object)")
    if depth(text) > MAX_DEPTH:
        raise Refused(f"nested too deeply to be {what} (over {MAX_DEPTH} levels) (write a flat JSON object)")
    try:
        return json.loads(text, parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except _Duplicate:
        key, line = _duplicate_key(text)
        raise Refused(f"the key {json.dumps(key)} is given twice in one object; readers differ on which value "
                      f"counts (keep one)", line) from None
    except json.JSONDecodeError as e:
        raise Refused(f"not valid JSON: {e.msg} at column {e.colno} (fix the syntax; a JSON linter shows where)",
                      e.lineno) from None
    except (ValueError, TypeError, RecursionError) as e:
        raise Refused(f"not valid JSON ({type(e).__name__}) (fix the syntax)") from None


def read_json(path: Path, root: Path):
    """The JSON value of a file under `root`, read as above."""
    return parse_json(decode(read_bytes(path, root, MAX_JSON_BYTES)))


def read_text(path: Path, root: Path, limit: int = MAX_TSV_BYTES) -> str:
    """The UTF-8 text of a file under `root` (a log), read as above."""
    return decode(read_bytes(path, root, limit))
