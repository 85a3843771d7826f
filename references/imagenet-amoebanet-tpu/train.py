"""imagenet-amoebanet-tpu: ImageNet to 93% top-5 with AmoebaNet-D N6F256, Google's DAWNBench v1 entry
(7.47 h on one Cloud TPU v2), in TensorFlow 2 / Keras 3. Read top to bottom; to fork, `cp -r` this
directory and edit this file.

The network (Real et al. 2018, "Regularized Evolution for Image Classifier Architecture Search";
built here as tensorflow/tpu's models/official/amoeba_net builds it, in Keras, channels last):
  - a stem: a 3x3/2 convolution (no padding) to 32 channels, then two reduction cells ("stem cells")
    at a quarter and a half of `filters`;
  - `num_cells` normal cells in all (6 for N6), with a reduction cell before the normal cell at one
    third and at two thirds of them (cells 2 and 4 of 0-5); each reduction cell doubles the filters;
  - a cell: its two inputs (the previous cell's output, and the one before, brought to this cell's
    size by a 1x1 convolution or a factorized reduction) give two hidden states; five combinations
    each add two operations on earlier hidden states; the hidden states the cell marks unused are
    concatenated (normal cell: 4 x filters channels, reduction cell: 3 x filters);
  - the cells' operations and inputs are AmoebaNet-D's (NORMAL_CELL, REDUCTION_CELL below): 1x1 and
    3x3 convolutions, the 1x7-then-7x1 pair, 2x2 and 3x3 max pools, a 3x3 average pool, the identity
    ("none"); a convolution of a cell is ReLU, convolution, batch norm; 3x3 and 1x7_7x1 run in a
    bottleneck of a quarter of the filters;
  - an auxiliary head on the normal cell before the second reduction, weighted 0.4 in the loss; 0.5
    dropout before the classifier; no convolution biases; batch-norm scales and shifts everywhere.

The recipe: tensorflow/tpu's amoeba_net.py flags, with the command its README gives for 93% top-5
"in under 7.5 hours" (and the entry's JSON in stanford-futuredata/dawn-bench-entries):
  - RMSProp (decay 0.9, momentum 0.9, epsilon 1.0, the mean square starting at 1 as TF1's does);
    learning rate 2.56 for a global batch of 1,024, from 0 linearly over 0.35 epochs, then 2.56 x
    0.88^(whole epochs done), never below 1e-4 of the peak, updated every step; 35 epochs;
  - weight decay 4e-5 (L2 on convolution and dense kernels); label smoothing 0.1; drop path off
    (`drop_connect_keep_prob` 1.0, the flag's default, which the README command keeps); no gradient
    clipping (the flag's 0);
  - the exponential moving average of the weights and the batch-norm statistics (decay 0.9999,
    TF1's min(decay, (1 + step) / (10 + step)) early on) is what is evaluated and saved;
  - Inception preprocessing: random crops of 10% to 100% of the area, aspect 3/4 to 4/3, resized to
    `image_size`, flipped, brightness and saturation jittered; evaluation takes the central 87.5%
    and resizes it; pixels scaled to [-1, 1];
  - bfloat16 on TPUs (Keras mixed_bfloat16), float16 with loss scaling on GPUs, float32 on CPUs
    (`precision` "auto"); the logits and the loss stay float32;
  - the data: the TFRecords of `dawnbench data prepare imagenet --format tfrecord`.
One code path for every machine: common.tf_base.choose_strategy gives TPUStrategy where a TPU
answers, MirroredStrategy over the GPUs (or over `cpu_replicas` logical CPUs, what the CPU tests
run), else the default strategy; the global batch is split across its replicas.
The harness times and scores everything; this file never sees a validation label.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")   # keep TensorFlow's start-up chatter off stderr

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from common.imagenet_files import DATASET
from common.tf_base import KerasReference, choose_strategy, find_tpu, policy_precision
from harness.datasets import DatasetError

# AmoebaNet-D's cells (tensorflow/tpu model_specs.py, "amoeba_net_d"): ten operations, in pairs; the
# hidden state each one reads (0: this cell's input after its 1x1, 1: the previous cell's output,
# 2-6: the five combinations in order); and which hidden states count as used, the others being
# concatenated into the cell's output.
NORMAL_CELL = {
    "operations": ("1x1", "max_pool_3x3", "none", "1x7_7x1", "1x1", "1x7_7x1",
                   "max_pool_3x3", "none", "avg_pool_3x3", "1x1"),
    "inputs": (1, 1, 1, 0, 0, 0, 2, 2, 1, 5),
    "used": (0, 1, 1, 0, 0, 1, 0),          # output: hidden states 0, 3, 4, 6
}
REDUCTION_CELL = {
    "operations": ("max_pool_2x2", "max_pool_3x3", "none", "3x3", "1x7_7x1",
                   "max_pool_3x3", "none", "max_pool_2x2", "avg_pool_3x3", "1x1"),
    "inputs": (0, 0, 2, 1, 2, 2, 3, 1, 2, 3),
    "used": (1, 1, 1, 1, 0, 0, 0),          # output: hidden states 4, 5, 6
}
REDUCTIONS = 2                # reduction cells among the normal ones, at 1/3 and 2/3
STEM_CELLS = 2                # reduction cells of the stem, at filters / 4 and filters / 2
STEM_FILTERS = 32             # the stem's first convolution
AUX_WIDTHS = (128, 768)       # the auxiliary head's convolutions, times `aux_scaling`
BN_MOMENTUM, BN_EPSILON = 0.9, 1e-5     # amoeba_net.py's batch_norm_decay and batch_norm_epsilon flags
RMSPROP = {"rho": 0.9, "momentum": 0.9, "epsilon": 1.0}
EMA_WARMUP = 10               # TF1's ExponentialMovingAverage(num_updates=step): min(decay, (1 + t) / (10 + t))
CROP_AREA = (0.1, 1.0)        # Inception preprocessing: min_object_covered 0.1 ...
CROP_RATIO = (3 / 4, 4 / 3)
CROP_ATTEMPTS = 100
EVAL_FRACTION = 0.875         # ... and the central 87.5% at evaluation
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
RECORDS_INDEX = "records.json"      # dawnbench/pack_tfrecord.py's count of a split's records, per shard
READ_SHARDS = 16
SHUFFLE_BUFFER = 10_000


# ----------------------------------------------------------------------------------------------
# The network

def conv(x, filters: int, kernel, stride=1, name: str = "", padding: str = "same"):
    """A bias-free convolution, He-initialized by fan-out (TF1's variance_scaling_initializer
    (mode="FAN_OUT"), a truncated normal); a new initializer per layer, since Keras fixes an
    initializer's seed when it is made."""
    init = keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="truncated_normal")
    return layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False,
                         kernel_initializer=init, name=name)(x)


def bn(x, name: str):
    return layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name)(x)


def relu(x, name: str):
    return layers.ReLU(name=name)(x)


class DropPath(layers.Layer):
    """Drops a whole operation's output per example with probability 1 - keep_prob, scaled up to
    keep the mean. Off by default (keep_prob 1.0, the published run's flag): then not even built."""

    def __init__(self, keep_prob: float, **kwargs):
        super().__init__(**kwargs)
        self.keep_prob = keep_prob
        self.seed = keras.random.SeedGenerator(0)

    def call(self, x, training=False):
        if not training:
            return x
        shape = (keras.ops.shape(x)[0], 1, 1, 1)
        keep = keras.ops.floor(self.keep_prob + keras.random.uniform(shape, seed=self.seed, dtype=x.dtype))
        return x / self.keep_prob * keep


def factorized_reduction(x, filters: int, name: str):
    """Halve the spatial size without dropping pixels: two 1x1/2 convolutions to filters / 2 each,
    one on the even pixels and one on the odd (the input shifted by one), concatenated, batch norm."""
    even = conv(x, filters // 2, 1, 2, f"{name}_path1", padding="valid")
    shifted = layers.Cropping2D(((1, 0), (1, 0)), name=f"{name}_shift")(
        layers.ZeroPadding2D(((0, 1), (0, 1)), name=f"{name}_pad")(x))
    odd = conv(shifted, filters // 2, 1, 2, f"{name}_path2", padding="valid")
    return bn(layers.Concatenate(name=f"{name}_concat")([even, odd]), f"{name}_bn")


def operation(x, op: str, filters: int, stride: int, keep_prob: float, name: str):
    """One operation of a cell on hidden state x, to `filters` channels (tensorflow/tpu's
    BaseCell._apply_operation). `stride` is 2 only in a reduction cell, on its two inputs."""
    channels = x.shape[-1]
    if op in ("none", "1x1"):
        # The identity, unless it must stride or change the width: then it is a 1x1 convolution.
        if op == "none" and stride == 1 and channels == filters:
            return x
        x = bn(conv(relu(x, f"{name}_relu"), filters, 1, stride, f"{name}_1x1"), f"{name}_bn")
    elif op in ("3x3", "1x7_7x1"):
        inner = filters // 4        # a bottleneck: 1x1 down to a quarter, the op, 1x1 back up
        x = bn(conv(relu(x, f"{name}_relu0"), inner, 1, 1, f"{name}_pre"), f"{name}_pre_bn")
        x = relu(x, f"{name}_relu1")
        if op == "3x3":
            x = conv(x, inner, 3, stride, f"{name}_3x3")
        else:
            x = conv(x, inner, (1, 7), (1, stride), f"{name}_1x7")
            x = relu(bn(x, f"{name}_1x7_bn"), f"{name}_relu_1x7")
            x = conv(x, inner, (7, 1), (stride, 1), f"{name}_7x1")
        x = relu(bn(x, f"{name}_bn"), f"{name}_relu2")
        x = bn(conv(x, filters, 1, 1, f"{name}_post"), f"{name}_post_bn")
    elif op.endswith(("_pool_2x2", "_pool_3x3")):
        size = int(op[-1])
        pool = layers.MaxPooling2D if op.startswith("max") else layers.AveragePooling2D
        x = pool(size, strides=stride, padding="same", name=f"{name}_pool")(x)
        if channels != filters:     # no ReLU here: tensorflow/tpu's pools go straight to the 1x1
            x = bn(conv(x, filters, 1, 1, f"{name}_1x1"), f"{name}_bn")
    else:
        raise ValueError(f"unknown operation {op!r}")
    if op != "none" and keep_prob < 1.0:
        x = DropPath(keep_prob, name=f"{name}_drop_path")(x)
    return x


def cell(x, previous, spec: dict, filters: int, stride: int, keep_prob: float, name: str):
    """One cell: (this cell's input, the input of the cell before it or None) -> its output."""
    # The previous cell's output, brought to this cell's spatial size and width.
    if previous is None:
        previous = x                    # the first stem cell: its own input, as it is
    elif previous.shape[2] != x.shape[2]:
        previous = factorized_reduction(relu(previous, f"{name}_prev_relu"), filters, f"{name}_prev")
    elif previous.shape[-1] != filters:
        previous = bn(conv(relu(previous, f"{name}_prev_relu"), filters, 1, 1, f"{name}_prev_1x1"), f"{name}_prev_bn")
    hidden = [bn(conv(relu(x, f"{name}_relu"), filters, 1, 1, f"{name}_1x1"), f"{name}_bn"), previous]
    ops, inputs = spec["operations"], spec["inputs"]
    for k in range(5):
        pair = []
        for side in (0, 1):
            i = inputs[2 * k + side]
            # Only the cell's two inputs (hidden states 0 and 1) are strided; later ones are reduced already.
            pair.append(operation(hidden[i], ops[2 * k + side], filters, stride if i < 2 else 1, keep_prob,
                                  f"{name}_comb{k}_{'left' if side == 0 else 'right'}"))
        hidden.append(layers.Add(name=f"{name}_comb{k}")(pair))
    # The output: the unused hidden states, each brought to the last one's size and width first.
    last = hidden[-1]
    out = []
    for i, (h, used) in enumerate(zip(hidden, spec["used"])):
        if used:
            continue
        if h.shape[2] != last.shape[2]:
            h = factorized_reduction(h, last.shape[-1], f"{name}_out{i}")
        elif h.shape[-1] != last.shape[-1]:
            h = bn(conv(h, last.shape[-1], 1, 1, f"{name}_out{i}_1x1"), f"{name}_out{i}_bn")
        out.append(h)
    return layers.Concatenate(name=f"{name}_out")(out)


def reduction_layers(num_cells: int, reductions: int = REDUCTIONS) -> list[int]:
    """The normal cells before which a reduction cell goes: at 1/3 and 2/3 of them (int of the
    float, as tensorflow/tpu's calc_reduction_layers): [2, 4] for 6 cells, [4, 8] for 12."""
    return [int(k / (reductions + 1) * num_cells) for k in range(1, reductions + 1)]


def aux_head(x, num_classes: int, scaling: float, name: str = "aux"):
    """ReLU, a 5x5/3 average pool, 1x1 conv + BN + ReLU, a conv over the whole remaining map + BN +
    ReLU, a dense layer: float32 logits."""
    x = layers.AveragePooling2D(5, strides=3, padding="valid", name=f"{name}_pool")(relu(x, f"{name}_relu0"))
    x = relu(bn(conv(x, int(AUX_WIDTHS[0] * scaling), 1, 1, f"{name}_proj"), f"{name}_bn0"), f"{name}_relu1")
    x = relu(bn(conv(x, int(AUX_WIDTHS[1] * scaling), tuple(x.shape[1:3]), 1, f"{name}_conv", "valid"),
                f"{name}_bn1"), f"{name}_relu2")
    return dense(layers.Flatten(name=f"{name}_flatten")(x), num_classes, f"{name}_logits")


def dense(x, units: int, name: str):
    init = keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="truncated_normal")
    return layers.Dense(units, kernel_initializer=init, dtype="float32", name=name)(x)


def build_model(num_cells: int = 6, filters: int = 256, image_size: int = 224, num_classes: int = 1000,
                aux_scaling: float = 0.4, dropout_keep_prob: float = 0.5, drop_path_keep_prob: float = 1.0,
                aux: bool = True) -> keras.Model:
    """AmoebaNet-D N{num_cells}F{filters}: uint8-range float images scaled to [-1, 1], (B, image_size,
    image_size, 3) -> [logits, aux logits] (float32), or the logits alone where `aux` is False."""
    if filters < 16 or filters % 16:
        # The first stem cell works at filters / 4, its bottlenecks at a quarter of that.
        raise ValueError(f"filters {filters}: expected a multiple of 16")
    inputs = keras.Input((image_size, image_size, 3), name="image")
    x = bn(conv(inputs, STEM_FILTERS, 3, 2, "stem_conv", padding="valid"), "stem_bn")
    outputs = [None, x]                 # every cell's output; a cell reads the last two
    for k in range(STEM_CELLS):         # stem cells: reduction cells at filters / 4, then / 2
        x = cell(x, outputs[-2], REDUCTION_CELL, filters * 2 ** k // 2 ** STEM_CELLS, 2, drop_path_keep_prob,
                 f"stem_cell{k}")
        outputs.append(x)
    reductions = reduction_layers(num_cells)
    width, aux_logits = filters, None
    for k in range(num_cells):
        if k in reductions:
            width *= 2
            x = cell(x, outputs[-2], REDUCTION_CELL, width, 2, drop_path_keep_prob,
                     f"reduction_cell{reductions.index(k)}")
            outputs.append(x)
        x = cell(x, outputs[-2], NORMAL_CELL, width, 1, drop_path_keep_prob, f"cell{k}")
        outputs.append(x)
        if aux and k == reductions[-1] - 1:        # the normal cell before the second reduction
            aux_logits = aux_head(x, num_classes, aux_scaling)
    x = layers.GlobalAveragePooling2D(name="pool")(relu(x, "final_relu"))
    x = layers.Dropout(1 - dropout_keep_prob, name="dropout")(x)
    logits = dense(x, num_classes, "logits")
    return keras.Model(inputs, [logits, aux_logits] if aux else logits,
                       name=f"amoebanet_d_n{num_cells}f{filters}")


def count_parameters(model: keras.Model) -> int:
    """Trainable parameters (the batch-norm moving statistics are not)."""
    return int(sum(math.prod(v.shape) for v in model.trainable_variables))


def decays(variable) -> bool:
    """L2 weight decay on the convolution and dense kernels (rank > 1), as slim's weights_regularizer:
    none on batch norm and the dense biases."""
    return len(variable.shape) > 1


# ----------------------------------------------------------------------------------------------
# The learning rate

def learning_rate(step: int, cfg: dict, steps_per_epoch: int) -> float:
    """The rate at `step` (from 0): `lr` (for a global batch of `lr_batch`, scaled linearly) reached
    linearly over `warmup_epochs`, then `lr_decay` to the power of whole `epochs_per_decay` done
    (tf.train.exponential_decay, staircase), never below 1e-4 of the peak (tensorflow/tpu's floor)."""
    peak = cfg["lr"] * cfg["batch_size"] / cfg["lr_batch"]
    warmup = int(cfg["warmup_epochs"] * steps_per_epoch)
    if step < warmup:
        rate = peak * step / warmup
    else:
        rate = peak * cfg["lr_decay"] ** (step // int(cfg["epochs_per_decay"] * steps_per_epoch))
    return max(rate, 1e-4 * peak)


class RMSprop(keras.optimizers.RMSprop):
    """TF1's RMSPropOptimizer, which the published run used: Keras's update (epsilon inside the square
    root, momentum on the scaled step), with the mean square starting at 1 instead of 0."""

    def build(self, variables):
        super().build(variables)
        for velocity in self._velocities:
            velocity.assign(tf.ones_like(velocity))


def make_optimizer(policy: str, lr: float) -> keras.optimizers.Optimizer:
    """TF1's RMSProp at `lr`; under mixed_float16 wrapped in Keras's LossScaleOptimizer, since float16
    gradients underflow without loss scaling. Call it in the strategy's scope."""
    opt = RMSprop(learning_rate=lr, **RMSPROP)
    return keras.optimizers.LossScaleOptimizer(opt) if policy == "mixed_float16" else opt


def minimize(opt: keras.optimizers.Optimizer, loss_fn, variables, weight_decay: float) -> tf.Tensor:
    """One step of `opt` on `loss_fn()` (this replica's part of the global batch's mean loss) plus
    L2 weight decay on the `decays` variables, as slim's weights_regularizer adds it to the loss:
    weight_decay x w joins the gradient before RMSProp. Returns the loss.

    The optimizer sums the replicas' gradients, so each replica adds 1/replicas of the decay. A
    LossScaleOptimizer divides the gradients it is given by its loss scale (2^15 at first, then
    dynamic): the decay is scaled as the loss is, so that it arrives whole, not divided by the scale.
    A step with an overflow on any replica is skipped on all."""
    scaled = isinstance(opt, keras.optimizers.LossScaleOptimizer)
    with tf.GradientTape() as tape:
        loss = loss_fn()
        objective = opt.scale_loss(loss) if scaled else loss
    grads = tape.gradient(objective, variables)
    replicas = tf.distribute.get_replica_context()
    decay = weight_decay / replicas.num_replicas_in_sync
    if scaled:
        decay = opt.scale_loss(decay)
        if replicas.num_replicas_in_sync > 1:
            # Keras's LossScaleOptimizer skips a step (and halves its scale) on replica 0's gradients
            # alone, checked before the replicas' are summed: another replica's float16 overflow would
            # reach the weights as inf. Any replica's overflow makes every replica's gradients
            # infinite, so that the step is skipped everywhere.
            overflows = replicas.all_reduce(tf.distribute.ReduceOp.SUM,
                                            tf.cast(tf.logical_not(opt.check_finite(grads)), tf.float32))
            grads = [g + tf.where(overflows > 0, math.inf, 0.0) for g in grads]
    opt.apply_gradients([(g + tf.cast(decay, g.dtype) * tf.cast(v, g.dtype) if decays(v) else g, v)
                         for g, v in zip(grads, variables)])
    return loss


# ----------------------------------------------------------------------------------------------
# Data: the TFRecords that `dawnbench data prepare imagenet --format tfrecord` packs
# (dawnbench/pack_tfrecord.py): <data root>/imagenet/tfrecord/{train,val}/, the same JPEG bytes as the
# prepared folders, with records.json counting each shard's records. The val shards hold the images
# in canonical order and no labels.

def record_shards(data_root, split: str) -> tuple[list[str], int]:
    folder = Path(data_root) / DATASET / "tfrecord" / split
    if not (folder / RECORDS_INDEX).is_file():
        raise DatasetError(f"ImageNet's {split} TFRecords: {RECORDS_INDEX} not found in {folder}; run "
                           "`dawnbench data prepare imagenet --format tfrecord`")
    try:
        index = json.loads((folder / RECORDS_INDEX).read_text())
        files, count = [str(folder / name) for name in index["shards"]], int(index["records"])
    except (ValueError, KeyError, TypeError):
        raise DatasetError(f"{folder / RECORDS_INDEX} is not a TFRecord index: run "
                           "`dawnbench data prepare imagenet --format tfrecord` again") from None
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise DatasetError(f"TFRecord shard {missing[0]} not found ({len(missing)} of {len(files)} missing): "
                           "run `dawnbench data prepare imagenet --format tfrecord` again")
    return files, count


def parse_train(raw):
    features = tf.io.parse_single_example(raw, {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                                                "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
    return features["image/encoded"], features["image/class/label"]


def parse_val(raw):
    return tf.io.parse_single_example(raw, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})["image/encoded"]


def train_image(data, label, size: int, seed):
    """Inception preprocessing of one training JPEG: a random crop (10-100% of the area, aspect
    3/4-4/3), decoded from that crop only, resized to size x size, flipped, brightness (+-32/255) and
    saturation (x0.5-1.5) jittered; float32 in [0, 255]. `seed` (two int64s) fixes every draw."""
    box, flip, bright, sat = tf.unstack(tf.random.experimental.stateless_split(seed, 4))
    begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.io.extract_jpeg_shape(data), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=box,
        min_object_covered=CROP_AREA[0], aspect_ratio_range=CROP_RATIO, area_range=CROP_AREA,
        max_attempts=CROP_ATTEMPTS, use_image_if_no_bounding_boxes=True)
    image = tf.io.decode_and_crop_jpeg(data, tf.stack([begin[0], begin[1], extent[0], extent[1]]), channels=3)
    image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, [size, size], method="bilinear")
    image = tf.image.stateless_random_flip_left_right(image, flip)
    image = tf.image.stateless_random_brightness(image, 32 / 255, bright)
    image = tf.image.stateless_random_saturation(image, 0.5, 1.5, sat)
    return tf.clip_by_value(image, 0.0, 1.0) * 255.0, label


def eval_image(data, size: int):
    """The central 87.5% of the JPEG's height and width, decoded from that window only and resized
    to size x size: uint8 (size, size, 3)."""
    shape = tf.io.extract_jpeg_shape(data)
    side = tf.maximum(tf.cast(tf.cast(shape[:2], tf.float32) * EVAL_FRACTION, tf.int32), 1)
    offset = (shape[:2] - side) // 2
    image = tf.io.decode_and_crop_jpeg(data, tf.concat([offset, side], 0), channels=3)
    image = tf.image.resize(image, [size, size], method="bilinear")
    return tf.cast(tf.round(tf.clip_by_value(image, 0, 255)), tf.uint8)


def scale(x: tf.Tensor) -> tf.Tensor:
    """Pixels (0-255, any dtype) -> float32 in [-1, 1], as Inception preprocessing leaves them."""
    return tf.cast(x, tf.float32) / 127.5 - 1.0


class EvalImages(Sequence):
    """The validation images in canonical order, decoded on demand: uint8 (size, size, 3). What
    `infer` is timed on; read forward with a cursor, restarted only when asked for an earlier one."""

    def __init__(self, data_root, size: int):
        self.files, self.count = record_shards(data_root, "val")
        self.size = size
        self._decode = tf.function(lambda data: eval_image(data, size), autograph=False,
                                   input_signature=[tf.TensorSpec((), tf.string)])
        self._cursor, self._next = None, 0

    def __len__(self):
        return self.count

    def encoded(self) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(self.files).map(parse_val)

    def __getitem__(self, index):
        if not isinstance(index, (int, np.integer)):
            raise TypeError("EvalImages takes one index at a time")
        if not 0 <= index < self.count:
            raise IndexError(index)
        if self._cursor is None or index < self._next:
            self._cursor, self._next = iter(self.encoded().skip(index)), int(index)
        for _ in range(index - self._next):
            next(self._cursor)
        self._next = int(index) + 1
        return self._decode(next(self._cursor))

    def dataset(self, batch: int) -> tf.data.Dataset:
        return (self.encoded().map(lambda d: eval_image(d, self.size), num_parallel_calls=tf.data.AUTOTUNE,
                                   deterministic=True).batch(batch).prefetch(tf.data.AUTOTUNE))


# ----------------------------------------------------------------------------------------------
# The precision

def resolve_precision(value, device: str) -> str:
    """The Keras dtype policy on `device` ("TPU", "GPU" or "CPU"): "auto" is mixed_bfloat16 on a TPU
    (what the published run used), mixed_float16 on a GPU, float32 on a CPU."""
    text = str(value).strip().lower()
    if text not in PRECISIONS:
        raise ValueError(f"precision {value!r}: expected one of {', '.join(PRECISIONS)}")
    if text == "auto":
        return {"TPU": "mixed_bfloat16", "GPU": "mixed_float16"}.get(device, "float32")
    return text


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class AmoebaNetTPU(KerasReference):
    """The trainer trains `self.model` (logits and aux logits) and keeps `self.averaged`, its
    moving average, which is what predicts and is saved (KerasReference's save and load go through
    `evaluated`). The predictor builds the network once and loads the averaged weights into it."""

    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        if cfg["num_classes"] != 1000:
            raise ValueError(f"num_classes {cfg['num_classes']}: the harness scores ImageNet's 1000 classes")
        for gpu in tf.config.list_physical_devices("GPU"):
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:          # the GPUs were initialized already (a second setup)
                pass
        keras.utils.set_random_seed(ctx.seed)
        if ctx.world_size > 1:
            raise ValueError("imagenet-amoebanet-tpu runs as one process (a TPU's or a machine's "
                             "replicas under one tf.distribute strategy); do not launch it on several nodes")
        # Only the trainer takes the TPU (or several replicas); the predictor runs on this host's first device.
        if ctx.trains:
            self.strategy = choose_strategy(cfg.get("tpu", "auto"), cfg.get("cpu_replicas", 1))
        else:
            self.strategy = tf.distribute.get_strategy()
        self.device = ("TPU" if isinstance(self.strategy, tf.distribute.TPUStrategy)
                       else "GPU" if tf.config.list_logical_devices("GPU") else "CPU")
        self.gpu = self.device == "GPU"
        self.policy = resolve_precision(cfg["precision"], self.device)
        replicas = self.strategy.num_replicas_in_sync
        if cfg["batch_size"] % replicas:
            raise ValueError(f"batch_size {cfg['batch_size']} is not divisible by {replicas} replicas")

        if ctx.serves:      # infer's timed server: the model only, each example comes with its request
            self.averaged = self.build(aux=False)
            return
        if not ctx.trains:          # a predictor: the validation images only; load() brings the weights
            self.val = EvalImages(ctx.data_root, cfg["image_size"])
            self.averaged = self.build(aux=False)
            return

        self.files, self.count = record_shards(ctx.data_root, "train")
        if self.count < cfg["batch_size"]:
            raise ValueError(f"batch_size {cfg['batch_size']} is larger than the {self.count} training images")
        self.steps_per_epoch = self.count // cfg["batch_size"]
        self.model = self.build(aux=True)
        self.averaged = self.build(aux=True)
        # The moving average of every float weight (the trained ones and the batch-norm moving
        # statistics, not the dropout's integer seed) lives in one flat vector while training: one
        # update a step instead of one per weight (tracing 300 per-weight updates per replica takes
        # longer than the step). `save` writes it into `self.averaged`. It starts at the initial weights.
        self.averaged_weights = [w for w in self.model.weights if "float" in w.dtype]
        with self.strategy.scope():
            self.average = tf.Variable(self.flat(self.averaged_weights), trainable=False, name="weight_average")
            self.opt = make_optimizer(self.policy, learning_rate(0, cfg, self.steps_per_epoch))
            self.opt.build(self.model.trainable_variables)          # its variables exist before tracing
        self.lr_at = lambda step: learning_rate(step, cfg, self.steps_per_epoch)
        self.step = 0
        self.train_step = self._make_train_step()

    def build(self, aux: bool) -> keras.Model:
        """The network, under the precision policy and in the strategy's scope."""
        cfg = self.ctx.config
        keras.mixed_precision.set_global_policy(self.policy)
        with self.strategy.scope():
            return build_model(cfg["num_cells"], cfg["filters"], cfg["image_size"], cfg["num_classes"],
                               cfg["aux_scaling"], cfg["dropout_keep_prob"], cfg["drop_path_keep_prob"], aux=aux)

    def evaluated(self) -> keras.Model:
        return self.averaged

    @staticmethod
    def flat(weights) -> tf.Tensor:
        return tf.concat([tf.reshape(tf.cast(w, tf.float32), [-1]) for w in weights], 0)

    def save(self, path: Path) -> None:
        """The moving average written into the averaged network, which KerasReference saves."""
        flat, start = self.average.numpy(), 0
        for average, weight in zip(self.averaged.weights, self.model.weights):
            if "float" in weight.dtype:
                size = math.prod(weight.shape)
                average.assign(flat[start:start + size].reshape(weight.shape))
                start += size
        super().save(path)

    def train_dataset(self, epoch: int) -> tf.data.Dataset:
        """This epoch's batches, one input pipeline per host: the shards in an order of (seed, epoch),
        interleaved, shuffled, decoded with crops drawn from (seed, epoch, record), cut into the
        replicas' batches."""
        cfg, seed, files = self.ctx.config, self.ctx.seed, self.files
        steps = self.steps_per_epoch

        def pipeline(context: tf.distribute.InputContext):
            share = cfg["batch_size"] // context.num_input_pipelines
            order = [files[i] for i in np.random.default_rng((seed, epoch)).permutation(len(files))]
            records = (tf.data.Dataset.from_tensor_slices(order)
                       .interleave(tf.data.TFRecordDataset, cycle_length=min(READ_SHARDS, len(order)),
                                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                       .shard(context.num_input_pipelines, context.input_pipeline_id))
            shuffle_seed = int(np.random.default_rng((seed, epoch, context.input_pipeline_id)).integers(2 ** 31))
            records = records.shuffle(SHUFFLE_BUFFER, seed=shuffle_seed).repeat().take(steps * share).enumerate()

            def example(key, raw):
                return train_image(*parse_train(raw), cfg["image_size"],
                                   tf.stack([tf.constant(seed, tf.int64), epoch * 2 ** 32 + key]))

            return (records.map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                    .batch(context.get_per_replica_batch_size(cfg["batch_size"]), drop_remainder=True)
                    .prefetch(tf.data.AUTOTUNE))

        return self.strategy.distribute_datasets_from_function(pipeline)

    def _make_train_step(self):
        """One compiled step. Each replica adds sum(loss) / global batch (the main head's smoothed
        cross-entropy plus 0.4 x the aux head's) and its share of the L2 decay; the optimizer sums
        the replicas' gradients. Then the moving average takes the new weights, on every replica."""
        cfg, model, opt, strategy = self.ctx.config, self.model, self.opt, self.strategy
        global_batch, smoothing, aux_weight = cfg["batch_size"], cfg["label_smoothing"], cfg["aux_weight"]
        average, averaged_weights = self.average, self.averaged_weights

        def smoothed_nll(logits, y):
            # tf.losses.softmax_cross_entropy(label_smoothing=e): target (1 - e) one-hot + e / classes.
            log_p = tf.nn.log_softmax(tf.cast(logits, tf.float32))
            return (1 - smoothing) * -tf.gather(log_p, y, batch_dims=1) - smoothing * tf.reduce_mean(log_p, -1)

        def update_average(distribution, weights):
            # In cross-replica context (merge_call): each device updates its copy from its own weights.
            t = tf.cast(opt.iterations, tf.float32)
            rate = tf.minimum(cfg["ema_decay"], (1 + t) / (EMA_WARMUP + t))
            distribution.extended.update(average, lambda a, w: a.assign(rate * a + (1 - rate) * w), args=(weights,))

        def replica_step(x, y):
            def loss_fn():
                logits, aux_logits = model(scale(x), training=True)
                return tf.reduce_sum(smoothed_nll(logits, y) + aux_weight * smoothed_nll(aux_logits, y)) / global_batch

            loss = minimize(opt, loss_fn, model.trainable_variables, cfg["weight_decay"])
            tf.distribute.get_replica_context().merge_call(update_average, args=(self.flat(averaged_weights),))
            return loss

        @tf.function(autograph=False)
        def train_step(x, y):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(x, y)), axis=None)

        return train_step

    def train_precision(self):
        return policy_precision(self.policy, "precision", self.ctx.config["precision"], self.device)

    def train_epoch(self, epoch):
        ctx = self.ctx
        total_loss = tf.zeros((), tf.float32)
        for x, y in ctx.progress(self.train_dataset(epoch), total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            self.opt.learning_rate.assign(self.lr_at(self.step))
            total_loss += self.train_step(x, y)
            self.step += 1
        return {"loss": float(total_loss) / self.steps_per_epoch, "lr": self.lr_at(self.step),
                "samples": self.steps_per_epoch * ctx.config["batch_size"]}

    # Evaluation and inference: the averaged weights, logits only.

    def scores(self, x: tf.Tensor) -> tf.Tensor:
        out = self.averaged(scale(x), training=False)
        return out[0] if isinstance(out, (list, tuple)) else out

    def example_spec(self):
        size = self.ctx.config["image_size"]          # decoded on demand: uint8 (size, size, 3)
        return tf.TensorSpec((size, size, 3), tf.uint8)

    def decode_image_file(self, data):
        # a timed request carries the image file (harness.inference): its decode is in the latency
        return eval_image(data, self.ctx.config["image_size"])

    def predict(self):
        batches = self.val.dataset(self.ctx.config["eval_batch_size"])
        return np.concatenate([self._batch_scores(x).numpy() for x in batches])

    def eval_inputs(self):
        return self.val

    def framework_versions(self) -> dict[str, str]:
        replicas = self.strategy.num_replicas_in_sync if hasattr(self, "strategy") else 1
        return {**super().framework_versions(), "replicas": str(replicas), "device": getattr(self, "device", ""),
                "strategy": type(getattr(self, "strategy", None)).__name__,
                "precision": getattr(self, "policy", "float32"),
                "tpu": str(find_tpu(self.ctx.config.get("tpu", "auto"))) if hasattr(self, "ctx") else ""}
