"""The Fashion-MNIST twins learn, on the CPU, in seconds (issue 24, part 3).

Each reference's own code (setup, train_epoch, save; a predictor's setup, load, predict) trains on
a Fashion-MNIST written in the official IDX files (tests/fashion_mnist_fixture.py: 5,120 training
and 500 test images whose class is a fixed mirror-symmetric pattern under noise), read through the
harness's checksummed readers from the role views a run gives, and is scored by the task's own
metric against the labels the harness reads. Everything is the recipe's (network, batch 256,
one-cycle Nesterov SGD, coupled weight decay, label smoothing, flips, flip TTA) except the length of
the schedule: `epochs=3`, 60 steps of 20 an epoch, so that warm-up, peak and decay all happen.

What fails it (seeded, then reverted): labels shuffled in the TensorFlow step (top-1 0.104), a
learning rate of 0 in the PyTorch schedule (0.082); labels the reader swaps, a broken network or
predictor alike. What it does not catch: the PyTorch weight decay off (seeded: it still learns);
tests/test_anchor_fashion_mnist.py's two steps by hand do.

Measured (python -m pytest tests/test_learns_fashion_mnist.py, and seeds 0 to 7 of data and
training through tests/learning.py, 2-core CPU shared with other jobs): top-1 1.000 on every seed
for both references. Chance is 0.1 (10 balanced classes; on 500 images its standard deviation is
0.013); the bar, 0.6, is 38 of those above chance and 0.4 below every measured run."""
from __future__ import annotations

import pytest
from conftest import role_views
from fashion_mnist_fixture import fixture_manifest, write_fashion_mnist
from learning import learn

from harness import datasets

SCHEDULE = ["epochs=3"]               # the one-cycle plan over the 3 epochs run here
EPOCHS = 3
TRAIN, TEST = 5120, 500               # 20 steps an epoch at the recipe's batch of 256
CHANCE, BAR = 0.1, 0.6


@pytest.fixture(scope="module")
def fashion(tmp_path_factory):
    """{"root": the data root, "manifest": its checksums, "train"/"predict": the role views}."""
    tmp = tmp_path_factory.mktemp("fashion-learnable")
    root = tmp / "data"
    write_fashion_mnist(root / "fashion-mnist", n_train=TRAIN, n_test=TEST, seed=0)
    manifest = fixture_manifest(tmp / "datasets-fashion-fixture.toml", root / "fashion-mnist")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(datasets.MANIFEST_ENV, str(manifest))
        return {"root": root, "manifest": manifest, **role_views("fashion-mnist", root, tmp / "views")}


@pytest.mark.parametrize("name", ["fashion-mnist-cnn-pytorch", "fashion-mnist-cnn-tensorflow"])
def test_learns_a_pattern_per_class(name, fashion, tmp_path, monkeypatch):
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(fashion["manifest"]))
    learned = learn(name, fashion, fashion["root"], SCHEDULE, EPOCHS, tmp_path)
    assert learned.scores["top1"] >= BAR, (f"{name} reached top-1 {learned.scores['top1']:.3f} (chance {CHANCE}) "
                                           f"in {EPOCHS * TRAIN // 256} steps; losses {learned.losses}")
