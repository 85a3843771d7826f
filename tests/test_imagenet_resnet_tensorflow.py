"""imagenet-resnet50-tensorflow and imagenet-resnet152-tensorflow (one train.py, two depths) on CPU:
the parameter counts against the PyTorch networks', the two copies are one recipe, the data
pipeline (crops, eval geometry, class and file order), a falling loss on a repeated batch, and a
smoke run as a run drives it on the tiny ImageNet `prepare` makes (conftest's `imagenet_root`):
a trainer on the training folder only (setup -> one epoch -> save), then a predictor on the
validation folder only (setup -> load -> predict -> infer), and `dawnbench infer`'s code path.

The images are tiny (32 px crops) so that the full networks stay fast on a small CPU. Tracing a
training step takes TensorFlow about 20 s on a small CPU, so ResNet-50's smoke run traces it once
and also checks there that the loss falls on a repeated batch; ResNet-152's executes the same
tf.functions eagerly and trains one step."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import check_inference_entry, check_roles_see_only_their_files, role_views

from common import imagenet_files
from harness import registry
from harness.reference import Context

PARAMETERS = {"imagenet-resnet50-tensorflow": (50, 25_557_032), "imagenet-resnet152-tensorflow": (152, 60_192_808)}
REFERENCES = sorted(PARAMETERS)
EAGER = {"imagenet-resnet152-tensorflow"}
SMALL = {"image_size_start": 32, "image_size_end": 32, "eval_resize": 40, "eval_crop": 32,
         "batch_size": 4, "eval_batch_size": 5, "xla_inference": False}
# Keras saves weights through np.array(variable), which TensorFlow 2.21's variables answer with
# this numpy 2 deprecation warning; harmless.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")


def recipe(name):
    return sys.modules[registry.load_spec(name).load_entry_class().__module__]


def context(spec, data_root, role="train", **overrides):
    config = dict(spec.hyperparameters, **SMALL)
    config.update(overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, show_progress=False, role=role)


def make(spec, data_root, role="train", **overrides):
    ref = spec.load_entry_class()()
    ref.setup(context(spec, data_root, role, **overrides))
    return ref


@pytest.fixture
def eager_if():
    def set_eager(eager: bool):
        tf.config.run_functions_eagerly(eager)
    yield set_eager
    tf.config.run_functions_eagerly(False)


@pytest.fixture
def views(imagenet_root, tmp_path):
    return role_views("imagenet", imagenet_root, tmp_path)


# ------------------------------------------------------------------------------------ the network

@pytest.mark.parametrize("name", REFERENCES)
def test_spec_and_parameter_count(name):
    spec = registry.load_spec(name)
    depth, count = PARAMETERS[name]
    cfg = spec.hyperparameters
    assert spec.task.name == "imagenet" and spec.framework == "tensorflow" and spec.gpus
    assert cfg["depth"] == depth and cfg["num_classes"] == 1000 and spec.max_epochs == cfg["epochs"]
    model = recipe(name).build_model(depth)
    # torchvision's counts (resnet50: 25,557,032; resnet152: 60,192,808); the moving statistics are not trainable.
    assert recipe(name).count_parameters(model) == count
    moving = sum(math.prod(v.shape) for v in model.non_trainable_variables)
    assert moving == sum(2 * layer.gamma.shape[0] for layer in model.layers
                         if isinstance(layer, tf.keras.layers.BatchNormalization))
    assert model(tf.zeros((1, 32, 32, 3)), training=False).shape == (1, 1000)


def test_copies_are_one_recipe():
    """The two references carry the same code; only their docstrings' opening lines differ."""
    codes = {}
    for name in REFERENCES:
        text = (registry.load_spec(name).directory / "train.py").read_text()
        codes[name] = text[text.index("The two references"):]
    assert len(set(codes.values())) == 1


def test_v1_5_strides_in_the_3x3_and_no_conv_biases():
    train = recipe("imagenet-resnet50-tensorflow")
    model = train.build_model(50)
    convs = {layer.name: layer for layer in model.layers if isinstance(layer, tf.keras.layers.Conv2D)}
    assert not any(c.use_bias for c in convs.values())
    strided = sorted(n for n, c in convs.items() if c.strides != (1, 1))
    assert strided == sorted(["stem_conv"] + [f"stage{s}_block1_{k}" for s in (2, 3, 4) for k in ("conv2", "proj")])
    assert all(np.all(model.get_layer(f"stage{s}_block{b}_bn3").gamma.numpy() == 0)
               for s, b in ((1, 1), (4, 3)))                                # each block starts as the identity
    decayed = [v for v in model.trainable_variables if train.decays(v)]
    assert len(decayed) == len(convs) + 1                                   # every kernel and the dense one
    assert model.layers[-1].compute_dtype == "float32"


# ------------------------------------------------------------------------------------ schedules, data

def test_schedules_and_user_mistakes(views):
    spec = registry.load_spec("imagenet-resnet50-tensorflow")
    train = recipe(spec.name)
    cfg = spec.hyperparameters
    sizes = [train.image_size(e, cfg) for e in range(1, 41)]
    assert sizes[0] == 160 and sizes[-1] == 224 and all(s % 32 == 0 for s in sizes) and sizes == sorted(sizes)
    assert train.peak_lr(cfg) == pytest.approx(0.4)
    ref = make(spec, views["train"], epochs=4, warmup_epochs=1)           # 14 images, batch 4: 3 steps
    assert ref.steps_per_epoch == 3 and ref.lr_at(3) == pytest.approx(train.peak_lr(ref.ctx.config))
    assert ref.lr_at(0) < ref.lr_at(3) > ref.lr_at(6) > ref.lr_at(12) == 0.0
    order = train.epoch_order(14, ref.ctx.config, 0, 1)
    assert order.shape == (3, 4) and len(set(order.ravel().tolist())) == 12
    for overrides, message in (({"batch_size": 16}, "larger than the 14 training images"),
                               ({"mixed_precision": "mixed_bfloat16"}, "needs a GPU"),
                               ({"mixed_precision": "half"}, "mixed_precision 'half'"),
                               ({"depth": 51}, "depth 51"),
                               ({"num_classes": 10}, "num_classes 10")):
        with pytest.raises(ValueError, match=message) as caught:
            make(spec, views["train"], **overrides)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="larger than eval_resize"):
        make(spec, views["predict"], "predict", eval_crop=48)


def test_train_and_eval_images(views, tmp_path):
    train = recipe("imagenet-resnet50-tensorflow")
    paths, labels, wnids = imagenet_files.train_samples(views["train"])
    for path, label in zip(paths, labels):
        assert path.split("/")[-2] == wnids[label]
    seed = tf.constant([0, 5], tf.int64)
    x, y = train.train_image(paths[5], labels[5], 48, seed)
    assert x.shape == (48, 48, 3) and x.dtype == tf.uint8 and int(y) == labels[5]
    assert np.array_equal(train.train_image(paths[5], labels[5], 48, seed)[0], x)   # the seed fixes the draws
    assert not np.array_equal(train.train_image(paths[5], labels[5], 48, seed + [0, 1])[0], x)
    # Eval geometry: a bar image whose columns say where they came from; the centre survives.
    columns = np.repeat(np.repeat(np.arange(80, dtype=np.uint8)[None, :] * 3, 40, axis=0)[:, :, None], 3, axis=2)
    tf.io.write_file(str(tmp_path / "bars.JPEG"), tf.io.encode_jpeg(columns, quality=100))
    out = train.eval_image(str(tmp_path / "bars.JPEG"), 40, 32).numpy()
    row = out[16, :, 0] / 3.0
    assert out.shape == (32, 32, 3) and abs(row[0] - 24.5) < 1.5 and abs(row[-1] - 55.5) < 1.5


# ------------------------------------------------------------------------------- end to end, CPU

@pytest.mark.parametrize("name", REFERENCES)
def test_reference_smoke(name, imagenet_root, views, tmp_path, eager_if):
    spec = registry.load_spec(name)
    eager_if(name in EAGER)
    trainer = make(spec, views["train"])
    assert not hasattr(trainer, "val") and trainer.policy == "float32"
    if name in EAGER:
        trainer.steps_per_epoch = 1
        trainer.paths, trainer.labels = trainer.paths[:4], trainer.labels[:4]
    stats = trainer.train_epoch(1)
    assert math.isfinite(stats["loss"]) and stats["samples"] == 4 * trainer.steps_per_epoch and stats["lr"] > 0
    trainer.save(tmp_path / "model")

    predictor = make(spec, views["predict"], "predict")
    assert not hasattr(predictor, "paths") and not hasattr(predictor, "opt")
    predictor.load(tmp_path / "model")
    scores = predictor.predict()
    inputs = predictor.eval_inputs()
    n = len(imagenet_files.val_files(views["predict"]))
    assert isinstance(scores, np.ndarray) and scores.shape == (n, 1000) and scores.dtype == np.float32
    assert np.isfinite(scores).all() and len(inputs) == n
    # Canonical order: row i is the i-th file name in sorted order.
    written = sorted(p.name for p in (imagenet_root / "imagenet" / "val").iterdir())
    assert [p.rsplit("/", 1)[1] for p in inputs.paths] == written
    for i in (0, n - 1) if name not in EAGER else (n - 1,):
        one = predictor.infer(inputs[i])
        assert one.shape == (1000,)
        np.testing.assert_allclose(one, scores[i], rtol=1e-4, atol=1e-4 * float(np.abs(scores[i]).max() + 1))
    if name in EAGER:
        return
    # The predictor scores the weights the trainer saved (batch-norm statistics included).
    x = tf.stack([inputs[i] for i in range(3)])
    np.testing.assert_allclose(scores[:3], trainer.scores(x).numpy(), rtol=1e-4, atol=1e-4)
    check_inference_entry(spec, tmp_path / "model", predictor.ctx.config, imagenet_root, tmp_path / "infer",
                          scores, items=3)

    # The loss falls on a repeated batch, through the compiled step traced above (a second trace of
    # ResNet-50's step would cost as much as this whole test).
    batches, size = trainer.train_dataset(2)
    x, y = next(iter(batches))
    assert size == 32 and x.shape == (4, 32, 32, 3) and x.dtype == tf.uint8 and y.dtype == tf.int64
    trainer.opt.learning_rate.assign(0.05)
    losses = [float(trainer.train_step(x, y)) for _ in range(6)]
    assert all(math.isfinite(v) for v in losses)
    assert losses[0] > 6.0 and losses[-1] < 0.7 * losses[0], losses          # from about ln 1000


def test_roles_see_only_their_files(views):
    spec = registry.load_spec("imagenet-resnet50-tensorflow")
    check_roles_see_only_their_files(spec.load_entry_class(), lambda role, root: context(spec, root, role), views)
