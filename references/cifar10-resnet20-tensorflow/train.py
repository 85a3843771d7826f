"""cifar10-resnet20-tensorflow: ResNet-20 with basic blocks (n = 3 per stage, 0.27M parameters) on CIFAR-10
in TensorFlow 2 / Keras, trained with the DAWNBench seed recipe (He et al. 2016).

The five references cifar10-resnet{20,56,110,164}-tensorflow (basic blocks) and
cifar10-resnet164b-tensorflow (bottleneck blocks) each carry this same file; `depth` and `block`
are hyperparameters in their reference.toml. The network and recipe are those of cifar10-resnet164-pytorch's
train.py, with the same parameter counts, so the two frameworks can be compared on one recipe.
Read top to bottom; to fork, `cp -r` this directory and edit this file.

The network ("Deep Residual Learning for Image Recognition", section 4.2, and, pre-activation,
"Identity Mappings in Deep Residual Networks"; `block` in reference.toml picks the form):
  - a 3x3 convolution to 16 channels, then three stages of n residual blocks at 16, 32 and 64
    channels (strides 1, 2, 2), global average pooling and one dense layer to 10 classes;
  - "basic" (ResNet-20, -56, -110: He et al. 2015's post-activation form): two 3x3 convolutions,
    depth = 6n + 2, batch norm after every convolution and ReLU after the addition (the stem's
    too), with parameter-free shortcuts (option A: subsample by 2 and pad the new channels with
    zeros), so the counts are the paper's: ResNet-20 0.27M, ResNet-56 0.85M, ResNet-110 1.7M;
  - "preact-basic" and "preact-bottleneck" (ResNet-164, the PyTorch seed's preact164-basic and
    preact164): batch norm and ReLU before every convolution of a block, nothing after its
    addition, none after the stem, and one batch norm and ReLU after the last block, before the
    pooling; two 3x3 convolutions (depth = 6n + 2) or 1x1, 3x3 (strided), 1x1 with 4x expansion
    (depth = 9n + 2); where the shape changes the shortcut is a 1x1 convolution (no batch norm)
    of the block's pre-activated input, elsewhere the input itself. ReLU, not the TensorFlow
    seed's leaky ReLU (slope 0.1): one network for both twins (README, anchor table);
  - He (fan-out) initialization, no dropout. Layer settings follow PyTorch's defaults where
    Keras's differ (batch-norm momentum 0.9 and epsilon 1e-5, the dense layer's uniform
    initialization, symmetric padding of the strided 3x3 convolutions), so a PyTorch checkpoint
    maps onto this network exactly.
The seed recipe: SGD with momentum 0.9 and weight decay 5e-4 at batch 128; learning rate 0.01
for 1 warm-up epoch, 0.1 until epoch 91, 0.01 until epoch 136, then 0.001 to epoch 181 (the
schedule the seed entries ran, in both frameworks: their logs jump at epochs 92 and 137); random crops of
the image padded by 4 black pixels and random horizontal flips; per-channel normalization.
Weight decay is L2 added to the gradient of every trainable weight before the momentum step,
as PyTorch's SGD(weight_decay=...) and the original Caffe recipe do, not Keras's decoupled
`weight_decay` (which skips the momentum): the two frameworks then optimize the same objective.
The whole training set lives on the device as one normalized tensor, and each batch is
gathered, cropped and flipped there by one compiled training step (no per-image Python, no
tf.data). Several GPUs in one process train under tf.distribute.MirroredStrategy, each replica
on its slice of every global batch. The harness times and scores everything; this file never
sees the test labels.
"""
from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")   # keep TensorFlow's start-up chatter off stderr

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from common.loaders import load_cifar10, load_cifar10_images
from common.tf_augment import crop_flip
from common.tf_base import KerasReference

# Per-channel pixel statistics of the 50,000 CIFAR-10 training images (after scaling to [0, 1]).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
PAD = 4                               # pixels of zero padding around each image for random crops
WIDTHS = (16, 32, 64)                 # channels of the three stages (before bottleneck expansion)


# ----------------------------------------------------------------------------------------------
# The network (Keras functional API, channels last: the layout TensorFlow's CPU and GPU kernels want)

def conv(x, filters: int, kernel: int, stride: int = 1, name: str = ""):
    """A bias-free convolution. Strided 3x3 ones pad one pixel on every side, as PyTorch's
    padding=1: Keras's "same" would pad only bottom and right and shift the sampled grid by a
    pixel against the shortcut's."""
    if stride > 1 and kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
    # He initialization, normal with fan-out, as PyTorch's kaiming_normal_(mode="fan_out"). A new
    # initializer per layer: Keras fixes an initializer's seed when it is made, so a shared one
    # would give every kernel of a shape the same values.
    he_fan_out = keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")
    return layers.Conv2D(filters, kernel, strides=stride, use_bias=False, name=name,
                         padding="valid" if stride > 1 else "same", kernel_initializer=he_fan_out)(x)


def bn(x, name: str):
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=name)(x)


class ZeroPadShortcut(layers.Layer):
    """Option A: subsample by `stride` and pad the new channels with zeros, split evenly before
    and after, as the paper; no parameters."""

    def __init__(self, stride: int, extra_channels: int, **kwargs):
        super().__init__(**kwargs)
        self.stride, self.extra_channels = stride, extra_channels

    def call(self, x):
        if self.stride != 1:
            x = x[:, ::self.stride, ::self.stride, :]
        half = self.extra_channels // 2
        return tf.pad(x, [[0, 0], [0, 0], [0, 0], [half, self.extra_channels - half]])

    def compute_output_shape(self, shape):
        b, h, w, c = shape
        subsampled = [None if d is None else -(-d // self.stride) for d in (h, w)]
        return (b, *subsampled, c + self.extra_channels)

    def get_config(self):
        return {**super().get_config(), "stride": self.stride, "extra_channels": self.extra_channels}


def basic_block(x, width: int, stride: int, name: str):
    """Post-activation: two 3x3 convolutions, each followed by batch norm, ReLU after the addition;
    parameter-free shortcut (option A) when the shape changes."""
    c_in = x.shape[-1]
    out = layers.ReLU(name=f"{name}_relu1")(bn(conv(x, width, 3, stride, f"{name}_conv1"), f"{name}_bn1"))
    out = bn(conv(out, width, 3, 1, f"{name}_conv2"), f"{name}_bn2")
    shortcut = x
    if stride != 1 or c_in != width:
        shortcut = ZeroPadShortcut(stride, width - c_in, name=f"{name}_shortcut")(x)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([out, shortcut]))


def bn_relu(x, name: str):
    """A pre-activation: batch norm, then ReLU."""
    return layers.ReLU(name=f"{name}_relu")(bn(x, f"{name}_bn"))


def preact_shortcut(x, pre, c_out: int, stride: int, name: str):
    """Where the shape changes, a bare 1x1 convolution (no batch norm) of the pre-activated input
    `pre`, as the PyTorch seed's; elsewhere the block's input `x` itself."""
    if stride == 1 and x.shape[-1] == c_out:
        return x
    return conv(pre, c_out, 1, stride, f"{name}_proj")


def preact_basic_block(x, width: int, stride: int, name: str):
    """Pre-activation (the PyTorch seed's PreActBlock): BN, ReLU, 3x3 conv (strided), BN, ReLU,
    3x3 conv, plus the shortcut; nothing after the addition."""
    pre = bn_relu(x, f"{name}_pre1")
    out = conv(pre, width, 3, stride, f"{name}_conv1")
    out = conv(bn_relu(out, f"{name}_pre2"), width, 3, 1, f"{name}_conv2")
    return layers.Add(name=f"{name}_add")([out, preact_shortcut(x, pre, width, stride, name)])


def preact_bottleneck_block(x, width: int, stride: int, name: str):
    """Pre-activation (the PyTorch seed's PreActBottleneck): BN, ReLU, 1x1 conv; BN, ReLU, 3x3 conv
    (strided); BN, ReLU, 1x1 conv expanding by 4; plus the shortcut; nothing after the addition."""
    pre = bn_relu(x, f"{name}_pre1")
    out = conv(pre, width, 1, 1, f"{name}_conv1")
    out = conv(bn_relu(out, f"{name}_pre2"), width, 3, stride, f"{name}_conv2")
    out = conv(bn_relu(out, f"{name}_pre3"), width * 4, 1, 1, f"{name}_conv3")
    return layers.Add(name=f"{name}_add")([out, preact_shortcut(x, pre, width * 4, stride, name)])


# block: (the block, convolutions on its main path, pre-activation)
BLOCKS = {"basic": (basic_block, 2, False), "preact-basic": (preact_basic_block, 2, True),
          "preact-bottleneck": (preact_bottleneck_block, 3, True)}


def blocks_per_stage(depth: int, block: str) -> int:
    """n in depth = 6n + 2 (2 convolutions a block) or 9n + 2 (bottlenecks: 3 a block)."""
    if block not in BLOCKS:
        raise ValueError(f"block {block!r}: expected one of {', '.join(BLOCKS)}")
    layers_per_block = BLOCKS[block][1]
    n, rest = divmod(depth - 2, 3 * layers_per_block)
    if rest or n < 1:
        raise ValueError(f"depth {depth} with {block} blocks: depth must be "
                         f"{3 * layers_per_block}n + 2, n >= 1")
    return n


def build_model(depth: int, block: str = "basic", num_classes: int = 10) -> keras.Model:
    """The CIFAR ResNet of `depth` weighted layers: float (B, 32, 32, 3) normalized images -> logits."""
    n, (make_block, _, preactivation) = blocks_per_stage(depth, block), BLOCKS[block]
    inputs = keras.Input((32, 32, 3), name="image")
    x = conv(inputs, WIDTHS[0], 3, 1, "stem_conv")
    if not preactivation:           # pre-activation: the first block normalizes the stem's output
        x = layers.ReLU(name="stem_relu")(bn(x, "stem_bn"))
    for i, width in enumerate(WIDTHS):
        for j in range(n):
            x = make_block(x, width, stride=2 if i > 0 and j == 0 else 1, name=f"stage{i + 1}_block{j + 1}")
    if preactivation:               # the last block's sum, normalized and activated once before the pooling
        x = bn_relu(x, "final")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    # PyTorch's nn.Linear initialization: uniform in +-1/sqrt(fan_in) for weights and bias.
    bound = 1 / math.sqrt(x.shape[-1])
    logits = layers.Dense(num_classes, name="fc",
                          kernel_initializer=keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform"),
                          bias_initializer=keras.initializers.RandomUniform(-bound, bound))(x)
    return keras.Model(inputs, logits, name=f"resnet{depth}_{block}")


def count_parameters(depth: int, block: str = "basic") -> int:
    """Trainable parameters: convolutions, batch-norm scales and shifts, the dense layer (not the
    batch-norm moving statistics), counted as PyTorch counts `parameters()`.
    ResNet-20/56/110 (basic): 269,722 / 853,018 / 1,727,962."""
    model = build_model(depth, block)
    return int(sum(math.prod(v.shape) for v in model.trainable_variables))


# ----------------------------------------------------------------------------------------------
# Data: the images on the device, augmented (common.tf_augment) a batch at a time; the schedule;
# the devices

def to_padded(images: np.ndarray) -> np.ndarray:
    """uint8 (N, 32, 32, 3) -> uint8 (N, 40, 40, 3) with PAD black pixels on every side."""
    return np.pad(images, ((0, 0), (PAD, PAD), (PAD, PAD), (0, 0)))


def normalize(x: tf.Tensor) -> tf.Tensor:
    """uint8 (B, H, W, 3) -> float32, per-channel standardized."""
    return (tf.cast(x, tf.float32) / 255.0 - MEAN) / STD


def lr_at(config: dict, epoch: int) -> float:
    """Piecewise constant: lr_values[k] once `epoch - 1` epochs are past k of the boundaries."""
    return config["lr_values"][sum(epoch > b for b in config["lr_boundaries"])]


def choose_strategy() -> tf.distribute.Strategy:
    """All the GPUs of the machine in one process when there are several, else the default."""
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def data_device() -> str:
    """Where the data lives and each batch is cut: the first GPU, else the host. Eager tensors made
    from NumPy arrays stay in host memory unless told, and every step would copy them over."""
    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class CifarResNetKeras(KerasReference):
    """predict, save, load, eval_inputs and infer are KerasReference's (common/tf_base.py): the
    model's logits, without test-time augmentation (the seed recipe had none)."""

    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        if len(cfg["lr_values"]) != len(cfg["lr_boundaries"]) + 1:
            raise ValueError(f"lr_values {cfg['lr_values']} needs one more entry than "
                             f"lr_boundaries {cfg['lr_boundaries']}")
        if ctx.world_size > 1:
            raise ValueError("this TensorFlow reference runs as one process (several GPUs through "
                             "tf.distribute.MirroredStrategy); do not launch it with torchrun")
        for gpu in tf.config.list_physical_devices("GPU"):
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:          # the GPUs were initialized already (a second setup)
                pass
        keras.utils.set_random_seed(ctx.seed)     # Python, NumPy and TensorFlow generators
        self.strategy = choose_strategy()
        replicas = self.strategy.num_replicas_in_sync
        if cfg["batch_size"] % replicas:
            raise ValueError(f"batch_size {cfg['batch_size']} is not divisible by {replicas} replicas")

        with self.strategy.scope():
            self.model = build_model(cfg["depth"], cfg["block"])
        self.device, self.gpu = data_device(), bool(tf.config.list_logical_devices("GPU"))
        if ctx.serves:      # infer's timed server: the model only, each example comes with its request
            return
        if not ctx.trains:      # a predictor: the eval images only
            with tf.device(self.device):
                self.eval_x = normalize(tf.constant(load_cifar10_images(ctx.data_root, "test")))
            return

        images, labels = load_cifar10(ctx.data_root, "train")
        with tf.device(self.device):
            # Padded before normalizing, so the crops' borders are black; float32 (N, 40, 40, 3).
            self.train_x = normalize(tf.constant(to_padded(images)))
            self.train_y = tf.constant(labels)                                  # int64
        self.steps_per_epoch = len(images) // cfg["batch_size"]

        with self.strategy.scope():
            self.opt = keras.optimizers.SGD(learning_rate=cfg["lr_values"][0], momentum=cfg["momentum"],
                                            nesterov=cfg["nesterov"])
            self.opt.build(self.model.trainable_variables)          # its variables exist before tracing
        self.train_step = self._make_train_step()

    def calibration_batch(self, indices):
        # int8 calibration (dawnbench infer --precision int8): training images as the eval images
        # are prepared: the padding cut off, no augmentation (normalized already).
        return tf.gather(self.train_x, indices)[:, PAD:-PAD, PAD:-PAD, :]

    def _make_train_step(self):
        """One compiled step on the global batch `idx`: gather and augment it where the data
        lives, then each replica takes its slice and contributes sum(loss) / global batch to
        gradients that the optimizer sums across replicas."""
        cfg, model, opt, strategy = self.ctx.config, self.model, self.opt, self.strategy
        global_batch, replicas = cfg["batch_size"], strategy.num_replicas_in_sync
        per_replica = global_batch // replicas
        decay = cfg["weight_decay"] / replicas      # summed over replicas: weight_decay in all
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

        def replica_step(x, y):
            k = tf.distribute.get_replica_context().replica_id_in_sync_group
            x, y = x[k * per_replica:(k + 1) * per_replica], y[k * per_replica:(k + 1) * per_replica]
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True)) / global_batch
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables)
            opt.apply_gradients([(g + decay * v, v) for g, v in zip(grads, variables)])
            return loss

        @tf.function(autograph=False)           # no Python control flow to convert
        def train_step(idx, dy, dx, flip):
            x = crop_flip(tf.gather(self.train_x, idx), tf.gather(dy, idx), tf.gather(dx, idx),
                          tf.gather(flip, idx))
            losses = strategy.run(replica_step, args=(x, tf.gather(self.train_y, idx)))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

        return train_step

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        lr = lr_at(cfg, epoch)
        self.opt.learning_rate.assign(lr)
        # The epoch's order and augmentation, drawn at once; the step gathers its batch from them.
        n, batch = len(self.train_y), cfg["batch_size"]
        rng = np.random.default_rng(ctx.seed * 1000 + epoch)
        with tf.device(self.device):                    # int64: int32 tensors stay on the host
            order = tf.constant(rng.permutation(n))
            dx = tf.constant(rng.integers(0, 2 * PAD + 1, n))
            dy = tf.constant(rng.integers(0, 2 * PAD + 1, n))
            flips = tf.constant(rng.random(n) < 0.5)
        total_loss = tf.zeros((), tf.float32)
        for i in ctx.progress(range(self.steps_per_epoch), total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            total_loss += self.train_step(order[i * batch:(i + 1) * batch], dy, dx, flips)
        return {"loss": float(total_loss) / self.steps_per_epoch,
                "samples": self.steps_per_epoch * batch, "lr": lr}

    def framework_versions(self) -> dict[str, str]:
        replicas = self.strategy.num_replicas_in_sync if hasattr(self, "strategy") else 1
        return {**super().framework_versions(), "replicas": str(replicas)}
