"""Issue 47's fresh probe of the run path: new bad inputs and faults in the issue's six categories,
none of them a case of issue 34's probe (bench/measured/2026-11-26-issue34/probe.py). A bench, never
a test: it takes minutes, runs real trainings and kills, and mounts nothing but writes under PROBE_DIR.

    .venv/test/bin/python bench/probe_run_path.py RUN DNC_RUN ENTRIES [--quick]

RUN: a converged run folder (`dawnbench run fashion-mnist-cnn-pytorch --max-epochs 1 --threshold 0.5`),
DNC_RUN: a DNC one (the same without --threshold), ENTRIES: an entries tree holding RUN's entry
(`dawnbench submit RUN --allow-unofficial --cost-per-hour 1 --out ENTRIES`). Run from a checkout with
Fashion-MNIST in ./data, as root (the read-only cases need a folder root cannot write: a read-only bind
mount is not used; chmod is, and root ignores it, so those cases run as `nobody` through setpriv).
--quick leaves out the three trainings of hostile forks.

Each case counts: a traceback on stderr; a wrong exit (not the one expected: 2 for a refusal, 1 or 2
where a check may fail, 0 where the command should work, or a hang past its timeout); unclear (a
refusal that is not one line on stderr, make's own "make: ***" line aside); orphans (processes left
2 s after the command or its kill, found through a subreaper); data lost (a file the command must not
change, changed: the data, the entries tree, the run folder a check reads). It prints the table (a
markdown table, as bench/measured/ keeps it) and each bad case.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.killed_run import descendants  # noqa: E402  (every live process under a pid)

PY = sys.executable
W = Path(os.environ.get("PROBE_DIR", "/tmp/issue47-probe"))
QUICK = "--quick" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--quick"]
RUN, DNC, ENTRIES = (Path(a).resolve() for a in ARGS[:3])
DATA = REPO / "data"
R = "fashion-mnist-cnn-pytorch"
CATEGORIES = ("bad options and arguments", "bad data", "faults during a run", "disk and file system",
              "hostile entries and sites", "concurrency and load")
rows: list[dict] = []

# A subreaper between the probe and each command: whatever the command leaves behind is re-parented
# to it, so it can be counted (the command's own tree is gone by then) and killed.
KEEPER = r"""
import ctypes, os, subprocess, sys, threading
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
h = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
print(h.pid, flush=True)
rc = h.wait()
print(rc, flush=True)
sys.stdin.read()
"""


def env(**extra) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO)
    e.pop("DAWNBENCH_DATASETS_MANIFEST", None)
    e.update({k: v for k, v in extra.items() if v is not None})
    return e


def digest(paths) -> str:
    """One hash of every file under `paths` (names, bytes), to tell whether a command changed them."""
    h = hashlib.sha256()
    for root in paths:
        root = Path(root)
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()) if root.is_dir() else [root]
        for f in files:
            h.update(str(f).encode())
            try:
                h.update(f.read_bytes())
            except OSError:
                h.update(b"?")
    return h.hexdigest()


def case(category: str, argv: list, ok=(2,), one_line=True, timeout=120, extra_env=None, keep=(), cwd=None,
         signal_after: tuple[int, float] | None = None, name: str | None = None, user: str | None = None) -> dict:
    """Run `argv` (a dawnbench command unless it starts with a program path) under the subreaper."""
    assert category in CATEGORIES, category
    argv = [str(a) for a in argv]
    if not argv[0].startswith("/") and argv[0] != "make":
        argv = [PY, "-m", "dawnbench", *argv]
    if user:
        argv = ["/usr/bin/setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", *argv]
    before = digest(keep) if keep else None
    err_file = W / "stderr.txt"
    with open(err_file, "w") as err:
        k = subprocess.Popen([PY, "-c", KEEPER, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=err, text=True, env=env(**(extra_env or {})), cwd=cwd or W)
        pid = int(k.stdout.readline())
        if signal_after:
            time.sleep(signal_after[1])
            try:
                os.kill(pid, signal_after[0])
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        rc: object = "hang"
        while time.monotonic() < deadline:
            if k.poll() is not None:
                break
            line = _ready_line(k)
            if line is not None:
                rc = int(line)
                break
        if rc == "hang":
            for p in [pid, *descendants(k.pid)]:
                try:
                    os.kill(p, 9)
                except OSError:
                    pass
        time.sleep(2)
        left = descendants(k.pid)
        for p in left:
            try:
                os.kill(p, 9)
            except OSError:
                pass
        k.stdin.close()
        k.wait()
    text = err_file.read_text(errors="replace")
    lines = [x for x in text.splitlines() if x.strip() and not x.startswith("make: ***")
             and not x.startswith("make[")]
    row = {"category": category, "case": name or " ".join(a for a in argv if a != PY)[:110], "rc": rc,
           "traceback": "Traceback (most recent call last)" in text,
           "wrong_exit": rc not in ok, "unclear": one_line and len(lines) != 1,
           "orphans": len(left), "lost": before is not None and digest(keep) != before,
           "stderr": lines[-1][:200] if lines else ""}
    rows.append(row)
    return row


def _ready_line(k) -> str | None:
    import select
    r, _, _ = select.select([k.stdout], [], [], 0.05)
    if r:
        line = k.stdout.readline()
        return line.strip() or None
    return None


def write_json(path: Path, value) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value) if not isinstance(value, str) else value)
    return path


def main() -> int:
    shutil.rmtree(W, ignore_errors=True)
    W.mkdir(parents=True)
    os.chmod(W, 0o755)
    os.mkfifo(W / "fifo")
    (W / "file").write_text("x")
    (W / "emptydir").mkdir()
    big = "9" * 400
    deep = "[" * 40000 + "]" * 40000
    data_keep = [DATA / "fashion-mnist"]
    res = W / "res"

    # ---------------------------------------------------------------- bad options and arguments
    cat = "bad options and arguments"
    run = ["run", R, "--results", res, "--max-epochs", "1", "--no-progress"]
    for assignment in ["bf16=sometimes", "bf16=", "bf16=[1]", f"lr={big}", f"lr={deep[:40000]}", f"widths={deep[:40000]}",
                       "epochs=" + "9" * 5000, "lr=1e400", "lr=-inf", "flip=2", "batch_size=1e9", "label_smoothing=nan",
                       "widths=a,b", "bf16=true=false", " =1", "lr==0.1"]:
        case(cat, [*run, "--set", assignment], keep=data_keep)
    for record in [
        f'{{"instance": "a:b", "usd_per_hour": {big}, "source": "x", "date": "2025-01-01"}}',
        f'{{"instance": "a:b", "usd_per_hour": -{big}, "source": "x", "date": "2025-01-01"}}',
        '{"instance": "a:b", "usd_per_hour": ' + "9" * 5000 + ', "source": "x", "date": "2025-01-01"}',
        deep, "[" * 65 + "]" * 65, "", "null", '{"a": 1}',
        '{"instance": "a:b", "usd_per_hour": 1, "usd_per_hour": 2, "source": "x", "date": "2025-01-01"}',
        '{"instance": "a:b", "usd_per_hour": "1", "source": "x", "date": "2025-01-01"}',
        '{"instance": "a:b", "usd_per_hour": true, "source": "x", "date": "2025-01-01"}',
        '{"instance": "a:b", "usd_per_hour": 1e400, "source": "x", "date": "2025-01-01"}',
        '{"instance": "", "usd_per_hour": 1, "source": "x", "date": "2025-01-01"}',
        '{"instance": "a:b", "usd_per_hour": 1, "source": "x", "date": 5}',
    ]:
        case(cat, [*run, "--price-record", record], name=f"run --price-record {record[:60]!r}")
    for opt, value in [("--cost-per-hour", "-inf"), ("--cost-per-hour", "-1e5"), ("--cost-per-hour", "-nan"),
                       ("--cost-per-hour", "1e400"), ("--max-epochs", "-1e5"), ("--nodes", "-inf"),
                       ("--threshold", "-inf"), ("--max-seconds", "-inf"), ("--max-seconds", "1e400"),
                       ("--seed", "-1e3"), ("--runs", "-inf")]:
        case(cat, [*run, opt, value])
    infer = ["infer", R, "--model", RUN / "model", "--out", W / "inf"]
    for opt, value in [("--warmup", "-inf"), ("--limit", "-1e3"), ("--threads", "-nan"), ("--set", "bf16=often"),
                       ("--runtime", "tensorrt"), ("--precision", "fp8")]:
        case(cat, [*infer, opt, value])
    for argv in [
        ["data", "fetch", "fashion-mnist", "--reference", "cifar10-fast-pytorch", "--data", W / "d1"],
        ["data", "verify", "fashion-mnist", "--reference", "cifar10-fast-pytorch"],
        ["data", "verify", "cifar10", "--reference", R],
        ["data", "verify", "--reference", "no-such-ref"],
        ["data", "fetch", "--reference", "a/b", "--data", W / "d1"],
        ["compliance", "/dev/zero"], ["compliance", "/dev/null"], ["compliance", W / "fifo"],
        ["compliance", W / "emptydir"],
        ["list", "--references", W / "emptydir"], ["list", "--references", W / "fifo"],
        ["submit", RUN, "--out", W / "e1", "--cost-per-hour", "-inf"],
        ["reproduce", RUN, "--runs", "-inf"],
        ["analyze", "curves", RUN, "--out", W / "fifo"],
        ["leaderboard", ENTRIES, "--out", W / "file"],
        ["validate", "--level", "v2", ENTRIES],
    ]:
        case(cat, argv, keep=data_keep)
    for nproc in ["abc", "0", "-1", "2x", ""]:
        case(cat, ["make", "--no-print-directory", "check-nproc", f"NPROC={nproc}"], cwd=REPO,
             name=f"make check-nproc NPROC={nproc!r} (what make run checks first)")

    # ---------------------------------------------------------------- bad data
    cat = "bad data"
    base = ('[fashion-mnist]\ndir = "fashion-mnist"\nfetch_command = "dawnbench data fetch fashion-mnist"\n'
            'eval_labels = "t10k-labels-idx1-ubyte"\n')
    manifests = {
        "files-oops": base + 'files = "oops"\n',
        "entry-int": "fashion-mnist = 3\n",
        "file-int": base + "[fashion-mnist.files]\nt10k-labels-idx1-ubyte = 5\n",
        "sha-int": base + "[fashion-mnist.files]\nt10k-labels-idx1-ubyte = { sha256 = 5 }\n",
        "size-text": base + '[fashion-mnist.files]\nt10k-labels-idx1-ubyte = { sha256 = "00", size = "x" }\n',
        "with-text": base + 'with = "glove"\n',
        "dir-int": base.replace('dir = "fashion-mnist"', "dir = 5"),
        "deep": "x = " + "[" * 5000 + "]" * 5000 + "\n",
        "digits": "x = " + "9" * 5000 + "\n",
        "not-toml": "[[[\n",
        "splits-list": base + "splits = [1]\n",
    }
    for label, text in manifests.items():
        m = write_json(W / "manifests" / f"{label}.toml", text)
        case(cat, ["data", "verify", "fashion-mnist"], ok=(1, 2), extra_env={"DAWNBENCH_DATASETS_MANIFEST": str(m)},
             keep=data_keep, name=f"data verify, manifest {label}")
        case(cat, [*run, "--data", DATA], ok=(1, 2), extra_env={"DAWNBENCH_DATASETS_MANIFEST": str(m)},
             keep=data_keep, name=f"run, manifest {label}")
    fm = W / "fm"
    shutil.copytree(DATA, fm, symlinks=True, ignore=lambda d, names: [n for n in names if n not in ("fashion-mnist",)
                                                                        and Path(d) == DATA])
    variants = {}
    for label in ("images-truncated", "extra-file", "file-is-dir", "loop-link"):
        d = W / f"data-{label}"
        shutil.copytree(fm, d)
        target = d / "fashion-mnist" / "t10k-images-idx3-ubyte"
        if label == "images-truncated":
            target.write_bytes(target.read_bytes()[:1000])
        elif label == "extra-file":
            (d / "fashion-mnist" / "stray.bin").write_bytes(b"x")
        elif label == "file-is-dir":
            target.unlink()
            target.mkdir()
        else:
            target.unlink()
            os.symlink(target.name, target)
        variants[label] = d
    for label, d in variants.items():
        case(cat, ["data", "verify", "fashion-mnist", "--data", d], ok=(0, 1, 2) if label == "extra-file" else (1, 2),
             one_line=label != "extra-file", name=f"data verify, {label}")
        case(cat, [*run, "--data", d], ok=(0, 1) if label == "extra-file" else (1, 2),
             one_line=label != "extra-file", name=f"run, {label}", timeout=400)

    # ---------------------------------------------------------------- hostile entries and sites
    cat = "hostile entries and sites"
    src = next(ENTRIES.glob("*/train/*.json"))
    fields = json.loads(src.read_text())

    def numbers(o, path=()):
        if isinstance(o, dict):
            for key, value in o.items():
                yield from numbers(value, path + (key,))
        elif isinstance(o, (int, float)) and not isinstance(o, bool):
            yield path

    for path in list(numbers(fields)):
        root = W / "big" / "_".join(path)
        shutil.copytree(ENTRIES, root, symlinks=True)
        f = root / src.relative_to(ENTRIES)
        edited = json.loads(f.read_text())
        inner = edited
        for key in path[:-1]:
            inner = inner[key]
        inner[path[-1]] = "BIGNUMBER"
        f.write_text(json.dumps(edited).replace('"BIGNUMBER"', big))
        case(cat, ["validate", root], ok=(1,), one_line=False, keep=[root], name=f"validate, {'.'.join(path)} = 400 digits")
    for path in list(numbers(fields))[:6]:
        root = W / "big" / "_".join(path)
        case(cat, ["leaderboard", root, "--out", W / "site-big"], ok=(0, 1), one_line=False, keep=[root],
             name=f"leaderboard, {'.'.join(path)} = 400 digits")
    result = json.loads((RUN / "result.json").read_text())
    for key in [k for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]:
        folder = W / "vbig" / key
        shutil.copytree(RUN, folder, symlinks=True)
        edited = dict(result)
        edited[key] = "BIGNUMBER"
        (folder / "result.json").write_text(json.dumps(edited).replace('"BIGNUMBER"', big))
        case(cat, ["verify", folder], ok=(1, 2), one_line=False, keep=[folder], name=f"verify, result.json {key} = 400 digits")
    folder = W / "vbig" / "_deep"
    shutil.copytree(RUN, folder, symlinks=True)
    (folder / "result.json").write_text(deep)
    case(cat, ["verify", folder], ok=(1, 2), one_line=False, keep=[folder], name="verify, result.json 40,000 brackets")
    # a tree of unnamed logs: linear, not quadratic (issue 47: 2,000 took 66 s, 5,000 over 300 s)
    tree = W / "hostile5000" / "CIFAR10" / "train"
    tree.mkdir(parents=True)
    v1 = REPO / "tests" / "data" / "dawn-bench-entries" / "CIFAR10" / "train"
    one = (v1 / "BAIDU-USA-GAIT_BaiduNet9P_8GV100_pytorch.json").read_text()
    log = (v1 / "BAIDU-USA-GAIT_BaiduNet9P_8GV100_pytorch.tsv").read_text()
    for i in range(5000):
        (tree / f"e{i}.json").write_text(one)
        (tree / f"log{i}.tsv").write_text(log)
    t = time.monotonic()
    row = case(cat, ["validate", W / "hostile5000"], ok=(1,), one_line=False, timeout=30,
               name="validate, 5,000 entries whose logs no JSON names (30 s bound)")
    row["seconds"] = round(time.monotonic() - t, 1)
    tree2 = W / "samelog" / "CIFAR10" / "train"
    tree2.mkdir(parents=True)
    for i in range(2000):
        (tree2 / f"e{i}.json").write_text(json.dumps({**json.loads(one), "logFilename": "one.tsv"}))
    (tree2 / "one.tsv").write_text(log)
    case(cat, ["validate", W / "samelog"], ok=(0, 1), one_line=False, timeout=60,
         name="validate, 2,000 JSONs naming one log (60 s bound)")
    nested = W / "nested"
    d = nested
    for _ in range(200):
        d = d / "d"
    d.mkdir(parents=True)
    (d / "x.tsv").write_text(log)
    case(cat, ["validate", nested], ok=(1,), one_line=False, name="validate, a log 200 folders deep")
    case(cat, ["leaderboard", W / "hostile5000", "--out", W / "site-5000"], ok=(0, 1), one_line=False, timeout=120,
         name="leaderboard, 5,000 hostile entries (120 s bound)")

    # ---------------------------------------------------------------- disk and file system
    cat = "disk and file system"
    ro = W / "readonly"
    ro.mkdir()
    os.chmod(ro, 0o555)
    (W / "nobody").mkdir()
    os.chmod(W / "nobody", 0o777)
    for argv in [
        ["run", R, "--results", ro / "res", "--max-epochs", "1", "--no-progress"],
        ["submit", RUN, "--out", ro / "e", "--allow-unofficial", "--cost-per-hour", "1"],
        ["leaderboard", ENTRIES, "--out", ro / "site"],
        ["analyze", "curves", RUN, "--out", ro / "a"],
        ["infer", R, "--model", RUN / "model", "--out", ro / "inf", "--limit", "10", "--warmup", "0"],
    ]:
        # leaderboard lists the invalid (smoke-test) entry on stderr before its error: one line is not asked of it
        case(cat, argv, ok=(1, 2), user="nobody", timeout=300, keep=[RUN, ENTRIES], one_line=argv[0] != "leaderboard",
             name=f"{argv[0]} into a read-only folder, as nobody")
    odd = W / "oddrun"
    shutil.copytree(RUN, odd, symlinks=True)
    (odd / "result.json").unlink()
    os.mkfifo(odd / "result.json")
    case(cat, ["verify", odd], ok=(1, 2), timeout=30, name="verify, result.json a FIFO")
    case(cat, ["submit", odd, "--out", W / "e2", "--allow-unofficial", "--cost-per-hour", "1"], ok=(1, 2), timeout=30,
         name="submit, result.json a FIFO")
    odd2 = W / "oddrun2"
    shutil.copytree(RUN, odd2, symlinks=True)
    (odd2 / "events.jsonl").unlink()
    os.symlink("/dev/zero", odd2 / "events.jsonl")
    case(cat, ["verify", odd2], ok=(1, 2), timeout=30, name="verify, events.jsonl a link to /dev/zero")
    case(cat, ["compliance", odd2], ok=(1, 2), timeout=30, name="compliance, events.jsonl a link to /dev/zero")
    case(cat, ["analyze", "curves", odd2, "--out", W / "a3"], ok=(0, 1, 2), one_line=False, timeout=30,
         name="analyze curves, events.jsonl a link to /dev/zero (curves come from the TSV: 0 is right)")
    case(cat, ["run", R, "--results", "/proc/self", "--max-epochs", "1"], ok=(1, 2), name="run --results /proc/self")
    case(cat, ["list", "--references", "/proc"], ok=(2,), name="list --references /proc")

    # ---------------------------------------------------------------- faults during a run
    cat = "faults during a run"
    for command, delay in [(["validate", W / "hostile5000"], 1.5), (["leaderboard", ENTRIES, "--out", W / "site-k"], 1.0),
                           (["verify", RUN], 1.0), (["analyze", "curves", RUN, "--out", W / "a-k"], 1.0),
                           (["submit", RUN, "--out", W / "e-k", "--allow-unofficial", "--cost-per-hour", "1"], 1.0),
                           (["data", "verify", "fashion-mnist", "--data", DATA], 0.5)]:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            case(cat, command, ok=(1, 2, 130, 143, 129, -2, -15, -1, 0), one_line=False, signal_after=(sig, delay),
                 keep=[RUN, ENTRIES] + data_keep, name=f"{sig.name} {delay} s into {command[0]}")
    if not QUICK:
        refs = W / "refs"
        # json.dumps in the worker recurses, so 500 deep is what a worker's own reply can carry (over MAX_DEPTH)
        for label, stat in [("a", "10**400"), ("b", "__import__('functools').reduce(lambda a, _: [a], range(500), 0)"),
                            ("c", "int('9' * 4000)")]:
            fork = refs / f"fashion-mnist-hostile{label}-pytorch"
            shutil.copytree(REPO / "references" / R, fork, ignore=shutil.ignore_patterns(".venv", "__pycache__"))
            train = fork / "train.py"
            text = train.read_text()
            marker = "        cfg, ctx = self.ctx.config, self.ctx\n"
            assert marker in text
            train.write_text(text.replace(marker, marker + f"        return {{'loss': 1.0, 'samples': 1, 'lr': 0.1, "
                                                          f"'hostile': {stat}}}\n", 1))
            case(cat, ["run", fork.name, "--references", refs, "--results", W / "res-fork", "--max-epochs", "1",
                       "--no-progress"], ok=(1,), one_line=False, timeout=600, keep=data_keep,
                 name=f"run, train_epoch returns a stat {stat[:40]}")

    # ---------------------------------------------------------------- concurrency and load
    cat = "concurrency and load"
    procs = []
    for _ in range(3):
        procs.append(subprocess.Popen([PY, "-m", "dawnbench", "validate", str(W / "hostile5000")], env=env(),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    t = time.monotonic()
    outs = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    rows.append({"category": cat, "case": f"3 x validate of 5,000 hostile entries at once ({time.monotonic() - t:.0f} s)",
                 "rc": [rc for rc, _ in outs], "traceback": any("Traceback" in e for _, e in outs),
                 "wrong_exit": any(rc != 1 for rc, _ in outs), "unclear": False, "orphans": 0, "lost": False,
                 "stderr": ""})
    for argv, ok in [(["data", "verify", "fashion-mnist"], (0,)),
                     (["verify", RUN], (0,)),
                     (["leaderboard", ENTRIES, "--out", W / "site-c"], (0,)),
                     (["list"], (0,)),
                     (["compliance", RUN], (0, 1))]:
        before = digest([RUN, ENTRIES] + data_keep)
        ps = [subprocess.Popen([PY, "-m", "dawnbench", *map(str, argv)], env=env(), cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(3)]
        outs = [(p.wait(timeout=300), p.stderr.read()) for p in ps]
        rows.append({"category": cat, "case": f"3 x {' '.join(map(str, argv))[:80]} at once",
                     "rc": [rc for rc, _ in outs], "traceback": any("Traceback" in e for _, e in outs),
                     "wrong_exit": any(rc not in ok for rc, _ in outs), "unclear": False, "orphans": 0,
                     "lost": digest([RUN, ENTRIES] + data_keep) != before, "stderr": ""})

    json.dump(rows, open(W / "rows.json", "w"), indent=1, default=str)
    print(table(rows))
    for row in rows:
        if row["traceback"] or row["wrong_exit"] or row["unclear"] or row["orphans"] or row["lost"]:
            print(f"BAD [{row['category']}] {row['case']!r} rc={row['rc']} tb={row['traceback']} "
                  f"unclear={row['unclear']} orphans={row['orphans']} lost={row['lost']}: {row['stderr']}")
    return 0


def table(rows: list[dict]) -> str:
    cols = ("traceback", "wrong_exit", "unclear", "orphans", "lost")
    out = ["| category | cases | tracebacks | wrong exits | unclear | orphans | data lost or half-written |",
           "|---|---|---|---|---|---|---|"]
    totals = [0] * 6
    for category in CATEGORIES:
        mine = [r for r in rows if r["category"] == category]
        counts = [len(mine)] + [sum(int(r[c]) for r in mine) for c in cols]
        totals = [a + b for a, b in zip(totals, counts)]
        out.append(f"| {category} | " + " | ".join(map(str, counts)) + " |")
    out.append("| **total** | " + " | ".join(f"**{n}**" for n in totals) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
