"""Adversarial references: a small honest base and the cheats an entrant could try on it.

The base is a numpy softmax regression on Fashion-MNIST (about 84% top-1: it never reaches the
official 92%), quick enough that every cheat runs end to end through the real harness in seconds.
Each cheat is a subclass of the base in its own reference folder, written the way an entrant would
write it, knowing every path of the machine (the data, the results, the checkout).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

BASE = '''
import os
from pathlib import Path

import numpy as np

from common.loaders import load_fashion_mnist, load_fashion_mnist_images
from harness.reference import Reference


def features(images):
    x = images.reshape(len(images), -1).astype(np.float32) / 255
    return np.concatenate([x, np.ones((len(x), 1), np.float32)], axis=1)


class Base(Reference):
    def setup(self, ctx):
        self.ctx = ctx
        self.w = np.zeros((785, 10), np.float32)
        if ctx.trains:
            images, self.y = load_fashion_mnist(ctx.data_root, "train")
            self.x = features(images)
        elif not ctx.serves:        # infer's timed server: the model only, each example comes with its request
            self.eval_x = features(load_fashion_mnist_images(ctx.data_root, "test"))

    def train_epoch(self, epoch):
        order = np.random.default_rng(epoch).permutation(len(self.x))
        losses = []
        for i in range(0, len(order), 500):
            idx = order[i:i + 500]
            z = self.x[idx] @ self.w
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            rows = np.arange(len(idx))
            losses.append(-np.log(p[rows, self.y[idx]] + 1e-9).mean())
            p[rows, self.y[idx]] -= 1
            self.w -= 0.5 * self.x[idx].T @ p / len(idx)
        return {"loss": float(np.mean(losses)), "samples": len(order)}

    def predict(self):
        return self.eval_x @ self.w

    def save(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        np.save(Path(path) / "w.npy", self.w)

    def load(self, path):
        self.w = np.load(Path(path) / "w.npy")

    def eval_inputs(self):
        return self.eval_x

    def infer(self, x):
        return x @ self.w
'''

TOML = '''task = "fashion-mnist"
framework = "numpy"
model = "softmax regression"
entry = "train:{entry}"
description = "an adversarial test reference"

[hyperparameters]
lr = 0.5

[budget]
max_epochs = 2
max_seconds = 600
'''


# Training in the eval span: the trainer only hands over a slice of the training set; the
# predictor trains on it for as long as it likes, where the clock does not run.
SMUGGLE = '''
import time
from pathlib import Path


class Cheat(Base):
    def train_epoch(self, epoch):
        return {{"loss": 1.0, "samples": 60000}}      # claims a whole epoch, trains nothing

    def save(self, path):
        super().save(path)
        np.save(Path(path) / "x.npy", self.x[:{n}])    # the training data, in the "model"
        np.save(Path(path) / "y.npy", self.y[:{n}])

    def load(self, path):
        super().load(path)
        self.stash = Path(path)
        if "{where}" == "load":
            self.smuggled_training()

    def predict(self):
        if "{where}" == "predict":
            self.smuggled_training()
        return super().predict()

    def smuggled_training(self):
        x, y = np.load(self.stash / "x.npy"), np.load(self.stash / "y.npy")
        end = time.monotonic() + 60                      # a minute of training, off the clock
        while time.monotonic() < end:
            z = x[:500] @ self.w
            p = np.exp(z - z.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
            p[np.arange(500), y[:500]] -= 1
            self.w -= 0.5 * x[:500].T @ p / 500
'''



def needs_isolation():
    """The mark of a module of cheats: skipped, with the reason in one line, where this machine
    cannot isolate a reference (no bubblewrap and not root); an error instead under
    DAWNBENCH_REQUIRE_ISOLATION=1, as CI sets, so the path that matters is never skipped there."""
    import pytest

    from harness.sandbox import modes
    if modes.probe().isolated:
        return []
    if os.environ.get("DAWNBENCH_REQUIRE_ISOLATION") == "1":
        raise RuntimeError(f"DAWNBENCH_REQUIRE_ISOLATION=1 but {modes.probe().reason}")
    return pytest.mark.skip(reason=modes.probe().reason)


def write_reference(root: Path, name: str, cheat: str = "", entry: str = "Cheat") -> Path:
    """references/<name>/ holding the base and `cheat` (a class Cheat(Base), or empty for the base)."""
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "train.py").write_text(BASE + "\n\n" + textwrap.dedent(cheat), encoding="utf-8")
    (directory / "reference.toml").write_text(TOML.format(entry=entry if cheat else "Base"), encoding="utf-8")
    return directory


def harness_run(references: Path, name: str, data: Path, results: Path, *args: str,
                env: dict | None = None, timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict | None, Path | None]:
    """`python -m harness run` of one reference; (process, result.json or None, run folder or None)."""
    proc = subprocess.run([sys.executable, "-m", "harness", "run", name, "--references", str(references),
                           "--data", str(data), "--results", str(results), "--no-progress", *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    runs = sorted((results / name).glob("*/")) if (results / name).is_dir() else []
    run_dir = runs[-1] if runs else None
    result = None
    if run_dir and (run_dir / "result.json").is_file():
        result = json.loads((run_dir / "result.json").read_text())
    return proc, result, run_dir


def events(run_dir: Path) -> list[dict]:
    from harness.events import read_events
    return read_events(run_dir / "events.jsonl")


def speed_up(run_dir: Path, factor: float) -> None:
    """Forge a finished run folder as an entrant holding every file could: every clock reading of its
    log multiplied by `factor`, MLPerf's time_ms re-derived from it, each eval's cost figures and bound
    scaled and recomputed by the formula, then result.json's times and the TSV's hours rewritten to
    match. The folder still agrees with itself (`verify` passes it): only running it again tells."""
    from harness import eval_bound
    from harness.events import PREFIX
    from harness.tasks import TASKS

    path = run_dir / "events.jsonl"
    records = [json.loads(line[len(PREFIX):]) for line in path.read_text().splitlines() if line.strip()]
    start_ms = records[0]["time_ms"] - 1000 * records[0]["metadata"]["clock_s"]
    result = json.loads((run_dir / "result.json").read_text())
    task = TASKS[result["task"]]
    for r in records:
        r["metadata"]["clock_s"] = round(r["metadata"]["clock_s"] * factor, 6)
        r["time_ms"] = int(round(start_ms + 1000 * r["metadata"]["clock_s"]))
    clock = {(r["key"], r["metadata"].get("epoch_num")): r["metadata"]["clock_s"] for r in records}
    trained = {r["metadata"].get("epoch_num"): r["metadata"].get("samples") for r in records if r["key"] == "epoch_stop"}
    (examples,) = [r["value"] for r in records if r["key"] == "eval_samples"]
    train_examples = next((r["value"] for r in records if r["key"] == "dawnbench_train_examples"), task.train_examples)
    init_s = clock[("init_stop", None)] - clock[("init_start", None)]
    for i, r in enumerate(e for e in records if e["key"] == "eval_stop"):
        m = r["metadata"]
        for name in ("predictor_s", "predictor_cpu_s", "train_s", "train_cpu_s"):
            if name in m:
                m[name] = round(m[name] * factor, 3)
        if "rank_train_s" in m:
            m["rank_train_s"] = [round(t * factor, 3) for t in m["rank_train_s"]]
        m["eval_bound_s"] = round(eval_bound.EvalBound.of(
            train_s=m["train_s"], eval_examples=examples, train_examples=train_examples,
            rank_train_s=m.get("rank_train_s", ()), start_s=init_s if i == 0 or m.get("fresh_predictor") else None,
            passes=m.get("eval_passes", 1.0)).seconds, 3)
    def train_time(epoch: int) -> float:     # the train spans only, through `epoch` (docs/RULES.md)
        return sum(clock[("epoch_stop", n)] - clock[("epoch_start", n)] for n in trained if n <= epoch)

    for r in records:
        if r["key"] == "run_stop" and r["metadata"].get("train_seconds") is not None:
            r["metadata"]["train_seconds"] = round(train_time(result["history"][-1]["epoch"]), 3)
    path.write_text("".join(f"{PREFIX}{json.dumps(r)}\n" for r in records))

    def tta(epoch: int) -> float:      # the DAWNBench rule, from the forged readings
        stop = clock[("epoch_stop", epoch)]
        spans = [(clock[("eval_start", n)], clock[("eval_stop", n)]) for n in trained if ("eval_stop", n) in clock]
        return stop - sum(b - a for a, b in spans if b <= stop)

    for row in result["history"]:
        row["tta_seconds"] = round(tta(row["epoch"]), 3)
        row["wall_seconds"] = round(clock[("eval_stop", row["epoch"])], 3)
        if "train_seconds" in row:
            row["train_seconds"] = round(train_time(row["epoch"]), 3)
    if result["tta_seconds"] is not None:
        result["tta_seconds"] = result["history"][-1]["tta_seconds"]
        if result.get("train_seconds") is not None:
            result["train_seconds"] = result["history"][-1]["train_seconds"]
    result["wall_seconds"] = round(clock[("run_stop", None)], 3)
    result["spans_seconds"] = {k: round(v * factor, 4) for k, v in result["spans_seconds"].items()}
    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    tsv = run_dir / result["logFilename"]
    rows = [line.split("\t") for line in tsv.read_text().splitlines()]
    hours = {row["epoch"]: tta(row["epoch"]) / 3600 for row in result["history"]}
    tsv.write_text("\n".join("\t".join(row if n == 0 else [row[0], f"{hours[int(row[0])]:.6f}", *row[2:]])
                             for n, row in enumerate(rows)) + "\n")


def entrant_environment(root: Path, plant: dict[str, str], distributions: tuple[str, ...] = ("numpy",)) -> Path:
    """A reference's environment as an entrant's requirements leave it, under `root` (not under /tmp: a sandboxed
    worker's /tmp is its own): `distributions` of this test environment and what they require, hard-linked file
    by file (a worker's view holds the environment's folder, so no link may lead out of it), with `plant` added
    to its site-packages ({relative path: text}: a .pth, a package of the entrant's own build shadowing a real
    one). Its bin/python."""
    from importlib import metadata

    from packaging.requirements import Requirement
    venv = root / "entrant-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    shadowed = {Path(p).parts[0] for p in plant}
    todo, done = list(distributions), set()
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in done:
            continue
        done.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for req in dist.requires or ():
            parsed = Requirement(req)
            if parsed.marker is None or parsed.marker.evaluate({"extra": ""}):
                todo.append(parsed.name)
        for file in dist.files or ():
            source, target = Path(dist.locate_file(file)), site / file
            if file.parts[0] in shadowed or ".." in file.parts or not source.is_file() or target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
    for relative, text in plant.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(textwrap.dedent(text), encoding="utf-8")
    return venv / "bin" / "python"


def marking(marker: Path, what: str) -> str:
    """Python that appends `what`, this process's id and its command line to `marker` (where it can)."""
    return (f"import os, sys\ntry:\n    open({str(marker)!r}, 'a').write('{what} ' + str(os.getpid()) + ' ' + "
            f"' '.join(sys.argv) + chr(10))\nexcept OSError:\n    pass\n")
