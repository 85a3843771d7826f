"""What a sandboxed worker's environment gives the reference's libraries: a user name, though the
worker's uid may have no passwd entry (uid mode: a container's root runs the workers as 10002 and 10003)."""
from __future__ import annotations

import os
import subprocess

import pytest

from harness.sandbox import launch, uid_mode

SYSTEM_PYTHON = "/usr/bin/python3"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="uid mode drops to another uid: it needs root")


@root_only
def test_a_uid_without_a_passwd_entry_still_has_a_user_name(tmp_path, monkeypatch):
    """torch asks getpass.getuser() on a CUDA machine; with no USER or LOGNAME it falls back to the
    passwd file, which has no entry for the worker's uid, and the reference's setup died with
    `KeyError: 'getpwuid(): uid not found: 10002'` (an H200 in a container, 2026-11-26)."""
    uid = uid_mode.uid_mode_uids()["train"]
    for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, uid, uid)
    env = launch.worker_environment(str(home), str(home), {})
    probe = "import getpass, os; print(os.getuid(), getpass.getuser())"
    # the system's interpreter: the uid may not pass the folders down to this one (under /root)
    done = subprocess.run([SYSTEM_PYTHON, "-c", probe], env=env, capture_output=True, text=True, cwd=home,
                          preexec_fn=launch.child_setup(uid))
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.split() == [str(uid), launch.WORKER_USER]
