"""Several local ranks of the harness, started by the judge, in one network namespace that has only a loopback.

    python -I harness/judge.py harness.local_ranks --nproc-per-node 2 run REF [ARG ...]   # make run NPROC=2
    ... harness.local_ranks --nproc-per-node 2 -m dawnbench run REF    # each rank's module (default: harness)
    python -m harness.local_ranks COMMAND [ARG ...]                    # one command in such a namespace

The rank launcher is a judge process (docs/RULES.md, "The trust boundary"): it is the parent of every
rank's harness and sets its environment. torchrun, the launcher it replaces, ran in the reference's
interpreter, where a `.pth` of the reference's requirements put a `sitecustomize` on the ranks'
`PYTHONPATH`, and their harness imported it (issue 46). So this launcher runs from the judge's own
interpreter (the one it is started with: the tools environment's, /opt/harness's in an image, never
a reference's), standard library only, and starts each rank as a judge process (harness.judge: `-I`,
this code first on the path, no inherited start-up hook) with what torchrun would have set: RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT (the trainers'
process group, rank 0's store), OMP_NUM_THREADS=1 unless set, and the harness ranks' own port and
secret ($DAWNBENCH_HARNESS_PORT, $DAWNBENCH_RUN_TOKEN: harness.collective). When a rank fails, the
launcher notes which and why (a file of its notes folder, $DAWNBENCH_RANKS_DIR, where the failing rank
left its reason: harness.collective), says so in one line, and stops the others with SIGTERM (their runs
end DNC naming that rank, with their logs; SIGKILL 10 s later); a SIGINT, SIGTERM or SIGHUP to the
launcher goes to every rank, after a note naming the signal and the ranks still running, which each
rank's DNC reason gives; a launcher killed outright (SIGKILL) takes its ranks along: each rank has
a parent-death signal (SIGTERM: it ends DNC, and kills its workers), so nothing of the run outlives it
and no rank trains on to write a result for a run its user killed (issue 47).

A single trainer gets a loopback of its own from bubblewrap. Several ranks on one machine cannot:
their collective (gloo, NCCL's bootstrap) talks over sockets, so each rank's trainer keeps the
network its harness has. The launcher gives that network the least it can be: it moves itself into
a new network namespace (a new user namespace too when it is not root, which is what lets an
unprivileged user make one) and brings the loopback up before it starts the ranks. Every rank, and
every trainer they start, then shares that namespace: they reach each other over 127.0.0.1 and
nothing else. Each rank's env.json says so ("network").

Where no namespace can be made (a container under Docker's seccomp profile, which has no network of
its own anyway under docker-compose) it says so in one line and runs the ranks with the network it has.

Several machines (the Slurm and Kubernetes launchers of a reference) run one launcher per machine,
each the judge's, never the image's torchrun (issue 46): `--nnodes N --node-rank R --master-addr HOST
--master-port PORT`, torchrun's static rendezvous. Each option may come, as torchrun's do, from its
PET_* variable (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_NPROC_PER_NODE: what
the Kubeflow training operator sets in each pod), the master's also from MASTER_ADDR and MASTER_PORT
(the operator's too), and the node's rank from SLURM_NODEID (one launcher per node under srun). Node R's
local rank L is global rank R x nproc + L of nnodes x nproc; node 0's first rank is rank 0, which hosts
the trainers' store at HOST:PORT and the harness ranks' collective at PORT + 1 (harness.collective).
The ranks keep the hosts' network (their collective crosses machines), and the harness ranks' secret
must be the same on every node: $DAWNBENCH_RUN_TOKEN, which a launcher of several nodes refuses to
run without.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from harness import collective, judge
from harness.collective import LAUNCHER_ENV, PORT_ENV, RANKS_DIR_ENV, TOKEN_ENV

PR_SET_PDEATHSIG = 1
# The grace between a failed rank's SIGTERM to the others and their SIGKILL: a rank's harness ends in well
# under a second (it kills its workers and writes its DNC); this bounds one that does not.
KILL_AFTER_S = 10.0
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
USAGE = ("usage: python -I harness/judge.py harness.local_ranks --nproc-per-node N [-m MODULE] ARG ...\n"
         "       ... harness.local_ranks --nproc-per-node N --nnodes M --node-rank R --master-addr HOST "
         "--master-port PORT [-m MODULE] ARG ...\n"
         "       python -m harness.local_ranks COMMAND [ARG ...]")
# torchrun's options for one node of several (its static rendezvous), each with the variable it also reads
NODE_OPTIONS = {"--nproc-per-node": "PET_NPROC_PER_NODE", "--nnodes": "PET_NNODES", "--node-rank": "PET_NODE_RANK",
                "--master-addr": "PET_MASTER_ADDR", "--master-port": "PET_MASTER_PORT"}
# where a cluster's launcher says it otherwise: the training operator's MASTER_*, Slurm's node id
FALLBACK_ENV = {"--master-addr": "MASTER_ADDR", "--master-port": "MASTER_PORT", "--node-rank": "SLURM_NODEID"}
DEFAULT_MASTER_PORT = 29500     # torchrun's


class Usage(Exception):
    """A launcher command that cannot run: the one line that says why and what to give."""


@dataclass(frozen=True)
class Nodes:
    """Where this launcher's ranks sit among every node's: one machine unless `count` > 1."""
    count: int = 1
    rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None      # None: a free port of this machine (one node)

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


def launcher_command(ranks: int, *args: str, module: str = "harness", python: str | None = None) -> list[str]:
    """The command that runs `ranks` local ranks of `python -m module args`, this launcher a judge process
    of `python` (default this one: the judge's, never a reference's interpreter)."""
    return judge.command("harness.local_ranks", "--nproc-per-node", str(ranks), "-m", module, *args, python=python)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_environment(rank: int, ranks: int, base: dict[str, str] | None = None, nodes: Nodes = Nodes()) -> dict[str, str]:
    """Local rank `rank`'s environment: `base` without its start-up hooks, with torchrun's variables for
    `ranks` ranks on each of `nodes`. `base` must already hold the ports and the secret every rank shares
    (launch sets them)."""
    first, world = nodes.rank * ranks, nodes.count * ranks
    env = judge.environment(base, RANK=str(first + rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                            LOCAL_WORLD_SIZE=str(ranks), GROUP_RANK=str(nodes.rank), GROUP_WORLD_SIZE=str(nodes.count),
                            ROLE_RANK=str(first + rank), ROLE_WORLD_SIZE=str(world))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _die_with(launcher: int):
    """What each rank runs before its exec: a parent-death signal (SIGTERM: its harness ends the run DNC and
    kills its workers), and, where the launcher died before the signal was set, an exit."""
    def start() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher:
            os._exit(128 + signal.SIGTERM)
    return start


def launch(ranks: int, module: str, args: list[str], nodes: Nodes = Nodes()) -> int:
    """Start `ranks` judge processes of `module args` (this node's of `nodes`), wait for them all; the first
    failure's exit status (a signal's 128 + number), else 0."""
    shared = {"MASTER_ADDR": nodes.master_addr, "MASTER_PORT": str(nodes.master_port or free_port())}
    if nodes.count == 1:
        shared[PORT_ENV] = os.environ.get(PORT_ENV) or str(free_port())
    # several nodes: the harness ranks' port is MASTER_PORT + 1 on rank 0's node, or $DAWNBENCH_HARNESS_PORT
    # as given to every node (harness.collective); a free port here would be this node's alone
    shared[TOKEN_ENV] = os.environ.get(TOKEN_ENV) or secrets.token_hex(16)
    notes = tempfile.mkdtemp(prefix="dawnbench-ranks-")
    shared[RANKS_DIR_ENV], shared[LAUNCHER_ENV] = notes, str(os.getpid())
    base = {**os.environ, **shared}
    first = nodes.rank * ranks         # this node's first global rank: the ranks are named by theirs
    procs: list[subprocess.Popen] = []
    stopped_by: list[str] = []          # the signals the user sent: the ranks' ends are then no rank's failure

    def forward(signum) -> None:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    p.send_signal(signum)

    def on_signal(signum, _frame) -> None:
        running = [first + r for r, p in enumerate(procs) if p.poll() is None]
        if not stopped_by and running:      # before the ranks get it: each names these ranks in its DNC
            collective.note_stopped(notes, signal.Signals(signum).name, running)
        stopped_by.append(signal.Signals(signum).name)
        forward(signum)
    previous = {s: signal.signal(s, on_signal) for s in FORWARDED}
    status, stopping_since = 0, None
    try:
        for r in range(ranks):
            procs.append(subprocess.Popen(judge.command(module, *args), env=rank_environment(r, ranks, base, nodes),
                                          preexec_fn=_die_with(os.getpid())))
        while True:
            running = [p.poll() for p in procs].count(None)     # every rank polled: any() stopped at rank 0
            failed = [(first + r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed and stopping_since is None:      # a rank failed: say which, and stop the others
                (rank, code), stopping_since = failed[0], time.monotonic()
                status = _status(code)
                if not stopped_by:
                    reason = collective.note_first_failure(notes, rank, _ended(code))
                    print(f"dawnbench: rank {rank} failed ({reason}); "
                          f"{'stopping the other ranks' if running else 'the other ranks ended too'}",
                          file=sys.stderr, flush=True)
                forward(signal.SIGTERM)
            elif stopping_since is not None and time.monotonic() - stopping_since > KILL_AFTER_S:
                forward(signal.SIGKILL)
            if not running:
                break
            time.sleep(0.05)
    except OSError as exc:      # a rank that cannot start: one line; those started are stopped above
        forward(signal.SIGKILL)
        print(f"dawnbench: error: cannot start the ranks: {exc.strerror or exc}", file=sys.stderr)
        status = 1
    finally:
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=KILL_AFTER_S)
        for s, handler in previous.items():
            signal.signal(s, handler)
        shutil.rmtree(notes, ignore_errors=True)
    return status or next((_status(p.returncode) for p in procs if p.returncode), 0)


def _status(code: int) -> int:
    return 128 - code if code < 0 else code


def _ended(code: int) -> str:
    """How a rank's process ended, in words: what its note says when it left none (a SIGKILL)."""
    if code < 0:
        return f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"killed by signal {-code}"
    return f"exit status {code}"


def _isolate_network() -> None:
    try:
        enter_loopback_namespace()
    except OSError as exc:
        print(f"dawnbench: warning: the local ranks keep this machine's network: no network namespace "
              f"could be made here ({exc.strerror or exc}); each rank's env.json records it", file=sys.stderr)


def parse(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, Nodes, str, list[str]]:
    """A launcher command (its options, each also from torchrun's PET_* variable and the cluster's, as the
    module's docstring says) -> (local ranks, nodes, module, the ranks' arguments). Raises Usage."""
    env = os.environ if env is None else env
    given: dict[str, str] = {}
    while argv and argv[0].partition("=")[0] in NODE_OPTIONS:
        option, equals, value = argv[0].partition("=")
        if not equals:
            if len(argv) < 2:
                raise Usage(f"{option} needs a value")
            value, argv = argv[1], argv[2:]
        else:
            argv = argv[1:]
        given[option] = value

    def value_of(option: str) -> str | None:
        found = given.get(option) or env.get(NODE_OPTIONS[option])
        return found or (env.get(FALLBACK_ENV[option]) if option in FALLBACK_ENV else None)

    def count(option: str, lowest: int, what: str) -> int | None:
        text = value_of(option)
        if text is None:
            return None
        if not text.isdigit() or int(text) < lowest:
            raise Usage(f"{option} {text!r}: give {what}")
        return int(text)
    ranks = count("--nproc-per-node", 1, "the number of local ranks, 1 or more")
    if ranks is None:
        raise Usage("--nproc-per-node N is needed: the number of local ranks")
    nnodes = count("--nnodes", 1, "the number of nodes, 1 or more (a fixed number: no elastic range)") or 1
    nodes = Nodes()
    if nnodes > 1:
        rank = count("--node-rank", 0, f"this node's rank, 0 to {nnodes - 1}")
        if rank is None or rank >= nnodes:
            raise Usage(f"--node-rank {'is needed' if rank is None else repr(str(rank)) + ': give'} this node's rank, "
                        f"0 to {nnodes - 1} (or run under srun, which sets SLURM_NODEID, or the training operator's "
                        f"PET_NODE_RANK)")
        addr = value_of("--master-addr")
        if not addr:
            raise Usage("--master-addr is needed with --nnodes: the host of node 0, which every node reaches")
        port = count("--master-port", 1, "the TCP port of node 0 for the rendezvous, 1 to 65534")
        port = DEFAULT_MASTER_PORT if port is None else port
        if port > 65534:        # the harness ranks' collective listens on PORT + 1
            raise Usage(f"--master-port {port}: give a TCP port of node 0 for the rendezvous, 1 to 65534")
        if not env.get(TOKEN_ENV):
            raise Usage(f"{TOKEN_ENV} is not set: every node needs the same secret for the harness ranks (the "
                        f"Slurm and Kubernetes launchers set it; e.g. {TOKEN_ENV}=$(od -An -tx1 -N16 /dev/urandom "
                        f"| tr -d ' \\n'))")
        nodes = Nodes(nnodes, rank, addr, port)
    module = "harness"
    if argv[:1] == ["-m"]:
        if len(argv) < 2:
            raise Usage("-m needs the module each rank runs (e.g. -m harness)")
        module, argv = argv[1], argv[2:]
    if not argv:
        raise Usage(f"no command for the ranks: e.g. --nproc-per-node {ranks} run REF\n{USAGE}")
    return ranks, nodes, module, argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0] + "\n\n" + USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0].partition("=")[0] in NODE_OPTIONS:
        try:
            ranks, nodes, module, argv = parse(argv)
        except Usage as e:
            print(f"dawnbench: error: {e}", file=sys.stderr)
            return 2
        if nodes.count == 1:
            _isolate_network()      # several nodes: the ranks' collective needs the hosts' network
        return launch(ranks, module, argv, nodes)
    program = shutil.which(argv[0])
    if program is None:
        print(f"dawnbench: error: {argv[0]}: no such program on PATH: give the command to run, or the local "
              f"ranks of the harness: --nproc-per-node 2 run REF", file=sys.stderr)
        return 2
    _isolate_network()
    os.execv(program, argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
