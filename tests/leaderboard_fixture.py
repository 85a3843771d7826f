"""Hand-written DAWNBench v1 entries with known rankings, for the leaderboard, site and analysis tests.

CIFAR10 (threshold 94%) training entries, by hours of the first log row at or over 94:
  alice 0.5 h ($3.06/h)  erin 0.75 h (2018-05-01, $2/h)  gina 0.75 h (2018-05-01, $2/h: the name breaks the tie)
  dave 0.75 h (reaches 94.0, dips to 93.5, reaches 94.5 at 1.25 h; 2018-06-01, $2/h)  frank 1.0 h (no price)
  evil 2.0 h (hostile strings everywhere, $1/h)  bob 3.0 h (crosses late, $0.9/h)  carol never reaches it.
CIFAR10 inference: alice 10 ms (costPerHour only), henry 20 ms (no price), old 50 ms (only the v1 `cost`),
  slow 5 ms but 93% (under the threshold). Plus an entry that is not JSON and one whose log has text in a
  number column (both skipped), a SQuAD entry with F1 as a fraction and an ImageNet inference entry named `..`.
"""
from __future__ import annotations

import json
from pathlib import Path

XSS = {
    "author": "<script>alert(1)</script>",
    "model": '"><img src=x onerror=alert(1)>',
    "hardware": "<b onmouseover=alert(1)>x</b>",
    "framework": "'\"><svg onload=alert(1)>",
    "codeURL": "javascript:alert(1)",
    "commitHash": "<script>alert(2)</script>",
}
EVIL_STEM = 'evil_"><img src=x onerror=alert(1)>'
HEADERS = {"CIFAR10": "epoch\thours\ttop1Accuracy", "SQuAD": "epoch\thours\tf1Score",
           "ImageNet": "epoch\thours\ttop1Accuracy\ttop5Accuracy", "FashionMNIST": "epoch\thours\ttop1Accuracy"}


def _fields(stem: str, **extra) -> dict:
    author, model, hardware, framework = (stem.split("_") + ["x"] * 4)[:4]
    fields = {"version": "v1.0", "author": author, "authorEmail": f"{author}@example.org", "framework": framework,
              "codeURL": f"https://example.org/{author}/code", "model": model, "hardware": hardware,
              "timestamp": "2018-04-20", "misc": {}}
    fields.update(extra)
    return {k: v for k, v in fields.items() if v is not None}


def train(root: Path, task: str, stem: str, rows: list[tuple], **extra) -> Path:
    folder = Path(root) / task / "train"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(_fields(stem, **extra)))
    lines = [HEADERS[task]] + ["\t".join(str(c) for c in row) for row in rows]
    (folder / f"{stem}.tsv").write_text("\n".join(lines) + "\n")
    return path


def inference(root: Path, task: str, stem: str, **extra) -> Path:
    folder = Path(root) / task / "inference"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(_fields(stem, **extra)))
    return path


def write_entries(root: Path) -> Path:
    root = Path(root)
    train(root, "CIFAR10", "alice_resnet18_p3.2xlarge_pytorch",
          [(1, 0.1, 80.0), (2, 0.3, 92.0), (3, 0.5, 94.1), (4, 0.7, 95.0)], costPerHour=3.06,
          commitHash="abc123")
    train(root, "CIFAR10", "bob_resnet50_k80_tensorflow",
          [(1, 0.5, 70.0), (5, 2.5, 93.9), (6, 3.0, 94.0)], costPerHour=0.9, timestamp="2017-10-01")
    train(root, "CIFAR10", "carol_cnn_cpu_pytorch", [(1, 1.0, 90.0), (2, 2.0, 93.99)], costPerHour=0.5)
    train(root, "CIFAR10", "dave_dip_v100_pytorch",
          [(1, 0.25, 90.0), (2, 0.75, 94.0), (3, 1.0, 93.5), (4, 1.25, 94.5)], costPerHour=2.0,
          timestamp="2018-06-01")
    train(root, "CIFAR10", "erin_tie_v100_pytorch", [(1, 0.75, 94.2)], costPerHour=2.0, timestamp="2018-05-01")
    train(root, "CIFAR10", "gina_tie_v100_pytorch", [(1, 0.75, 94.2)], costPerHour=2.0, timestamp="2018-05-01")
    train(root, "CIFAR10", "frank_noprice_tpu_tensorflow", [(1, 1.0, 94.5)], timestamp="2018-05-01")
    train(root, "CIFAR10", EVIL_STEM, [(1, 1.0, 60.0), (2, 2.0, 94.0)], costPerHour=1.0,
          **XSS)
    inference(root, "CIFAR10", "alice_resnet18_p3.2xlarge_pytorch", latency=10.0, top1Accuracy=94.2,
              costPerHour=3.06)
    inference(root, "CIFAR10", "henry_nocost_cpu_onnx", latency=20.0, top1Accuracy=94.0)
    inference(root, "CIFAR10", "old_resnet_k80_caffe", latency=50.0, top1Accuracy=94.5, cost=2e-5)
    inference(root, "CIFAR10", "slow_cnn_cpu_pytorch", latency=5.0, top1Accuracy=93.0, costPerHour=0.1)
    (root / "CIFAR10" / "train" / "broken_x_y_z.json").write_text("{not json")
    train(root, "CIFAR10", "textlog_x_y_z", [(1, "soon", 95.0)])
    train(root, "SQuAD", "ivan_bidaf_k80_tensorflow", [(1, 0.5, 0.70), (2, 1.0, 0.76)], costPerHour=0.9)
    inference(root, "ImageNet", "..", latency=7.0, top5Accuracy=93.5, **XSS)
    return root


TRAIN_TIME_ORDER = ["alice_resnet18_p3.2xlarge_pytorch", "erin_tie_v100_pytorch", "gina_tie_v100_pytorch",
                    "dave_dip_v100_pytorch", "frank_noprice_tpu_tensorflow", EVIL_STEM,
                    "bob_resnet50_k80_tensorflow"]
TRAIN_COST_ORDER = ["erin_tie_v100_pytorch", "gina_tie_v100_pytorch", "dave_dip_v100_pytorch",
                    "alice_resnet18_p3.2xlarge_pytorch", EVIL_STEM, "bob_resnet50_k80_tensorflow"]
LATENCY_ORDER = ["alice_resnet18_p3.2xlarge_pytorch", "henry_nocost_cpu_onnx", "old_resnet_k80_caffe"]
INFERENCE_COST_ORDER = ["alice_resnet18_p3.2xlarge_pytorch", "old_resnet_k80_caffe"]
