"""Several local ranks in one network namespace that has only a loopback.

    python -m harness.local_ranks torchrun --standalone --nproc-per-node 2 -m harness run REF

A single trainer gets a loopback of its own from bubblewrap. Several ranks on one machine cannot:
their collective (gloo, NCCL's bootstrap) talks over sockets, so each rank's trainer keeps the
network its harness has. This launcher gives that network the least it can be: it moves itself into
a new network namespace (a new user namespace too when it is not root, which is what lets an
unprivileged user make one), brings the loopback up, and replaces itself with the command. Every
rank torchrun starts, and every trainer they start, then shares that namespace: they reach each
other over 127.0.0.1 and nothing else. Each rank's env.json says so ("network").

Several machines need the hosts' network for the collective; this launcher is for one machine. Where
no namespace can be made (a container under Docker's seccomp profile, which has no network of its
own anyway under docker-compose) it says so in one line and runs the command with the network it has.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import socket
import struct
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP = 0x1


def enter_loopback_namespace() -> None:
    """Move this process into a new network namespace whose loopback is up. Raises OSError."""
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    flags = CLONE_NEWNET if uid == 0 else CLONE_NEWNET | CLONE_NEWUSER
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    if uid != 0:
        # Map only this user onto itself: nobody becomes root, and the processes started later
        # (bubblewrap's own user namespaces included) run as they would have outside.
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    # A new namespace's loopback is down. The capability to bring it up lasts until the exec below.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        current = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", current | IFF_UP))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0] + "\n\nusage: python -m harness.local_ranks COMMAND [ARG ...]",
              file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    program = shutil.which(argv[0])
    if program is None:
        print(f"dawnbench: error: {argv[0]}: no such program on PATH: give the launcher to run, "
              f"e.g. torchrun --standalone --nproc-per-node 2 -m harness run REF", file=sys.stderr)
        return 2
    try:
        enter_loopback_namespace()
    except OSError as exc:
        print(f"dawnbench: warning: the local ranks keep this machine's network: no network namespace "
              f"could be made here ({exc.strerror or exc}); each rank's env.json records it", file=sys.stderr)
    os.execv(program, argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
