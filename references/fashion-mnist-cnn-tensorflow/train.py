"""Fashion-MNIST to 92% top-1 with a small CNN in TensorFlow 2 / Keras, tuned for a 2-core CPU.

The TensorFlow counterpart of fashion-mnist-cnn-pytorch: the same network, initialization,
optimizer, schedule shape and augmentation, so the two frameworks (or two TensorFlow releases)
can be compared on one workload; the schedule is one epoch longer (6), for a margin over 92%.
Read top to bottom; fork the directory and edit this file to make an entry of your own.
What makes it fast on a CPU:
  - the whole training set lives in memory as one normalized tensor: no tf.data, no per-image
    Python; each step gathers and flips its batch inside one compiled tf.function;
  - a narrow network that pools right after its first two convolutions, so batch norm and
    ReLU run at 14x14 and 7x7;
  - channels last, the layout TensorFlow's oneDNN CPU kernels want;
  - a one-cycle learning rate with Nesterov SGD and label smoothing: few epochs, no tuning per run;
  - random horizontal flips for training, and flip test-time augmentation at eval.
Only APIs present in both TensorFlow 2.20 and 2.21 (Keras 3) are used, so one file serves both.
The harness times and scores everything; this file never sees the test labels.
"""
from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")   # keep TensorFlow's start-up chatter off stderr
# TensorFlow's oneDNN CPU kernels. Linux builds turn them on by default only on CPUs with AVX-512
# VNNI/BF16, AVX-VNNI or AMX, so on an AVX2-only CPU (the project's AMD EPYC) the same wheel
# would run its slower Eigen kernels: twice as slow per step here. Set before TensorFlow is
# imported (it reads the variable once); TF_ENABLE_ONEDNN_OPTS=0 in the environment overrides.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from common.loaders import load_fashion_mnist, load_fashion_mnist_images
from common.schedules import one_cycle
from common.tf_base import KerasReference

# Pixel statistics of the Fashion-MNIST training set (after scaling to [0, 1]).
MEAN, STD = 0.2860, 0.3530


def torch_uniform(fan_in: int):
    """PyTorch's default initialization for convolutions and linear layers, uniform in
    +-1/sqrt(fan_in), which the PyTorch recipe was tuned with (Keras's default is Glorot). One
    per weight: Keras fixes an initializer's seed when it is made, so a shared one repeats its
    values (a dense bias would equal the first values of its kernel)."""
    bound = 1 / math.sqrt(fan_in)
    return keras.initializers.RandomUniform(-bound, bound)


class FusedBatchNorm(layers.BatchNormalization):
    """Keras's batch norm (the same weights and weights file) computed by TensorFlow's fused
    kernel: one op where Keras runs moments, subtract, scale and shift as separate passes over
    the activations; about 10% of a training step on the project's CPU."""

    def call(self, inputs, training=None, mask=None):
        if not training:
            return tf.compat.v1.nn.fused_batch_norm(inputs, self.gamma, self.beta, self.moving_mean,
                                                    self.moving_variance, self.epsilon, is_training=False)[0]
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(inputs, self.gamma, self.beta, epsilon=self.epsilon)
        self.moving_mean.assign(self.momentum * self.moving_mean + (1 - self.momentum) * mean)
        self.moving_variance.assign(self.momentum * self.moving_variance + (1 - self.momentum) * variance)
        return y


def conv_block(x, width: int, pool: bool, name: str):
    # Pool right after the convolution: batch norm and ReLU then touch 4x fewer values, and on a
    # CPU those memory-bound passes cost as much as the convolutions.
    x = layers.Conv2D(width, 3, padding="same", use_bias=False, name=f"{name}_conv",
                      kernel_initializer=torch_uniform(9 * x.shape[-1]))(x)
    if pool:
        x = layers.MaxPooling2D(2, name=f"{name}_pool")(x)
    # PyTorch's batch-norm settings: Keras's momentum 0.9 is PyTorch's 0.1.
    x = FusedBatchNorm(momentum=0.9, epsilon=1e-5, name=f"{name}_bn")(x)
    return layers.ReLU(name=f"{name}_relu")(x)


def build_model(widths: list[int]) -> keras.Model:
    """Normalized float (B, 28, 28, 1) images -> (B, 10) logits."""
    w1, w2, w3 = widths
    inputs = keras.Input((28, 28, 1), name="image")
    x = conv_block(inputs, w1, pool=True, name="block1")      # 28x28 -> 14x14
    x = conv_block(x, w2, pool=True, name="block2")           # 14x14 -> 7x7
    x = conv_block(x, w3, pool=False, name="block3")          # 7x7
    x = layers.Flatten(name="flatten")(x)
    logits = layers.Dense(10, kernel_initializer=torch_uniform(x.shape[-1]),
                          bias_initializer=torch_uniform(x.shape[-1]), name="fc")(x)
    return keras.Model(inputs, logits, name="fashion_cnn")


def epoch_draw(n: int, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """The epoch's order of the n training images, and which of them to flip (each with p = 0.5)."""
    rng = np.random.default_rng(seed * 1000 + epoch)
    return rng.permutation(n), rng.random(n) < 0.5


def flip(x: tf.Tensor, which: tf.Tensor) -> tf.Tensor:
    """The training augmentation: the images (N, 28, 28, 1) where `which` is true mirrored left to right."""
    return tf.where(which[:, None, None, None], tf.reverse(x, axis=[2]), x)


def to_input(images: np.ndarray) -> np.ndarray:
    """uint8 (N, 28, 28) -> normalized float32 (N, 28, 28, 1)."""
    return ((images.astype(np.float32) / 255 - MEAN) / STD)[..., None]


class FashionCNNKeras(KerasReference):
    """predict, save, load, eval_inputs and infer are KerasReference's (common/tf_base.py),
    through this class's `scores`: flip test-time augmentation."""

    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        if ctx.world_size > 1:
            raise ValueError("this TensorFlow reference runs as one process; do not launch it with torchrun")
        keras.utils.set_random_seed(ctx.seed)     # Python, NumPy and TensorFlow: the initialization
        self.model = build_model(cfg["widths"])
        # Eager tensors made from NumPy stay in host memory unless told: on a GPU every step
        # would copy its batch over.
        self.gpu = bool(tf.config.list_logical_devices("GPU"))
        self.device = "/GPU:0" if self.gpu else "/CPU:0"
        if ctx.serves:      # infer's timed server: the model only, each example comes with its request
            return
        if not ctx.trains:      # a predictor: the eval images only
            with tf.device(self.device):
                self.eval_x = tf.constant(to_input(load_fashion_mnist_images(ctx.data_root, "test")))
            return
        images, labels = load_fashion_mnist(ctx.data_root, "train")
        with tf.device(self.device):
            self.train_x = tf.constant(to_input(images))
            self.train_y = tf.constant(labels)                                        # int64
        self.steps_per_epoch = len(images) // cfg["batch_size"]    # the last partial batch is dropped

        # The learning rate before each step of the planned run: indexed by the optimizer's step.
        total = cfg["epochs"] * self.steps_per_epoch
        self.lr_table = one_cycle(np.arange(total + 1), total, cfg["lr"], cfg["warmup_fraction"],
                                  cfg["lr_start_fraction"], cfg["lr_end_fraction"])
        self.opt = keras.optimizers.SGD(learning_rate=float(self.lr_table[0]), momentum=cfg["momentum"],
                                        nesterov=True)
        self.opt.build(self.model.trainable_variables)              # its variables exist before tracing
        self.train_step = self._make_train_step()

    def calibration_batch(self, indices):
        # int8 calibration (dawnbench infer --precision int8): training images, unflipped, prepared
        # as the eval images are.
        return tf.gather(self.train_x, indices)

    def _make_train_step(self):
        """One compiled step: gather the batch, flip it, forward, backward, SGD update."""
        cfg, model, opt = self.ctx.config, self.model, self.opt
        loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=cfg["label_smoothing"])
        decay = cfg["weight_decay"]
        with tf.device(self.device):
            lr_table = tf.constant(self.lr_table, tf.float32)
        last = len(self.lr_table) - 1

        @tf.function(autograph=False)           # no Python control flow to convert
        def train_step(idx, flips):
            x = flip(tf.gather(self.train_x, idx), tf.gather(flips, idx))
            y = tf.one_hot(tf.gather(self.train_y, idx), 10)
            # The schedule is indexed by the optimizer's own step counter, so it needs no Python
            # float per step (which would retrace) and resumes correctly across epochs.
            opt.learning_rate.assign(tf.gather(lr_table, tf.minimum(tf.cast(opt.iterations, tf.int32), last)))
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables)
            # L2 added to every gradient before the momentum step, as PyTorch's
            # SGD(weight_decay=...): Keras's own weight_decay is decoupled, a different recipe.
            opt.apply_gradients([(g + decay * v, v) for g, v in zip(grads, variables)])
            return loss

        return train_step

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        n, batch = len(self.train_y), cfg["batch_size"]
        # The epoch's order and flips, drawn at once; each step gathers its batch from them.
        order, flips = epoch_draw(n, ctx.seed, epoch)
        with tf.device(self.device):                    # int64: int32 tensors stay on the host
            order, flips = tf.constant(order), tf.constant(flips)
        total_loss = tf.zeros((), tf.float32)
        for i in ctx.progress(range(self.steps_per_epoch), total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            total_loss += self.train_step(order[i * batch:(i + 1) * batch], flips)
        step = min(int(self.opt.iterations), len(self.lr_table) - 1)
        return {"loss": float(total_loss) / self.steps_per_epoch,
                "samples": self.steps_per_epoch * batch, "lr": float(self.lr_table[step])}

    def scores(self, x):
        # Flip test-time augmentation: average the logits of the image and its mirror.
        return (self.model(x, training=False) + self.model(tf.reverse(x, axis=[2]), training=False)) / 2
