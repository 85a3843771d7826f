"""The CIFAR-10 ResNet recipe in PyTorch (references/cifar10-resnet*-pytorch/train.py, one copy in
each of the five references): the network against the paper, the augmentation, the schedule, and
a smoke run of every reference on the tiny CIFAR-10 fixture, as a run drives it: a trainer on the
training files only (setup -> one epoch -> save), then a predictor on the eval images only (setup
-> load -> predict -> infer). The network tests read cifar10-resnet56-pytorch's copy; the smoke
runs and test_copies_are_one_recipe cover the other four."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from cifar10_resnets import EXACT, PUBLISHED, recipe, references
from conftest import check_inference_entry, check_roles_see_only_their_files

from common.torch_augment import crop_flip
from harness import registry
from harness.reference import Context

REFERENCES = references("pytorch")


@pytest.fixture(scope="module")
def train():
    """cifar10-resnet56-pytorch's train.py."""
    return recipe("cifar10-resnet56-pytorch")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread: on a shared CPU, OpenMP threads spin-waiting for a busy core made
    these tests up to 20x slower and erratic; one thread keeps them at about a minute."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------- the network

@pytest.mark.parametrize("depth", sorted(PUBLISHED))
def test_parameter_counts_match_the_paper(depth, train):
    count = train.count_parameters(depth, "basic")
    assert abs(count - PUBLISHED[depth]) / PUBLISHED[depth] < 0.02, count


def test_exact_parameter_counts(train):
    counts = {key: train.count_parameters(*key) for key in EXACT}
    for (depth, block), count in counts.items():
        print(f"ResNet-{depth} {block}: {count:,} parameters")
    assert counts == EXACT


@pytest.mark.parametrize("depth, block, n", [(20, "basic", 3), (56, "basic", 9), (110, "basic", 18),
                                             (164, "preact-basic", 27), (164, "preact-bottleneck", 18),
                                             (29, "preact-bottleneck", 3), (8, "basic", 1)])
def test_depth_is_weighted_layers(depth, block, n, train):
    assert train.blocks_per_stage(depth, block) == n
    model = train.CifarResNetModel(depth, block)
    assert [len(stage) for stage in model.stages] == [n, n, n]
    # depth counts the stem, the convolutions on every block's main path and the linear layer;
    # projection shortcuts are not layers of the depth.
    main_path = [m for name, m in model.named_modules()
                 if isinstance(m, nn.Conv2d) and ".shortcut" not in name]
    assert len(main_path) + 1 == depth


@pytest.mark.parametrize("depth, block", [(21, "basic"), (2, "basic"), (20, "bottleneck2"), (30, "preact-bottleneck"),
                                          (29, "bottleneck")])
def test_impossible_depths_are_refused(depth, block, train):
    with pytest.raises(ValueError, match="depth|block"):
        train.blocks_per_stage(depth, block)


def test_shapes_and_shortcuts(train):
    torch.manual_seed(0)
    for depth, block in [(20, "basic"), (20, "preact-basic"), (29, "preact-bottleneck")]:
        model = train.CifarResNetModel(depth, block).eval()
        with torch.no_grad():
            assert model(torch.randn(3, 3, 32, 32)).shape == (3, 10)
    # Option A: stride-2 subsampling, zero channels padded evenly on both sides, no parameters.
    blk = train.BasicBlock(16, 32, stride=2)
    x = torch.randn(2, 16, 8, 8)
    s = blk.shortcut(x)
    assert s.shape == (2, 32, 4, 4)
    assert torch.equal(s[:, 8:24], x[:, :, ::2, ::2])
    assert not s[:, :8].any() and not s[:, 24:].any()
    # Pre-activation: a bare 1x1 projection (no BN) only where the shape changes, else none (identity).
    for block, c_in, width, stride, projects in [(train.PreActBlock, 16, 16, 1, False), (train.PreActBlock, 16, 32, 2, True),
                                                 (train.PreActBottleneck, 64, 16, 1, False),
                                                 (train.PreActBottleneck, 16, 16, 1, True),
                                                 (train.PreActBottleneck, 64, 32, 2, True)]:
        shortcut = block(c_in, width, stride).shortcut
        if not projects:
            assert shortcut is None
            continue
        assert isinstance(shortcut, nn.Conv2d) and shortcut.bias is None
        assert (shortcut.kernel_size, shortcut.stride) == ((1, 1), (stride, stride))
        assert (shortcut.in_channels, shortcut.out_channels) == (c_in, width * block.expansion)
    # The pre-activation network: no BN after the stem, one BN and ReLU after the last block.
    model = train.CifarResNetModel(20, "preact-basic")
    assert [type(m) for m in model.stem] == [nn.Conv2d]
    assert [type(m) for m in model.head] == [nn.BatchNorm2d, nn.ReLU]


def test_resnet20_overfits_one_batch(train):
    torch.manual_seed(0)
    model = train.CifarResNetModel(20, "basic")
    x = train.normalize(torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8))
    y = torch.arange(16) % 10
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(20):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# ----------------------------------------------------------------------------- data, schedule

def test_crop_flip_keeps_shapes_and_moves_pixels(train):
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (8, 32, 32, 3), dtype=torch.uint8, generator=gen).numpy()
    padded = train.to_padded_chw(images)
    assert padded.shape == (8, 3, 40, 40) and padded.dtype == torch.uint8
    assert not padded[:, :, :4].any() and not padded[:, :, :, -4:].any()      # black border
    original = torch.from_numpy(images).permute(0, 3, 1, 2)
    center = torch.full((8,), train.PAD)
    no = torch.zeros(8, dtype=torch.bool)
    assert torch.equal(crop_flip(padded, center, center, no), original)
    assert torch.equal(crop_flip(padded, center, center, ~no), original.flip(3))
    dx = torch.randint(0, 9, (8,), generator=gen)
    dy = torch.randint(0, 9, (8,), generator=gen)
    flip = torch.rand(8, generator=gen) < 0.5
    out = crop_flip(padded, dy, dx, flip)
    assert out.shape == original.shape and out.dtype == torch.uint8
    moved = (dx != train.PAD) | (dy != train.PAD) | flip
    assert moved.any()
    for i in range(8):
        assert torch.equal(out[i], original[i]) != bool(moved[i])
        # the crop is the padded image's window at (dy, dx), mirrored where flipped
        window = padded[i, :, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
        assert torch.equal(out[i], window.flip(2) if flip[i] else window)
    x = train.normalize(out)
    assert x.dtype == torch.float32 and x.shape == (8, 3, 32, 32)


# ------------------------------------------------------------------- every reference, end to end

def _context(spec, data_root, tmp_path, role="train", **overrides):
    config = dict(spec.hyperparameters, batch_size=16, **overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, work_dir=tmp_path,
                   show_progress=False, role=role)


@pytest.mark.recipe_run
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_smoke(name, cifar10_root, cifar10_views, tmp_path):
    spec = registry.load_spec(name)
    assert (spec.hyperparameters["depth"], spec.hyperparameters["block"]) == REFERENCES[name]
    assert spec.task.name == "cifar10" and spec.max_epochs == 181
    cls = spec.load_entry_class()
    torch.manual_seed(0)
    trainer = cls()
    trainer.setup(_context(spec, cifar10_views["train"], tmp_path, "train"))
    assert not hasattr(trainer, "eval_x")
    stats = trainer.train_epoch(1)
    n_train = len(trainer.train_x)
    assert math.isfinite(stats["loss"]) and stats["lr"] == 0.01
    assert stats["samples"] == (n_train // 16) * 16
    trainer.save(tmp_path / "model")

    predictor = cls()
    ctx = _context(spec, cifar10_views["predict"], tmp_path, "predict")
    predictor.setup(ctx)
    assert not hasattr(predictor, "train_x") and not hasattr(predictor, "opt")
    predictor.load(tmp_path / "model")
    scores = predictor.predict()
    assert isinstance(scores, np.ndarray) and scores.shape == (50, 10)
    assert np.isfinite(scores).all()
    # The saved model is the trained one: the trainer's network scores the eval images alike.
    trainer.net.eval()
    np.testing.assert_allclose(scores, trainer.scores(predictor.eval_x).numpy(), rtol=1e-5, atol=1e-5)
    inputs = predictor.eval_inputs()
    assert len(inputs) == 50
    one = predictor.infer(inputs[0])
    assert one.shape == (10,)
    np.testing.assert_allclose(one, scores[0], rtol=1e-4, atol=1e-4)
    check_inference_entry(spec, tmp_path / "model", ctx.config, cifar10_root, tmp_path / "infer", scores)


def test_roles_see_only_their_files(cifar10_views, tmp_path):
    spec = registry.load_spec("cifar10-resnet20-pytorch")
    check_roles_see_only_their_files(spec.load_entry_class(),
                                     lambda role, root: _context(spec, root, tmp_path, role, depth=8), cifar10_views)


def test_learning_rate_schedule(cifar10_views, tmp_path):
    spec = registry.load_spec("cifar10-resnet20-pytorch")
    ref = spec.load_entry_class()()
    ref.setup(_context(spec, cifar10_views["train"], tmp_path))
    lrs = {epoch: ref.lr_at(epoch) for epoch in (1, 2, 91, 92, 136, 137, 181)}
    assert lrs == {1: 0.01, 2: 0.1, 91: 0.1, 92: 0.01, 136: 0.01, 137: 0.001, 181: 0.001}
    with pytest.raises(ValueError, match="lr_values"):
        spec.load_entry_class()().setup(_context(spec, cifar10_views["train"], tmp_path, lr_values=[0.1, 0.01]))


def test_training_batches_are_the_epochs_draws(cifar10_views, tmp_path, train):
    """What the network trains on, pinned: batch i holds the images order[16 i : 16 (i + 1)], each
    the window of the padded image at rows dy, columns dx, mirrored where flipped, where order, dx,
    dy and the flips are drawn in that order from one generator seeded seed * 1000 + epoch."""
    class Recorder(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net, self.seen = net, []

        def forward(self, x):
            self.seen.append(x.detach().clone())
            return self.net(x)

    spec = registry.load_spec("cifar10-resnet20-pytorch")
    ref = spec.load_entry_class()()
    ref.setup(_context(spec, cifar10_views["train"], tmp_path, depth=8))
    ref.model = recorder = Recorder(ref.model)
    ref.train_epoch(3)
    n = len(ref.train_x)
    gen = torch.Generator().manual_seed(0 * 1000 + 3)
    order = torch.randperm(n, generator=gen)
    dx = torch.randint(0, 2 * train.PAD + 1, (n,), generator=gen)
    dy = torch.randint(0, 2 * train.PAD + 1, (n,), generator=gen)
    flips = torch.rand(n, generator=gen) < 0.5
    assert len(recorder.seen) == ref.steps_per_epoch == n // 16
    for i, batch in enumerate(recorder.seen):
        for j, k in enumerate(order[i * 16:(i + 1) * 16]):
            window = ref.train_x[k, :, dy[k]:dy[k] + 32, dx[k]:dx[k] + 32]
            expected = train.normalize((window.flip(2) if flips[k] else window)[None])[0]
            assert torch.equal(batch[j], expected), (i, j)


def test_copies_are_one_recipe():
    """The five references carry the same code; only their docstrings' opening lines differ."""
    codes = {name: _code(registry.load_spec(name).directory / "train.py") for name in REFERENCES}
    assert len(set(codes.values())) == 1, sorted(codes)


def _code(path) -> str:
    text = path.read_text()
    return text[text.index('The network ("Deep Residual'):]
