"""The CIFAR-10 ResNet recipe in TensorFlow 2 / Keras (references/cifar10-resnet*-tensorflow/train.py,
one copy in each of the five references): the network against the paper and the PyTorch recipe,
the augmentation, the schedule, several replicas under MirroredStrategy, and a smoke run of every
reference on the tiny CIFAR-10 fixture, as a run drives it: a trainer on the training files only
(setup -> one epoch -> save), then a predictor on the eval images only (setup -> load -> predict
-> infer).
The network tests read cifar10-resnet56-tensorflow's copy; the smoke runs and
test_copies_are_one_recipe cover the other four.

TensorFlow and PyTorch share the test environment (requirements/test.txt), so the networks are
also checked against the PyTorch recipe's output for the same weights. Nothing here is skipped.
"""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import torch
from cifar10_resnets import EXACT, PUBLISHED, recipe, references
from conftest import check_inference_entry, check_roles_see_only_their_files, cli_env

from common.loaders import load_cifar10
from common.tf_augment import crop_flip
from harness import registry
from harness.reference import Context

REFERENCES = references("tensorflow")
# Tracing and optimizing the training step of a deep network takes TensorFlow most of a minute
# on a small CPU, so only ResNet-20 runs its steps compiled here and trains a whole epoch; the
# other smoke runs execute the same tf.functions eagerly (the same code, without graph
# compilation) and train one step of their epoch (an eager step of ResNet-164 takes ~6 s here).
COMPILED = {"cifar10-resnet20-tensorflow"}
ONE_STEP = set(REFERENCES) - COMPILED


def trainable_count(model) -> int:
    return int(sum(math.prod(v.shape) for v in model.trainable_variables))


def main_path_convs(model) -> int:
    """Convolutions that count in the depth: every one but the bottlenecks' projection shortcuts."""
    return sum(isinstance(layer, tf.keras.layers.Conv2D) and not layer.name.endswith("_proj")
               for layer in model.layers)


def _context(spec, data_root, tmp_path, role="train", **overrides):
    config = dict(spec.hyperparameters, batch_size=16, **overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, work_dir=tmp_path,
                   show_progress=False, role=role)


@pytest.fixture(scope="module")
def train():
    """cifar10-resnet56-tensorflow's train.py."""
    return recipe("cifar10-resnet56-tensorflow")


@pytest.fixture(scope="module")
def torch_train():
    """cifar10-resnet56-pytorch's train.py: the same networks in PyTorch."""
    return recipe("cifar10-resnet56-pytorch")


@pytest.fixture
def eager_if():
    """Run tf.functions eagerly when asked, and always restore the default afterwards."""
    def set_eager(eager: bool):
        tf.config.run_functions_eagerly(eager)
    yield set_eager
    tf.config.run_functions_eagerly(False)


# ---------------------------------------------------------------------------------- the network

@pytest.mark.parametrize("depth, block, n", [(20, "basic", 3), (56, "basic", 9), (110, "basic", 18),
                                             (164, "preact-basic", 27), (164, "preact-bottleneck", 18),
                                             (29, "preact-bottleneck", 3), (8, "basic", 1)])
def test_blocks_per_stage(depth, block, n, train):
    assert train.blocks_per_stage(depth, block) == n


@pytest.mark.parametrize("depth, block", [(21, "basic"), (2, "basic"), (20, "bottleneck2"), (30, "preact-bottleneck"),
                                          (29, "bottleneck")])
def test_impossible_depths_are_refused(depth, block, train):
    with pytest.raises(ValueError, match="depth|block"):
        train.blocks_per_stage(depth, block)


def test_exact_counts_are_the_papers():
    for depth, published in PUBLISHED.items():
        assert abs(EXACT[depth, "basic"] - published) / published < 0.02


def test_counts_equal_the_pytorch_recipe(torch_train):
    """The TensorFlow networks' counts are checked against EXACT in the smoke runs below."""
    assert {key: torch_train.count_parameters(*key) for key in EXACT} == EXACT


def test_shapes_and_shortcuts(train):
    model = train.build_model(29, "preact-bottleneck")
    assert model(tf.zeros((3, 32, 32, 3)), training=False).shape == (3, 10)
    assert main_path_convs(model) + 1 == 29
    # Projection shortcuts exactly where a bottleneck block changes shape: the first of each stage.
    assert sorted(layer.name for layer in model.layers if layer.name.endswith("_proj")) == [
        "stage1_block1_proj", "stage2_block1_proj", "stage3_block1_proj"]
    # Option A: stride-2 subsampling, zero channels padded evenly on both sides, no parameters.
    shortcut = train.ZeroPadShortcut(2, 16)
    x = tf.random.stateless_normal((2, 8, 8, 16), seed=(0, 1))
    s = shortcut(x).numpy()
    assert s.shape == (2, 4, 4, 32) and not shortcut.weights
    np.testing.assert_array_equal(s[..., 8:24], x.numpy()[:, ::2, ::2, :])
    assert not s[..., :8].any() and not s[..., 24:].any()


def test_initialization_is_seeded_and_distinct(train):
    """Every kernel gets its own draw (no two equal), and the seed fixes them all."""
    def kernels(seed):
        tf.keras.utils.set_random_seed(seed)
        return [layer.kernel.numpy() for layer in train.build_model(20).layers
                if isinstance(layer, tf.keras.layers.Conv2D)]
    first, again, other = kernels(0), kernels(0), kernels(1)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not any(np.array_equal(a, b) for a, b in zip(first, other))
    same_shape = [k for k in first if k.shape == (3, 3, 16, 16)]
    assert len(same_shape) == 6                       # stage 1: 3 blocks of 2
    assert not any(np.array_equal(a, b) for i, a in enumerate(same_shape) for b in same_shape[i + 1:])
    # He (fan-out) scale: std = sqrt(2 / (3 * 3 * 16)) for these kernels
    assert abs(np.std(np.concatenate([k.ravel() for k in same_shape])) - math.sqrt(2 / 144)) < 0.01


def test_same_outputs_as_the_pytorch_recipe(train, torch_train):
    """With the PyTorch network's weights copied in, the Keras network computes the same logits,
    in training mode (batch statistics) and in inference mode (moving statistics)."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).normal(size=(4, 32, 32, 3)).astype(np.float32)
    for depth, block in [(20, "basic"), (20, "preact-basic"), (29, "preact-bottleneck")]:
        tnet, knet = torch_train.CifarResNetModel(depth, block), train.build_model(depth, block)
        tconv = [m for m in tnet.modules() if isinstance(m, torch.nn.Conv2d)]
        tbn = [m for m in tnet.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        kconv = [m for m in knet.layers if isinstance(m, tf.keras.layers.Conv2D)]
        kbn = [m for m in knet.layers if isinstance(m, tf.keras.layers.BatchNormalization)]
        assert (len(tconv), len(tbn)) == (len(kconv), len(kbn))
        for t, k in zip(tconv, kconv):
            k.kernel.assign(t.weight.detach().permute(2, 3, 1, 0).numpy())
        for t, k in zip(tbn, kbn):
            with torch.no_grad():        # statistics away from their defaults, so eval mode is checked
                t.running_mean.uniform_(-0.5, 0.5), t.running_var.uniform_(0.5, 2.0)
                t.weight.uniform_(0.5, 1.5), t.bias.uniform_(-0.2, 0.2)
            for kv, tv in [(k.gamma, t.weight), (k.beta, t.bias), (k.moving_mean, t.running_mean),
                           (k.moving_variance, t.running_var)]:
                kv.assign(tv.detach().numpy())
        fc = knet.get_layer("fc")
        fc.kernel.assign(tnet.fc.weight.detach().T.numpy()), fc.bias.assign(tnet.fc.bias.detach().numpy())
        tx = torch.from_numpy(x).permute(0, 3, 1, 2)
        with torch.no_grad():
            t_eval, t_train = tnet.eval()(tx).numpy(), tnet.train()(tx).numpy()
        np.testing.assert_allclose(knet(x, training=False).numpy(), t_eval, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(knet(x, training=True).numpy(), t_train, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- data, schedule

def test_crop_flip_keeps_shapes_and_moves_pixels(train):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (8, 32, 32, 3), dtype=np.uint8)
    padded = train.to_padded(images)
    assert padded.shape == (8, 40, 40, 3) and padded.dtype == np.uint8
    assert not padded[:, :4].any() and not padded[:, :, -4:].any()            # black border
    center = tf.fill([8], train.PAD)
    no = tf.zeros([8], tf.bool)
    np.testing.assert_array_equal(crop_flip(padded, center, center, no), images)
    np.testing.assert_array_equal(crop_flip(padded, center, center, ~no), images[:, :, ::-1])
    dx, dy = rng.integers(0, 9, 8).astype(np.int32), rng.integers(0, 9, 8).astype(np.int32)
    flip = rng.random(8) < 0.5
    out = crop_flip(tf.constant(padded), tf.constant(dy), tf.constant(dx), tf.constant(flip)).numpy()
    assert out.shape == images.shape and out.dtype == np.uint8
    moved = (dx != train.PAD) | (dy != train.PAD) | flip
    assert moved.any()
    for i in range(8):
        assert np.array_equal(out[i], images[i]) != bool(moved[i])
        # the crop is the padded image's window at (dy, dx), mirrored where flipped
        window = padded[i, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
        np.testing.assert_array_equal(out[i], window[:, ::-1] if flip[i] else window)
    x = train.normalize(out).numpy()
    assert x.dtype == np.float32 and x.shape == (8, 32, 32, 3)
    expected = (images[0, 0, 0] / 255 - np.array(train.MEAN)) / np.array(train.STD)
    np.testing.assert_allclose(train.normalize(images).numpy()[0, 0, 0], expected, rtol=1e-5)


def test_learning_rate_schedule(cifar10_views, tmp_path, train):
    spec = registry.load_spec("cifar10-resnet20-tensorflow")
    lrs = {epoch: train.lr_at(spec.hyperparameters, epoch) for epoch in (1, 2, 91, 92, 136, 137, 181)}
    assert lrs == {1: 0.01, 2: 0.1, 91: 0.1, 92: 0.01, 136: 0.01, 137: 0.001, 181: 0.001}
    with pytest.raises(ValueError, match="lr_values"):
        spec.load_entry_class()().setup(_context(spec, cifar10_views["train"], tmp_path, lr_values=[0.1, 0.01]))


def test_several_processes_are_refused(cifar10_views, tmp_path):
    """Several GPUs are one process under MirroredStrategy; torchrun's processes would each train alone."""
    spec = registry.load_spec("cifar10-resnet20-tensorflow")
    ctx = _context(spec, cifar10_views["train"], tmp_path)
    ctx.world_size = 2
    with pytest.raises(ValueError, match="MirroredStrategy"):
        spec.load_entry_class()().setup(ctx)


def test_resnet20_loss_falls_on_one_batch(cifar10_views, tmp_path, train):
    """The reference's own compiled step (gather, crop, momentum, weight decay), 20 times on one
    batch, centred and unflipped: the loss falls."""
    spec = registry.load_spec("cifar10-resnet20-tensorflow")
    ref = spec.load_entry_class()()
    ref.setup(_context(spec, cifar10_views["train"], tmp_path))
    ref.opt.learning_rate.assign(0.05)
    idx = tf.range(16, dtype=tf.int64)
    center = tf.fill([len(ref.train_y)], tf.constant(train.PAD, tf.int64))
    no_flip = tf.zeros([len(ref.train_y)], tf.bool)
    losses = [float(ref.train_step(idx, center, center, no_flip)) for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_training_batches_are_the_epochs_draws(cifar10_views, tmp_path, eager_if, monkeypatch):
    """What the network trains on, pinned: batch i holds the images order[16 i : 16 (i + 1)], each
    the window of the padded image at rows dy, columns dx, mirrored where flipped, where order, dx,
    dy and the flips are drawn in that order from NumPy's generator seeded seed * 1000 + epoch."""
    spec = registry.load_spec("cifar10-resnet20-tensorflow")
    ref = spec.load_entry_class()()
    ref.setup(_context(spec, cifar10_views["train"], tmp_path, depth=8))
    train = sys.modules[type(ref).__module__]       # the module this instance's step reads
    seen = []

    def recording_crop_flip(*args):
        seen.append(crop_flip(*args).numpy())
        return seen[-1]
    monkeypatch.setattr(train, "crop_flip", recording_crop_flip)
    eager_if(True)                     # the step's Python runs at every call, so the batches are seen
    ref.steps_per_epoch = 2
    ref.train_epoch(3)
    n = len(ref.train_y)
    rng = np.random.default_rng(0 * 1000 + 3)
    order = rng.permutation(n)
    dx, dy = rng.integers(0, 2 * train.PAD + 1, n), rng.integers(0, 2 * train.PAD + 1, n)
    flips = rng.random(n) < 0.5
    padded = ref.train_x.numpy()
    assert len(seen) == 2
    for i, batch in enumerate(seen):
        for j, k in enumerate(order[i * 16:(i + 1) * 16]):
            window = padded[k, dy[k]:dy[k] + 32, dx[k]:dx[k] + 32]
            np.testing.assert_array_equal(batch[j], window[:, ::-1] if flips[k] else window)


def test_copies_are_one_recipe():
    """The five references carry the same code; only their docstrings' opening lines differ."""
    codes = {name: _code(registry.load_spec(name).directory / "train.py") for name in REFERENCES}
    assert len(set(codes.values())) == 1, sorted(codes)


def _code(path) -> str:
    text = path.read_text()
    return text[text.index('The network ("Deep Residual'):]


# ------------------------------------------------------------------- every reference, end to end

@pytest.mark.recipe_run
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_smoke(name, cifar10_root, cifar10_views, tmp_path, eager_if):
    spec = registry.load_spec(name)
    depth, block = REFERENCES[name]
    assert (spec.hyperparameters["depth"], spec.hyperparameters["block"]) == (depth, block)
    assert spec.task.name == "cifar10" and spec.max_epochs == 181 and spec.framework == "tensorflow"
    eager_if(name not in COMPILED)
    cls = spec.load_entry_class()
    trainer = cls()
    trainer.setup(_context(spec, cifar10_views["train"], tmp_path, "train"))
    assert not hasattr(trainer, "eval_x")
    assert trainable_count(trainer.model) == EXACT[depth, block]
    assert main_path_convs(trainer.model) + 1 == depth

    assert trainer.steps_per_epoch == len(trainer.train_y) // 16
    if name in ONE_STEP:
        trainer.steps_per_epoch = 1
    stats = trainer.train_epoch(1)
    assert math.isfinite(stats["loss"]) and stats["lr"] == 0.01
    assert stats["samples"] == trainer.steps_per_epoch * 16
    trainer.save(tmp_path / "model")
    # int8 calibration examples: the training images prepared as the eval images (the padding cut
    # off, unaugmented, normalized); the fixture has 100, so all of them, in file order
    images, _ = load_cifar10(cifar10_views["train"], "train")
    expected = sys.modules[cls.__module__].normalize(tf.constant(images)).numpy()
    np.testing.assert_allclose(trainer.calibration_inputs(256), expected, rtol=0, atol=1e-6)

    predictor = cls()
    ctx = _context(spec, cifar10_views["predict"], tmp_path, "predict")
    predictor.setup(ctx)
    assert not hasattr(predictor, "train_x") and not hasattr(predictor, "opt")
    predictor.load(tmp_path / "model")
    scores = predictor.predict()
    assert isinstance(scores, np.ndarray) and scores.shape == (50, 10)
    assert np.isfinite(scores).all()
    # The saved model is the trained one (batch-norm statistics included): the trainer's model
    # scores the eval images alike.
    by_trainer = trainer.scores(predictor.eval_x).numpy()
    np.testing.assert_allclose(scores, by_trainer, rtol=1e-4, atol=1e-4 * float(np.abs(by_trainer).max() + 1))
    inputs = predictor.eval_inputs()
    assert len(inputs) == 50
    one = predictor.infer(inputs[0])
    assert isinstance(one, np.ndarray) and one.shape == (10,)
    np.testing.assert_allclose(one, scores[0], rtol=1e-4, atol=1e-4 * float(np.abs(scores[0]).max() + 1))
    check_inference_entry(spec, tmp_path / "model", ctx.config, cifar10_root, tmp_path / "infer", scores)


def test_roles_see_only_their_files(cifar10_views, tmp_path):
    spec = registry.load_spec("cifar10-resnet20-tensorflow")
    check_roles_see_only_their_files(spec.load_entry_class(),
                                     lambda role, root: _context(spec, root, tmp_path, role, depth=8), cifar10_views)


MIRRORED = textwrap.dedent('''
    import sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from harness import registry
    from harness.reference import Context
    spec = registry.load_spec("cifar10-resnet20-tensorflow")
    cls = spec.load_entry_class()
    sys.modules[cls.__module__].choose_strategy = lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    config = dict(spec.hyperparameters, depth=8, batch_size=16)
    trainer, predictor = cls(), cls()
    trainer.setup(Context(config=config, data_root=sys.argv[1], seed=0, task=spec.task, show_progress=False))
    assert trainer.strategy.num_replicas_in_sync == 2
    stats = trainer.train_epoch(1)
    assert np.isfinite(stats["loss"]) and stats["samples"] == 96, stats
    trainer.save(sys.argv[3])
    predictor.setup(Context(config=config, data_root=sys.argv[2], seed=0, task=spec.task, show_progress=False,
                            role="predict"))
    assert predictor.strategy.num_replicas_in_sync == 2
    predictor.load(sys.argv[3])
    scores = predictor.predict()
    assert scores.shape == (50, 10) and np.isfinite(scores).all()
    np.testing.assert_allclose(predictor.infer(predictor.eval_inputs()[0]), scores[0], rtol=1e-4, atol=1e-4)
    print("mirrored ok", stats)
''')


def test_mirrored_strategy_on_two_logical_cpus(cifar10_views, tmp_path):
    """Several replicas in one process (MirroredStrategy, as on a multi-GPU machine), on two
    logical CPU devices, the trainer then the predictor; TensorFlow fixes its devices at start-up,
    hence the subprocess."""
    proc = subprocess.run([sys.executable, "-c", MIRRORED, str(cifar10_views["train"]), str(cifar10_views["predict"]),
                           str(tmp_path / "model")], capture_output=True, text=True, env=cli_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "mirrored ok" in proc.stdout
