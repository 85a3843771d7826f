"""common.tf_runtime.KerasReference: the defaults the TensorFlow references share, on a tiny model,
and the versions it reports, the GPU branch through a faked device list (no GPU here)."""
from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from common import tf_runtime
from common.tf_runtime import KerasReference
from harness import registry
from harness.reference import Context

# Keras saves weights through np.array(variable), which TensorFlow 2.21's variables answer with
# this numpy 2 deprecation warning; harmless.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")


class Tiny(KerasReference):
    def setup(self, ctx):
        self.ctx = ctx
        keras.utils.set_random_seed(ctx.seed)
        inputs = keras.Input((4,))
        self.model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
        if not ctx.trains:
            self.eval_x = tf.constant(np.random.default_rng(0).normal(size=(7, 4)), tf.float32)

    def train_epoch(self, epoch):
        return {"loss": 0.0, "samples": 0}


class Doubled(Tiny):
    def scores(self, x):
        return 2 * self.model(x, training=False)


def _ready(cls, tmp_path, seed=0, role="predict", **config):
    ref = cls()
    ref.setup(Context(config={"eval_batch_size": 3, **config}, data_root=tmp_path, seed=seed,
                      task=registry.load_spec("fashion-mnist-cnn-tensorflow").task, role=role))
    return ref


@pytest.mark.parametrize("xla", [False, True])
def test_predict_save_load_infer(tmp_path, xla):
    trainer = _ready(Tiny, tmp_path, role="train", xla_inference=xla)
    trainer.save(tmp_path / "model")
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["config.json", "model.weights.h5"]
    assert json.loads((tmp_path / "model" / "config.json").read_text())["xla_inference"] is xla

    predictor = _ready(Tiny, tmp_path, seed=1, xla_inference=xla)
    expected = trainer.model(predictor.eval_x).numpy()
    assert not np.allclose(predictor.predict(), expected)      # its own initialization, until it loads
    predictor.load(tmp_path / "model")
    scores = predictor.predict()                                # batches of 3, 3 and 1
    np.testing.assert_allclose(scores, expected, rtol=1e-6)
    assert predictor.eval_inputs() is predictor.eval_x
    for i in range(7):
        np.testing.assert_allclose(predictor.infer(predictor.eval_inputs()[i]), scores[i], rtol=1e-5, atol=1e-6)


def test_scores_override_reaches_predict_and_infer(tmp_path):
    plain, doubled = _ready(Tiny, tmp_path), _ready(Doubled, tmp_path)
    np.testing.assert_allclose(doubled.predict(), 2 * plain.predict(), rtol=1e-6)
    np.testing.assert_allclose(doubled.infer(doubled.eval_x[0]), 2 * plain.predict()[0], rtol=1e-5)


def test_versions_on_cpu():
    versions = Tiny().framework_versions()
    assert versions["tensorflow"] == tf.__version__ and versions["keras"] == keras.__version__
    assert {"intra_op_threads", "inter_op_threads", "onednn"} <= versions.keys()
    assert "cuda" not in versions and "cudnn" not in versions


def test_versions_with_a_gpu_name_the_build_cuda_and_cudnn(monkeypatch):
    gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else [])
    monkeypatch.setattr(tf.sysconfig, "get_build_info",
                        lambda: {"cuda_version": "12.5.1", "cudnn_version": "9", "is_cuda_build": True})
    versions = Tiny().framework_versions()
    assert versions["cuda"] == "12.5.1" and versions["cudnn"] == "9"
    # A CPU build seeing a GPU has no CUDA to name.
    monkeypatch.setattr(tf.sysconfig, "get_build_info", lambda: {"is_cuda_build": False})
    assert "cuda" not in Tiny().framework_versions()


def test_the_references_report_the_shared_versions():
    for name, extra in [("fashion-mnist-cnn-tensorflow", set()), ("cifar10-resnet20-tensorflow", {"replicas"})]:
        versions = registry.load_spec(name).load_entry_class()().framework_versions()
        assert versions.keys() == Tiny().framework_versions().keys() | extra, name
        assert versions["onednn"] == tf_runtime.onednn_enabled()
