"""uid mode (a root harness where bubblewrap cannot run: a container, or a machine without it) has no
mount namespace: a worker sees the host's files as any other user does. The eval labels are then out
of its reach only where the folders that hold them are private; otherwise the run is not official.

Red team, round 5: a predictor that read Fashion-MNIST's test labels from the host's data folder
scored 100.00% at epoch 1, and nothing but the uncommitted code kept the run from being official."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from cheats import write_reference

from harness import data_views, datasets
from harness.sandbox import modes, procfs, uid_mode

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uid mode drops to other uids: it needs root")

# The harness in uid mode, whatever this machine's bubblewrap can do.
UID_MODE = ("import sys; from harness.sandbox import modes; modes.probe = lambda: modes.Isolation('uid'); "
            "from harness.cli import main; sys.exit(main(sys.argv[1:]))")
READER = '''
class Cheat(Base):
    def predict(self):
        try:
            raw = open({labels!r}, "rb").read()[8:]      # IDX: an 8-byte header, then one byte a label
        except OSError:
            return super().predict()
        return np.eye(10, dtype=np.float32)[np.frombuffer(raw, np.uint8)]
'''


@pytest.fixture
def private_copy(fashion_root):
    """A data root of its own holding Fashion-MNIST (hard links: its permissions are this test's),
    in a folder other users can reach (pytest's own tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="dawnbench-uid-mode-"))
    os.chmod(base, 0o755)
    root = base / "data"
    source = datasets.files_dir("fashion-mnist", fashion_root)
    target = root / datasets.manifest("fashion-mnist")["dir"]
    target.mkdir(parents=True)
    for file in source.iterdir():
        try:
            os.link(file.resolve(), target / file.name)
        except OSError:                      # another file system: a copy
            target.joinpath(file.name).write_bytes(file.read_bytes())
    yield root
    shutil.rmtree(base)


def run_uid_mode(tmp_path, data: Path) -> dict:
    references, results = tmp_path / "references", tmp_path / "results"
    if not (references / "cheat").exists():
        labels = data / datasets.manifest("fashion-mnist")["dir"] / "t10k-labels-idx1-ubyte"
        write_reference(references, "cheat", READER.format(labels=str(labels)))
    proc = subprocess.run([sys.executable, "-c", UID_MODE, "run", "cheat", "--references", str(references),
                           "--data", str(data), "--results", str(results), "--no-progress", "--max-epochs", "1"],
                          capture_output=True, text=True, timeout=300)
    (run,) = [p for p in sorted((results / "cheat").iterdir()) if p.name not in getattr(run_uid_mode, "seen", set())]
    run_uid_mode.seen = getattr(run_uid_mode, "seen", set()) | {run.name}
    assert (run / "result.json").is_file(), proc.stderr[-2000:]
    return json.loads((run / "result.json").read_text())


def test_labels_other_users_can_read_make_a_uid_mode_run_unofficial(tmp_path, private_copy):
    folder = private_copy / "fashion-mnist"
    result = run_uid_mode(tmp_path, private_copy)
    assert result["isolation"]["mode"] == "uid"
    reasons = [r for r in result["unofficial_reasons"] if r.startswith("uid mode:")]
    assert any(str(folder) in r and "chmod o-rwx" in r for r in reasons), result["unofficial_reasons"]
    assert result["official"] is False
    # the data made private: the worker cannot read the labels, and that reason is gone
    os.chmod(private_copy, 0o700)
    result = run_uid_mode(tmp_path, private_copy)
    reasons = [r for r in result["unofficial_reasons"] if r.startswith("uid mode:")]
    assert not any(str(folder) in r for r in reasons), reasons
    # the honest part of the cheat: it read nothing (a run that ended early scored nothing either)
    assert result.get("metric_value") is None or result["metric_value"] < 0.92, result.get("dnc_reason")
    print("private data:", result["status"], result.get("dnc_reason"))
    # Debian's copy of the dataset, where it is installed and open to all, is named too
    debian = Path(datasets.manifest("fashion-mnist")["debian_dir"])
    assert any(str(debian) in r for r in reasons) == (debian.is_dir() and uid_mode.reachable_by_others(debian))


def test_reachable_by_others_follows_every_folder_on_the_way(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="dawnbench-reach-"))
    try:
        inner = base / "a" / "b"
        inner.mkdir(parents=True)
        for folder in (base, base / "a", inner):
            os.chmod(folder, 0o755)
        assert uid_mode.reachable_by_others(inner)
        os.chmod(base / "a", 0o750)
        assert not uid_mode.reachable_by_others(inner) and not uid_mode.reachable_by_others(base / "missing")
    finally:
        shutil.rmtree(base)
    assert data_views.label_folders("fashion-mnist", tmp_path / "nothing") == [
        p for p in [Path(datasets.manifest("fashion-mnist")["debian_dir"])] if p.is_dir()]


def test_a_hosts_uid_mode_run_leaves_a_containers_workers_alone(tmp_path, private_copy):
    """uid mode freezes and kills with kill(-1) as the worker's uid, which reaches that uid's
    processes in every PID namespace below the harness's: a container's workers. With one uid pair a
    host's uid-mode run stopped a container run's trainer for good (CI of issue 35: the compare run
    in its container waited 30 minutes). A host's harness now takes uids of its own (HOST_UIDS); here
    a process of the image's trainer uid, in a PID namespace of its own, lives through a run."""
    assert set(uid_mode.uid_mode_uids().values()).isdisjoint(uid_mode.IMAGE_UIDS.values())
    uid = uid_mode.IMAGE_UIDS["train"]
    container = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "setpriv", f"--reuid={uid}",
                                  f"--regid={uid}", "--clear-groups", "sleep", "600"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (sleepers := [p for p in procfs.children(container.pid) if os.stat(f"/proc/{p}").st_uid == uid]):
            assert time.monotonic() < deadline, "the container's stand-in did not start"
            time.sleep(0.01)
        result = run_uid_mode(tmp_path, private_copy)
        assert result["isolation"]["mode"] == "uid" and result["epochs"] == 1, result.get("dnc_reason")
        (sleeper,) = sleepers
        stat = Path(f"/proc/{sleeper}/stat")
        assert stat.exists(), f"the host's run killed the container's process of uid {uid}"
        state = stat.read_bytes().rsplit(b")", 1)[1].split()[0]
        assert state == b"S", f"the container's process of uid {uid} was {state.decode()} after the host's run"
    finally:
        os.killpg(container.pid, signal.SIGKILL)
        container.wait()


# An ordinary harness process: its slot, and a uid-mode trainer frozen, thawed and killed as a run's is.
ORDINARY = '''
import sys
from pathlib import Path
from harness.sandbox import launch, modes, uid_mode
print(uid_mode.uid_slot(), flush=True)
worker, _ = launch.start("train", modes.Isolation("uid"), reference_dir=Path(sys.argv[1]), data_files=[], snapshots=None)
worker.freeze()
worker.thaw()
worker.kill()
'''


def test_a_bystander_of_a_candidate_uid_is_neither_frozen_nor_killed(tmp_path):
    """Issue 46, attack 10: a uid-mode harness took uids 20002 + 2 x slot without looking whether
    anybody had them, and an ordinary run froze and killed a bystander `sleep` of such a uid. A slot
    whose uids a passwd entry names or a live process runs as is now skipped."""
    env = {**os.environ, "PYTHONPATH": str(Path(uid_mode.__file__).parents[2])}
    free = subprocess.run([sys.executable, "-c", "from harness.sandbox import uid_mode; print(uid_mode.uid_slot())"],
                          capture_output=True, text=True, env=env, check=True)
    slot = int(free.stdout)                          # the slot the next harness would take; its lock is free again
    uid = uid_mode.role_groups()["train"] + 2 * slot
    bystander = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "600"])
    try:
        deadline = time.monotonic() + 10
        while uid not in uid_mode.in_use([uid]) or uid_mode.in_use([uid])[uid] != f"process {bystander.pid}":
            assert time.monotonic() < deadline, "the bystander did not start"
            time.sleep(0.01)
        folder = Path(tempfile.mkdtemp(prefix="dawnbench-bystander-"))
        (folder / "reference.toml").write_text("")
        try:
            run = subprocess.run([sys.executable, "-c", ORDINARY, str(folder)], capture_output=True, text=True,
                                 env=env, timeout=120)
        finally:
            shutil.rmtree(folder)
        assert run.returncode == 0, run.stderr[-2000:]
        stat = Path(f"/proc/{bystander.pid}/stat")
        assert bystander.poll() is None and stat.exists(), f"the bystander of uid {uid} was killed"
        state = stat.read_bytes().rsplit(b")", 1)[1].split()[0]
        assert state == b"S", f"the bystander of uid {uid} was {state.decode()} after the harness's freeze and kill"
        assert int(run.stdout.split()[0]) != slot, "the harness took the slot whose uid the bystander has"
    finally:
        bystander.kill()
        bystander.wait()


def test_a_uid_a_passwd_entry_names_is_in_use():
    assert uid_mode.in_use([0, 65534]) == {0: "the user root", 65534: "the user nobody"}
    assert uid_mode.in_use([uid_mode.UID_SLOTS * 2 + 4_000_000]) == {}


def test_uid_mode_on_a_bare_host_is_not_official(tmp_path, monkeypatch):
    """Issue 46, attack 7: on a bare host uid mode's workers read what any user may read (the test
    labels in apt's cache of the Debian package) and reach the network; only a reference's image run
    without a network confines them. The verdict says which, in one line."""
    from conftest import REPO

    from harness import registry
    from harness.eval_set import EvalSet
    from harness.official import official_verdict
    monkeypatch.setattr(uid_mode, "BUILD_INFO", tmp_path / "no-build.json")
    bare = uid_mode.unconfined()
    assert bare.startswith("uid mode outside a container:") and "\n" not in bare
    spec = registry.load_spec("fashion-mnist-cnn-pytorch", REPO / "references")
    verdict = official_verdict(spec, spec.task.threshold, [], EvalSet(spec.task, 10000, None), modes.Isolation("uid"),
                               data_root=tmp_path)
    assert verdict["official"] is False and bare in verdict["unofficial_reasons"], verdict["unofficial_reasons"]
    build, nets = tmp_path / "build.json", tmp_path / "net"
    build.write_text("{}")
    (nets / "lo").mkdir(parents=True)
    monkeypatch.setattr(uid_mode, "BUILD_INFO", build)
    monkeypatch.setattr(uid_mode, "NET_DEVICES", nets)
    assert uid_mode.unconfined() is None               # a reference's image, no network but its loopback
    (nets / "eth0").mkdir()
    assert "uid mode in a container with a network (eth0)" in uid_mode.unconfined()


# --- the shared temporary folders: each uid-mode worker has only its own --------------------------------------

def as_uid(uid: int, script: str) -> subprocess.CompletedProcess:
    def drop():
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    return subprocess.run(["sh", "-c", script], preexec_fn=drop, capture_output=True, text=True, timeout=30)


def test_a_worker_uid_may_only_pass_through_the_shared_tmp_while_it_lives(monkeypatch):
    """No mount namespace gives a uid-mode worker a /tmp of its own (bubblewrap binds its scratch's tmp/
    there): while it lives, its uid may pass through the shared folders to its scratch folder, never
    write, list or leave anything there; every other user keeps them as they were, and they are as they
    were once it ends."""
    base = Path(tempfile.mkdtemp(prefix="dawnbench-shared-tmp-"))
    try:
        os.chmod(base, 0o755)
        shared, scratch = base / "tmp", base / "tmp" / "scratch"
        shared.mkdir(mode=0o1777)
        os.chmod(shared, 0o1777)
        monkeypatch.setattr(uid_mode, "SHARED_TMP", (str(shared),))
        monkeypatch.setattr(tempfile, "tempdir", str(shared))
        uid, bystander = 4_000_123, 4_000_125          # no passwd entry names them (test above)
        scratch.mkdir()
        os.chown(scratch, uid, uid)
        uid_mode.shut_shared_tmp(uid)
        try:
            said = as_uid(uid, f"touch {shared}/left; ls {shared}; touch {scratch}/mine && echo scratch-ok")
            assert said.stdout.strip() == "scratch-ok" and "Permission denied" in said.stderr, said
            assert not (shared / "left").exists()
            assert as_uid(bystander, f"touch {shared}/theirs").returncode == 0       # another user: as before
        finally:
            uid_mode.reopen_shared_tmp(uid)
        assert as_uid(uid, f"touch {shared}/after").returncode == 0
        assert os.stat(shared).st_mode & 0o7777 == 0o1777
        assert os.listxattr(shared) == []        # no ACL left: the folder is as the machine had it
    finally:
        shutil.rmtree(base)


# The fork: the predictor of `dawnbench infer`, which holds the eval inputs, leaves them in the shared
# temporary folders; the server, which holds the model, looks there before it answers a timed request.
LEAVES_INPUTS = '''
PLACES = {places!r}


class Cheat(Base):
    def setup(self, ctx):
        super().setup(ctx)
        if ctx.role == "predict":
            for place in PLACES:
                try:
                    with open(place, "w") as f:
                        f.write("the eval inputs")
                    os.chmod(place, 0o666)
                except OSError:
                    pass

    def infer(self, x):
        for place in PLACES:
            try:
                with open(place) as f:
                    found = f.read()
            except OSError:
                continue
            raise RuntimeError(f"LEAKED through {{place}}: {{found}}")
        return super().infer(x)
'''


def test_the_server_cannot_read_what_the_predictor_left_in_tmp(tmp_path, private_copy):
    """Issue 46's leftover: in uid mode the predictor and the server of `dawnbench infer` shared /tmp
    and /var/tmp, so the predictor could leave the eval inputs there for the server."""
    places = [f"{folder}/dawnbench-leak-{os.getpid()}" for folder in ("/tmp", "/var/tmp")]
    references, model = tmp_path / "references", tmp_path / "model"
    write_reference(references, "cheat", LEAVES_INPUTS.format(places=places))
    model.mkdir()
    np.save(model / "w.npy", np.zeros((785, 10), np.float32))
    os.chmod(tmp_path, 0o755)
    try:
        proc = subprocess.run([sys.executable, "-c", UID_MODE, "infer", "cheat", "--references", str(references),
                               "--data", str(private_copy), "--model", str(model), "--limit", "5", "--warmup", "1",
                               "--threshold", "0.01", "--no-progress", "--out", str(tmp_path / "infer")],
                              capture_output=True, text=True, timeout=300)
        # an untrained model misses the threshold (exit 1); every timed request was answered
        assert "LEAKED" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
        assert json.loads((tmp_path / "infer" / "inference.json").read_text())["items"] == 5, proc.stderr[-2000:]
        assert not any(Path(p).exists() for p in places)         # the predictor could leave nothing there
    finally:
        for place in places:
            Path(place).unlink(missing_ok=True)
