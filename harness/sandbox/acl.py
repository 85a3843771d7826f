"""A folder's POSIX access ACL (the `system.posix_acl_access` extended attribute), read and written
through the kernel's own format, without the acl tools: what uid mode uses to take one uid's write
access to a folder every user shares (harness.sandbox.uid_mode.shut_shared_tmp).

The format (linux/posix_acl_xattr.h): a little-endian version (2), then one (tag, perm, id) entry of
2, 2 and 4 bytes each, sorted by tag and id. A folder without the attribute has the three entries its
mode bits say. Named users and groups need a mask entry, which bounds them and the owning group; the
mode's group bits then show the mask.
"""
from __future__ import annotations

import errno
import os
import struct

ATTR = "system.posix_acl_access"
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED = 0xFFFFFFFF
_ENTRY = struct.Struct("<HHI")


def read(path: str) -> list[tuple[int, int, int]]:
    """The (tag, perm, id) entries of `path`'s access ACL; from its mode bits where it has none."""
    try:
        blob = os.getxattr(path, ATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        mode = os.lstat(path).st_mode
        return [(USER_OBJ, mode >> 6 & 7, UNDEFINED), (GROUP_OBJ, mode >> 3 & 7, UNDEFINED), (OTHER, mode & 7, UNDEFINED)]
    (version,) = struct.unpack_from("<I", blob)
    if version != VERSION or (len(blob) - 4) % _ENTRY.size:
        raise OSError(errno.EINVAL, f"an access ACL of version {version} and {len(blob)} bytes")
    return [_ENTRY.unpack_from(blob, at) for at in range(4, len(blob), _ENTRY.size)]


def set_user(path: str, uid: int, perm: int | None) -> None:
    """Give the user `uid` exactly `perm` (rwx bits) on `path` whatever the mode says, or (None) take
    that entry away; every other entry kept. OSError where the file system keeps no ACL."""
    entries = [e for e in read(path) if not (e[0] == USER and e[2] == uid) and e[0] != MASK]
    if perm is not None:
        entries.append((USER, perm, uid))
    named = [e for e in entries if e[0] in (USER, GROUP)]
    if named:       # the mask bounds named entries and the owning group: the union keeps every one as it was
        entries.append((MASK, _union(e[1] for e in entries if e[0] in (USER, GROUP, GROUP_OBJ)), UNDEFINED))
    entries.sort(key=lambda e: (e[0], e[2]))
    os.setxattr(path, ATTR, struct.pack("<I", VERSION) + b"".join(_ENTRY.pack(*e) for e in entries),
                follow_symlinks=False)


def _union(perms) -> int:
    out = 0
    for perm in perms:
        out |= perm
    return out
