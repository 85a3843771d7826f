"""cifar10-airbench-muon-pytorch on the tiny CIFAR-10 fixture, on CPU.

The recipe is airbench94_muon's (KellerJordan/cifar10-airbench `airbench94_muon.py`, MIT licence;
"am:N" below is its line N). Each technique is checked against the anchor's own definition,
restated in this file from the anchor (the network and its init, the whitening, Muon and its
Newton-Schulz iteration, the optimizers' groups and schedule, the loader's augmentation, the TTA
views), never against the reference's own code. The anchor file itself is not imported: it needs
torchvision and CUDA at import, and it lives in the git-ignored .gpu/. Then: the "auto" switches,
and a smoke run as a run drives it (trainer: setup -> one epoch -> save; predictor: setup -> load
-> predict -> infer).

Only the smoke run and the parameter count use the full-width network; the other tests narrow it
through the config so the file stays fast on a small CPU."""
from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import check_inference_entry, check_roles_see_only_their_files

from common.loaders import load_cifar10
from harness import registry
from harness.reference import Context

NAME = "cifar10-airbench-muon-pytorch"
SMALL = {"widths": [16, 32, 32]}     # a narrow network for the tests that are not the smoke run


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    """The reference's module (train.py)."""
    return sys.modules[spec.load_entry_class().__module__]


def context(spec, data_root, tmp_path, role="train", **overrides):
    config = {**spec.hyperparameters, "batch_size": 20, **overrides}
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, work_dir=tmp_path,
                   show_progress=False, role=role)


def make(spec, views, tmp_path, role="train", **overrides):
    """An instance set up in `role` on that role's view of the data (conftest.role_views)."""
    ref = spec.load_entry_class()()
    ref.setup(context(spec, views[role], tmp_path, role, **overrides))
    return ref


def center(ref, idx):
    """The training images `idx` without translation, as stored (a random half mirrored)."""
    pad = ref.ctx.config["crop_pad"]
    return ref.train_x[idx][:, :, pad:pad + 32, pad:pad + 32]


def state(net):
    return {k: v.clone() for k, v in net.state_dict().items()}


# ------------------------------------------------------------ airbench94_muon, as its file defines it

AM_HYP = {"batch_size": 2000, "epochs": 8, "bias_lr": 0.053, "head_lr": 0.67, "wd_per_example": 2e-6,
          "sgd_momentum": 0.85, "muon_lr": 0.24, "muon_momentum": 0.6, "ns_steps": 3, "label_smoothing": 0.2,
          "whiten_bias_epochs": 3, "translate": 2, "widths": [64, 256, 256], "bn_momentum": 0.6, "bn_eps": 1e-12,
          "whiten_kernel": 2, "tta_level": 2}     # am:342-345, 348, 352-353, 361-362, 399, 32, 184, 221-222, 427


def am_newton_schulz(G, steps=3, eps=1e-7):               # am:31-54, eager
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    X /= (X.norm() + eps)
    if G.size(0) > G.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


def am_muon_step(params, buffers, lr, momentum, steps=3):  # am:67-85, nesterov
    for p, buf in zip(params, buffers):
        g = p.grad
        buf.mul_(momentum).add_(g)
        g = g.add(buf, alpha=momentum)
        p.data.mul_(len(p.data) ** 0.5 / p.data.norm())
        p.data.add_(am_newton_schulz(g.reshape(len(g), -1), steps).view(g.shape), alpha=-lr)


class AmBatchNorm(nn.BatchNorm2d):                        # am:183-187
    def __init__(self, num_features, momentum=0.6, eps=1e-12):
        super().__init__(num_features, eps=eps, momentum=1 - momentum)
        self.weight.requires_grad = False


class AmConv(nn.Conv2d):                                  # am:189-196
    def __init__(self, c_in, c_out):
        super().__init__(c_in, c_out, kernel_size=3, padding="same", bias=False)

    def reset_parameters(self):
        super().reset_parameters()
        w = self.weight.data
        torch.nn.init.dirac_(w[:w.size(1)])


class AmConvGroup(nn.Module):                             # am:198-216
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv1, self.pool, self.norm1 = AmConv(c_in, c_out), nn.MaxPool2d(2), AmBatchNorm(c_out)
        self.conv2, self.norm2, self.activ = AmConv(c_out, c_out), AmBatchNorm(c_out), nn.GELU()

    def forward(self, x):
        x = self.activ(self.norm1(self.pool(self.conv1(x))))
        return self.activ(self.norm2(self.conv2(x)))


class AmNet(nn.Module):                                   # am:218-261, in float32 on the CPU
    def __init__(self, widths=AM_HYP["widths"]):
        super().__init__()
        self.whiten = nn.Conv2d(3, 24, 2, padding=0, bias=True)
        self.whiten.weight.requires_grad = False
        self.layers = nn.Sequential(nn.GELU(), AmConvGroup(24, widths[0]), AmConvGroup(widths[0], widths[1]),
                                    AmConvGroup(widths[1], widths[2]), nn.MaxPool2d(3))
        self.head = nn.Linear(widths[2], 10, bias=False)
        w = self.head.weight.data                          # reset(), am:240-245
        w *= 1 / w.std()

    def forward(self, x):
        x = self.layers(F.conv2d(x, self.whiten.weight, self.whiten.bias))
        x = x.view(len(x), -1)
        return self.head(x) / x.size(-1)


def am_whitening(images, eps=5e-4):                       # am:247-254 (in float64 here)
    c, h, w = 3, 2, 2
    patches = images.double().unfold(2, h, 1).unfold(3, w, 1).transpose(1, 3).reshape(-1, c, h, w)
    flat = patches.view(len(patches), -1)
    eigenvalues, eigenvectors = torch.linalg.eigh(flat.T @ flat / len(flat), UPLO="U")
    scaled = eigenvectors.T.reshape(-1, c, h, w) / torch.sqrt(eigenvalues.view(-1, 1, 1, 1) + eps)
    return torch.cat((scaled, -scaled))


def am_crop(images, shifts, r=2, crop=32):               # am:98-107: shifts (B, 2) in [-r, r], rows then columns
    out = torch.empty((len(images), images.shape[1], crop, crop), dtype=images.dtype)
    for sy in range(-r, r + 1):
        for sx in range(-r, r + 1):
            mask = (shifts[:, 0] == sy) & (shifts[:, 1] == sx)
            out[mask] = images[mask, :, r + sy:r + sy + crop, r + sx:r + sx + crop]
    return out


def am_tta(net, inputs):                                  # am:310-324, tta_level 2
    def mirror(x):
        return 0.5 * net(x) + 0.5 * net(x.flip(-1))
    padded = F.pad(inputs, (1,) * 4, "reflect")
    translated = torch.stack([mirror(padded[:, :, 0:32, 0:32]), mirror(padded[:, :, 2:34, 2:34])]).mean(0)
    return 0.5 * mirror(inputs) + 0.5 * translated


class AmOptimizers:
    """am:352-366 and 398-407 on `net`: SGD for the whitening bias, the BN shifts and the head;
    Muon (restated above) for the 4-d trainable tensors; the summed, smoothed loss; the rates set
    before each step as the anchor sets them; the whitening bias detached from `whiten_steps` on."""

    def __init__(self, net, batch, total_steps, whiten_steps):
        wd = AM_HYP["wd_per_example"] * batch
        bias_lr, head_lr = AM_HYP["bias_lr"], AM_HYP["head_lr"]
        self.net, self.total, self.whiten_steps, self.step = net, total_steps, whiten_steps, 0
        self.filters = [p for p in net.parameters() if len(p.shape) == 4 and p.requires_grad]
        norm_biases = [p for n, p in net.named_parameters() if "norm" in n and p.requires_grad]
        self.sgd = torch.optim.SGD([dict(params=[net.whiten.bias], lr=bias_lr, weight_decay=wd / bias_lr),
                                    dict(params=norm_biases, lr=bias_lr, weight_decay=wd / bias_lr),
                                    dict(params=[net.head.weight], lr=head_lr, weight_decay=wd / head_lr)],
                                   momentum=AM_HYP["sgd_momentum"], nesterov=True)
        self.initial = [g["lr"] for g in self.sgd.param_groups]
        self.buffers = [torch.zeros_like(p) for p in self.filters]

    def train_step(self, x, y):
        net = self.net
        bias = net.whiten.bias if self.step < self.whiten_steps else net.whiten.bias.detach()
        out = net.head_input(x, bias)
        F.cross_entropy(out, y, label_smoothing=AM_HYP["label_smoothing"], reduction="sum").backward()
        self.sgd.param_groups[0]["lr"] = self.initial[0] * (1 - self.step / self.whiten_steps)
        for group, lr in zip(self.sgd.param_groups[1:], self.initial[1:]):
            group["lr"] = lr * (1 - self.step / self.total)
        self.sgd.step()
        am_muon_step(self.filters, self.buffers, AM_HYP["muon_lr"] * (1 - self.step / self.total),
                     AM_HYP["muon_momentum"], AM_HYP["ns_steps"])
        net.zero_grad(set_to_none=True)
        self.step += 1


def am_copy_of(ours):
    """An AmNet holding a copy of our network's weights and buffers (the same order of tensors)."""
    theirs = AmNet([group.conv1.out_channels for group in ours.blocks])
    theirs.load_state_dict(dict(zip(theirs.state_dict(), ours.state_dict().values())))

    def head_input(x, bias):
        h = theirs.layers(F.conv2d(x, theirs.whiten.weight, bias)).view(len(x), -1)
        return theirs.head(h) / h.size(-1)
    theirs.head_input = head_input
    return theirs


# ------------------------------------------------------------------------------------ the network

def test_hyperparameters_are_airbench94_muons(spec):
    cfg = spec.hyperparameters
    assert spec.task.name == "cifar10" and spec.framework == "pytorch"
    ours = {"batch_size": cfg["batch_size"], "epochs": cfg["epochs"], "bias_lr": cfg["bias_lr"],
            "head_lr": cfg["head_lr"], "wd_per_example": cfg["weight_decay"], "sgd_momentum": cfg["sgd_momentum"],
            "muon_lr": cfg["muon_lr"], "muon_momentum": cfg["muon_momentum"], "ns_steps": cfg["ns_steps"],
            "label_smoothing": cfg["label_smoothing"], "whiten_bias_epochs": cfg["whiten_bias_epochs"],
            "translate": cfg["crop_pad"], "widths": cfg["widths"], "bn_momentum": cfg["bn_momentum"],
            "bn_eps": cfg["bn_eps"], "whiten_kernel": cfg["stem_kernel"], "tta_level": cfg["tta_level"]}
    assert ours == AM_HYP
    assert (cfg["compile"], cfg["bf16"], cfg["channels_last"]) == ("false", "auto", "auto")
    assert spec.max_epochs == AM_HYP["epochs"]          # past the schedule the rates are 0


def test_network_is_airbench94_muons(train):
    """Same parameters (shapes, order, which are trained) and the same function as the anchor's net."""
    trainable, fixed = train.count_parameters()
    params = list(AmNet().parameters())
    assert (trainable, fixed) == (sum(p.numel() for p in params if p.requires_grad),
                                  sum(p.numel() for p in params if not p.requires_grad)) == (1_971_352, 1_440)
    ours, theirs = train.MuonNet(**SMALL), AmNet(SMALL["widths"])
    assert [(tuple(p.shape), p.requires_grad) for p in ours.parameters()] == \
           [(tuple(p.shape), p.requires_grad) for p in theirs.parameters()]
    theirs.load_state_dict(dict(zip(theirs.state_dict(), ours.state_dict().values())))
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    for mode in (True, False):                           # batch statistics, then running statistics
        ours.train(mode), theirs.train(mode)
        with torch.no_grad():
            out = ours(x)
            torch.testing.assert_close(out, theirs(x), rtol=1e-5, atol=1e-6)
    assert out.shape == (4, 10)
    for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b)                  # BN momentum: the running statistics moved alike


def test_the_initialization_is_airbench94_muons(train):
    """Dirac on each 3x3 conv's first filters, BN scales fixed at 1 (eps 1e-12, momentum 0.6 in
    airbench's sense), the head at unit standard deviation, the whitening bias drawn as PyTorch draws
    a convolution's bias (am:224 is a plain nn.Conv2d, reset at am:242), not zero."""
    torch.manual_seed(0)
    net = train.MuonNet(**SMALL)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == 6
    for conv in convs:
        c_in = conv.in_channels
        identity = torch.zeros(min(c_in, conv.out_channels), c_in, 3, 3)
        identity[range(len(identity)), range(len(identity)), 1, 1] = 1.0
        assert torch.equal(conv.weight[:c_in], identity)
        if conv.out_channels > c_in:
            assert conv.weight[c_in:].abs().sum() > 0
    norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(norms) == 6 and all(torch.equal(m.weight, torch.ones_like(m.weight)) and not m.weight.requires_grad
                                   and m.bias.requires_grad and m.eps == 1e-12
                                   and m.momentum == pytest.approx(0.4) for m in norms)
    assert net.head.weight.std().item() == pytest.approx(1.0, rel=1e-5) and net.head.bias is None
    bias = net.whiten.bias
    assert bias.requires_grad and not net.whiten.weight.requires_grad
    assert bias.abs().max() <= 1 / math.sqrt(12) and bias.abs().sum() > 0


def test_whitening_matches_airbench94_muon(train, spec, cifar10_views, tmp_path):
    gen = torch.Generator().manual_seed(0)
    # Correlated channels, smooth images and a mean away from 0: far from white.
    base = F.avg_pool2d(torch.randn(64, 1, 34, 34, generator=gen), 3, stride=1) + 0.3
    images = torch.cat([base, 0.5 * base + 0.1 * torch.randn(64, 1, 32, 32, generator=gen),
                        torch.randn(64, 1, 32, 32, generator=gen)], dim=1)
    ours, theirs = train.whitening_filters(images, kernel=2).double(), am_whitening(images)
    assert ours.shape == (24, 3, 2, 2) and torch.equal(ours[12:], -ours[:12])
    # Each filter is the anchor's, in the anchor's order, up to its sign (an eigenvector's sign is arbitrary).
    signs = torch.sign((ours[:12] * theirs[:12]).sum((1, 2, 3))).view(-1, 1, 1, 1)
    torch.testing.assert_close(ours[:12] * signs, theirs[:12], rtol=1e-4, atol=1e-4)
    # setup: from the first 5,000 training images (all 100 of the fixture), before any mirroring (am:385).
    ref = make(spec, cifar10_views, tmp_path, **SMALL)
    x = train.to_device_images(load_cifar10(cifar10_views["train"], "train")[0][:5000], torch.device("cpu"))
    assert torch.equal(ref.net.whiten.weight, train.whitening_filters(x, 2))


# -------------------------------------------------------------------------------------------- Muon

# The 3x3 filters of the full network, flattened as Muon flattens them (out, in x 3 x 3), and a tall one.
FILTER_SHAPES = [(64, 24 * 9), (64, 64 * 9), (256, 64 * 9), (256, 256 * 9), (576, 64)]


@pytest.mark.parametrize("shape", FILTER_SHAPES)
def test_newton_schulz_makes_the_update_near_orthogonal(train, shape):
    """3 quintic steps on a Gaussian matrix: every singular value lands near 1 (the anchor's claim,
    am:38-40, "S' ~ Uniform(0.5, 1.5)"; measured here 0.67 to 1.21 on these shapes), and the singular
    vectors are G's: U^T X V is diagonal, so the step is U S' V^T, the direction of U V^T."""
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)), dtype=torch.float64)
    x = train.orthogonalize(g, steps=3)
    assert x.dtype == torch.bfloat16 and x.shape == g.shape
    s = torch.linalg.svdvals(x.double())
    assert 0.5 < s.min() and s.max() < 1.5, (s.min(), s.max())
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    core = u.T @ x.double() @ vh.T
    off = core - torch.diag(torch.diagonal(core))
    assert off.abs().max() < 0.05 * torch.diagonal(core).abs().min(), off.abs().max()
    # against the anchor's iteration, restated: bf16 both, the same operations
    torch.testing.assert_close(x.double(), am_newton_schulz(g, 3).double(), rtol=0, atol=1e-2)
    # without the iteration's pull, a matrix is far from orthogonal: the test can fail
    assert torch.linalg.svdvals(g / g.norm()).max() < 0.5


def test_muon_steps_equal_a_computation_by_hand(train):
    """Three steps of the reference's Muon against three written out here from the update rule:
    Nesterov momentum, the weight renormalized to norm sqrt(out channels), then minus lr x the
    Newton-Schulz image of the update (am:67-85)."""
    gen = torch.Generator().manual_seed(3)
    ours = nn.Parameter(torch.randn(8, 4, 3, 3, generator=gen))
    theirs = ours.detach().clone().double()
    opt = train.Muon([ours], lr=0.24, momentum=0.6, nesterov=True, ns_steps=3)
    buf = torch.zeros_like(theirs)
    for _ in range(3):
        grad = torch.randn(8, 4, 3, 3, generator=gen)
        ours.grad = grad.clone()
        opt.step()
        buf = 0.6 * buf + grad.double()
        update = (grad.double() + 0.6 * buf).reshape(8, -1)
        theirs = theirs * math.sqrt(8) / theirs.norm()
        theirs = theirs - 0.24 * am_newton_schulz(update, 3).double().view(8, 4, 3, 3)
    torch.testing.assert_close(ours.detach().double(), theirs, rtol=1e-3, atol=1e-3)
    assert not torch.allclose(ours.detach().double(), theirs * 1.01, rtol=1e-3, atol=1e-3)   # the check bites
    with pytest.raises(ValueError, match="Nesterov needs a momentum"):
        train.Muon([ours], lr=0.1, momentum=0.0, nesterov=True)


def test_optimizer_matches_airbench94_muon(train, spec, cifar10_views, tmp_path):
    """Steps of the reference against the anchor's optimizers (restated above) on a copy of the same
    network: Muon on the six 3x3 filters, SGD's three groups with their decay, the summed loss, the
    rates before each step. whiten_bias_epochs 0.4 puts the whitening bias's freeze at step 2 of 5.

    Each step starts both networks from the same weights and compares what the step did to every
    tensor. Newton-Schulz runs in bf16 (the anchor's choice), so a gradient that differs in its
    last float32 bits (the two networks' convolutions are not the same kernels) can round one bf16
    value the other way, and the step moves by about 1% of itself; a wrong rate, momentum or
    Nesterov term moves it by 10% or more (checked below)."""
    ref = make(spec, cifar10_views, tmp_path, whiten_bias_epochs=0.4, epochs=1, **SMALL)
    batch = ref.ctx.config["batch_size"]
    assert (ref.steps_per_epoch, ref.total_steps, ref.whiten_bias_steps) == (5, 5, 2)
    theirs = am_copy_of(ref.net)
    am = AmOptimizers(theirs, batch, ref.total_steps, ref.whiten_bias_steps)
    assert [len(g["params"]) for g in ref.sgd.param_groups] == [len(g["params"]) for g in am.sgd.param_groups] == [1, 6, 1]
    assert len(ref.muon.param_groups[0]["params"]) == len(am.filters) == 6
    idx = torch.arange(batch)
    x, y = center(ref, idx), ref.train_y[idx]
    theirs.train(), ref.net.train()
    moved = []
    for step in range(4):
        theirs.load_state_dict(dict(zip(theirs.state_dict(), ref.net.state_dict().values())))
        start = state(ref.net)
        am.train_step(x, y)
        ref.train_step(x, y)
        for (name, a), b in zip(ref.net.state_dict().items(), theirs.state_dict().values()):
            if a.is_floating_point():
                ours, anchor = a - start[name], b - start[name]
                assert (ours - anchor).norm() <= 1e-3 * anchor.norm() + 1e-6, (step, name, (ours - anchor).norm(), anchor.norm())
        moved.append(not torch.equal(ref.net.whiten.bias, start["whiten.bias"]))
    assert moved == [True, True, False, False]          # the whitening bias: 2 steps, then frozen
    # each SGD group's decay per step is the anchor's 2e-6 x batch: lr x weight_decay
    decay = AM_HYP["wd_per_example"] * batch
    assert all(g["initial_lr"] * g["weight_decay"] == pytest.approx(decay) for g in ref.sgd.param_groups)
    # the tolerance bites: Muon's rate 10% off moves the filters' step by more than 3%
    ref.muon.param_groups[0]["initial_lr"] *= 1.1
    theirs.load_state_dict(dict(zip(theirs.state_dict(), ref.net.state_dict().values())))
    start = state(ref.net)
    am.train_step(x, y)
    ref.train_step(x, y)
    a, b = ref.net.blocks[1].conv2.weight, theirs.layers[2].conv2.weight
    key = "blocks.1.conv2.weight"
    assert (a - start[key] - (b - start[key])).norm() > 0.03 * (b - start[key]).norm()


def test_schedule_matches_airbench94_muon(spec, cifar10_views, tmp_path):
    """am:352-353, 400-403: 25 steps of 2,000 an epoch, 200 in all; every rate linear to 0 over them,
    the whitening bias's over its 75; zero past the end."""
    ref = make(spec, cifar10_views, tmp_path, **SMALL)
    ref.steps_per_epoch, ref.total_steps, ref.whiten_bias_steps = 25, math.ceil(8 * 25), math.ceil(3 * 25)
    initial = [g["initial_lr"] for g in ref.sgd.param_groups + ref.muon.param_groups]
    assert initial == [0.053, 0.053, 0.67, 0.24]
    for step in (0, 1, 50, 74, 75, 100, 199, 200, 260):
        ref.set_rates(step)
        rates = [g["lr"] for g in ref.sgd.param_groups + ref.muon.param_groups]
        whiten = 0.053 * (1 - step / 75) if step < 75 else 0.0     # the anchor's goes negative on a detached bias
        rest = (1 - step / 200) if step < 200 else 0.0
        assert rates == pytest.approx([whiten, 0.053 * rest, 0.67 * rest, 0.24 * rest], abs=1e-12), step


# ------------------------------------------------------------------------------------ augmentation

def test_augmentation_matches_airbench94_muon(train, spec, cifar10_views, tmp_path):
    """The anchor's loader (am:148-176): at its first epoch a random half of the normalized images
    is mirrored and the set padded by 2 (reflect); each epoch a random translation in [-2, 2]^2 per
    image, and the whole set mirrored in odd epochs (counted from 0)."""
    ref = make(spec, cifar10_views, tmp_path, **SMALL)
    x = train.to_device_images(load_cifar10(cifar10_views["train"], "train")[0], torch.device("cpu"))
    assert 20 < int(ref.flipped.sum()) < 80                                       # a random half
    stored = F.pad(torch.where(ref.flipped.view(-1, 1, 1, 1), x.flip(-1), x), (2,) * 4, "reflect")
    assert torch.equal(ref.train_x, stored)
    idx = torch.arange(0, 100, 3)
    gen = torch.Generator().manual_seed(1)
    for epoch in range(1, 5):                               # the harness counts epochs from 1
        shifts = torch.randint(-2, 3, (len(idx), 2), generator=gen)
        expected = am_crop(stored[idx], shifts)
        if (epoch - 1) % 2 == 1:
            expected = expected.flip(-1)
        assert torch.equal(ref.augment(idx, (shifts + 2).T, epoch), expected), epoch


# --------------------------------------------------------------------------------------- training

def test_whitening_bias_trains_three_epochs_then_freezes(spec, cifar10_views, tmp_path):
    ref = make(spec, cifar10_views, tmp_path, **SMALL)              # 5 steps an epoch, 40 in all
    whiten = ref.net.whiten.weight.clone()
    biases = [ref.net.whiten.bias.clone()]
    for epoch in range(1, 6):
        ref.train_epoch(epoch)
        biases.append(ref.net.whiten.bias.clone())
    assert all(not torch.equal(biases[e], biases[e - 1]) for e in (1, 2, 3))
    assert torch.equal(biases[5], biases[3]) and torch.equal(biases[4], biases[3])
    assert torch.equal(ref.net.whiten.weight, whiten)                                 # never trained
    norms = [m for m in ref.net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in norms)       # scales stay 1
    # Muon keeps each filter tensor at norm sqrt(out channels) before its step: near it after.
    for conv in [m for m in ref.net.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]:
        assert conv.weight.norm().item() == pytest.approx(math.sqrt(conv.out_channels), rel=0.2)


def test_loss_falls_on_a_repeated_batch(spec, cifar10_views, tmp_path):
    ref = make(spec, cifar10_views, tmp_path, epochs=100, **SMALL)    # a long schedule: the rates stay high
    idx = torch.arange(20)
    x, y = center(ref, idx), ref.train_y[idx]
    losses = [ref.train_step(x, y).item() for _ in range(15)]
    assert all(math.isfinite(v) for v in losses)
    # Label smoothing 0.2 keeps the loss above ~0.87 even for a perfect fit; it starts near ln 10.
    assert losses[0] > 2.0 and losses[-1] < 0.7 * losses[0], losses


def test_a_batch_larger_than_the_training_set_is_one_line(spec, cifar10_views, tmp_path):
    with pytest.raises(ValueError, match=r"batch_size 200 is more than the 100 training images: set a smaller one"):
        make(spec, cifar10_views, tmp_path, batch_size=200, **SMALL)


def test_a_run_past_the_schedule_learns_nothing_more(spec, cifar10_views, tmp_path):
    ref = make(spec, cifar10_views, tmp_path, epochs=1, whiten_bias_epochs=1, **SMALL)
    assert ref.train_epoch(1)["lr"] == 0.0
    before = state(ref.net)
    stats = ref.train_epoch(2)
    assert stats["lr"] == 0.0 and math.isfinite(stats["loss"])
    after = state(ref.net)
    assert all(torch.equal(before[k], after[k]) for k in before if "running" not in k and "num_batches" not in k)


# --------------------------------------------------------------------------------------- inference

def test_tta_matches_airbench94_muon(spec, cifar10_views, tmp_path):
    predictor = make(spec, cifar10_views, tmp_path, "predict", **SMALL)
    net, x = predictor.net.eval(), predictor.eval_x
    with torch.no_grad():
        expected = am_tta(net, x).numpy()
    np.testing.assert_allclose(predictor.predict(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predictor.infer(predictor.eval_inputs()[3]), expected[3], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="tta_level"):
        make(spec, cifar10_views, tmp_path, "predict", tta_level=3, **SMALL)


def test_auto_switches_resolve_off_on_cpu(spec, cifar10_views, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: 'auto' means on")
    ref = make(spec, cifar10_views, tmp_path, **SMALL)
    assert ref.device.type == "cpu"
    assert (ref.use_compile, ref.use_bf16, ref.memory_format) == (False, False, torch.contiguous_format)
    assert ref.model is ref.net
    assert ref.train_precision() == ("fp32", 'bf16 = "auto" on cpu: float32')      # what the run records


def test_bf16_autocast_keeps_float32_weights(spec, cifar10_views, tmp_path):
    """The precision row: with bf16 on (as "auto" resolves on CUDA), the forward pass runs in bf16
    under autocast, the loss and the weights stay float32, and a step changes the weights."""
    ref = make(spec, cifar10_views, tmp_path, bf16="true", **SMALL)
    seen = []
    hook = ref.net.register_forward_hook(lambda m, args, out: seen.append(out.dtype))
    before = state(ref.net)
    loss = ref.train_step(center(ref, torch.arange(20)), ref.train_y[:20])
    hook.remove()
    assert seen == [torch.bfloat16] and loss.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in ref.net.parameters())
    assert any(not torch.equal(before[k], v) for k, v in ref.net.state_dict().items())


# ------------------------------------------------------------------------------- end to end, CPU

@pytest.mark.recipe_run
def test_reference_smoke(spec, cifar10_root, cifar10_views, tmp_path):
    torch.manual_seed(0)
    trainer = make(spec, cifar10_views, tmp_path)            # the full-width network, batch 20
    assert not hasattr(trainer, "eval_x")
    stats = trainer.train_epoch(1)
    assert math.isfinite(stats["loss"]) and stats["samples"] == 100 and stats["lr"] > 0
    trainer.save(tmp_path / "model")
    predictor = make(spec, cifar10_views, tmp_path, "predict")
    assert not hasattr(predictor, "train_x") and not hasattr(predictor, "muon")
    predictor.load(tmp_path / "model")
    assert torch.equal(predictor.net.whiten.weight, trainer.net.whiten.weight)
    scores = predictor.predict()
    assert isinstance(scores, np.ndarray) and scores.shape == (50, 10) and scores.dtype == np.float32
    trainer.net.eval()
    np.testing.assert_allclose(scores, trainer.scores(predictor.eval_x).numpy(), rtol=1e-5, atol=1e-5)
    one = predictor.infer(predictor.eval_inputs()[0])
    np.testing.assert_allclose(one, scores[0], rtol=1e-4, atol=1e-4)
    check_inference_entry(spec, tmp_path / "model", predictor.ctx.config, cifar10_root, tmp_path / "infer", scores)


def test_roles_see_only_their_files(spec, cifar10_views, tmp_path):
    check_roles_see_only_their_files(spec.load_entry_class(),
                                     lambda role, root: context(spec, root, tmp_path, role, **SMALL), cifar10_views)


def test_a_predictor_loads_what_a_trainer_saved(spec, cifar10_views, tmp_path):
    ref = make(spec, cifar10_views, tmp_path, **SMALL)
    ref.train_epoch(1)
    ref.save(tmp_path / "model")
    predictor = type(ref)()
    predictor.setup(dataclasses.replace(ref.ctx, role="predict", data_root=cifar10_views["predict"]))
    predictor.load(tmp_path / "model")
    assert all(torch.equal(v, predictor.net.state_dict()[k]) for k, v in ref.net.state_dict().items())
    calibration = ref.calibration_batch(torch.arange(100))
    images = load_cifar10(cifar10_views["train"], "train")[0]
    assert torch.equal(calibration, sys.modules[type(ref).__module__].to_device_images(images, torch.device("cpu")))


def test_tta_exports_to_onnx(spec, cifar10_views, tmp_path):
    """dawnbench infer --runtime onnxruntime|openvino runs the exported `scores`: all 6 views and the
    global max pool, traced at batch 1, must take any batch size and agree with predict()."""
    ort = pytest.importorskip("onnxruntime")
    predictor = make(spec, cifar10_views, tmp_path, "predict", **SMALL)
    predictor.net.eval()
    predictor.export_onnx(tmp_path / "scores.onnx")
    session = ort.InferenceSession(str(tmp_path / "scores.onnx"), providers=["CPUExecutionProvider"])
    exported = session.run(None, {"input": predictor.export_inputs(0, 50)})[0]
    np.testing.assert_allclose(exported, predictor.predict(), rtol=1e-4, atol=1e-5)
