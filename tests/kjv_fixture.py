"""A small `kjv` dataset in the exact on-disk format (two UTF-8 text files), and a stand-in language model.

The text is a Markov chain over a few letters in which every letter has two successors, equally likely:
one bit per byte is its entropy, so a byte bigram model learns it to about 1.1 bits per byte within one
epoch, under the kjv-bytes task's 1.95, in a fraction of a second. The files' sha256 go into a
$DAWNBENCH_DATASETS_MANIFEST (the run is unofficial for it).

LM_BASE is an honest causal model of that text in numpy (a byte bigram with add-alpha counts), on the
harness's predictor contract for a language model (docs/RULES.md, "Language-model tasks"): predict(inputs)
gets [N, T] token ids and returns float32 log-probabilities [N, T, 256]. The cheats of
tests/test_cheats_lm.py subclass it, as tests/cheats.py's do its classifier.
"""
from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import numpy as np
from cifar10_fixture import _toml_value, builtin_entry

TRAIN, VAL = "kjv-train.txt", "kjv-val.txt"
ALPHABET = b"abcdefghij klmnop"


def markov_text(n: int, seed: int) -> bytes:
    """n bytes of the chain: each letter followed by one of its two successors (the same in every split)."""
    successors = np.random.default_rng(1234).integers(0, len(ALPHABET), size=(len(ALPHABET), 2))
    rng = np.random.default_rng(seed)
    state, out = 0, bytearray()
    for coin in rng.integers(0, 2, size=n):
        state = int(successors[state, coin])
        out.append(ALPHABET[state])
    return bytes(out)


def write_kjv(directory: Path, n_train: int = 20000, n_val: int = 3000) -> dict[str, bytes]:
    """kjv-train.txt and kjv-val.txt in `directory` (a data root's kjv/)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {TRAIN: markov_text(n_train, 1), VAL: markov_text(n_val, 2)}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


def fixture_manifest(path: Path, directory: Path) -> Path:
    """A $DAWNBENCH_DATASETS_MANIFEST: the built-in [kjv] entry with the fixture's sha256 and sizes."""
    entry = builtin_entry("kjv")
    for name in entry["files"]:
        data = (Path(directory) / name).read_bytes()
        entry["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    lines = ["# Test override of harness/data/datasets.toml, written by tests/kjv_fixture.py", "[kjv]"]
    lines += [f"{json.dumps(key)} = {_toml_value(value)}" for key, value in entry.items()]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)


LM_BASE = '''
import time
from pathlib import Path

import numpy as np

from harness.reference import Reference


class Base(Reference):
    """A byte bigram: log p(next | byte) from add-alpha counts of the training text."""

    def setup(self, ctx):
        self.ctx = ctx
        self.table = np.zeros((256, 256), np.float32)
        if ctx.trains:
            self.text = np.frombuffer((ctx.dataset_dir / "kjv-train.txt").read_bytes(), np.uint8)

    def train_epoch(self, epoch):
        time.sleep(self.ctx.config.get("train_sleep", 0.0))     # a longer epoch: a larger eval bound
        counts = np.full((256, 256), 0.01)
        np.add.at(counts, (self.text[:-1], self.text[1:]), 1.0)
        probs = counts / counts.sum(1, keepdims=True)
        self.table = np.log(probs).astype(np.float32)
        loss = -self.table[self.text[:-1], self.text[1:]].mean()
        return {"loss": float(loss), "samples": len(self.text)}

    def predict(self, inputs):
        return self.table[np.asarray(inputs)]          # row t: the distribution after inputs[:, t]

    def save(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        np.save(Path(path) / "table.npy", self.table)

    def load(self, path):
        self.table = np.load(Path(path) / "table.npy")

    def eval_inputs(self):
        return []

    def infer(self, x):
        return self.table[np.asarray(x)]
'''

LM_TOML = '''task = "kjv-bytes"
framework = "numpy"
model = "byte bigram"
entry = "train:{entry}"
description = "a stand-in language model for tests"

[hyperparameters]
train_sleep = 0.0

[budget]
max_epochs = 1
max_seconds = 300
'''


def write_lm_reference(root: Path, name: str, cheat: str = "", entry: str = "Cheat") -> Path:
    """references/<name>/ holding the stand-in and `cheat` (a class Cheat(Base), or empty for the base)."""
    directory = Path(root) / name
    directory.mkdir(parents=True)
    (directory / "train.py").write_text(LM_BASE + "\n\n" + textwrap.dedent(cheat), encoding="utf-8")
    (directory / "reference.toml").write_text(LM_TOML.format(entry=entry if cheat else "Base"), encoding="utf-8")
    return directory
