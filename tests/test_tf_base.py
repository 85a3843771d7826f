"""common.tf_base.KerasReference: the defaults the TensorFlow references share, on a tiny model,
and the versions it reports, the GPU branch through a faked device list (no GPU here); the check of
the CUDA libraries a GPU run loads, with the versions injected."""
from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from common import tf_base
from common.tf_base import KerasReference
from harness import registry
from harness.errors import UsageError
from harness.reference import Context


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
    monkeypatch.setattr(tf_base, "check_cuda_libraries", lambda: None)    # no CUDA libraries here
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
        assert versions["onednn"] == tf_base.onednn_enabled()


# ------------------------------------------------------------------------ the CUDA libraries' check

BUILT = {"cuda": "12.5.1", "cudnn": "9.3.0.75"}         # tensorflow 2.21.0's
GOOD = {"cuda": "12.5", "cudnn": "9.3.0", "ptxas": "/venv/nvidia/cuda_nvcc/bin/ptxas",
        "libdevice": "/venv/nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc"}


@pytest.mark.parametrize("found,expected", [
    ({}, None),
    ({"cudnn": "9.10.2"}, None),                                  # minors compare as numbers
    ({"cuda": "12.9"}, None),                                     # CUDA's minor-version compatibility
    ({"cudnn": "9.2.1", "cudnn_path": "/usr/lib/x86_64-linux-gnu/libcudnn.so.9"},
     "cuDNN 9.2.1 (/usr/lib/x86_64-linux-gnu/libcudnn.so.9), older than the 9.3"),
    ({"cudnn": "8.9.7"}, "not cuDNN 9"),
    ({"cudnn": None}, "no cuDNN 9 library"),
    ({"cuda": "12.4"}, "CUDA runtime 12.4, older than the 12.5"),
    ({"cuda": "13.0"}, "not CUDA runtime 12"),
    ({"ptxas": None}, "XLA finds no ptxas"),
    ({"libdevice": None}, "XLA finds no libdevice"),
])
def test_cuda_problem_is_one_line_naming_what_is_wrong(found, expected):
    problem = tf_base.cuda_problem(BUILT, {**GOOD, **found})
    if expected is None:
        assert problem is None
    else:
        assert expected in problem and "\n" not in problem and problem.startswith(f"TensorFlow {tf.__version__}")


def test_cuda_problem_with_the_cudnn_major_only_and_with_no_gpu_listed():
    assert tf_base.cuda_problem({"cuda": "12.5.1", "cudnn": "9"}, {**GOOD, "cudnn": "9.0.0"}) is None
    problem = tf_base.cuda_problem(BUILT, GOOD, gpus_listed=False)
    assert "sees none of this machine's NVIDIA GPUs" in problem and "\n" not in problem


def test_built_versions_take_the_cudnn_minor_from_the_and_cuda_extra():
    """get_build_info names cuDNN 9 only; the installed TensorFlow's [and-cuda] extra (its
    metadata, the CPU build's included) asks for nvidia-cudnn-cu12>=9.3.0.75."""
    built = tf_base.built_versions({"cuda_version": "12.5.1", "cudnn_version": "9"})
    assert built == {"cuda": "12.5.1", "cudnn": "9.3.0.75"}
    assert tf_base.built_versions({"cuda_version": "11.8", "cudnn_version": "8"})["cudnn"] == "8"


def test_library_versions_are_decoded_as_cudnn_and_cudart_encode_them():
    assert tf_base.cudnn_version_text(90300) == "9.3.0" and tf_base.cudnn_version_text(91002) == "9.10.2"
    assert tf_base.cudnn_version_text(8907) == "8.9.7"
    assert tf_base.cudart_version_text(12050) == "12.5"


def test_found_libraries_look_where_xla_looks(tmp_path):
    nvcc = tmp_path / "cuda_nvcc"
    (nvcc / "bin").mkdir(parents=True)
    (nvcc / "bin" / "ptxas").write_text("")
    (nvcc / "bin" / "ptxas").chmod(0o755)
    (nvcc / "nvvm" / "libdevice").mkdir(parents=True)
    (nvcc / "nvvm" / "libdevice" / "libdevice.10.bc").write_text("")
    environ = {"XLA_FLAGS": f"--xla_gpu_cuda_data_dir={nvcc}", "PATH": "", "LD_LIBRARY_PATH": str(tmp_path)}
    found = tf_base.found_libraries(BUILT, environ)
    if found["libdevice"].startswith("/usr/local/cuda") or found["libdevice"].startswith("/opt/cuda"):
        pytest.skip("this machine has a CUDA toolkit, which XLA would look in first")
    assert found["ptxas"] == str(nvcc / "bin" / "ptxas")
    assert found["libdevice"] == str(nvcc / "nvvm" / "libdevice" / "libdevice.10.bc")


def _fake_gpu_build(monkeypatch, cudnn_found):
    gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else [])
    monkeypatch.setattr(tf.sysconfig, "get_build_info",
                        lambda: {"cuda_version": "12.5.1", "cudnn_version": "9", "is_cuda_build": True})
    monkeypatch.setattr(tf_base, "found_libraries", lambda built, environ=None: {**GOOD, "cudnn": cudnn_found})


def test_a_keras_reference_stops_at_once_on_an_older_cudnn(monkeypatch):
    """The check runs when the reference is made, before setup: on the old images' cuDNN 9.2.1 the
    run stops with one line; on 9.3 it goes on; CUDA_VISIBLE_DEVICES= (a CPU run) skips it."""
    _fake_gpu_build(monkeypatch, "9.2.1")
    with pytest.raises(UsageError) as error:
        Tiny()
    assert "cuDNN 9.2.1" in str(error.value) and "\n" not in str(error.value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    Tiny()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    _fake_gpu_build(monkeypatch, "9.3.0")
    Tiny()


def test_the_check_is_quiet_on_a_cpu_build_or_without_gpus(monkeypatch):
    def unreachable(*args, **kwargs):
        raise AssertionError("looked for CUDA libraries on a CPU run")
    monkeypatch.setattr(tf_base, "found_libraries", unreachable)
    tf_base.check_cuda_libraries()                 # this machine: the CPU build
    monkeypatch.setattr(tf.sysconfig, "get_build_info",
                        lambda: {"cuda_version": "12.5.1", "cudnn_version": "9", "is_cuda_build": True})
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    monkeypatch.setattr(tf_base.glob, "glob", lambda pattern: [])
    tf_base.check_cuda_libraries()                 # a CUDA build on a machine without NVIDIA GPUs
    # GPUs on the machine that TensorFlow does not list: its CUDA libraries did not load.
    monkeypatch.setattr(tf_base.glob, "glob", lambda pattern: ["/dev/nvidia0"])
    monkeypatch.setattr(tf_base, "found_libraries", lambda built, environ=None: {**GOOD, "cudnn": None})
    with pytest.raises(UsageError, match="sees none of this machine's NVIDIA GPUs; no cuDNN 9 library found"):
        tf_base.check_cuda_libraries(environ={})
