"""The Fashion-MNIST twins against their anchor tables, and against each other.

Each row of references/fashion-mnist-cnn-{pytorch,tensorflow}/anchor.toml is checked here against the
code, as its `check` says: the parameter count by building the network; the learning rate at a
dozen points of the plan; two optimizer steps through the reference's own step, computed by hand
(label smoothing, Nesterov momentum, coupled weight decay on every parameter); the augmentation and
the eval preprocessing on fixed images; the batch norms' epsilon and momentum read from both built
networks (test_the_keras_batch_norm_is_pytorchs: the float32 twins would see Keras's default epsilon of
1e-3 only at about twice their tolerance). Then the twins are run side by side from the same weights
on the same batches (test_the_twins_agree_step_for_step).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
from anchor_checks import anchor_rows, every_row_is_checked, import_tensorflow_without_onednn

from harness import registry
from harness.reference import Context

TORCH, KERAS = "fashion-mnist-cnn-pytorch", "fashion-mnist-cnn-tensorflow"
CHECKED_HERE = {"parameters", "schedule", "optimizer", "augmentation", "eval_preprocessing", "config", "test"}


@pytest.fixture(scope="module", autouse=True)
def tensorflow_without_onednn():
    """TensorFlow imported with its oneDNN kernels off, where this module imports it first: they
    reorder sums. TensorFlow reads the variable once, so it is put back at once and the CLI runs of
    other modules in this process keep their default."""
    import_tensorflow_without_onednn()


def trainer(name: str, data_root, tmp_path, **overrides):
    spec = registry.load_spec(name)
    ref = spec.load_entry_class()()
    ref.setup(Context(config=dict(spec.hyperparameters, **overrides), data_root=data_root, seed=0, task=spec.task,
                      work_dir=tmp_path, show_progress=False, role="train"))
    return ref, spec


@pytest.fixture(scope="module")
def torch_ref(fashion_root, tmp_path_factory):
    return trainer(TORCH, fashion_root, tmp_path_factory.mktemp("torch"))


@pytest.fixture(scope="module")
def keras_ref(fashion_root, tmp_path_factory):
    return trainer(KERAS, fashion_root, tmp_path_factory.mktemp("keras"))


def module_of(ref):
    return sys.modules[type(ref).__module__]


@pytest.mark.parametrize("name", [TORCH, KERAS])
def test_every_row_is_checked_here(name):
    every_row_is_checked(name, CHECKED_HERE, __file__)


# ---- parameters ----------------------------------------------------------------------------------

def test_the_pytorch_parameter_count(torch_ref):
    ref, spec = torch_ref
    (count,) = [r["ours"] for r in anchor_rows(TORCH, "parameters") if isinstance(r["ours"], int)]
    net = module_of(ref).build_model(spec.hyperparameters["widths"])
    assert sum(p.numel() for p in net.parameters()) == count
    widths = [m.out_channels for m in net.modules() if type(m).__name__ == "Conv2d"]
    assert widths == [16, 32, 64] and [m.in_features for m in net.modules() if type(m).__name__ == "Linear"] == [3136]


def test_the_keras_parameter_count(keras_ref):
    ref, spec = keras_ref
    (count,) = [r["ours"] for r in anchor_rows(KERAS, "parameters") if isinstance(r["ours"], int)]
    model = module_of(ref).build_model(spec.hyperparameters["widths"])
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == count


# ---- batch norm ----------------------------------------------------------------------------------

def batch_norms_apart(net, model) -> list[str]:
    """Where the Keras twin's batch norms differ from the PyTorch twin's, read from the built layers in
    PyTorch's convention: the same epsilon, and a Keras momentum (the share the running statistics keep)
    of one minus PyTorch's (the share the new batch gets); one line each. The twins' float32 losses
    hide an epsilon of 1e-3 in summation noise (issue 49: about 2x their tolerance), so the settings
    are compared as the numbers the code writes."""
    import keras
    import torch
    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    kbns = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    apart = [] if len(bns) == len(kbns) else [f"{len(kbns)} Keras batch norms against PyTorch's {len(bns)}"]
    for bn, kbn in zip(bns, kbns):
        if kbn.epsilon != bn.eps:
            apart.append(f"{kbn.name}: epsilon {kbn.epsilon:g}, PyTorch's {bn.eps:g}")
        if abs((1 - kbn.momentum) - bn.momentum) > 1e-12:
            apart.append(f"{kbn.name}: momentum {kbn.momentum:g} keeps {kbn.momentum:g} of the running statistics, "
                         f"PyTorch's {bn.momentum:g} keeps {1 - bn.momentum:g}")
        if not (kbn.center and kbn.scale and bn.affine and bn.track_running_stats):
            apart.append(f"{kbn.name}: not a learned scale and shift with running statistics in both")
    return apart


def test_the_keras_batch_norm_is_pytorchs(torch_ref, keras_ref):
    """The batch norm row: the models the trainers build, three batch norms each, the same settings."""
    net, model = torch_ref[0].net, keras_ref[0].model
    assert len([m for m in net.modules() if type(m).__name__ == "BatchNorm2d"]) == 3
    assert batch_norms_apart(net, model) == []


@pytest.mark.parametrize("bug, named", [({"epsilon": 1e-3}, "epsilon 0.001, PyTorch's 1e-05"),
                                        ({"momentum": 0.99}, "momentum 0.99")], ids=["epsilon-1e-3", "momentum-0.99"])
def test_a_seeded_keras_batch_norm_is_named(bug, named, keras_ref, torch_ref, monkeypatch):
    """Keras's own defaults (epsilon 1e-3, momentum 0.99) seeded in the Keras twin's batch norm: every
    batch norm is named, with both values, whatever the float32 twins' losses do."""
    train = module_of(keras_ref[0])

    class Seeded(train.FusedBatchNorm):
        def __init__(self, **options):
            super().__init__(**{**options, **bug})

    monkeypatch.setattr(train, "FusedBatchNorm", Seeded)
    apart = batch_norms_apart(torch_ref[0].net, train.build_model(keras_ref[1].hyperparameters["widths"]))
    assert len(apart) == 3 and all(named in line for line in apart), apart


# ---- config, schedule ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", [TORCH, KERAS])
def test_the_config_rows(name):
    spec = registry.load_spec(name)
    for row in anchor_rows(name, "config"):
        assert spec.hyperparameters[row["expect"]] == row["ours"], row


def test_the_pytorch_schedule(torch_ref):
    ref, _ = torch_ref
    (row,) = anchor_rows(TORCH, "schedule")
    for epoch, lr in row["expect"]:
        assert ref.lr_at(round(epoch * ref.steps_per_epoch)) == pytest.approx(lr, rel=1e-5, abs=1e-9), epoch


def test_the_keras_schedule(keras_ref):
    ref, _ = keras_ref
    (row,) = anchor_rows(KERAS, "schedule")
    for epoch, lr in row["expect"]:
        step = min(round(epoch * ref.steps_per_epoch), len(ref.lr_table) - 1)
        assert float(ref.lr_table[step]) == pytest.approx(lr, rel=1e-5, abs=1e-9), epoch


# ---- the optimizer step, by hand -----------------------------------------------------------------

EPSILON, MOMENTUM, DECAY = 0.1, 0.9, 5e-4       # the tables' label smoothing, momentum, weight decay
# The steps below run with the decay raised to 0.05: at 5e-4 one step moves a weight by lr x 5e-4 x w,
# about 1e-6, inside float32's noise, so a decay skipped on a parameter would pass unseen. At 0.05 it
# moves it by 1e-4; the code path is the same, and test_the_decay_momentum_and_smoothing_are_the_tables checks the 5e-4.
TEST_DECAY = 0.05


@pytest.mark.parametrize("name", [TORCH, KERAS])
def test_the_decay_momentum_and_smoothing_are_the_tables(name):
    config = registry.load_spec(name).hyperparameters
    assert (config["weight_decay"], config["momentum"], config["label_smoothing"]) == (DECAY, MOMENTUM, EPSILON)


def smoothed_cross_entropy(logits, labels, xp):
    """Label smoothing written out: the target is 0.9 on the label plus 0.1 spread over the 10 classes."""
    target = (1 - EPSILON) * xp.one_hot(labels, 10) + EPSILON / 10
    return -xp.mean(xp.sum(target * xp.log_softmax(logits), axis=1))


def test_two_pytorch_steps_by_hand(fashion_root, tmp_path):
    import torch
    import torch.nn.functional as F

    ref, _ = trainer(TORCH, fashion_root, tmp_path, weight_decay=TEST_DECAY, bf16="false")  # the hand steps are float32
    x, y = ref.train_x[:32], ref.train_y[:32]
    names = [n for n, _ in ref.net.named_parameters()]
    w = {n: p.detach().clone().double() for n, p in ref.net.named_parameters()}
    buf = {}
    for step in range(2):
        lr = ref.lr_at(step)
        # the gradient of the smoothed loss, written out, at the current weights
        logits = ref.net(x)
        loss = -(((1 - EPSILON) * F.one_hot(y, 10) + EPSILON / 10) * F.log_softmax(logits, 1)).sum(1).mean()
        grads = dict(zip(names, torch.autograd.grad(loss, list(ref.net.parameters()))))
        got = ref.train_step(x, y)
        assert float(got.detach()) == pytest.approx(float(loss.detach()), rel=1e-5)
        for n in names:         # Nesterov, coupled decay on every parameter (BN and bias too)
            d = grads[n].double() + TEST_DECAY * w[n]
            buf[n] = d if step == 0 else MOMENTUM * buf[n] + d
            w[n] = w[n] - lr * (d + MOMENTUM * buf[n])
    for n, p in ref.net.named_parameters():
        np.testing.assert_allclose(p.detach().double().numpy(), w[n].numpy(), rtol=1e-5, atol=1e-7, err_msg=n)


def test_two_keras_steps_by_hand(fashion_root, tmp_path):
    import tensorflow as tf

    ref, _ = trainer(KERAS, fashion_root, tmp_path, weight_decay=TEST_DECAY)
    idx = tf.range(32, dtype=tf.int64)
    no_flip = tf.zeros([len(ref.train_y)], tf.bool)
    x, y = tf.gather(ref.train_x, idx), tf.gather(ref.train_y, idx)
    variables = ref.model.trainable_variables
    w = [v.numpy().astype(np.float64) for v in variables]
    m = [np.zeros_like(v) for v in w]
    for step in range(2):
        lr = float(ref.lr_table[step])
        with tf.GradientTape() as tape:
            logits = ref.model(x, training=True)
            target = (1 - EPSILON) * tf.one_hot(y, 10) + EPSILON / 10
            loss = -tf.reduce_mean(tf.reduce_sum(target * tf.nn.log_softmax(logits), axis=1))
        grads = tape.gradient(loss, variables)
        got = ref.train_step(idx, no_flip)
        assert float(got) == pytest.approx(float(loss), rel=1e-5)
        for i, g in enumerate(grads):    # Keras's Nesterov: the rate inside the buffer; coupled decay
            d = g.numpy().astype(np.float64) + TEST_DECAY * w[i]
            m[i] = MOMENTUM * m[i] - lr * d
            w[i] = w[i] + MOMENTUM * m[i] - lr * d
    for v, expected in zip(variables, w):
        np.testing.assert_allclose(v.numpy(), expected, rtol=1e-5, atol=1e-7, err_msg=v.path)


# ---- augmentation, eval preprocessing ------------------------------------------------------------

def fixed_images() -> np.ndarray:
    """Three 28x28 images nobody could mistake for their mirror: a ramp, a corner block, noise."""
    ramp = np.tile(np.arange(28, dtype=np.uint8) * 9, (28, 1))
    corner = np.zeros((28, 28), np.uint8)
    corner[:5, :3] = 255
    noise = np.random.default_rng(0).integers(0, 256, (28, 28), dtype=np.uint8)
    return np.stack([ramp, corner, noise])


@pytest.mark.parametrize("name", [TORCH, KERAS])
def test_the_augmentation_flips_half_the_images_left_to_right(name, torch_ref, keras_ref):
    ref, _ = torch_ref if name == TORCH else keras_ref
    train = module_of(ref)
    images = fixed_images()
    x = train.to_input(images)
    which = np.array([True, False, True])
    if name == TORCH:
        import torch
        out = train.flip(x, torch.from_numpy(which)).numpy()
    else:
        out = np.asarray(train.flip(x, which))
    out = out[:, 0] if name == TORCH else out[..., 0]
    expected = (np.where(which[:, None, None], images[:, :, ::-1], images) / 255 - 0.2860) / 0.3530
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    order, flips = train.epoch_draw(60_000, seed=0, epoch=3)
    assert sorted(np.asarray(order).tolist()) == list(range(60_000))
    assert abs(np.asarray(flips).mean() - 0.5) < 0.01          # p = 0.5: 5 sigma is 0.01
    again, _ = train.epoch_draw(60_000, seed=0, epoch=4)
    assert not np.array_equal(np.asarray(order), np.asarray(again))      # a new order each epoch


@pytest.mark.parametrize("name", [TORCH, KERAS])
def test_the_eval_preprocessing(name, torch_ref, keras_ref, fashion_root):
    from common import loaders
    ref, _ = torch_ref if name == TORCH else keras_ref
    train = module_of(ref)
    # the constants are the training set's own statistics
    images = loaders.load_fashion_mnist_images(fashion_root, "train").astype(np.float64) / 255
    assert images.mean() == pytest.approx(train.MEAN, abs=5e-4) and images.std() == pytest.approx(train.STD, abs=5e-4)
    x = train.to_input(fixed_images())
    pixels = np.asarray(x)[:, 0] if name == TORCH else np.asarray(x)[..., 0]
    np.testing.assert_allclose(pixels, (fixed_images() / 255 - 0.2860) / 0.3530, rtol=1e-6, atol=1e-6)
    # flip test-time augmentation: the mean of the logits of the image and of its mirror
    if name == TORCH:
        import torch
        ref.net.eval()
        with torch.no_grad():
            expected = (ref.net(x) + ref.net(x.flip(3))).numpy() / 2
        got = ref.scores(x).numpy()
        ref.net.train()
    else:
        import tensorflow as tf
        mirrored = x[:, :, ::-1, :].copy()
        expected = (ref.model(x, training=False).numpy() + ref.model(mirrored, training=False).numpy()) / 2
        got = np.asarray(ref.scores(tf.constant(x)))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    plain = ref.net.eval()(x).detach().numpy() if name == TORCH else ref.model(x, training=False).numpy()
    assert not np.allclose(got, plain, rtol=1e-3, atol=1e-3)        # the mirror's logits were averaged in
    if name == TORCH:
        ref.net.train()


def conv_output_dtypes(ref, x, y) -> list:
    """The dtype of each convolution's output during one train_step of `ref` on (x, y)."""
    import torch
    seen = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
             for m in ref.net.modules() if isinstance(m, torch.nn.Conv2d)]
    try:
        ref.train_step(x, y)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


@pytest.mark.parametrize("native", [True, False])
def test_the_pytorch_recipe_trains_in_bf16_where_native_channels_last(native, fashion_root, tmp_path, monkeypatch):
    """bf16 = "native": the training step's convolutions run in bf16 where the CPU multiplies bf16 in
    hardware and in float32 where it does not (both cases, whatever this machine has); the weights
    stay float32 in both, channels last."""
    import torch

    import common.torch_base
    monkeypatch.setattr(common.torch_base, "native_bf16", lambda device: native)
    ref, spec = trainer(TORCH, fashion_root, tmp_path)
    assert spec.hyperparameters["bf16"] == "native"
    assert ref.train_x.dtype == torch.float32 and ref.train_x.is_contiguous(memory_format=torch.channels_last)
    want = torch.bfloat16 if native else torch.float32
    assert conv_output_dtypes(ref, ref.train_x[:32], ref.train_y[:32]) == [want] * 3
    assert ref.train_precision()[0] == ("bf16" if native else "fp32")     # what the run records it chose
    assert all(p.dtype == torch.float32 for p in ref.net.parameters())
    conv = next(m for m in ref.net.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_native_bf16_is_the_cpu_flags_the_harness_records():
    """What the recipe's "native" chooses on this CPU is what env.json records (cpu.bf16), which the
    roofline analysis reads to name a run's precision."""
    import torch

    from common.torch_base import native_bf16
    from harness.environment import describe_system
    assert native_bf16(torch.device("cpu")) == describe_system(worker={})["cpu"]["bf16"]


def test_the_tensorflow_recipe_runs_float32_channels_last(keras_ref):
    ref, _ = keras_ref
    assert ref.train_x.dtype.name == "float32" and tuple(ref.train_x.shape[1:]) == (28, 28, 1)
    assert ref.model.input_shape == (None, 28, 28, 1)
    assert all(v.dtype == "float32" for v in ref.model.trainable_variables)


# ---- the twins, step for step --------------------------------------------------------------------

def copy_torch_weights_into_keras(net, model) -> None:
    """The PyTorch network's weights into the Keras one: convolutions (out, in, kh, kw) -> (kh, kw, in,
    out); the dense kernel's rows from PyTorch's (c, h, w) flattening order to Keras's (h, w, c)."""
    import torch
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    (fc,) = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    for i, (conv, bn) in enumerate(zip(convs, bns), 1):
        model.get_layer(f"block{i}_conv").set_weights([conv.weight.detach().numpy().transpose(2, 3, 1, 0)])
        model.get_layer(f"block{i}_bn").set_weights([t.detach().numpy() for t in
                                                     (bn.weight, bn.bias, bn.running_mean, bn.running_var)])
    kernel = fc.weight.detach().numpy().reshape(10, 64, 7, 7).transpose(2, 3, 1, 0).reshape(3136, 10)
    model.get_layer("fc").set_weights([kernel, fc.bias.detach().numpy()])


def test_the_twins_agree_step_for_step(fashion_root, tmp_path):
    """Same weights, same 64 unflipped images, three steps each: the losses, the weights and the eval
    logits agree. What differs by design, and how it is neutralised:
    - the schedule: a constant rate (warm-up from 100% over the whole plan), because Keras keeps the
      rate inside its momentum buffer and PyTorch applies it after; equal only at a constant rate;
    - the augmentation's randomness: no flips; the batch is the same images in the same order;
    - oneDNN's reordered sums: TF_ENABLE_ONEDNN_OPTS=0 where this module first imports TensorFlow;
    - BN's running variance (unbiased in PyTorch, biased in TF's fused kernel) over 12,544 values per
      channel: a factor 1.00008, inside the eval tolerance.
    Tolerance: the training-mode logits of the same weights differ by ~1e-5 (float32, two libraries'
    summation orders), and each step amplifies that: at lr 0.05 the loss on one repeated batch climbs
    and the weights part by 1e-3 within four steps, so the rate is 0.01, where three steps leave the
    single weights up to 5e-5 apart (measured), so the weights are compared per tensor, by the norm
    of the difference over the norm of the weights: within 2e-4 (measured: at most 4.7e-5, block2's
    convolution). BN shifts start at zero and move by sums of gradients that nearly cancel, so float32
    noise is a larger share of them: within 5e-3 (measured: at most 1.4e-3). Losses within 1e-5
    relative. The decay is raised to 0.05 (TEST_DECAY), so a decay missing from one twin moves each
    weight tensor by lr x 0.05 x (1 + 1.9 + 2.7) = 2.8e-3 of its norm over the three steps, fourteen
    times the tolerance; missing label smoothing moves the loss by 1e-2."""
    import tensorflow as tf
    import torch
    constant = {"lr": 0.01, "lr_start_fraction": 1.0, "warmup_fraction": 1.0, "weight_decay": TEST_DECAY}
    tref, _ = trainer(TORCH, fashion_root, tmp_path / "t", **constant, bf16="false")   # the Keras twin trains in float32
    kref, _ = trainer(KERAS, fashion_root, tmp_path / "k", **constant)
    copy_torch_weights_into_keras(tref.net, kref.model)
    idx = tf.range(64, dtype=tf.int64)
    no_flip = tf.zeros([len(kref.train_y)], tf.bool)
    assert np.array_equal(tref.train_y[:64].numpy(), kref.train_y[:64].numpy())
    for step in range(3):
        assert tref.lr_at(step) == pytest.approx(float(kref.lr_table[step])) == pytest.approx(0.01)
        t_loss, k_loss = float(tref.train_step(tref.train_x[:64], tref.train_y[:64])), float(kref.train_step(idx, no_flip))
        assert t_loss == pytest.approx(k_loss, rel=1e-5), step
    pairs = []
    for i in (1, 2, 3):
        conv, bn = tref.net[i - 1][0], tref.net[i - 1][2]
        pairs += [(f"block{i}_conv", kref.model.get_layer(f"block{i}_conv").get_weights()[0],
                   conv.weight.detach().numpy().transpose(2, 3, 1, 0))]
        pairs += [(f"block{i}_bn {what}", got, want.detach().numpy()) for what, got, want in
                  zip(("gamma", "beta"), kref.model.get_layer(f"block{i}_bn").get_weights()[:2], (bn.weight, bn.bias))]
    fc = tref.net[4].weight.detach().numpy().reshape(10, 64, 7, 7).transpose(2, 3, 1, 0).reshape(3136, 10)
    pairs += [("fc kernel", kref.model.get_layer("fc").get_weights()[0], fc),
              ("fc bias", kref.model.get_layer("fc").get_weights()[1], tref.net[4].bias.detach().numpy())]
    for name, got, want in pairs:
        apart = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert apart < (5e-3 if name.endswith("beta") else 2e-4), (name, apart)
    # the eval logits of 256 training images, flip TTA, BN from the running statistics
    tref.net.eval()
    with torch.no_grad():
        t_scores = tref.scores(tref.train_x[:256]).numpy()
    k_scores = np.asarray(kref.scores(tf.gather(kref.train_x, tf.range(256, dtype=tf.int64))))
    np.testing.assert_allclose(k_scores, t_scores, rtol=2e-3, atol=2e-3)
    assert (k_scores.argmax(1) == t_scores.argmax(1)).mean() >= 0.99
