"""The TensorFlow ImageNet references' L2 weight decay, through the code path their training step
takes on a GPU: each reference's `make_optimizer` (Keras's LossScaleOptimizer under mixed_float16)
and `minimize` (the loss scaled, the decay added, the optimizer applied), two steps on a tiny dense
layer against the update written out in numpy: PyTorch's SGD(momentum, weight_decay) for the
ResNets, TF1's RMSProp for AmoebaNet, with the decay added to the unscaled gradient. Under
mixed_float16 and float32, at one or two replicas (MirroredStrategy over 2 logical CPUs).
Also: a float16 overflow on either of 2 replicas skips the step on both, and which variables decay.

Issue 23: the decay used to join gradients that were still multiplied by the loss scale, which
LossScaleOptimizer then divided by it (2^15 at first), so on a GPU a decay of 0.25 moved a weight
of 1.0 by 2.5e-6 instead of 0.025. The references refuse mixed_float16 on a CPU
(`resolve_precision`), so the tests call `make_optimizer` with the policy named; both Keras's
float16 policy and its LossScaleOptimizer run on the CPU.

Exactness: the inputs, weights, loss scale and learning rate are small dyadic numbers, so the
forward and backward passes in float16 (mixed) or float32 are exact in any summation order (oneDNN
or not); what rounds is the float32 optimizer arithmetic (decay x w, momentum 0.9, RMSProp's square
root), a few operations of relative error 2^-24 each, hence rtol 1e-6. The decay under test moves
the kernel by 0.025 or more; losing it, or applying it to the bias, is off by orders more."""
from __future__ import annotations

import functools
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import layers

from common import tf_base
from harness import registry

REFERENCES = ("imagenet-resnet50-tensorflow", "imagenet-resnet152-tensorflow", "imagenet-amoebanet-tpu")
WD = 0.25                   # large, so that a decay lost to the loss scale cannot hide in the tolerance
LR = 0.125
X = np.array([[1.0, 0.5, -1.0], [0.25, -0.5, 1.0], [-1.0, 0.75, 0.5], [0.5, 0.25, 0.25]])  # a global batch of 4
C = np.array([1.0, -0.5])   # the loss: sum over the batch of y . C, / the global batch
W0 = np.array([[1.0, -0.5], [0.5, 2.0], [-1.0, 0.25]])   # the kernel: decayed
B0 = np.array([0.5, -1.0])                                 # the bias: not decayed
SCALES = (2.0 ** 15, 2.0 ** 9)  # LossScaleOptimizer's initial scale, then one set by hand: the decay must not depend on it
RTOL = 1e-6

# TensorFlow fixes its devices when it first runs an op: the 2 logical CPUs are made at import, before
# any test of the session runs one (tests/test_imagenet_amoebanet_tpu.py makes the same 2).
try:
    tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                               [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:
    pass


@functools.cache
def strategy(replicas: int) -> tf.distribute.Strategy:
    """The default strategy, or one MirroredStrategy over the 2 logical CPUs for the whole module.
    Every MirroredStrategy numbers its collective ops from the same keys, and TensorFlow remembers a
    key's tensor shape for the life of the process: a second strategy whose first all-reduce has
    another shape (another test, or test_imagenet_amoebanet_tpu's trainer in the same process) aborts
    every collective after it. So this module makes one, with keys of its own (the class attribute
    TensorFlow keeps for tests)."""
    mirrored = tf.distribute.MirroredStrategy
    base = mirrored._collective_key_base
    mirrored._collective_key_base = 23_000
    try:
        return tf_base.choose_strategy("none", cpu_replicas=replicas)
    finally:
        mirrored._collective_key_base = base


@functools.cache
def recipe(name):
    return sys.modules[registry.load_spec(name).load_entry_class().__module__]


def optimizer(name, policy):
    """The reference's optimizer as its `setup` makes it for `policy`, at learning rate LR."""
    train = recipe(name)
    if name == "imagenet-amoebanet-tpu":
        return train.make_optimizer(policy, LR)
    opt = train.make_optimizer(dict(registry.load_spec(name).hyperparameters), policy)
    opt.learning_rate.assign(LR)           # as train_epoch sets it every step
    return opt


def expected(name, grads, w, decayed):
    """`w` after one step per gradient in `grads`, the reference's update in numpy, in float64."""
    if name == "imagenet-amoebanet-tpu":
        # TF1's RMSPropOptimizer: mean square from 1, epsilon inside the root, momentum on the step.
        rms = recipe(name).RMSPROP
        ms, mom = np.ones_like(w), np.zeros_like(w)
        for g in grads:
            g = g + WD * w if decayed else g
            ms = rms["rho"] * ms + (1 - rms["rho"]) * g ** 2
            mom = rms["momentum"] * mom + LR * g / np.sqrt(ms + rms["epsilon"])
            w = w - mom
        return w
    # PyTorch's SGD(lr, momentum, weight_decay): d = g + wd w; buf = momentum buf + d; w -= lr buf.
    momentum = registry.load_spec(name).hyperparameters["momentum"]
    buf = np.zeros_like(w)
    for g in grads:
        buf = momentum * buf + (g + WD * w if decayed else g)
        w = w - LR * buf
    return w


def setup(name, policy, replicas, x):
    """(strategy, the dense layer (kernel W0, bias B0), the reference's optimizer, one compiled step of
    `minimize` on the layer, each replica taking its share of the global batch `x`)."""
    train, distribution = recipe(name), strategy(replicas)
    assert distribution.num_replicas_in_sync == replicas
    with distribution.scope():
        dense = layers.Dense(2, dtype=policy, kernel_initializer=keras.initializers.Constant(W0),
                             bias_initializer=keras.initializers.Constant(B0))
        dense.build((None, 3))
        opt = optimizer(name, policy)
        opt.build(dense.trainable_variables)
    x, c = tf.constant(x, tf.float32), tf.constant(C, tf.float32)

    def replica_step():
        share = tf.reshape(x, (replicas, -1, 3))[tf.distribute.get_replica_context().replica_id_in_sync_group]
        return train.minimize(opt, lambda: tf.reduce_sum(tf.cast(dense(share), tf.float32) * c) / len(X),
                              dense.trainable_variables, WD)

    return distribution, dense, opt, tf.function(lambda: distribution.run(replica_step), autograph=False)


@pytest.mark.parametrize("policy,replicas", [("mixed_float16", 1), ("mixed_float16", 2), ("float32", 1), ("float32", 2)])
@pytest.mark.parametrize("name", REFERENCES)
def test_weight_decay_is_applied_whole_whatever_the_loss_scale(name, policy, replicas):
    distribution, dense, opt, step = setup(name, policy, replicas, X)
    scaled = isinstance(opt, keras.optimizers.LossScaleOptimizer)
    assert scaled == (policy == "mixed_float16")
    assert dense.compute_dtype == ("float16" if scaled else "float32")
    for scale in SCALES:
        if scaled:
            opt.dynamic_scale.assign(scale)
        step()
        if scaled:         # the step was taken: finite gradients, the scale kept (it grows after 2,000)
            assert opt.dynamic_scale.numpy() == scale

    grad_kernel, grad_bias = X.sum(0)[:, None] * C[None, :] / len(X), C
    kernel, bias = dense.kernel.numpy(), dense.bias.numpy()
    np.testing.assert_allclose(kernel, expected(name, [grad_kernel] * 2, W0, True), rtol=RTOL)
    np.testing.assert_allclose(bias, expected(name, [grad_bias] * 2, B0, False), rtol=RTOL)
    for copy in distribution.experimental_local_results(dense.kernel.value):     # every replica's copy alike
        np.testing.assert_array_equal(copy.numpy(), kernel)
    # The decay is what moved the kernel this far: without it the kernel would be elsewhere.
    assert not np.allclose(kernel, expected(name, [grad_kernel] * 2, W0, False), rtol=1e-3)


@pytest.mark.parametrize("replica", [0, 1])
@pytest.mark.parametrize("name", REFERENCES)
def test_an_overflow_on_any_replica_skips_the_step_on_all(name, replica):
    """Under mixed_float16 on 2 replicas, one replica's inputs overflow float16 in the backward pass:
    the step is skipped on both (weights unchanged) and the loss scale halves. Keras's
    LossScaleOptimizer alone looks at replica 0's gradients only: an overflow on replica 1 reached
    the weights as inf."""
    x = X.copy()
    x[2 * replica:2 * replica + 2] *= 1024     # x * C * scale / batch: 1024 x 2^15 / 4 > float16's 65504
    distribution, dense, opt, step = setup(name, "mixed_float16", 2, x)
    step()
    assert opt.dynamic_scale.numpy() == SCALES[0] / 2
    for variable, start in ((dense.kernel, W0), (dense.bias, B0)):
        for copy in distribution.experimental_local_results(variable.value):
            np.testing.assert_array_equal(copy.numpy(), start.astype(np.float32))


@pytest.mark.parametrize("name", REFERENCES)
def test_decay_takes_the_kernels_only(name):
    """Convolution and dense kernels decay; batch-norm scales and shifts and dense biases do not,
    on layers made by the reference's own helpers."""
    train = recipe(name)
    inputs = keras.Input((8, 8, 3))
    x = layers.GlobalAveragePooling2D(name="pool")(train.bn(train.conv(inputs, 4, 3, 1, name="conv"), name="bn"))
    # build_model's heads: AmoebaNet's `dense` helper; the ResNets' is a plain Dense with its bias.
    logits = train.dense(x, 5, "fc") if name == "imagenet-amoebanet-tpu" else layers.Dense(5, name="fc")(x)
    variables = keras.Model(inputs, logits).trainable_variables
    assert sorted(v.path for v in variables if train.decays(v)) == ["conv/kernel", "fc/kernel"]
    assert sorted(v.path for v in variables if not train.decays(v)) == ["bn/beta", "bn/gamma", "fc/bias"]
