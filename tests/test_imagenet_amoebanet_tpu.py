"""imagenet-amoebanet-tpu on CPU: the parameter count against one derived by hand (a small network
built, and the full N6F256 at 224 px), AmoebaNet-D's cells as specified and where the reductions go,
the learning-rate schedule, the strategy chooser (no TPU here: it falls back; a config key gives
MirroredStrategy over 2 logical CPUs), a falling loss on a repeated batch, and a smoke run as a run
drives it on the tiny ImageNet packed into TFRecords, with MirroredStrategy over 2 logical CPUs: a
trainer on the training shards only (setup -> one epoch -> save), a predictor on the validation
shards only (setup -> load -> predict (N, 1000) -> infer), and `dawnbench infer`'s code path.

Speed (the file is meant to stay under a minute on a 2-core CPU): the smoke network is N3F16 at 96
px (the smallest size whose auxiliary head still sees a 5x5 window), its training step traced once
for the module; the full N6F256 is built once (~6 s) and never run."""
from __future__ import annotations

import functools
import math
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import check_inference_entry, check_roles_see_only_their_files, role_views

from common import tf_base
from harness import datasets, registry
from harness.reference import Context

NAME = "imagenet-amoebanet-tpu"
SMALL = {"num_cells": 3, "filters": 16, "image_size": 96, "batch_size": 4, "eval_batch_size": 5,
         "xla_inference": False, "cpu_replicas": 2, "tpu": "none"}

# TensorFlow fixes its devices when it first runs an op: the 2 logical CPUs are made at import, before
# any test of the session runs one (split_cpu would find them made and accept them).
try:
    tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                               [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:
    pass


@functools.cache
def recipe():
    return sys.modules[registry.load_spec(NAME).load_entry_class().__module__]


def context(data_root, role="train", **overrides):
    spec = registry.load_spec(NAME)
    config = dict(spec.hyperparameters, **SMALL)
    config.update(overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, show_progress=False, role=role)


def make(data_root, role="train", **overrides):
    ref = recipe().AmoebaNetTPU()
    ref.setup(context(data_root, role, **overrides))
    return ref


# ------------------------------------------------------------------------ the parameter count, derived

def convbn(c_in: int, c_out: int, area: int = 1) -> int:
    """A bias-free convolution with a kernel of `area` pixels, and its batch norm's scale and shift."""
    return area * c_in * c_out + 2 * c_out


def bottleneck(c_in: int, f: int, kernels: list[int]) -> int:
    """3x3 ([9]) or 1x7_7x1 ([7, 7], a batch norm between): 1x1 to f/4, the op(s) at f/4, 1x1 to f."""
    return convbn(c_in, f // 4) + sum(convbn(f // 4, f // 4, k) for k in kernels) + convbn(f // 4, f)


def normal_cell(c_in: int, c_prev: int, f: int) -> int:
    """1x1 on the input; the previous output brought to f (a 1x1, or a factorized reduction: two 1x1s
    to f/2 and one batch norm, the same count); ops: three 1x1 (f -> f), two 1x7_7x1, two max pools,
    an avg pool and two identities (no parameters)."""
    return convbn(c_in, f) + convbn(c_prev, f) + 3 * convbn(f, f) + 2 * bottleneck(f, f, [7, 7])


def reduction_cell(c_in: int, c_prev: int | None, f: int, c_h1: int | None = None) -> int:
    """1x1 on the input; the previous output adjusted (none in the first stem cell, whose second
    hidden state is its raw input, c_h1 channels); ops: 3x3 on h1, 1x7_7x1, a 1x1 (f -> f), pools
    and identities; the 2x2 max pool of h1 needs a 1x1 (no ReLU) where h1 is not f wide."""
    c_h1 = f if c_h1 is None else c_h1
    return (convbn(c_in, f) + (convbn(c_prev, f) if c_prev else 0) + bottleneck(c_h1, f, [9])
            + bottleneck(f, f, [7, 7]) + convbn(f, f) + (convbn(c_h1, f) if c_h1 != f else 0))


def derived_count(n: int, f: int, size: int, classes: int = 1000, aux_scaling: float = 0.4) -> int:
    """AmoebaNet-D N{n}F{f} at size x size: the stem conv (3x3/2 valid, 3 -> 32), two stem reduction
    cells at f/4 and f/2, n normal cells (4 x width out) with reduction cells (3 x width out) before
    the normal cells at n/3 and 2n/3, the aux head after the normal cell before the second reduction,
    the classifier (with bias) on 4 x the last width."""
    count = convbn(3, 32, 9)
    side = (size - 3) // 2 + 1
    count += reduction_cell(32, None, f // 4, c_h1=32) + reduction_cell(3 * f // 4, 32, f // 2)
    side = math.ceil(math.ceil(side / 2) / 2)
    c_prev, c, width = 3 * f // 4, 3 * f // 2, f
    reductions = [int(k / 3 * n) for k in (1, 2)]
    for k in range(n):
        if k in reductions:
            width, side = width * 2, math.ceil(side / 2)
            count += reduction_cell(c, c_prev, width)
            c_prev, c = c, 3 * width
        count += normal_cell(c, c_prev, width)
        c_prev, c = c, 4 * width
        if k == reductions[1] - 1:
            aux_side = (side - 5) // 3 + 1                     # 5x5/3 average pool, valid
            a0, a1 = int(128 * aux_scaling), int(768 * aux_scaling)
            count += convbn(c, a0) + convbn(a0, a1, aux_side ** 2) + a1 * classes + classes
    return count + c * classes + classes


@pytest.fixture(scope="module")
def full_network():
    return recipe().build_model(6, 256, 224)


def test_spec_and_full_parameter_count(full_network):
    spec = registry.load_spec(NAME)
    cfg = spec.hyperparameters
    assert spec.task.name == "imagenet" and spec.framework == "tensorflow" and spec.gpus
    assert (cfg["num_cells"], cfg["filters"], cfg["image_size"], cfg["num_classes"]) == (6, 256, 224, 1000)
    assert spec.max_epochs == cfg["epochs"] == 35 and cfg["precision"] == "auto" and cfg["tpu"] == "auto"
    count = recipe().count_parameters(full_network)
    assert count == derived_count(6, 256, 224) == 46_758_756
    assert f"{count:,}" in spec.model
    # The batch-norm moving statistics are the only float weights that are not trained (the dropout's
    # seed is an integer state).
    moving = sum(math.prod(v.shape) for v in full_network.non_trainable_variables if "float" in v.dtype)
    assert moving == sum(2 * layer.gamma.shape[0] for layer in full_network.layers
                         if isinstance(layer, tf.keras.layers.BatchNormalization))


@pytest.mark.parametrize("n, f, size", [(3, 16, 96), (6, 32, 128)])
def test_small_parameter_counts(n, f, size):
    assert recipe().count_parameters(recipe().build_model(n, f, size)) == derived_count(n, f, size)


def test_cells_as_specified(full_network):
    train = recipe()
    assert train.NORMAL_CELL["operations"] == ("1x1", "max_pool_3x3", "none", "1x7_7x1", "1x1", "1x7_7x1",
                                               "max_pool_3x3", "none", "avg_pool_3x3", "1x1")
    assert train.NORMAL_CELL["inputs"] == (1, 1, 1, 0, 0, 0, 2, 2, 1, 5)
    assert train.REDUCTION_CELL["operations"] == ("max_pool_2x2", "max_pool_3x3", "none", "3x3", "1x7_7x1",
                                                  "max_pool_3x3", "none", "max_pool_2x2", "avg_pool_3x3", "1x1")
    assert train.REDUCTION_CELL["inputs"] == (0, 0, 2, 1, 2, 2, 3, 1, 2, 3)
    # Reductions at 1/3 and 2/3 of the normal cells, as tensorflow/tpu's calc_reduction_layers.
    assert train.reduction_layers(6) == [2, 4] and train.reduction_layers(12) == [4, 8]
    # The cells in order, their outputs' sizes: 4 x width for a normal cell, 3 x width for a reduction.
    outs = [(layer.name.removesuffix("_out"), tuple(layer.output.shape[1:])) for layer in full_network.layers
            if layer.name.endswith("_out")]
    assert outs == [("stem_cell0", (56, 56, 192)), ("stem_cell1", (28, 28, 384)),
                    ("cell0", (28, 28, 1024)), ("cell1", (28, 28, 1024)), ("reduction_cell0", (14, 14, 1536)),
                    ("cell2", (14, 14, 2048)), ("cell3", (14, 14, 2048)), ("reduction_cell1", (7, 7, 3072)),
                    ("cell4", (7, 7, 4096)), ("cell5", (7, 7, 4096))]
    layer = {lay.name: lay for lay in full_network.layers}
    # In a reduction cell only the ops on its two inputs stride: the 1x7_7x1 reads hidden state 2.
    assert layer["reduction_cell0_comb2_left_1x7"].strides == (1, 1)
    assert layer["reduction_cell0_comb1_right_3x3"].strides == (2, 2)            # 3x3 on input 1
    assert layer["reduction_cell0_comb0_left_pool"].strides == (2, 2)            # 2x2 max pool on input 0
    assert "cell0_comb1_left_1x1" not in layer and "cell0_comb3_right_1x1" not in layer   # "none": identities
    # The aux head reads the normal cell before the second reduction (cell3: 14 x 14) -> a 4x4 conv.
    assert layer["aux_conv"].kernel.shape == (4, 4, 51, 307)
    assert layer["logits"].kernel.shape == (4096, 1000) and layer["logits"].compute_dtype == "float32"
    assert not any(lay.use_bias for lay in full_network.layers if isinstance(lay, tf.keras.layers.Conv2D))


def test_learning_rate_schedule():
    train = recipe()
    cfg = registry.load_spec(NAME).hyperparameters
    steps = 1_281_167 // 1024                                     # 1251 steps an epoch
    warmup = int(0.35 * steps)                                    # 437
    assert warmup == 437
    expected = {0: 2.56e-4,                                       # the floor: 1e-4 x 2.56
                100: 2.56 * 100 / 437, 436: 2.56 * 436 / 437,
                437: 2.56, 1250: 2.56, 1251: 2.56 * 0.88, 2 * 1251 + 5: 2.56 * 0.88 ** 2,
                35 * 1251 - 1: 2.56 * 0.88 ** 34}
    for step, rate in expected.items():
        assert train.learning_rate(step, cfg, steps) == pytest.approx(rate, rel=1e-12), step
    assert train.learning_rate(10**7, cfg, steps) == pytest.approx(2.56e-4)       # never below the floor


# ------------------------------------------------------------------------ devices

def test_strategy_chooser_falls_back_without_a_tpu(monkeypatch):
    # No TPU here: "auto" finds none (no TPU_NAME, no TPU device files); names pass through.
    assert tf_base.find_tpu("auto", environ={}, device_files=[]) is None
    assert tf_base.find_tpu("auto", environ={"TPU_NAME": "my-tpu"}, device_files=[]) == ""
    assert tf_base.find_tpu("auto", environ={}, device_files=["/dev/accel0"]) == "local"
    assert tf_base.find_tpu("grpc://10.0.0.2:8470") == "grpc://10.0.0.2:8470"
    assert tf_base.find_tpu("none") is None and tf_base.find_tpu("") is None
    for name in tf_base.TPU_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    default = tf_base.choose_strategy("auto")
    assert default is tf.distribute.get_strategy() and default.num_replicas_in_sync == 1
    mirrored = tf_base.choose_strategy("auto", cpu_replicas=2)
    assert isinstance(mirrored, tf.distribute.MirroredStrategy) and mirrored.num_replicas_in_sync == 2
    assert sorted(mirrored.extended.worker_devices) == ["/job:localhost/replica:0/task:0/device:CPU:0",
                                                        "/job:localhost/replica:0/task:0/device:CPU:1"]
    with pytest.raises(ValueError, match="cpu_replicas 3: TensorFlow already runs with 2 logical CPU"):
        tf_base.choose_strategy("none", cpu_replicas=3)
    train = recipe()
    assert [train.resolve_precision("auto", d) for d in ("TPU", "GPU", "CPU")] == \
        ["mixed_bfloat16", "mixed_float16", "float32"]
    with pytest.raises(ValueError, match="precision 'half'"):
        train.resolve_precision("half", "CPU")


# ------------------------------------------------------------------------ data, end to end

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The tiny ImageNet prepared and packed into TFRecords (3 train and 2 val shards), and the role
    views the harness gives (the trainer sees tfrecord/train, the predictor tfrecord/val)."""
    from imagenet_fixture import fixture_manifest, write_imagenet_fixture

    from dawnbench import pack_tfrecord
    from dawnbench.prepare_imagenet import prepare

    tmp = tmp_path_factory.mktemp("imagenet")
    fixture = write_imagenet_fixture(tmp / "imagenet-files")
    root = tmp / "data"
    prepare(fixture.folder, root, allow_unverified=True, progress=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(datasets.MANIFEST_ENV, str(fixture_manifest(tmp / "datasets-imagenet-fixture.toml", fixture)))
        pack_tfrecord.pack(root / "imagenet", train_shards=3, val_shards=2)
        datasets.write_prepared_manifest(root / "imagenet", extend=True)
        yield {"root": root, **role_views("imagenet", root, tmp / "views")}


@pytest.fixture(scope="module")
def no_grappler():
    """Grappler's graph optimizations off for the module: they take longer than the runs they speed up."""
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    yield
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory, no_grappler):
    """A trainer on 2 logical CPUs (MirroredStrategy), one epoch, saved: (the trainer, the model folder)."""
    trainer = make(data["train"])
    assert isinstance(trainer.strategy, tf.distribute.MirroredStrategy)
    assert trainer.strategy.num_replicas_in_sync == 2 and trainer.policy == "float32"
    assert trainer.steps_per_epoch == 3 and not hasattr(trainer, "val")
    stats = trainer.train_epoch(1)
    assert math.isfinite(stats["loss"]) and stats["samples"] == 12 and stats["lr"] > 0
    # The moving average moved, by TF1's early rate (1 + t) / (10 + t), off the initial weights.
    initial = trainer.averaged.get_layer("logits").kernel.numpy()
    model = tmp_path_factory.mktemp("amoeba") / "model"
    trainer.save(model)
    average = trainer.averaged.get_layer("logits").kernel.numpy()
    assert not np.allclose(average, initial) and not np.allclose(average, trainer.model.get_layer("logits").kernel)
    return trainer, model


@pytest.mark.recipe_run
def test_smoke_train_save_load_predict_infer(data, trained, tmp_path):
    trainer, model = trained
    predictor = make(data["predict"], "predict")
    assert not hasattr(predictor, "opt") and predictor.strategy.num_replicas_in_sync == 1
    predictor.load(model)
    scores, inputs = predictor.predict(), predictor.eval_inputs()
    assert isinstance(scores, np.ndarray) and scores.shape == (12, 1000) and scores.dtype == np.float32
    assert np.isfinite(scores).all() and len(inputs) == 12
    np.testing.assert_allclose(predictor.infer(inputs[11]), scores[11], rtol=1e-4, atol=1e-4)
    # The predictor scores the averaged weights the trainer saved (batch-norm statistics included).
    x = tf.stack([inputs[i] for i in range(3)])
    np.testing.assert_allclose(scores[:3], trainer.scores(x).numpy(), rtol=1e-4, atol=1e-4)
    check_inference_entry(registry.load_spec(NAME), model, predictor.ctx.config, data["root"], tmp_path / "infer",
                          scores, items=3)


def test_loss_falls_on_a_repeated_batch(trained):
    """Through the compiled step the module traced, on 2 replicas."""
    trainer, _ = trained
    x, y = next(iter(trainer.train_dataset(2)))
    trainer.opt.learning_rate.assign(0.02)
    losses = [float(trainer.train_step(x, y)) for _ in range(8)]
    assert all(math.isfinite(v) for v in losses)
    assert losses[0] > 6.0 and losses[-1] < 0.7 * losses[0], losses      # from about 1.4 x ln 1000


def test_roles_see_only_their_files(data):
    check_roles_see_only_their_files(registry.load_spec(NAME).load_entry_class(),
                                     lambda role, root: context(root, role), data)
