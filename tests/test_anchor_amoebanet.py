"""imagenet-amoebanet-tpu against its anchor: Google's DAWNBench v1 entry, tensorflow/tpu's
models/experimental/amoeba_net at 1acd2c4 with the command of its README.

Each row of references/imagenet-amoebanet-tpu/anchor.toml is checked here against train.py, as its
`check` says: the full AmoebaNet-D N6F256 built (its count, and the anchor's at 1,001 classes, from
the cell-by-cell derivation of tests/test_imagenet_amoebanet_tpu.py; batch norm and initializers);
the learning rate at 17 points of the full-ImageNet schedule through train.py's own function; two
steps through the reference's own train step on a tiny two-headed network, computed by hand (TF1's
RMSProp with its mean square starting at 1, L2 decay on the kernels only, both heads' smoothed
losses, the moving average of the weights), in float32 and under the GPU's and the TPU's mixed
precisions; the augmentation stage by stage on a fixed JPEG and its draws, the crops' range against
the anchor's parameters; the eval preprocessing on fixed JPEGs, and against the anchor's TF1 path.
"""
from __future__ import annotations

import functools
import sys

import numpy as np
import pytest
from anchor_checks import anchor_rows, every_row_is_checked
from test_anchor_imagenet_resnet152 import jpeg_bytes, same_but_the_rim
from test_imagenet_amoebanet_tpu import derived_count

from harness import registry
from harness.reference import Context

NAME = "imagenet-amoebanet-tpu"
CHECKED_HERE = {"parameters", "schedule", "optimizer", "augmentation", "eval_preprocessing", "config", "test"}
IMAGENET_TRAIN = 1_281_167
TEST_DECAY = 0.5            # 4e-5 moves a weight by ~1e-5 of itself a step: the decay raised, so that it shows


@functools.cache
def recipe():
    """train.py, imported once as the harness imports it (each import runs it anew)."""
    return sys.modules[registry.load_spec(NAME).load_entry_class().__module__]


def rows_by_item(kind: str) -> dict[str, dict]:
    return {row["item"]: row for row in anchor_rows(NAME, kind)}


def test_every_row_is_checked_here():
    every_row_is_checked(NAME, CHECKED_HERE, __file__)


def test_the_config_rows():
    spec = registry.load_spec(NAME)
    for row in anchor_rows(NAME, "config"):
        assert spec.hyperparameters[row["expect"]] == row["ours"], row
    assert spec.max_epochs == spec.hyperparameters["epochs"]
    assert spec.hyperparameters["lr_batch"] == spec.hyperparameters["batch_size"] == 1024      # 2.56 at 1,024
    assert spec.hyperparameters["weight_decay"] == 4e-5 and spec.hyperparameters["ema_decay"] == 0.9999


# ---- the network ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def full_network():
    return recipe().build_model(6, 256, 224)


def test_the_network_its_count_and_its_initialization(full_network):
    """N6F256 at 224 px as reference.toml configures it: 46,758,756 trainable parameters, the count
    derived cell by cell from the anchor's code, and 46,763,161 with the anchor's 1,001 classes;
    every batch norm with decay 0.9, epsilon 1e-5, scale and shift; every convolution bias-free; every
    kernel He fan-out, truncated normal; the dense biases 0; 1,000 logits, an aux head."""
    import keras
    train = recipe()
    cfg = registry.load_spec(NAME).hyperparameters
    assert (cfg["num_cells"], cfg["filters"], cfg["image_size"]) == (6, 256, 224)
    rows = rows_by_item("parameters")
    (count_row,) = [row for item, row in rows.items() if item.startswith("trainable parameters")]
    assert train.count_parameters(full_network) == count_row["ours"] == derived_count(6, 256, 224)
    assert derived_count(6, 256, 224, classes=1001) == count_row["anchor"]
    layers = full_network.layers
    bns = [layer for layer in layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert {(layer.momentum, layer.epsilon, layer.center, layer.scale) for layer in bns} == {(0.9, 1e-5, True, True)}
    kernels = [layer for layer in layers if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))]
    assert not any(layer.use_bias for layer in kernels if isinstance(layer, keras.layers.Conv2D))
    for layer in kernels:
        init = layer.kernel_initializer.get_config()
        assert (init["scale"], init["mode"], init["distribution"]) == (2.0, "fan_out", "truncated_normal"), layer.name
    dense = {layer.name: layer for layer in layers if isinstance(layer, keras.layers.Dense)}
    assert set(dense) == {"logits", "aux_logits"} and dense["logits"].units == 1000
    assert all(np.all(layer.bias.numpy() == 0) for layer in dense.values())
    assert [layer.rate for layer in layers if isinstance(layer, keras.layers.Dropout)] == [0.5]


# ---- the schedule --------------------------------------------------------------------------------

def test_the_schedule():
    """learning_rate, which train_epoch calls before every step, at step round(epoch x 1,251): ImageNet's
    steps an epoch at batch 1,024, as setup counts them (records // batch)."""
    train = recipe()
    cfg = registry.load_spec(NAME).hyperparameters
    (row,) = anchor_rows(NAME, "schedule")
    assert len(row["expect"]) >= 12
    steps = IMAGENET_TRAIN // cfg["batch_size"]
    assert steps == 1251 and int(cfg["warmup_epochs"] * steps) == int(0.01 * steps * cfg["epochs"]) == 437
    for epoch, lr in row["expect"]:
        assert train.learning_rate(round(epoch * steps), cfg, steps) == pytest.approx(lr, rel=1e-9, abs=1e-12), epoch


# ---- the optimizer step, by hand -----------------------------------------------------------------

def tiny_reference(policy: str):
    """The reference's own train step (`_make_train_step`: scale, both heads' smoothed losses, its
    `minimize`, the moving average) around a tiny two-headed network, Flatten and two Dense(5) on
    4 x 4 images, under `policy`, with train.py's optimizer; the moving average set up as setup sets
    it. AmoebaNet itself is swapped out; the step is not."""
    import keras
    import tensorflow as tf
    train = recipe()
    spec = registry.load_spec(NAME)
    config = dict(spec.hyperparameters, batch_size=4, weight_decay=TEST_DECAY)
    ref = getattr(train, spec.entry.partition(":")[2])()
    ref.ctx = Context(config=config, data_root=None, seed=0, task=spec.task, show_progress=False, role="train")
    ref.strategy = tf.distribute.get_strategy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(1)
        inputs = keras.Input((4, 4, 3))
        flat = keras.layers.Flatten()(inputs)
        ref.model = keras.Model(inputs, [keras.layers.Dense(5, name="logits")(flat),
                                         keras.layers.Dense(5, name="aux_logits")(flat)])
        ref.averaged_weights = [w for w in ref.model.weights if "float" in w.dtype]
        ref.average = tf.Variable(ref.flat(ref.averaged_weights), trainable=False)
        ref.opt = train.make_optimizer(policy, 0.1)
        ref.opt.build(ref.model.trainable_variables)
        return ref, ref._make_train_step()
    finally:
        keras.mixed_precision.set_global_policy("float32")


def smoothed_loss_and_grads(x, y, kernel, bias, smoothing, classes=5):
    """The mean over the batch of the cross-entropy against (1 - e) one-hot + e / classes of one
    dense head on x scaled to [-1, 1], and its gradients; float64."""
    xs = (x / 127.5 - 1.0).reshape(len(x), -1)
    logits = xs @ kernel + bias
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    target = np.full((len(x), classes), smoothing / classes)
    target[np.arange(len(x)), y] += 1 - smoothing
    dlogits = (np.exp(logp) - target) / len(x)
    return -(target * logp).sum(1).mean(), xs.T @ dlogits, dlogits.sum(0)


# float32 arithmetic; float16 and bfloat16 compute round each gradient to about 1e-3 and 4e-3 of
# itself, which moves a weight by lr x that / 1.4: under the decay's lr x 0.5 x w / 1.4 by 40x or more.
TOLERANCE = {"float32": {"rtol": 1e-5, "atol": 1e-7}, "mixed_float16": {"rtol": 1e-3, "atol": 3e-4},
             "mixed_bfloat16": {"rtol": 1e-2, "atol": 3e-3}}


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_two_steps_by_hand(policy):
    """Two steps of the reference's own train step at the schedule's rates at epochs 0.1 and 0.2,
    against the anchor's update written out: loss = main + 0.4 x aux, each smoothed by 0.1;
    g += decay x w on the kernels only; TF1's RMSProp, ms = 0.9 ms + 0.1 g^2 (ms starting at 1),
    mom = 0.9 mom + lr g / sqrt(ms + 1), w -= mom; then the average a = r a + (1 - r) w with
    r = min(0.9999, (1 + t) / (10 + t)) after step t. Under mixed_float16 (the GPU's path: Keras's
    LossScaleOptimizer) and mixed_bfloat16 (the TPU's) as well as float32."""
    import tensorflow as tf
    cfg = registry.load_spec(NAME).hyperparameters
    smoothing, aux_weight = cfg["label_smoothing"], cfg["aux_weight"]
    ref, step = tiny_reference(policy)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (4, 4, 4, 3)).astype(np.uint8)
    y = np.array([0, 3, 1, 4])
    heads = {name: [v.numpy().astype(np.float64) for v in ref.model.get_layer(name).weights]
             for name in ("logits", "aux_logits")}
    ms = {name: [np.ones_like(w) for w in ws] for name, ws in heads.items()}
    mom = {name: [np.zeros_like(w) for w in ws] for name, ws in heads.items()}
    average = {name: [w.copy() for w in ws] for name, ws in heads.items()}
    (schedule,) = anchor_rows(NAME, "schedule")
    rates = [lr for epoch, lr in schedule["expect"] if epoch in (0.1, 0.2)]
    for t, lr in enumerate(rates, 1):
        ref.opt.learning_rate.assign(lr)                       # as train_epoch sets it
        total = 0.0
        for name, weight in (("logits", 1.0), ("aux_logits", aux_weight)):
            kernel, bias = heads[name]
            loss, g_kernel, g_bias = smoothed_loss_and_grads(x, y, kernel, bias, smoothing)
            total += weight * loss
            for i, g in enumerate((weight * g_kernel + TEST_DECAY * kernel, weight * g_bias)):
                ms[name][i] = 0.9 * ms[name][i] + 0.1 * g ** 2
                mom[name][i] = 0.9 * mom[name][i] + lr * g / np.sqrt(ms[name][i] + 1.0)
                heads[name][i] = heads[name][i] - mom[name][i]
        rate = min(cfg["ema_decay"], (1 + t) / (10 + t))
        for name in heads:
            average[name] = [rate * a + (1 - rate) * w for a, w in zip(average[name], heads[name])]
        got = float(step(tf.constant(x), tf.constant(y)))
        assert got == pytest.approx(total, rel=1e-5 if policy == "float32" else 1e-2)
    tolerance = TOLERANCE[policy]
    for name, weights in heads.items():
        for variable, expected in zip(ref.model.get_layer(name).weights, weights):
            np.testing.assert_allclose(variable.numpy(), expected, err_msg=f"{name} {variable.name}", **tolerance)
    flat = ref.average.numpy()
    expected = np.concatenate([w.reshape(-1) for name in ("logits", "aux_logits") for w in average[name]])
    np.testing.assert_allclose(flat, expected, **tolerance)
    if policy == "mixed_float16":
        assert type(ref.opt).__name__ == "LossScaleOptimizer"


# ---- augmentation, eval preprocessing ------------------------------------------------------------

def test_the_augmentation_stage_by_stage_and_its_draws(monkeypatch):
    """train_image on one fixed 180 x 120 JPEG with 200 seeds, each stage recorded: the crop is the
    drawn window of the fully decoded image (same_but_the_rim) resized bilinearly to 64 px and
    scaled to [0, 1]; then the mirror or not; then one brightness offset within +-32/255; then
    saturation in 0.5-1.5; the output is that clipped to [0, 1], times 255. The draws: areas of
    10-100%, aspects 3/4-4/3, about half mirrored, offsets of both signs."""
    import tensorflow as tf
    train = recipe()
    width, height, size = 180, 120, 64
    data = tf.constant(jpeg_bytes(width, height))
    full = tf.io.decode_jpeg(data, channels=3)
    seen = {}

    def recorder(stage, function):
        def recorded(*args, **kwargs):
            out = function(*args, **kwargs)
            seen[stage] = (args, kwargs, out)
            return out
        return recorded
    for stage in ("stateless_sample_distorted_bounding_box", "stateless_random_flip_left_right",
                  "stateless_random_brightness", "stateless_random_saturation"):
        monkeypatch.setattr(tf.image, stage, recorder(stage, getattr(tf.image, stage)))
    flips, areas, ratios, offsets = [], [], [], []
    for k in range(200):
        out, label = train.train_image(data, 3, size, tf.constant([5, k], tf.int64))
        box_args, box_kwargs, (begin, extent, _) = seen["stateless_sample_distorted_bounding_box"]
        window = full[begin[0]:begin[0] + extent[0], begin[1]:begin[1] + extent[1]]
        resized = tf.image.resize(tf.cast(window, tf.float32) / 255.0, [size, size], "bilinear").numpy()
        (flip_in, _), _, flip_out = seen["stateless_random_flip_left_right"]
        assert same_but_the_rim(np.abs(np.round(flip_in.numpy() * 255) - np.round(resized * 255)))
        mirrored = bool(np.array_equal(flip_out.numpy(), flip_in.numpy()[:, ::-1]))
        assert mirrored or np.array_equal(flip_out.numpy(), flip_in.numpy())
        (bright_in, delta, _), _, bright_out = seen["stateless_random_brightness"]
        assert bright_in is flip_out and delta == pytest.approx(32 / 255)
        offset = (bright_out.numpy() - bright_in.numpy())
        assert offset.max() - offset.min() < 1e-5 and abs(offset.mean()) <= 32 / 255 + 1e-6
        (sat_in, lower, upper, _), _, sat_out = seen["stateless_random_saturation"]
        assert sat_in is bright_out and (lower, upper) == (0.5, 1.5)
        np.testing.assert_allclose(out.numpy(), np.clip(sat_out.numpy(), 0, 1) * 255, rtol=1e-6, atol=1e-4)
        assert int(label) == 3 and tuple(out.shape) == (size, size, 3)
        flips.append(mirrored)
        offsets.append(offset.mean())
        areas.append(extent[0] * extent[1] / (width * height))
        ratios.append(extent[1] / extent[0])
    assert box_kwargs["area_range"] == (0.1, 1.0) and box_kwargs["aspect_ratio_range"] == (3 / 4, 4 / 3)
    assert box_kwargs["min_object_covered"] == 0.1 and box_kwargs["max_attempts"] == 100
    areas, ratios = np.array(areas), np.array(ratios)
    assert areas.min() > 0.1 - 0.01 and areas.max() > 0.7 and ratios.min() > 0.75 * 0.95 and ratios.max() < 4 / 3 * 1.05
    assert 0.32 < np.mean(flips) < 0.68 and min(offsets) < -0.06 and max(offsets) > 0.06


def test_the_crops_range_is_the_anchors():
    """The anchor draws areas of 5-100% but requires 10% of the whole-image box covered, so both draw
    from 10-100%: 1,000 stateless draws of each on a 400 x 300 image (the same seeds, deterministic)."""
    import tensorflow as tf
    train = recipe()

    def areas(area_range):
        drawn = []
        for k in range(1000):
            _, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
                tf.constant([300, 400, 3]), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=[1, k],
                min_object_covered=0.1, aspect_ratio_range=train.CROP_RATIO, area_range=area_range,
                max_attempts=train.CROP_ATTEMPTS, use_image_if_no_bounding_boxes=True)
            drawn.append(float(extent[0] * extent[1]) / 120000)
        return np.array(drawn)
    ours, anchors = areas(train.CROP_AREA), areas((0.05, 1.0))          # inception_preprocessing.py:150
    assert train.CROP_AREA == (0.1, 1.0) and ours.min() >= 0.1 - 0.002 and anchors.min() >= 0.1 - 0.002
    assert abs(ours.mean() - anchors.mean()) < 0.03 and abs(np.median(ours) - np.median(anchors)) < 0.05


def test_the_eval_preprocessing_on_fixed_jpegs():
    """eval_image on JPEGs of four shapes: the central int(0.875 x side) of each side at offset
    (side - crop) // 2, cut from the fully decoded image, resized bilinearly to 224, rounded to uint8
    (same_but_the_rim); `scale` to [-1, 1]; and against the anchor's path (tf.image.central_crop,
    TF1's resize_bilinear on its corner grid, float throughout): under 0.1 of the range on average
    (0.03 to 0.07 measured on these noisy images). The predictor's scores are the averaged
    network's logits, not its aux head's."""
    import keras
    import tensorflow as tf
    train = recipe()
    assert train.EVAL_FRACTION == 0.875
    for width, height in ((300, 200), (200, 330), (257, 257), (500, 375)):
        data = tf.constant(jpeg_bytes(width, height, seed=width))
        got = train.eval_image(data, 224)
        sides = (int(height * 0.875), int(width * 0.875))
        top, left = (height - sides[0]) // 2, (width - sides[1]) // 2
        window = tf.io.decode_jpeg(data, channels=3)[top:top + sides[0], left:left + sides[1]]
        expected = tf.cast(tf.round(tf.clip_by_value(tf.image.resize(window, [224, 224], "bilinear"), 0, 255)), tf.uint8)
        assert got.dtype == tf.uint8 and same_but_the_rim(np.abs(got.numpy().astype(int) - expected.numpy().astype(int)))
        image = tf.image.convert_image_dtype(tf.io.decode_jpeg(data, channels=3), tf.float32)
        anchor = tf.compat.v1.image.resize_bilinear(tf.image.central_crop(image, 0.875)[None], [224, 224],
                                                    align_corners=False, half_pixel_centers=False)[0]
        apart = np.abs(train.scale(got).numpy() - (anchor.numpy() - 0.5) * 2.0)
        assert apart.mean() < 0.1, (width, height, apart.mean())
    pixels = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, -1)
    np.testing.assert_allclose(train.scale(tf.constant(pixels)).numpy(), pixels / 127.5 - 1, atol=1e-6)
    ref = getattr(train, registry.load_spec(NAME).entry.partition(":")[2])()
    keras.utils.set_random_seed(3)
    inputs = keras.Input((16, 16, 3))
    flat = keras.layers.Flatten()(inputs)
    ref.averaged = keras.Model(inputs, [keras.layers.Dense(5)(flat), keras.layers.Dense(5)(flat)])
    logits = ref.averaged(train.scale(tf.constant(pixels)), training=False)[0].numpy()
    np.testing.assert_allclose(ref.scores(tf.constant(pixels)).numpy(), logits, rtol=1e-6)


def test_the_precision_and_layout(full_network):
    """mixed_bfloat16 on a TPU, mixed_float16 on a GPU, float32 on a CPU ("auto"); NHWC; under
    mixed_bfloat16 the convolutions compute in bfloat16 on float32 weights and both heads' logits
    are float32 (a small N3F16 network at 96 px)."""
    import keras
    train = recipe()
    assert [train.resolve_precision("auto", d) for d in ("TPU", "GPU", "CPU")] == ["mixed_bfloat16", "mixed_float16",
                                                                                   "float32"]
    assert full_network.input_shape == (None, 224, 224, 3)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        small = train.build_model(3, 16, 96)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    convs = [layer for layer in small.layers if isinstance(layer, keras.layers.Conv2D)]
    assert {(layer.compute_dtype, layer.variable_dtype) for layer in convs} == {("bfloat16", "float32")}
    assert [out.dtype for out in small.outputs] == ["float32", "float32"]
