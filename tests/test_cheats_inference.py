"""Timed inference requests carry their example (issue 46): a fork of the default that answers from a
table it computed before the timer ran has no eval input to compute it from.

`dawnbench infer` once timed a predictor that held the model and every eval input: its `load()` could
run the model over the whole eval set, off the timer, and answer each timed request by looking its
example up (the latency was then the channel's round trip, not the model's). Now a predictor without
the model prepares the examples, and a server whose view holds the model and none of the task's files
gets each one with its timed request, in an order drawn with the seed.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

from cheats import needs_isolation
from conftest import REPO, cli_env

pytestmark = needs_isolation()

# The fork, as an entrant writes it: the default's network, made slow (a 20 ms pause stands for a large
# model), and a table of every eval image's answer, keyed by the image's bytes, built in load() from
# the eval images it can find: the predictor's own (self.eval_x), or the eval file in its data root.
TABLE = '''

import hashlib
import time

from common.loaders import load_fashion_mnist_images


def key(x) -> str:
    return hashlib.sha256(np.ascontiguousarray(x.detach().float().cpu().numpy()).tobytes()).hexdigest()


class Table(FashionCNN):
    def load(self, path):
        super().load(path)
        images = getattr(self, "eval_x", None)
        if images is None:
            try:
                images = to_input(load_fashion_mnist_images(self.ctx.data_root, "test")).to(self.device)
            except Exception:                           # noqa: BLE001 - no eval file in this view
                pass
        self.table = {}
        if images is not None:
            scores = torch.cat([self.scores(images[i:i + 1000]) for i in range(0, len(images), 1000)])
            self.table = {key(x): s.float().numpy() for x, s in zip(images, scores)}

    def infer(self, example):
        hit = self.table.get(key(example))
        if hit is not None:
            return hit                                  # no model ran: the channel's round trip
        time.sleep(0.02)                                # the model's latency
        return super().infer(example)
'''

ITEMS = 60


def test_a_table_built_in_load_answers_no_timed_request(default_run, fashion_root, tmp_path):
    references = tmp_path / "references"
    fork = references / "fashion-mnist-table"
    shutil.copytree(REPO / "references" / "fashion-mnist-cnn-pytorch", fork,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (fork / "train.py").write_text((fork / "train.py").read_text() + TABLE)
    toml = fork / "reference.toml"
    toml.write_text(toml.read_text().replace('entry = "train:FashionCNN"', 'entry = "train:Table"'))
    out = tmp_path / "infer"
    proc = subprocess.run([sys.executable, "-m", "harness", "infer", "fashion-mnist-table", "--references", str(references),
                           "--data", str(fashion_root), "--model", str(default_run / "model"), "--limit", str(ITEMS),
                           "--warmup", "2", "--threshold", "0.01", "--no-progress", "--out", str(out)],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "inference.json").read_text())
    # Every timed request ran the model: the server never held an eval image to build the table from.
    assert report["latency_ms"]["min"] >= 20.0, report["latency_ms"]
    assert report["items"] == ITEMS and report["top1"] > 0.5, report
