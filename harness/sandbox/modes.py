"""Which isolation this machine allows, the first that works (docs/RULES.md, "Isolation"): bubblewrap
(harness.sandbox.bubblewrap), as a user or as root; uid mode (harness.sandbox.uid_mode) for root where
namespaces are forbidden. Container mode (harness.sandbox.container_mode: each worker a container of
the entrant's image) only where asked for, by DAWNBENCH_ISOLATION=container. Where none works (no
user namespaces and not root) the run still goes with `none`, and is never official; the reason is one
line in result.json.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass

from harness.errors import UsageError
from harness.sandbox import bubblewrap, kernel

ISOLATION_ENV = "DAWNBENCH_ISOLATION"      # "none" switches isolation off (never official); "container" asks for it


@dataclass(frozen=True)
class Isolation:
    mode: str                   # bwrap | bwrap-root | uid | container | none
    reason: str | None = None   # why a run under it cannot be official (mode none)

    @property
    def isolated(self) -> bool:
        return self.mode != "none"


@functools.lru_cache(maxsize=1)
def probe() -> Isolation:
    """The isolation this machine allows, tried once per process."""
    if os.environ.get(ISOLATION_ENV) == "none":
        return Isolation("none", f"isolation switched off by {ISOLATION_ENV}=none")
    if os.environ.get(ISOLATION_ENV) == "container":
        from harness.sandbox import container_mode
        why = container_mode.available()
        if why:
            raise UsageError(f"{ISOLATION_ENV}=container: {why}")
        return Isolation("container")
    root = os.geteuid() == 0
    if shutil.which("bwrap"):
        mode = "bwrap-root" if root else "bwrap"
        view = bubblewrap.View(ro=[(p, p) for p in bubblewrap.SYSTEM_DIRS if os.path.isdir(p)])
        argv = bubblewrap.argv(mode, view, ["/bin/true"])
        try:
            ok = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                timeout=30, preexec_fn=kernel.child_setup()).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return Isolation(mode)
    if root:
        return Isolation("uid")
    why = "bubblewrap is not installed" if not shutil.which("bwrap") else "bubblewrap cannot create namespaces here"
    return Isolation("none", f"the reference could not be isolated: {why} and the harness is not root; "
                             f"install bubblewrap (apt-get install bubblewrap) where user namespaces are allowed")


def worker_reads_as(isolation: Isolation) -> int | None:
    """The uid the workers read the data views as where that is not the harness's (bwrap-root and
    container mode: each data file is bound into the view as it is, so its own mode bits decide); None where the harness's
    own reading settles it (bwrap as a user: the same uid; uid mode: copies made for the role's uid;
    no sandbox)."""
    return bubblewrap.SANDBOX_UID if isolation.mode in ("bwrap-root", "container") else None
