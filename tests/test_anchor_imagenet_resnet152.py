"""The two ResNet-152 references against their anchors, DAWNBench's seed ImageNet entries: their code,
deepakn94/tensorflow-benchmarks (TensorFlow, 4 M60s) and deepakn94/mxnet-resnet (MXNet, 8 K80s).

Each row of references/imagenet-resnet152-{tensorflow,mxnet}/anchor.toml is checked here against the
reference's code, as its `check` says: the parameter count, the block structure and the
initialization by building the network, and the seed's count derived from the seed's code; the
learning rate at a dozen points of the full-ImageNet schedule through the reference's own function;
two optimizer steps through the reference's own step, computed by hand (label smoothing, momentum,
coupled weight decay and which parameters it skips; loss scaling under mixed_float16 for
TensorFlow's GPU path); the augmentation on a fixed JPEG and its draws; the eval preprocessing on
fixed JPEGs and the flip test-time augmentation. Then the pair is run from one set of weights
(test_the_pair_computes_the_same_function_of_equal_weights).

MXNet 1.9.1 needs numpy 1.23.5 and TensorFlow 2.21 numpy 2, so no environment has both: the
TensorFlow tests run in the main test environment, the MXNet ones in MXNet's (`make test-mxnet` runs
this file there too); each skips the other's. The pair test runs in the main environment and starts
MXNet's interpreter for its half (the second_env tier), where `make test-mxnet` has made it.
"""
from __future__ import annotations

import functools
import importlib.util
import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from anchor_checks import anchor_rows, every_row_is_checked
from conftest import REPO

from harness import registry
from harness.reference import Context

TF_REF, MX_REF = "imagenet-resnet152-tensorflow", "imagenet-resnet152-mxnet"
CHECKED_HERE = {"parameters", "schedule", "optimizer", "augmentation", "eval_preprocessing", "config", "test"}
needs_tf = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                              reason="TensorFlow is not installed here: the main test environment runs these")
needs_mx = pytest.mark.skipif(importlib.util.find_spec("mxnet") is None,
                              reason="MXNet is not installed here: `make test-mxnet` runs these in "
                                     ".venv/imagenet-resnet152-mxnet (mxnet 1.9.1, numpy 1.23.5)")
MXNET_PYTHON = REPO / ".venv" / MX_REF / "bin" / "python"
pytestmark = [
    # MXNet 1.9.1 looks up scipy.sparse.csr.csr_matrix on every mx.nd.array: scipy 1.13 warns each time.
    pytest.mark.filterwarnings("ignore:Please import `csr_matrix`:DeprecationWarning"),
]

IMAGENET_TRAIN = 1_281_167          # ImageNet's training images: the schedules' steps an epoch come from it
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)      # the tables' normalization
# The hand-computed steps run with the decay raised: at 5e-5 (TensorFlow) or 1e-4 (MXNet) one step
# moves a weight by about 1e-6 of itself, float32's noise, so a decay applied where it should not be
# (or not applied) could pass unseen. At TEST_DECAY it moves a decayed weight by lr x 0.5 of itself.
TEST_DECAY = 0.5


@functools.cache
def module_of(name: str):
    """The reference's train.py, imported once as the harness imports it (each import runs it anew)."""
    return sys.modules[registry.load_spec(name).load_entry_class().__module__]


def entry_class(name: str):
    return getattr(module_of(name), registry.load_spec(name).entry.partition(":")[2])


def rows_by_item(name: str, kind: str) -> dict[str, dict]:
    return {row["item"]: row for row in anchor_rows(name, kind)}


def jpeg_bytes(width: int, height: int, seed: int = 0) -> bytes:
    """A fixed RGB JPEG no crop or mirror leaves unchanged: ramps across and down, plus noise."""
    from PIL import Image
    y, x = np.mgrid[0:height, 0:width]
    noise = np.random.default_rng(seed).integers(0, 60, (height, width, 3))
    pixels = np.stack([x * 200 // width, y * 200 // height, (x + y) * 100 // (width + height)], -1) + noise
    out = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(out, "JPEG", quality=95)
    return out.getvalue()


def same_but_the_rim(apart: np.ndarray) -> bool:
    """|ours - by hand| per pixel, (H, W, 3): equal inside a 3-pixel rim, and the mean under 0.2 of a
    grey level. tf.io.decode_and_crop_jpeg upsamples the chroma at the window's edge from the window
    alone, so the rim of a windowed decode differs from the full decode's (measured: up to 10 grey
    levels on the outermost pixels, 0 inside, a mean of at most 0.09 on these images)."""
    return apart[3:-3, 3:-3].max() == 0 and apart.mean() < 0.2


@pytest.mark.parametrize("name", [TF_REF, MX_REF])
def test_every_row_is_checked_here(name):
    every_row_is_checked(name, CHECKED_HERE, __file__)


@pytest.mark.parametrize("name", [TF_REF, MX_REF])
def test_the_config_rows(name):
    spec = registry.load_spec(name)
    for row in anchor_rows(name, "config"):
        assert spec.hyperparameters[row["expect"]] == row["ours"], row
    assert spec.max_epochs == spec.hyperparameters["epochs"]         # the harness's budget is the schedule's


# ================================================================================================
# imagenet-resnet152-tensorflow against the TensorFlow seed (deepakn94/tensorflow-benchmarks)

class FullImagenetFolders:
    """Stands in for the training folders in the Keras reference's setup, which reads only their
    image and class counts: the full ImageNet's, so the trainer's schedule is the real run's."""

    def __init__(self, data_root, cfg):
        self.count, self.classes = IMAGENET_TRAIN, 1000


@pytest.fixture(scope="module")
def keras_trainer(tmp_path_factory):
    """The Keras reference set up as a real run: its reference.toml, ImageNet's 1,281,167 images
    (no files: FullImagenetFolders), ResNet-152 built and its optimizer made. Never trained here."""
    train = module_of(TF_REF)
    spec = registry.load_spec(TF_REF)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "FolderTrain", FullImagenetFolders)
        ref = entry_class(TF_REF)()
        ref.setup(Context(config=dict(spec.hyperparameters), data_root=tmp_path_factory.mktemp("no-images"), seed=0,
                          task=spec.task, show_progress=False, role="train"))
    return ref


def seed_tensorflow_count(stages=(3, 8, 36, 3), classes: int = 1000) -> int:
    """The seed's ResNet v1 counted from its code (resnet_model.py:41-79, 204-225): every convolution
    bias-free with a batch norm of scale and shift after it (convnet_builder.py:158-173, scale True at
    resnet_model.py:208), a 1x1 projection + batch norm where a block changes the depth, the affine
    layer with its bias (convnet_builder.py:253-285)."""
    def conv_bn(c_in, c_out, kernel=1):
        return kernel * kernel * c_in * c_out + 2 * c_out
    count, channels = conv_bn(3, 64, 7), 64
    for stage, blocks in enumerate(stages):
        width = 64 * 2 ** stage
        for _ in range(blocks):
            count += conv_bn(channels, width) + conv_bn(width, width, 3) + conv_bn(width, 4 * width)
            count += conv_bn(channels, 4 * width) if channels != 4 * width else 0
            channels = 4 * width
    return count + channels * classes + classes


@needs_tf
def test_the_keras_network_its_count_and_its_initialization(keras_trainer):
    """The rows checked by building the network: v1.5 strides, the padded stem pool (224 -> 56),
    3-8-36-3 blocks, no convolution biases, 60,192,808 trainable parameters (and the seed's v1 the
    same), He fan-out convolutions, zero-initialized last batch norms, BN momentum 0.9 / epsilon 1e-5,
    the dense layer uniform in +-1/sqrt(2048)."""
    import keras
    import tensorflow as tf
    train = module_of(TF_REF)
    model = keras_trainer.model
    rows = rows_by_item(TF_REF, "parameters")
    assert train.count_parameters(model) == rows["trainable parameters"]["ours"]
    assert seed_tensorflow_count() == rows["trainable parameters"]["anchor"]
    for stage in (2, 3, 4):                     # v1.5: the first block of a stage strides in its 3x3
        assert model.get_layer(f"stage{stage}_block1_conv2").strides == (2, 2)
        assert model.get_layer(f"stage{stage}_block1_conv1").strides == (1, 1)
    assert [sum(layer.name.startswith(f"stage{s}_block") and layer.name.endswith("_add") for layer in model.layers)
            for s in (1, 2, 3, 4)] == [3, 8, 36, 3]
    stem = keras.Model(model.input, model.get_layer("stem_pool").output)
    assert tuple(stem(tf.zeros((1, 224, 224, 3))).shape) == (1, 56, 56, 64)
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len(convs) == 155 and not any(layer.use_bias for layer in convs)    # 151 + 4 projections
    for layer in convs:
        init = layer.kernel_initializer.get_config()
        assert (init["scale"], init["mode"], init["distribution"]) == (2.0, "fan_out", "untruncated_normal"), layer.name
    bns = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert {(layer.momentum, layer.epsilon) for layer in bns} == {(0.9, 1e-5)}
    for layer in bns:
        last = layer.name.endswith("_bn3")
        assert np.all(layer.gamma.numpy() == (0.0 if last else 1.0)) and np.all(layer.beta.numpy() == 0), layer.name
    assert sum(layer.name.endswith("_bn3") for layer in bns) == 50
    kernel, bias = (w.numpy() for w in model.get_layer("fc").weights)
    bound = 1 / math.sqrt(2048)
    assert kernel.shape == (2048, 1000) and bias.shape == (1000,)
    assert 0.999 * bound < np.abs(kernel).max() <= bound and np.abs(bias).max() <= bound


@needs_tf
def test_the_keras_schedule(keras_trainer):
    """The rate the trainer sets before each step (train_epoch: lr_at(step)), at step round(epoch x
    1,251), ImageNet's steps an epoch at batch 1,024."""
    (row,) = anchor_rows(TF_REF, "schedule")
    assert len(row["expect"]) >= 12
    assert keras_trainer.steps_per_epoch == IMAGENET_TRAIN // 1024
    assert module_of(TF_REF).peak_lr(keras_trainer.ctx.config) == 0.1 * 1024 / 256     # linear scaling
    for epoch, lr in row["expect"]:
        assert keras_trainer.lr_at(round(epoch * keras_trainer.steps_per_epoch)) == pytest.approx(lr, rel=1e-9, abs=1e-12), epoch


def tiny_keras_reference(policy: str, decay: float):
    """The Keras reference's own train step (`_make_train_step`: normalize, the smoothed loss, its
    `minimize`, the strategy's sum) around a tiny network, Flatten + Dense(5) on 4 x 4 images, under
    `policy`; its optimizer from `make_optimizer`. The big network is swapped out; the step is not."""
    import keras
    import tensorflow as tf
    train = module_of(TF_REF)
    spec = registry.load_spec(TF_REF)
    config = dict(spec.hyperparameters, batch_size=4, weight_decay=decay)
    ref = entry_class(TF_REF)()
    ref.ctx = Context(config=config, data_root=None, seed=0, task=spec.task, show_progress=False, role="train")
    ref.strategy = tf.distribute.get_strategy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(1)
        inputs = keras.Input((4, 4, 3))
        ref.model = keras.Model(inputs, keras.layers.Dense(5, name="fc")(keras.layers.Flatten()(inputs)))
        ref.opt = train.make_optimizer(config, policy)
        ref.opt.build(ref.model.trainable_variables)
        return ref, ref._make_train_step()
    finally:
        keras.mixed_precision.set_global_policy("float32")


def smoothed_step_by_hand(x, y, kernel, bias, smoothing, classes=5):
    """The mean over the batch of the cross-entropy against (1 - e) one-hot + e / classes, and its
    gradients with respect to the dense layer, in float64."""
    xn = ((x - np.array(MEAN)) / np.array(STD)).reshape(len(x), -1)
    logits = xn @ kernel + bias
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    target = np.full((len(x), classes), smoothing / classes)
    target[np.arange(len(x)), y] += 1 - smoothing
    loss = -(target * logp).sum(1).mean()
    dlogits = (np.exp(logp) - target) / len(x)
    return loss, xn.T @ dlogits, dlogits.sum(0)


@needs_tf
@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_two_keras_steps_by_hand(policy):
    """Two steps of the reference's own train step at the schedule's first two rates, against Keras's
    SGD written out: m = 0.9 m - lr (g + decay x w) on the kernel, m = 0.9 m - lr g on the bias (not
    decayed), w += m; the loss smoothed by 0.1. Under mixed_float16 (the GPU path: float16 compute,
    Keras's LossScaleOptimizer at 2^15) the forward and backward round to float16, about 1e-3 of a
    gradient, which moves a weight by lr x that: far under the decay's lr x 0.5 of the weight."""
    import tensorflow as tf
    spec = registry.load_spec(TF_REF)
    smoothing, momentum = spec.hyperparameters["label_smoothing"], spec.hyperparameters["momentum"]
    assert (smoothing, momentum) == (0.1, 0.9)
    ref, step = tiny_keras_reference(policy, TEST_DECAY)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (4, 4, 4, 3)).astype(np.uint8)
    y = np.array([0, 3, 1, 4])
    fc = ref.model.get_layer("fc")
    kernel, bias = (v.numpy().astype(np.float64) for v in (fc.kernel, fc.bias))
    m_kernel, m_bias = np.zeros_like(kernel), np.zeros_like(bias)
    (schedule,) = anchor_rows(TF_REF, "schedule")
    for lr in (schedule["expect"][0][1], schedule["expect"][1][1]):      # 0.04, then 0.112
        ref.opt.learning_rate.assign(lr)                                 # as train_epoch sets it
        loss, g_kernel, g_bias = smoothed_step_by_hand(x, y, kernel, bias, smoothing)
        got = float(step(tf.constant(x), tf.constant(y)))
        assert got == pytest.approx(loss, rel=1e-5 if policy == "float32" else 2e-3)
        m_kernel = momentum * m_kernel - lr * (g_kernel + TEST_DECAY * kernel)
        m_bias = momentum * m_bias - lr * g_bias
        kernel, bias = kernel + m_kernel, bias + m_bias
    tolerance = {"rtol": 1e-5, "atol": 1e-7} if policy == "float32" else {"rtol": 1e-3, "atol": 1e-4}
    np.testing.assert_allclose(fc.kernel.numpy(), kernel, **tolerance)
    np.testing.assert_allclose(fc.bias.numpy(), bias, **tolerance)
    if policy == "mixed_float16":
        assert type(ref.opt).__name__ == "LossScaleOptimizer" and fc.kernel.dtype == "float32"


@needs_tf
def test_the_keras_optimizer_is_heavy_ball_sgd(keras_trainer):
    opt = keras_trainer.opt
    assert type(opt).__name__ == "SGD" and opt.momentum == 0.9 and opt.nesterov is False
    rows = rows_by_item(TF_REF, "optimizer")
    assert "no Nesterov" in rows["optimizer"]["ours"] and "1e-4" in rows["weight decay"]["ours"]
    assert registry.load_spec(TF_REF).hyperparameters["weight_decay"] == 1e-4


@needs_tf
def test_the_keras_augmentation_on_a_fixed_jpeg_and_its_draws(monkeypatch):
    """train_image on one fixed 180 x 120 JPEG with 200 seeds: each output is the window the draw
    chose, cut from the fully decoded image, resized bilinearly to 64 px, mirrored or not
    (same_but_the_rim); the draws are the table's (area 8-100%, aspect 3/4-4/3,
    10 attempts, no box constraint), and about half the images are mirrored."""
    import tensorflow as tf
    train = module_of(TF_REF)
    width, height, size = 180, 120, 64
    data = tf.constant(jpeg_bytes(width, height))
    full = tf.io.decode_jpeg(data, channels=3)
    draws = []
    sample = tf.image.stateless_sample_distorted_bounding_box

    def recording(*args, **kwargs):
        begin, extent, box = sample(*args, **kwargs)
        draws.append((kwargs, begin.numpy(), extent.numpy()))
        return begin, extent, box
    monkeypatch.setattr(tf.image, "stateless_sample_distorted_bounding_box", recording)
    flips, areas, ratios = [], [], []
    for k in range(200):
        out, label = train.train_image(data, 7, size, tf.constant([0, k], tf.int64))
        kwargs, begin, extent = draws[-1]
        window = full[begin[0]:begin[0] + extent[0], begin[1]:begin[1] + extent[1]]
        plain = tf.cast(tf.round(tf.clip_by_value(tf.image.resize(window, [size, size], "bilinear"), 0, 255)), tf.uint8)
        apart = [np.abs(out.numpy().astype(int) - view.numpy().astype(int)) for view in (plain, plain[:, ::-1])]
        mirrored = bool(apart[1].mean() < apart[0].mean())
        assert same_but_the_rim(apart[mirrored]) and apart[not mirrored].mean() > 5, k
        flips.append(mirrored)
        areas.append(extent[0] * extent[1] / (width * height))
        ratios.append(extent[1] / extent[0])
        assert int(label) == 7 and out.dtype == tf.uint8 and tuple(out.shape) == (size, size, 3)
    assert kwargs["area_range"] == (0.08, 1.0) and kwargs["aspect_ratio_range"] == (3 / 4, 4 / 3)
    assert kwargs["max_attempts"] == 10 and kwargs["min_object_covered"] == 0.0
    areas, ratios = np.array(areas), np.array(ratios)
    whole = areas == 1.0                                       # the fallback after 10 failed attempts
    assert areas.min() > 0.08 - 0.01 and areas.max() > 0.7 and areas.mean() > 0.3      # 160 x 120 at most: 0.89
    assert ratios[~whole].min() > 0.75 * 0.95 and ratios[~whole].max() < 4 / 3 * 1.05    # pixel rounding
    assert 0.32 < np.mean(flips) < 0.68                         # p = 0.5: 5 sigma at 200 draws


@needs_tf
def test_the_training_image_size():
    """Progressive resizing through common.schedules.image_size, the function train_dataset asks
    for each epoch's crop size: 160 px to epoch 13, multiples of 32 rising to 224 px at epoch 30."""
    train = module_of(TF_REF)
    cfg = registry.load_spec(TF_REF).hyperparameters
    sizes = {epoch: train.image_size(epoch, cfg) for epoch in range(1, cfg["epochs"] + 1)}
    assert {sizes[e] for e in range(1, 14)} == {160} and {sizes[e] for e in range(30, 41)} == {224}
    middle = [sizes[e] for e in range(14, 30)]
    assert middle == sorted(middle) and set(middle) <= {160, 192, 224} and 192 in middle
    assert all(size % 32 == 0 for size in sizes.values())


@needs_tf
def test_the_keras_eval_preprocessing_on_fixed_jpegs():
    """eval_image on JPEGs of three shapes: the centre square of side round(short side x 224 / 256)
    cut from the fully decoded image, resized bilinearly to 224, rounded to uint8 (same_but_the_rim);
    then normalize's constants, and the scores of the image and its mirror
    averaged, with a tiny network standing in for ResNet-152."""
    import keras
    import tensorflow as tf
    train = module_of(TF_REF)
    cfg = registry.load_spec(TF_REF).hyperparameters
    assert (cfg["eval_resize"], cfg["eval_crop"]) == (256, 224)
    for width, height in ((300, 200), (200, 330), (257, 257)):
        data = tf.constant(jpeg_bytes(width, height, seed=width))
        got = train.eval_image(data, 256, 224)
        side = int(np.round(min(width, height) * 224 / 256))
        top, left = (height - side) // 2, (width - side) // 2
        window = tf.io.decode_jpeg(data, channels=3)[top:top + side, left:left + side]
        expected = tf.cast(tf.round(tf.clip_by_value(tf.image.resize(window, [224, 224], "bilinear"), 0, 255)), tf.uint8)
        assert got.dtype == tf.uint8 and same_but_the_rim(np.abs(got.numpy().astype(int) - expected.numpy().astype(int)))
    pixels = np.random.default_rng(1).integers(0, 256, (2, 8, 8, 3)).astype(np.uint8)
    np.testing.assert_allclose(train.normalize(tf.constant(pixels)).numpy(), (pixels - np.array(MEAN)) / np.array(STD),
                               rtol=1e-6, atol=1e-5)
    ref = entry_class(TF_REF)()
    keras.utils.set_random_seed(2)
    inputs = keras.Input((8, 8, 3))
    ref.model = keras.Model(inputs, keras.layers.Dense(5)(keras.layers.Flatten()(inputs)))
    scores = ref.scores(tf.constant(pixels)).numpy()
    normalized = train.normalize(tf.constant(pixels))
    both = (ref.model(normalized).numpy() + ref.model(normalized[:, :, ::-1]).numpy()) / 2
    np.testing.assert_allclose(scores, both, rtol=1e-5, atol=1e-6)
    assert np.abs(scores - ref.model(normalized).numpy()).max() > 1e-3       # the mirror matters


@needs_tf
def test_the_tensorflow_precision_and_layout(keras_trainer):
    train = module_of(TF_REF)
    assert train.resolve_precision("auto", gpu=True) == "mixed_float16"
    assert train.resolve_precision("auto", gpu=False) == "float32" == keras_trainer.policy
    assert keras_trainer.model.input_shape == (None, None, None, 3)              # NHWC
    assert {v.dtype for v in keras_trainer.model.trainable_variables} == {"float32"}
    assert type(train.make_optimizer(registry.load_spec(TF_REF).hyperparameters, "mixed_float16")).__name__ \
        == "LossScaleOptimizer"


# ================================================================================================
# imagenet-resnet152-mxnet against the MXNet seed (deepakn94/mxnet-resnet)

MX_SMALL = {"image_size": 32, "eval_resize": 40, "eval_crop": 32, "batch_size": 4, "eval_batch_size": 4,
            "num_workers": 1}


@pytest.fixture(scope="module")
def packed_data(imagenet_prepared, tmp_path_factory):
    """conftest's prepared tiny ImageNet, copied and packed into RecordIO as `dawnbench data prepare
    imagenet --format recordio` packs it (the packer run by this interpreter, MXNet's)."""
    import shutil

    from dawnbench import prepare_imagenet
    root = shutil.copytree(imagenet_prepared[0], tmp_path_factory.mktemp("packed") / "data", symlinks=True)
    prepare_imagenet.pack(root / "imagenet", "recordio", sys.executable)
    return root


def mxnet_trainer(data_root, **overrides):
    spec = registry.load_spec(MX_REF)
    ref = entry_class(MX_REF)()
    ref.setup(Context(config=dict(spec.hyperparameters, **MX_SMALL, **overrides), data_root=data_root, seed=0,
                      task=spec.task, show_progress=False, role="train"))
    return ref


def seed_mxnet_count(stages=(3, 8, 36, 3), classes: int = 1000) -> int:
    """The seed's ResNet-152 v2 counted from its code (symbol_resnet.py): an input batch norm
    (bn_data, gamma and beta), the 7x7 conv (no bias) and its batch norm; each pre-activation unit a
    batch norm before each of its three convolutions (no biases), a bare 1x1 convolution shortcut in
    the first unit of a stage; a last batch norm, the fully connected layer with its bias."""
    count, channels = 2 * 3 + 7 * 7 * 3 * 64 + 2 * 64, 64
    for stage, blocks in enumerate(stages):
        width = 64 * 2 ** stage
        for unit in range(blocks):
            count += 2 * channels + channels * width + 2 * width + 9 * width * width + 2 * width + width * 4 * width
            count += channels * 4 * width if unit == 0 else 0
            channels = 4 * width
    return count + 2 * channels + channels * classes + classes


@needs_mx
def test_the_mxnet_network_its_count_and_its_initialization():
    """v1 in torchvision's layout (the stride on the 3x3), projection + BN shortcuts, no convolution
    biases, 60,192,808 trainable parameters (the seed's v2: 60,185,262 arguments, by its code);
    batch norm momentum 0.9 / epsilon 1e-5, the last of each branch starting at 0; MSRA (He)
    initialization, normal with variance 2 / fan-in, as the seed's Xavier(gaussian, in, 2)."""
    import mxnet as mx
    from mxnet.gluon import nn
    train = module_of(MX_REF)
    rows = rows_by_item(MX_REF, "parameters")
    net = train.resnet152()
    assert train.count_parameters(net) == rows["trainable parameters"]["ours"]
    assert seed_mxnet_count() == rows["trainable parameters"]["anchor"]
    blocks = [b for b in net.features if isinstance(b, train.Bottleneck)]
    assert len(blocks) == 50 and sum(b.shortcut is not None for b in blocks) == 4
    for block in blocks:
        convs = [layer for layer in block.body if isinstance(layer, nn.Conv2D)]
        strides = [layer._kwargs["stride"] for layer in convs]
        assert strides[0] == strides[2] == (1, 1) and strides[1] in ((1, 1), (2, 2))
    assert [b.body[3]._kwargs["stride"] for b in blocks if b.shortcut is not None] == [(1, 1), (2, 2), (2, 2), (2, 2)]
    convs = [b for b in net.collect_params().values() if b.name.endswith("_weight") and len(b.shape) == 4]
    assert len(convs) == 155 and not [p for p in net.collect_params() if p.endswith("_bias") and "conv" in p]
    bns = [layer for layer in _walk(net) if isinstance(layer, nn.BatchNorm)]
    assert {(layer._kwargs["momentum"], layer._kwargs["eps"]) for layer in bns} == {(0.9, 1e-5)}
    net.initialize(mx.init.MSRAPrelu(factor_type="in", slope=0.0))     # what setup does
    lasts = [block.body[7] for block in blocks]
    assert all(np.all(b.gamma.data().asnumpy() == 0) for b in lasts)
    assert all(np.all(b.gamma.data().asnumpy() == 1) for b in bns if b not in lasts)
    for layer in (blocks[10].body[3], blocks[30].body[6], net.output):     # 147,456 to 2,048,000 draws each
        weight = layer.weight.data().asnumpy()
        fan_in = int(np.prod(weight.shape[1:]))
        assert weight.mean() == pytest.approx(0, abs=1e-3) and weight.std() == pytest.approx(math.sqrt(2 / fan_in), rel=0.01)
    assert "MSRAPrelu(factor_type=\"in\", slope=0.0)" in (REPO / "references" / MX_REF / "train.py").read_text()


def _walk(block):
    yield block
    for child in block._children.values():
        yield from _walk(child)


@needs_mx
def test_the_mxnet_schedule():
    """learning_rate, which train_epoch calls before every step, at step round(epoch x 5,005):
    ImageNet's steps an epoch at batch 256, as setup counts them (the last batch topped up)."""
    train = module_of(MX_REF)
    cfg = registry.load_spec(MX_REF).hyperparameters
    (row,) = anchor_rows(MX_REF, "schedule")
    assert len(row["expect"]) >= 12
    steps = math.ceil(IMAGENET_TRAIN / cfg["batch_size"])
    assert steps == 5005
    for epoch, lr in row["expect"]:
        assert train.learning_rate(round(epoch * steps), steps, cfg) == pytest.approx(lr, rel=1e-9, abs=1e-12), epoch


class OneBatch:
    """Stands in for train_epoch's ImageRecordIter: the same batch each epoch, no augmentation."""

    def __init__(self, x, y):
        import mxnet as mx
        self.batch = mx.io.DataBatch([x], [y], pad=0)

    def __iter__(self):
        yield self.batch

    def reset(self):
        pass


@needs_mx
def test_two_mxnet_steps_by_hand(packed_data):
    """Two steps of the reference's own train_epoch (its loss, backward, Trainer.step(batch)) on one
    batch of 4, at the peak rate (warm-up of one step), against MXNet's SGD written out:
    state = 0.9 state + lr (g / 4 + decay x w), w -= state, with the decay on the convolution and
    dense weights only (gamma, beta and every bias exempt, the running statistics untrained); the
    gradients are those of the cross-entropy against labels smoothed by 0.1, computed here with a
    target built by hand. The batch norm's running statistics move in both passes alike; only the
    trained weights are compared."""
    import mxnet as mx
    from mxnet import autograd
    ref = mxnet_trainer(packed_data, weight_decay=TEST_DECAY, lr=6.4, warmup_epochs=0.25)
    cfg = ref.cfg
    assert ref.steps_per_epoch == 4 and cfg["momentum"] == 0.9 and cfg["label_smoothing"] == 0.1
    lr = 6.4 * 4 / 256
    assert [mxnet_learning_rate(ref, step) for step in (0, 1)] == [pytest.approx(lr)] * 2
    rng = np.random.default_rng(0)
    x = mx.nd.array(rng.normal(size=(4, 3, 32, 32)).astype(np.float32))
    y = mx.nd.array([0, 3, 1, 2])
    target = np.full((4, cfg["num_classes"]), 0.1 / cfg["num_classes"])
    target[np.arange(4), y.asnumpy().astype(int)] += 0.9
    ref.train_iter = OneBatch(x, y)
    params = {name: p for name, p in ref.net.collect_params().items() if p.grad_req != "null"}
    decayed = {name for name in params if name.endswith("_weight")}
    assert {name for name, p in params.items() if p.wd_mult == 1.0} == decayed and len(decayed) == 155 + 1
    w = {name: p.data().asnumpy().astype(np.float64) for name, p in params.items()}
    state = {name: np.zeros_like(v) for name, v in w.items()}
    for epoch in (1, 2):
        with autograd.record():
            logp = mx.nd.log_softmax(ref.net(x), axis=-1)
            loss = -(logp * mx.nd.array(target)).sum(axis=-1)
        loss.backward()
        grads = {name: p.grad().asnumpy().astype(np.float64) for name, p in params.items()}
        stats = ref.train_epoch(epoch)
        assert stats["loss"] == pytest.approx(float(loss.mean().asscalar()), rel=1e-4) and stats["samples"] == 4
        for name in params:
            state[name] = 0.9 * state[name] + lr * (grads[name] / 4 + (TEST_DECAY if name in decayed else 0) * w[name])
            w[name] = w[name] - state[name]
    for name, p in params.items():
        np.testing.assert_allclose(p.data().asnumpy(), w[name], rtol=1e-4, atol=1e-6, err_msg=name)


def mxnet_learning_rate(ref, step: int) -> float:
    return module_of(MX_REF).learning_rate(step, ref.steps_per_epoch, ref.cfg)


@needs_mx
def test_the_mxnet_augmentation_and_its_draws(packed_data, monkeypatch):
    """train_records hands MXNet's decoder the table's augmentation (random-resized crops of 8-100%
    of the area, aspect 3/4-4/3, bicubic to image_size, random mirror, the records reshuffled) and
    normalization; run on the packed fixture, its crops are normalized pixels of the images, and
    two epochs draw different crops."""
    import mxnet as mx
    train = module_of(MX_REF)
    made = []
    monkeypatch.setattr(mx.io, "ImageRecordIter", lambda **kwargs: made.append(kwargs))   # a batch of 256: 14 records won't do
    cfg = dict(registry.load_spec(MX_REF).hyperparameters)
    folder = packed_data / "imagenet" / "recordio" / "train"
    rec, idx = str(folder / "train.rec"), str(folder / "train.idx")
    train.train_records(rec, idx, cfg, 0, 0, 1)
    monkeypatch.undo()
    (full,) = made
    assert full["data_shape"] == (3, 224, 224) and full["batch_size"] == 256
    assert (full["random_resized_crop"], full["min_random_area"], full["max_random_area"]) == (True, 0.08, 1.0)
    assert (full["min_aspect_ratio"], full["max_aspect_ratio"]) == (3 / 4, 4 / 3)
    assert full["rand_mirror"] is True and full["shuffle"] is True and full["inter_method"] == 2     # bicubic
    assert [full[f"mean_{c}"] for c in "rgb"] == list(MEAN) and [full[f"std_{c}"] for c in "rgb"] == list(STD)
    small = train.train_records(rec, idx, dict(cfg, image_size=32, batch_size=14), 0, 0, 1)
    epochs = []
    for _ in range(2):
        small.reset()
        epochs.append(next(iter(small)).data[0].asnumpy())
    pixels = epochs[0] * np.array(STD)[None, :, None, None] + np.array(MEAN)[None, :, None, None]
    assert epochs[0].shape == (14, 3, 32, 32) and pixels.min() > -1 and pixels.max() < 256
    assert np.abs(epochs[0] - epochs[1]).max() > 0.5


@needs_mx
def test_the_mxnet_eval_preprocessing_on_fixed_jpegs(monkeypatch):
    """eval_image (what `infer` decodes, as eval_records does in C++) on JPEGs of three shapes: the
    short side resized to 256 (bicubic), the centre 224 square, normalized, CHW; eval_records is
    handed the same settings in record order with no crop or mirror drawn; the softmax of the image
    and of its mirror averaged (a tiny network standing in for ResNet-152)."""
    import mxnet as mx
    from mxnet.gluon import nn
    train = module_of(MX_REF)
    for width, height in ((300, 200), (200, 330), (257, 257)):
        data = jpeg_bytes(width, height, seed=width)
        got = train.eval_image(data, 256, 224).asnumpy()
        image = mx.image.imdecode(data, flag=1, to_rgb=True)
        short = min(width, height)
        size = (256, height * 256 // width) if width == short else (width * 256 // height, 256)
        resized = mx.image.imresize(image, *size, interp=2).asnumpy().astype(np.float64)
        top, left = (size[1] - 224) // 2, (size[0] - 224) // 2
        expected = ((resized[top:top + 224, left:left + 224] - np.array(MEAN)) / np.array(STD)).transpose(2, 0, 1)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    made = []
    monkeypatch.setattr(mx.io, "ImageRecordIter", lambda **kwargs: made.append(kwargs))
    train.eval_records("val.rec", "val.idx", dict(registry.load_spec(MX_REF).hyperparameters))
    (kwargs,) = made
    assert (kwargs["resize"], kwargs["data_shape"], kwargs["inter_method"], kwargs["shuffle"]) == (256, (3, 224, 224), 2, False)
    assert not any(kwargs.get(k) for k in ("rand_crop", "rand_mirror", "random_resized_crop"))
    assert [kwargs[f"mean_{c}"] for c in "rgb"] == list(MEAN) and [kwargs[f"std_{c}"] for c in "rgb"] == list(STD)
    ref = entry_class(MX_REF)()
    ref.devices = [mx.cpu()]
    ref.net = nn.HybridSequential()
    ref.net.add(nn.Flatten(), nn.Dense(5, in_units=3 * 4 * 4))
    ref.net.initialize(mx.init.Normal(1.0))
    x = mx.nd.array(np.random.default_rng(3).normal(size=(2, 3, 4, 4)))
    both = (mx.nd.softmax(ref.net(x)) + mx.nd.softmax(ref.net(mx.nd.flip(x, axis=3)))).asnumpy() / 2
    np.testing.assert_allclose(ref._scores(x), both, rtol=1e-6)
    assert np.abs(ref._scores(x) - mx.nd.softmax(ref.net(x)).asnumpy()).max() > 1e-3


@needs_mx
def test_the_mxnet_precision_and_devices(packed_data):
    """float32 on the CPU (no AMP: it needs a GPU), AMP on a GPU by default; one process over every
    local GPU through the "device" kvstore, as the seed's 8 K80s, "dist_sync" across machines."""
    train = module_of(MX_REF)
    ref = mxnet_trainer(packed_data)
    assert ref.amp is False and {np.dtype(p.dtype) for p in ref.net.collect_params().values()} == {np.dtype(np.float32)}
    assert train.flag("auto", True) is True and train.flag("auto", False) is False
    assert train.kvstore_type("auto", 8, 1) == "device" and train.kvstore_type("auto", 0, 1) == "local"
    assert train.kvstore_type("auto", 8, 2) == "dist_sync" and ref.kvstore.type == "local"


# ================================================================================================
# The pair, from one set of weights

def keras_weights_in_gluon_order(model) -> list[np.ndarray]:
    """The Keras ResNet-152's weights in the order the Gluon one registers its parameters (stem conv
    and BN; per block conv1, bn1, conv2, bn2, conv3, bn3, then the projection and its BN; the dense
    layer), in Gluon's layouts: convolutions OIHW, BN gamma, beta, running mean, running variance,
    the dense kernel transposed."""
    names = ["stem_conv", "stem_bn"]
    for stage, blocks in enumerate((3, 8, 36, 3), 1):
        for block in range(1, blocks + 1):
            prefix = f"stage{stage}_block{block}_"
            names += [prefix + n for n in ("conv1", "bn1", "conv2", "bn2", "conv3", "bn3")]
            names += [prefix + "proj", prefix + "proj_bn"] if block == 1 else []
    arrays = []
    for name in names:
        weights = model.get_layer(name).get_weights()
        arrays += [weights[0].transpose(3, 2, 0, 1)] if len(weights) == 1 else weights
    kernel, bias = model.get_layer("fc").get_weights()
    return arrays + [kernel.T, bias]


@needs_tf
@pytest.mark.second_env
@pytest.mark.skipif(not MXNET_PYTHON.is_file(), reason="no MXNet environment: `make test-mxnet` makes "
                                                         ".venv/imagenet-resnet152-mxnet")
def test_the_pair_computes_the_same_function_of_equal_weights(tmp_path):
    """Issue 24: the ResNet-152 pair from one set of weights. The Keras network's (its initialization,
    with every batch norm's scale, shift and running statistics drawn at random, so that none is the
    identity) go into the MXNet reference's network (tests/resnet152_mxnet_logits.py, run by MXNet's
    interpreter); both score the same two 64 px images, normalized by the Keras reference's
    `normalize`, in inference mode. The MXNet reference normalizes with the same constants. What
    differs by design: NHWC against NCHW (the weights transposed), Keras's ZeroPadding + valid pool
    against MXNet's padded pool (equal after the ReLU); nothing is neutralised. Tolerance: LOGITS."""
    import tensorflow as tf
    train = module_of(TF_REF)
    model = train.build_model(152)
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.2, 1.0, n), rng.normal(0, 0.1, n), rng.normal(0, 0.1, n),
                               rng.uniform(0.5, 1.5, n)])
    pixels = rng.integers(0, 256, (2, 64, 64, 3)).astype(np.uint8)
    x = train.normalize(tf.constant(pixels))
    keras_logits = model(x, training=False).numpy()
    arrays = keras_weights_in_gluon_order(model)
    np.savez(tmp_path / "weights.npz", *arrays)
    np.save(tmp_path / "input.npy", x.numpy().transpose(0, 3, 1, 2))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([str(MXNET_PYTHON), str(REPO / "tests" / "resnet152_mxnet_logits.py"), str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["parameters"] == len(arrays) and tuple(facts["mean"]) == MEAN and tuple(facts["std"]) == STD
    assert tuple(train.MEAN) == pytest.approx(MEAN) and tuple(train.STD) == pytest.approx(STD)
    gluon_logits = np.load(tmp_path / "logits.npy")
    scale = np.abs(keras_logits).max()
    apart = np.abs(gluon_logits - keras_logits).max() / scale
    assert apart < LOGITS, (apart, scale)
    assert (gluon_logits.argsort(1)[:, -5:] == keras_logits.argsort(1)[:, -5:]).all()


# Measured on this machine (TensorFlow 2.21 with oneDNN, MXNet 1.9.1): the two networks' logits at
# most 1.0e-6 of the largest logit (2.4) apart, float32 through 155 convolutions each.
LOGITS = 1e-4
