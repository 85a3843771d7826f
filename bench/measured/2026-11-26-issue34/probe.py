"""Issue 34's fresh probe: 159 new bad inputs in six categories; counts tracebacks, wrong exits, orphans.

    sudo .venv/test/bin/python bench/measured/2026-11-26-issue34/probe.py RUN DNC_RUN ENTRIES

RUN: a converged run folder (`dawnbench run fashion-mnist-cnn-pytorch --max-epochs 1 --threshold 0.5`),
DNC_RUN: a DNC one (the same without --threshold), ENTRIES: an entries tree holding RUN's entry
(`dawnbench submit RUN --allow-unofficial --cost-per-hour 1 --out ENTRIES`). Root: the disk cases mount
a tmpfs. Run from a checkout with Fashion-MNIST in ./data; it prints the table and each bad case. A
case is wrong when its exit is not the one expected (2 for a refusal; 1 or 2 where a run or a check
may fail), when a refusal says more or less than one line on stderr, or when it hangs past 120 s.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # the checkout
PY = sys.executable
W = Path(os.environ.get("PROBE_DIR", "/tmp/issue34-probe"))
shutil.rmtree(W, ignore_errors=True)
W.mkdir(parents=True)
RUN, DNC, ENTRIES = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
DATA = REPO / "data"
os.mkfifo(W / "fifo")
(W / "file").write_text("x")
(W / "dir").mkdir()
rows = []
R = "fashion-mnist-cnn-pytorch"


def env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO)
    e.update(extra)
    return e


def case(category, argv, ok=(2,), one_line=True, timeout=120, extra_env=None):
    try:
        p = subprocess.run(
            [PY, "-m", "dawnbench", *map(str, argv)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env(**(extra_env or {})),
            cwd=W,
            stdin=subprocess.DEVNULL,
        )
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        rc, err = "hang", ""
    lines = [x for x in err.splitlines() if x.strip()]
    wrong = rc not in ok or (one_line and len(lines) != 1)
    rows.append((category, " ".join(map(str, argv))[:100], rc, "Traceback" in err, wrong, len(lines), 0))


# 1. CLI
for opt, bad in [
    ("--max-epochs", "0"),
    ("--max-epochs", "1.5"),
    ("--max-epochs", "1e9"),
    ("--max-epochs", "abc"),
    ("--max-seconds", "nan"),
    ("--max-seconds", "-1"),
    ("--max-seconds", "inf"),
    ("--max-seconds", "0"),
    ("--seed", "-1"),
    ("--seed", "99999999999"),
    ("--nodes", "0"),
    ("--nodes", "1e6"),
    ("--threshold", "0"),
    ("--threshold", "1.5"),
    ("--threshold", "nan"),
    ("--threshold", "-0.1"),
    ("--cost-per-hour", "nan"),
    ("--cost-per-hour", "-3"),
    ("--cost-per-hour", "inf"),
    ("--cost-per-hour", "1e30"),
    ("--cost-per-hour", "-0"),
    ("--runs", "0"),
    ("--runs", "100000"),
    ("--set", "lr"),
    ("--set", "=1"),
    ("--set", "nosuchkey=1"),
    ("--run-id", "../x"),
    ("--run-id", "a/b"),
    ("--run-id", ""),
    ("--run-id", "a\nb"),
    ("--results", ""),
    ("--data", ""),
    ("--references", ""),
    ("--price-record", "{"),
    ("--price-record", "[]"),
    ("--instance", "nosuch:thing"),
]:
    case("cli", ["run", R, opt, bad, "--results", W / "res-cli"])
for argv in [
    ["--bogus"],
    ["run"],
    ["run", "-x", R],
    ["run", R, "--bogus"],
    ["run", "no-such-ref"],
    ["run", "../etc"],
    ["run", "a" * 300],
    ["run", "a\nb"],
    ["infer"],
    ["infer", R, "--model", W / "nope"],
    ["infer", R, "--model", W / "file"],
    ["infer", R, "--model", W / "fifo"],
    ["list", "--references", W / "nope"],
    ["list", "--references", W / "file"],
    ["verify"],
    ["verify", W / "nope"],
    ["verify", W / "file"],
    ["verify", W / "dir"],
    ["verify", W / "fifo"],
    ["submit", W / "dir", "--out", W / "e1"],
    ["submit", W / "nope", "--out", W / "e1"],
    ["validate"],
    ["validate", W / "nope"],
    ["leaderboard"],
    ["leaderboard", W / "nope", "--out", W / "s1"],
    ["analyze"],
    ["analyze", "bogus"],
    ["analyze", "curves"],
    ["analyze", "curves", W / "nope", "--out", W / "a1"],
    ["analyze", "stability", W / "dir", "--out", W / "a1"],
    ["reproduce"],
    ["reproduce", W / "nope"],
    ["reproduce", W / "dir"],
    ["reproduce", RUN, "--runs", "0"],
    ["reproduce", RUN, "--tolerance", "-1"],
    ["reproduce", RUN, "--tolerance", "nan"],
    ["reproduce", RUN, "--runtime", "podman"],
    ["eval"],
    ["eval", "squad"],
    ["eval", "glue", "a", "b"],
    ["data"],
    ["data", "fetch", "no-such-set"],
    ["data", "explode", "fashion-mnist"],
]:
    case("cli", argv)

# 2. data
fm = W / "fm"
(fm / "fashion-mnist").mkdir(parents=True)
for f in (DATA / "fashion-mnist").iterdir():
    shutil.copy(f, fm / "fashion-mnist" / f.name)
trunc = W / "trunc"
shutil.copytree(fm, trunc)
t = next((trunc / "fashion-mnist").glob("t10k-labels*"))
t.write_bytes(t.read_bytes()[:100])
swapped = W / "swapped"
shutil.copytree(fm, swapped)
a = next((swapped / "fashion-mnist").glob("t10k-labels*"))
b = next((swapped / "fashion-mnist").glob("train-labels*"))
ta, tb = a.read_bytes(), b.read_bytes()
a.write_bytes(tb)
b.write_bytes(ta)
emptyd = W / "emptyd"
(emptyd / "fashion-mnist").mkdir(parents=True)
linkd = W / "linkd"
(linkd / "fashion-mnist").mkdir(parents=True)
for f in (fm / "fashion-mnist").iterdir():
    os.symlink("/nonexistent/" + f.name, linkd / "fashion-mnist" / f.name)
for d in [W / "file", W / "fifo", W / "nope", trunc, swapped, emptyd, linkd, "/dev/null"]:
    case("data", ["run", R, "--data", d, "--results", W / "res-data", "--max-epochs", "1"], ok=(1, 2))
    case("data", ["data", "verify", "fashion-mnist", "--data", d], ok=(1, 2))
for d in [W / "file", W / "fifo", trunc, emptyd]:
    case("data", ["verify", RUN, "--data", d], ok=(1, 2))
man = W / "manifest.json"
man.write_text("{not json")
for m in [man, W / "nope.json", W / "dir", W / "fifo"]:
    case(
        "data",
        ["data", "verify", "fashion-mnist", "--data", fm],
        ok=(1, 2),
        extra_env={"DAWNBENCH_DATASETS_MANIFEST": str(m)},
    )

# 3. disk
full = W / "full"
full.mkdir()
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(full)], check=True)
try:
    (full / "out").mkdir()
    try:
        with open(full / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)
    except OSError:
        pass
    for argv in [
        ["run", R, "--results", full / "out", "--max-epochs", "1", "--no-progress"],
        ["submit", RUN, "--out", full / "out", "--allow-unofficial", "--cost-per-hour", "1"],
        ["analyze", "curves", RUN, "--out", full / "out"],
        ["analyze", "thresholds", RUN, "--out", full / "out"],
        ["leaderboard", ENTRIES, "--out", full / "out" / "site"],
        ["infer", R, "--model", RUN / "model", "--out", full / "out" / "inf", "--limit", "10"],
    ]:
        case("disk", argv, ok=(1, 2), one_line=argv[0] not in ("leaderboard", "run", "infer"), timeout=300)
finally:
    subprocess.run(["umount", "-l", str(full)])

# 4. entries
src = next(ENTRIES.glob("*/train/*.json"))


def variant(name, data: bytes):
    d = W / "entries" / name / src.parent.parent.name / "train"
    d.mkdir(parents=True)
    for f in src.parent.iterdir():
        (shutil.copy if f.is_file() else lambda a, b: shutil.copytree(a, b, symlinks=True))(f, d / f.name)
    (d / src.name).write_bytes(data)
    return d / src.name


text = src.read_text()
base = json.loads(text)
num = next(k for k, v in base.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def edited(**kw):
    d = dict(base)
    d.update(kw)
    return json.dumps(d).encode()


muts = {
    "empty": b"",
    "nul": b"\0\0",
    "array": b"[]",
    "string": b'"x"',
    "deep": b"[" * 100000 + b"]" * 100000,
    "not-utf8": b"\xff\xfe{",
    "bom": b"\xef\xbb\xbf" + text.encode(),
    "nan": text.replace("{", '{"x": NaN, ', 1).encode(),
    "dupkey": text.replace("{", '{"author": "a", ', 1).encode(),
    "huge": edited(**{num: 1e308}),
    "negative-cost": edited(costPerHour=-5),
    "null-author": edited(author=None),
    "ctrl-author": edited(author="a\x1b[31mb\nc"),
    "long-author": edited(author="a" * 100000),
    "bool-number": edited(**{num: True}),
    "string-number": edited(**{num: str(base[num])}),
    "zero-price": edited(costPerHour=0),
    "forged-tta": edited(tta_seconds=0.001),
}
for name, data in muts.items():
    target = variant(name, data)
    case("entries", ["validate", target], ok=(1, 2), one_line=False)
    case(
        "entries",
        ["leaderboard", target.parent.parent.parent, "--out", W / f"site-{name}"],
        ok=(0, 1, 2),
        one_line=False,
    )

# 5. kills
KEEPER = r"""
import ctypes, os, subprocess, sys, threading
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
h = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(h.pid, flush=True)
def reap():
    while True:
        try: os.wait()
        except ChildProcessError: threading.Event().wait(0.02)
threading.Thread(target=reap, daemon=True).start()
sys.stdin.read()
"""


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{q}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(c) for c in open(f"/proc/{q}/task/{t}/children").read().split()]
            except OSError:
                kids = []
            out += kids
            todo += kids
    live = []
    for d in out:
        try:
            if open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                live.append(d)
        except OSError:
            pass
    return live


for sig, delay in [
    (9, 0.3),
    (9, 1.0),
    (9, 2.0),
    (9, 4.0),
    (9, 6.0),
    (9, 8.0),
    (15, 3.0),
    (2, 3.0),
    (15, 0.3),
    (2, 6.0),
]:
    k = subprocess.Popen(
        [
            PY,
            "-c",
            KEEPER,
            PY,
            "-m",
            "dawnbench",
            "run",
            R,
            "--data",
            str(DATA),
            "--results",
            str(W / "res-kill"),
            "--max-epochs",
            "2",
            "--no-progress",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=REPO,
    )
    pid = int(k.stdout.readline())
    time.sleep(delay)
    try:
        os.kill(pid, sig)
    except OSError:
        pass
    deadline = time.monotonic() + (2 if sig == 9 else 70)
    while descendants(k.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = descendants(k.pid)
    for d in left:
        try:
            os.kill(d, 9)
        except OSError:
            pass
    k.stdin.close()
    k.wait()
    rows.append(("kills", f"signal {sig} at {delay} s into run --max-epochs 2", "-", False, False, 0, len(left)))


# 6. concurrency
def together(argvs, ok):
    ps = [
        subprocess.Popen(
            [PY, "-m", "dawnbench", *map(str, a)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
            cwd=REPO,
        )
        for a in argvs
    ]
    outs = [(p.wait(timeout=600), p.stderr.read()) for p in ps]
    rcs = sorted(rc for rc, _ in outs)
    rows.append(
        (
            "concurrency",
            f"{len(argvs)} x {' '.join(map(str, argvs[0]))[:70]}",
            rcs,
            any("Traceback" in e for _, e in outs),
            not ok(rcs),
            0,
            0,
        )
    )


together(
    [
        [
            "run",
            R,
            "--run-id",
            "same",
            "--results",
            W / "res-conc",
            "--max-epochs",
            "1",
            "--no-progress",
            "--threshold",
            "0.5",
        ]
    ]
    * 2,
    lambda r: r == [0, 2],
)
together(
    [["submit", RUN, "--out", W / "e-conc", "--allow-unofficial", "--cost-per-hour", "1"]] * 3,
    lambda r: r[0] == 0 and all(x in (0, 2) for x in r),
)
together([["leaderboard", ENTRIES, "--out", W / "site-conc"]] * 3, lambda r: all(x in (0, 1, 2) for x in r))
together([["analyze", "curves", RUN, "--out", W / "a-conc"]] * 3, lambda r: r == [0, 0, 0])

json.dump(rows, open(W / "rows.json", "w"), indent=1, default=str)
cats = {}
for c, _name, _rc, tb, wrong, _lines, orph in rows:
    t = cats.setdefault(c, [0, 0, 0, 0])
    t[0] += 1
    t[1] += bool(tb)
    t[2] += bool(wrong)
    t[3] += orph
print("| category | cases | tracebacks | wrong exits or not one line | orphans |\n|---|---|---|---|---|")
for c, t in cats.items():
    print(f"| {c} | {t[0]} | {t[1]} | {t[2]} | {t[3]} |")
tot = [sum(t[i] for t in cats.values()) for i in range(4)]
print(f"| all | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} |")
for c, name, rc, tb, wrong, lines, orph in rows:
    if tb or wrong or orph:
        print("BAD", c, repr(name), rc, "tb" if tb else "", f"lines={lines}", f"orphans={orph}")
