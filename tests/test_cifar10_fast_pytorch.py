"""cifar10-fast-pytorch on the tiny CIFAR-10 fixture, on CPU: the network, the on-device
augmentation, the whitening stem, the weight averaging, the "auto" switches, and a smoke run as
a run drives it: a trainer on the training files only (setup -> one epoch -> save), then a
predictor on the eval images only (setup -> load -> predict -> infer).

Only the smoke run uses the full-width network; the other tests narrow it through the config so
the file stays fast on a small CPU."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import check_inference_entry, check_roles_see_only_their_files

from common.torch_augment import crop_flip
from harness import registry
from harness.reference import Context

NAME = "cifar10-fast-pytorch"
SMALL = {"widths": [16, 32, 32]}     # a narrow network for the tests that are not the smoke run
TRAINABLE, FIXED = 3_190_192, 288     # parameters of the default network (FIXED: whitening filters)


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    """The reference's module (train.py)."""
    import sys
    cls = spec.load_entry_class()
    return sys.modules[cls.__module__]


def context(spec, data_root, tmp_path, role="train", **overrides):
    config = dict(spec.hyperparameters, batch_size=20, **overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, work_dir=tmp_path,
                   show_progress=False, role=role)


def make(spec, views, tmp_path, role="train", **overrides):
    """An instance set up in `role` on that role's view of the data (conftest.role_views)."""
    ref = spec.load_entry_class()()
    ref.setup(context(spec, views[role], tmp_path, role, **overrides))
    return ref


def predictor_of(trainer, views, tmp_path):
    """A predictor loaded with what `trainer` saves: what the harness scores."""
    trainer.save(tmp_path / "model")
    predictor = type(trainer)()
    predictor.setup(dataclasses.replace(trainer.ctx, role="predict", data_root=views["predict"]))
    predictor.load(tmp_path / "model")
    return predictor


def center(ref, idx):
    """The un-augmented training images `idx`: the centre of the padded images."""
    pad = ref.ctx.config["crop_pad"]
    return ref.train_x[idx][:, :, pad:pad + 32, pad:pad + 32]


# ------------------------------------------------------------------------------------ the network

def test_spec_and_parameter_count(spec, train):
    assert spec.task.name == "cifar10" and spec.framework == "pytorch"
    cfg = spec.hyperparameters
    assert cfg["widths"] == [64, 256, 256] and cfg["epochs"] == 10
    assert (cfg["compile"], cfg["bf16"], cfg["channels_last"]) == ("auto", "auto", "auto")
    trainable, fixed = train.count_parameters(widths=cfg["widths"], residual_stages=cfg["residual_stages"],
                                              stem_kernel=cfg["stem_kernel"])
    print(f"{NAME}: {trainable:,} trainable parameters + {fixed} fixed (whitening)")
    assert (trainable, fixed) == (TRAINABLE, FIXED)
    net = train.FastNet(**SMALL).eval()
    with torch.no_grad():
        assert net(torch.randn(3, 3, 32, 32)).shape == (3, 10)


def test_whitening_filters_decorrelate_patches(train):
    gen = torch.Generator().manual_seed(0)
    # Correlated channels and smooth images: far from white.
    base = F.avg_pool2d(torch.randn(64, 1, 34, 34, generator=gen), 3, stride=1)
    images = torch.cat([base, 0.5 * base + 0.1 * torch.randn(64, 1, 32, 32, generator=gen),
                        torch.randn(64, 1, 32, 32, generator=gen)], dim=1)
    filters = train.whitening_filters(images, kernel=2, eps=1e-6)
    assert filters.shape == (24, 3, 2, 2)
    assert torch.equal(filters[12:], -filters[:12])
    out = F.conv2d(images, filters[:12]).permute(0, 2, 3, 1).reshape(-1, 12).double()
    cov = torch.cov(out.T)
    torch.testing.assert_close(cov, torch.eye(12, dtype=torch.float64), atol=1e-3, rtol=0)


# ------------------------------------------------------------------------------------ augmentation

def test_crop_flip_gives_the_expected_pixels():
    padded = torch.arange(16.0).view(1, 1, 4, 4)          # rows 0-3, columns 0-3: value = 4 row + col
    one = torch.tensor([1])
    out = crop_flip(padded, dy=one, dx=torch.tensor([2]), flip=torch.tensor([True]), size=2)
    # rows 1-2, columns 2-3, mirrored: column 3 first.
    assert torch.equal(out, torch.tensor([[[[7.0, 6.0], [11.0, 10.0]]]]))
    out = crop_flip(padded, dy=torch.tensor([0]), dx=one, flip=torch.tensor([False]), size=3)
    assert torch.equal(out, torch.tensor([[[[1.0, 2.0, 3.0], [5.0, 6.0, 7.0], [9.0, 10.0, 11.0]]]]))

    # A 32 x 32 image with reflected borders, against numpy.
    image = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    padded = F.pad(image, (2, 2, 2, 2), mode="reflect")
    reference = np.pad(image.numpy(), ((0, 0), (0, 0), (2, 2), (2, 2)), mode="reflect")
    dy, dx, flip = torch.tensor([0, 4]), torch.tensor([3, 1]), torch.tensor([True, False])
    out = crop_flip(padded, dy, dx, flip)
    np.testing.assert_array_equal(out[0].numpy(), reference[0, :, 0:32, 3:35][:, :, ::-1])
    np.testing.assert_array_equal(out[1].numpy(), reference[1, :, 4:36, 1:33])
    centre = crop_flip(padded, torch.tensor([2, 2]), torch.tensor([2, 2]), torch.tensor([False, False]))
    assert torch.equal(centre, image)


def test_on_device_augmentation(spec, cifar10_views, tmp_path):
    ref = make(spec, cifar10_views, tmp_path, **SMALL)
    pad = spec.hyperparameters["crop_pad"]
    assert ref.train_x.shape == (100, 3, 32 + 2 * pad, 32 + 2 * pad) and ref.train_x.device == ref.device
    idx = torch.arange(16)
    original = center(ref, idx)
    shifts = torch.randint(0, 2 * pad + 1, (2, 16), generator=torch.Generator().manual_seed(0))
    out = ref.augment(idx, shifts, epoch=1)
    assert out.shape == (16, 3, 32, 32) and out.dtype == torch.float32
    assert not torch.equal(out, original)
    moved = (shifts != pad).any(0) | ref.flip_odd[idx]
    for i in range(16):
        assert torch.equal(out[i], original[i]) != bool(moved[i])
    # Alternating flips: with no translation, each image is mirrored in exactly one of two
    # consecutive epochs, and a random half of them in each.
    still = torch.full((2, 16), pad)
    odd, even = ref.augment(idx, still, epoch=1), ref.augment(idx, still, epoch=2)
    assert torch.equal(odd.flip(3), even)
    for i in range(16):
        assert torch.equal(odd[i], original[i]) != torch.equal(even[i], original[i])
    assert 0 < int(ref.flip_odd.sum()) < 100


# --------------------------------------------------------------------------------------- training

def test_loss_falls_on_a_repeated_batch(spec, cifar10_views, tmp_path):
    ref = make(spec, cifar10_views, tmp_path, **SMALL)
    idx = torch.arange(10)
    x, y = center(ref, idx), ref.train_y[idx]
    for group in ref.opt.param_groups:
        group["lr"] = 0.1
    losses = [ref.train_step(x, y).item() for _ in range(20)]
    assert all(math.isfinite(v) for v in losses)
    # Label smoothing 0.2 keeps the loss above ~0.87 even for a perfect fit; it starts near ln 10.
    assert losses[0] > 2.0 and losses[-1] < 0.55 * losses[0], losses


def test_ema_weights_are_what_predict_uses(spec, cifar10_views, tmp_path):
    ref = make(spec, cifar10_views, tmp_path, ema_every=1, **SMALL)
    assert ref.ema is not ref.net and not ref.ema.training
    ema_before = {k: v.clone() for k, v in ref.ema.state_dict().items()}
    ref.train_epoch(1)                                       # 5 steps, 5 EMA updates
    assert ref.ema_updates == 5
    raw, ema = ref.net.state_dict(), ref.ema.state_dict()
    # The whitening filters are fixed; every trained weight has moved, and the average lags it.
    assert torch.equal(ema["stem.0.weight"], raw["stem.0.weight"])
    trained = [k for k, v in ema.items() if v.is_floating_point() and k != "stem.0.weight"]
    assert all(not torch.equal(ema[k], ema_before[k]) for k in trained)
    assert all(not torch.equal(ema[k], raw[k]) for k in trained)

    # The trainer saves the averaged weights, and the predictor scores with them.
    predictor = predictor_of(ref, cifar10_views, tmp_path)
    scores = predictor.predict()
    x = predictor.eval_x
    with torch.no_grad():
        ref.net.eval()
        by_ema = ((ref.ema(x) + ref.ema(x.flip(3))) / 2).numpy()
        by_raw = ((ref.net(x) + ref.net(x.flip(3))) / 2).numpy()
    np.testing.assert_allclose(scores, by_ema, rtol=1e-5, atol=1e-5)
    assert np.abs(scores - by_raw).max() > 1e-3

    off = make(spec, cifar10_views, tmp_path, ema_decay=0.0, **SMALL)
    assert off.ema is off.net


def test_auto_switches_resolve_off_on_cpu(spec, train, cifar10_views, tmp_path):
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert train.resolve_switch("auto", cpu) is False and train.resolve_switch("auto", cuda) is True
    assert train.resolve_switch("true", cpu) is True and train.resolve_switch(False, cuda) is False
    assert train.resolve_switch("off", cuda) is False
    with pytest.raises(ValueError, match="auto"):
        train.resolve_switch("maybe", cpu)
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: 'auto' means on")
    ref = make(spec, cifar10_views, tmp_path, **SMALL)
    assert ref.device.type == "cpu"
    assert (ref.use_compile, ref.use_bf16, ref.memory_format) == (False, False, torch.contiguous_format)
    assert ref.model is ref.net                             # neither compiled nor wrapped
    predictor = make(spec, cifar10_views, tmp_path, "predict", **SMALL)
    assert (predictor.use_bf16, predictor.memory_format) == (False, torch.contiguous_format)
    assert predictor.eval_x.is_contiguous() and predictor.predict().dtype == np.float32


# ------------------------------------------------------------------------------- end to end, CPU

@pytest.mark.recipe_run
def test_reference_smoke(spec, cifar10_root, cifar10_views, tmp_path):
    torch.manual_seed(0)
    trainer = make(spec, cifar10_views, tmp_path)            # the full-width network, batch 20
    assert not hasattr(trainer, "eval_x")
    stats = trainer.train_epoch(1)
    assert math.isfinite(stats["loss"]) and stats["samples"] == 100 and stats["lr"] > 0
    trainer.save(tmp_path / "model")
    saved = torch.load(tmp_path / "model" / "model.pt")
    assert all(torch.equal(saved[k], v) for k, v in trainer.ema.state_dict().items())   # the averaged weights

    predictor = make(spec, cifar10_views, tmp_path, "predict")
    assert not hasattr(predictor, "train_x") and not hasattr(predictor, "opt")
    predictor.load(tmp_path / "model")
    # The whitening filters came with the saved weights: the predictor never saw a training image.
    assert torch.equal(predictor.net.stem[0].weight, trainer.ema.stem[0].weight)
    scores = predictor.predict()
    assert isinstance(scores, np.ndarray) and scores.shape == (50, 10) and scores.dtype == np.float32
    assert np.isfinite(scores).all()
    np.testing.assert_allclose(scores, trainer.scores(predictor.eval_x).numpy(), rtol=1e-5, atol=1e-5)
    inputs = predictor.eval_inputs()
    assert len(inputs) == 50
    one = predictor.infer(inputs[0])
    assert one.shape == (10,)
    np.testing.assert_allclose(one, scores[0], rtol=1e-4, atol=1e-4)
    check_inference_entry(spec, tmp_path / "model", predictor.ctx.config, cifar10_root, tmp_path / "infer", scores)


def test_roles_see_only_their_files(spec, cifar10_views, tmp_path):
    check_roles_see_only_their_files(spec.load_entry_class(),
                                     lambda role, root: context(spec, root, tmp_path, role, **SMALL), cifar10_views)
