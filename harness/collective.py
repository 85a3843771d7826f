"""The harness processes of one multi-process run agree on the clock and the stop decision.

Under the rank launcher (harness.local_ranks) or torchrun each rank is a harness process with its own
sandboxed trainer. The reductions the rules need (the slowest rank's time, a NaN loss on any rank, rank
0's verdict) are done here, between harness processes, over TCP with a shared secret the workers never
see: a reference's own process group carries its gradients, never the harness's decisions. A rank that
fails tells the launcher why (the notes below), so that the others' DNC names it.

Rank 0 listens on MASTER_ADDR at MASTER_PORT + 1 (or $DAWNBENCH_HARNESS_PORT); the secret is
$DAWNBENCH_RUN_TOKEN, else torchrun's TORCHELASTIC_RUN_ID (both withheld from the workers).

Several machines: the rank launcher of each node (harness.local_ranks --nnodes) points MASTER_ADDR and
MASTER_PORT at node 0, where global rank 0 runs and the trainers' store listens, so MASTER_PORT + 1 is
a port on rank 0's machine that every node reaches as it reaches the store (under torchrun's c10d
rendezvous, MASTER_ADDR is the node that became rank 0: the same). Where that port is taken or
firewalled, $DAWNBENCH_HARNESS_PORT (the same on every node) names another.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import time

from harness.errors import DawnbenchError

PORT_ENV, TOKEN_ENV = "DAWNBENCH_HARNESS_PORT", "DAWNBENCH_RUN_TOKEN"
CONNECT_SECONDS = 120.0
# Set by the local rank launcher (harness.local_ranks): its notes folder, where a failing rank leaves its reason
# and the launcher the first failure it saw, and its pid (a rank whose parent is another has lost its launcher).
RANKS_DIR_ENV, LAUNCHER_ENV = "DAWNBENCH_RANKS_DIR", "DAWNBENCH_RANK_LAUNCHER"
FIRST = "first"         # the launcher's note: "<rank>\n<why>"
STOPPED = "stopped"     # the launcher's note when its user stopped it (a signal): why, naming the ranks it stopped
NOTE_MAX = 2000


# --- why a run of several ranks ended: one rank's failure, named in the others' DNC ---------------------------
#
# A rank that fails says why in a note before it exits; the launcher, seeing it exit first, writes the note
# `first` (that rank, its reason, or how its process ended when it left none: a SIGKILL) before it stops the
# others; each of them, ending, reads `first`, so rank 0's DNC names the rank that failed, not the SIGTERM
# that stopped it (issue 47). Without the launcher (torchrun, several machines) there are no notes.

def _write_note(folder: str, name: str, text: str) -> None:
    path = os.path.join(folder, name)
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text[:NOTE_MAX])
        os.replace(path + ".tmp", path)
    except OSError:
        pass        # a note is a courtesy: a rank ends as it would without it


def _read_note(folder: str, name: str) -> str | None:
    try:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            return f.read(NOTE_MAX)
    except OSError:
        return None


def note_failure(rank: int, reason: str) -> None:
    """This rank failed, for `reason` (its DNC reason): for the launcher to name it."""
    folder = os.environ.get(RANKS_DIR_ENV)
    if folder:
        _write_note(folder, f"rank-{rank}", reason)


def note_first_failure(folder: str, rank: int, ended: str) -> str:
    """The launcher's note that `rank` failed first: its own reason, else `ended` (how its process ended).
    Returns the reason."""
    reason = " ".join((_read_note(folder, f"rank-{rank}") or ended).split())
    _write_note(folder, FIRST, f"{rank}\n{reason}")
    return reason


def note_stopped(folder: str, signal_name: str, running: list[int]) -> None:
    """The launcher's note that its user stopped it with `signal_name` while `running` ranks were running."""
    which = (f"rank {running[0]}" if len(running) == 1
             else f"ranks {', '.join(map(str, running[:-1]))} and {running[-1]}")
    _write_note(folder, STOPPED, f"the rank launcher was stopped ({signal_name}): it stopped {which}, which "
                                 f"{'was' if len(running) == 1 else 'were'} running")


def first_failure(rank: int) -> str | None:
    """Why the run ended, where another rank failed first: "rank N failed: <its reason>"; where the user
    stopped the launcher (a signal), the ranks it stopped; where the launcher is gone (killed: the
    parent-death signal stopped this rank), that; else None."""
    folder = os.environ.get(RANKS_DIR_ENV)
    if not folder:
        return None
    note = _read_note(folder, FIRST)
    if note:
        failed, _, reason = note.partition("\n")
        if failed.strip() != str(rank):
            return f"rank {failed.strip()} failed: {reason.strip()}"
    stopped = _read_note(folder, STOPPED)
    if stopped:
        return " ".join(stopped.split())
    launcher = os.environ.get(LAUNCHER_ENV, "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        return "the rank launcher ended (it was killed): every rank was stopped"
    return None


class CollectiveError(DawnbenchError):
    pass


def _send(sock: socket.socket, key: bytes, obj) -> None:
    body = json.dumps(obj).encode()
    sock.sendall(struct.pack("<I", len(body)) + hmac.new(key, body, hashlib.sha256).digest() + body)


def _recv(sock: socket.socket, key: bytes):
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise CollectiveError("a harness rank closed its connection (it failed or was stopped)")
            data += chunk
        return data
    (n,) = struct.unpack("<I", exact(4))
    if n > 1 << 20:
        raise CollectiveError("a harness rank sent an oversized message")
    mac, body = exact(32), exact(n)
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        raise CollectiveError("a message between harness ranks failed its authentication")
    return json.loads(body)


class Group:
    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.peers: list[socket.socket] = []
        self.server: socket.socket | None = None
        if world_size == 1:
            return
        token = os.environ.get(TOKEN_ENV) or os.environ.get("TORCHELASTIC_RUN_ID")
        if not token:
            raise CollectiveError(f"several processes (WORLD_SIZE={world_size}) need a shared secret: launch with "
                                  f"torchrun, or set {TOKEN_ENV} to the same random value on every rank")
        self.key = hashlib.sha256(token.encode()).digest()
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get(PORT_ENV) or int(os.environ.get("MASTER_PORT", "29500")) + 1)
        if rank == 0:
            try:
                self.server = socket.create_server(("", port), reuse_port=False)
            except OSError as exc:
                raise CollectiveError(f"harness rank 0 cannot listen on port {port} ({exc.strerror}): set "
                                      f"{PORT_ENV} to a free port, the same on every node") from None
            self.server.settimeout(CONNECT_SECONDS)
            pending = {}
            while len(pending) < world_size - 1:
                try:
                    conn, _ = self.server.accept()
                except TimeoutError:
                    raise CollectiveError(f"harness rank 0 waited {CONNECT_SECONDS:g} s on port {port} for "
                                          f"{world_size - 1 - len(pending)} other rank(s): is the port "
                                          f"reachable from every node?") from None
                conn.settimeout(None)
                hello = _recv(conn, self.key)
                pending[int(hello["rank"])] = conn
            self.peers = [pending[r] for r in sorted(pending)]
        else:
            deadline = time.monotonic() + CONNECT_SECONDS
            while True:
                try:
                    sock = socket.create_connection((addr, port), timeout=5)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise CollectiveError(f"rank {rank} could not reach harness rank 0 at {addr}:{port}") from None
                    time.sleep(0.2)
            sock.settimeout(None)
            _send(sock, self.key, {"rank": rank})
            self.peers = [sock]

    def max(self, values: list[float]) -> list[float]:
        """Element-wise max over ranks (the slowest rank's clock); every rank gets the result."""
        return self._reduce(values, max)

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (the examples every rank trained on); every rank gets it."""
        return self._reduce(values, lambda a, b: a + b)

    def _reduce(self, values: list[float], op) -> list[float]:
        values = [float(v) for v in values]
        if self.world_size == 1:
            return values
        if self.rank == 0:
            for peer in self.peers:
                values = [op(a, float(b)) for a, b in zip(values, _recv(peer, self.key), strict=True)]
            for peer in self.peers:
                _send(peer, self.key, values)
            return values
        _send(self.peers[0], self.key, values)
        return [float(v) for v in _recv(self.peers[0], self.key)]

    def broadcast(self, values: list[float]) -> list[float]:
        """Rank 0's values on every rank."""
        if self.world_size == 1:
            return [float(v) for v in values]
        if self.rank == 0:
            for peer in self.peers:
                _send(peer, self.key, [float(v) for v in values])
            return [float(v) for v in values]
        return [float(v) for v in _recv(self.peers[0], self.key)]

    def close(self) -> None:
        for sock in [*self.peers, *([self.server] if self.server else [])]:
            try:
                sock.close()
            except OSError:
                pass
