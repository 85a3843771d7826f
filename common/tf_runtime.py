"""What TensorFlow / Keras references share: the default predict / save / load / eval_inputs /
infer of a classifier, the clock's device hook, and the versions worth recording.

A TensorFlow reference subclasses KerasReference instead of harness.Reference and in `setup`
sets `self.ctx`, `self.model` (the Keras model) and `self.gpu = True` when it runs on a GPU, in
both roles; then, in the trainer (`ctx.trains`), the training data and what training needs, and
in the predictor `self.eval_x` (the eval images, ready for the model, where the model runs). It
then writes only `setup` and `train_epoch`, and overrides `scores` for test-time augmentation or
`evaluated` to predict and save with other weights than `self.model`'s. The trainer's `save`
writes `evaluated()`'s weights; the predictor's `load` reads them back into it.

Inference runs through two tf.functions with fixed input signatures, traced once each: one for
the eval batches, one for a single example, which XLA compiles when the hyperparameter
`xla_inference` is true.

`choose_strategy` picks the tf.distribute strategy of one process, whatever the hardware: a Cloud
TPU where one answers, else the machine's GPUs, else the default strategy; or, asked for, several
logical CPUs (what tests of the multi-replica code path run on a machine without accelerators).
"""
from __future__ import annotations

import functools
import glob
import json
import os
from collections.abc import Mapping
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from harness.errors import UsageError
from harness.reference import Context, Reference

WEIGHTS_FILE = "model.weights.h5"
CONFIG_FILE = "config.json"
EVAL_BATCH_SIZE = 1000          # when the reference.toml names no eval_batch_size


class KerasReference(Reference):
    ctx: Context
    model: keras.Model
    eval_x: tf.Tensor
    gpu: bool = False

    # The evaluated model and its scores: what predict, infer and save use.

    def evaluated(self) -> keras.Model:
        """The model that predicts, infers and is saved: `self.model` unless overridden."""
        return self.model

    def scores(self, x: tf.Tensor) -> tf.Tensor:
        """Class scores of a batch of eval images, in inference mode; traced, never run eagerly
        by predict or infer."""
        return self.evaluated()(x, training=False)

    def example_spec(self) -> tf.TensorSpec:
        """One eval example as `infer` gets it (shape, dtype): the signature the scores are traced
        with. From `self.eval_x` unless overridden (a reference that decodes its images on demand)."""
        return tf.TensorSpec(self.eval_x.shape[1:], self.eval_x.dtype)

    @functools.cached_property
    def _batch_scores(self):
        # A leading None: one trace serves every batch, the last shorter one included.
        one = self.example_spec()
        spec = tf.TensorSpec((None, *one.shape), one.dtype)
        return tf.function(self.scores, autograph=False, input_signature=[spec])

    @functools.cached_property
    def _one_scores(self):
        # XLA fuses the batch-1 graph into fewer kernels (1.5-1.8x faster than the plain graph
        # for ResNet-20 and -56 on the project's 2-core CPU).
        return tf.function(lambda x: self.scores(x[None])[0], autograph=False, input_signature=[self.example_spec()],
                           jit_compile=self.ctx.config.get("xla_inference", False))

    def predict(self):
        step = self.ctx.config.get("eval_batch_size", EVAL_BATCH_SIZE)
        return np.concatenate([self._batch_scores(self.eval_x[i:i + step]).numpy()
                               for i in range(0, len(self.eval_x), step)])

    def save(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.evaluated().save_weights(path / WEIGHTS_FILE)    # batch-norm moving statistics included
        # The hyperparameters next to the weights, so a model folder copied alone still says what it is.
        (path / CONFIG_FILE).write_text(json.dumps(self.ctx.config, indent=2))

    def load(self, path: Path) -> None:
        self.evaluated().load_weights(Path(path) / WEIGHTS_FILE)

    def eval_inputs(self):
        return self.eval_x

    # Export for the harness's inference runtimes (dawnbench infer --runtime onnxruntime|openvino)

    def export_onnx(self, path: Path) -> None:
        """Write `scores` (test-time augmentation included), traced for batches of `example_spec`, as
        ONNX (opset 17, batch axis dynamic, input "input") with tf2onnx. In the predictor, after `load`."""
        try:
            import tf2onnx
        except ImportError:
            raise UsageError("exporting a Keras model to ONNX needs tf2onnx, not installed here: "
                             "pip install tf2onnx==1.17.0") from None
        one = self.example_spec()
        spec = (tf.TensorSpec((None, *one.shape), one.dtype, name="input"),)
        traced = tf.function(self.scores, autograph=False, input_signature=spec)
        tf2onnx.convert.from_function(traced, input_signature=spec, opset=17, output_path=str(path))

    def export_inputs(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The eval examples `start` to `stop` as the exported model takes them, in canonical order."""
        inputs = self.eval_inputs()
        if isinstance(inputs, (tf.Tensor, np.ndarray)):
            return np.asarray(inputs[start:stop])
        return np.stack([np.asarray(inputs[i]) for i in range(*slice(start, stop).indices(len(inputs)))])

    def calibration_inputs(self, n: int) -> np.ndarray:
        """`n` training examples drawn with the run's seed, prepared as `export_inputs` prepares the
        eval examples: the int8 calibration set. In the trainer, which sees the training files only."""
        train_x = getattr(self, "train_x", None)
        if train_x is None:
            raise UsageError(f"{type(self).__name__} does not support int8 yet: it keeps no self.train_x to "
                             f"draw calibration examples from")
        total = int(train_x.shape[0])
        chosen = np.sort(np.random.default_rng(self.ctx.seed).choice(total, size=min(n, total), replace=False))
        return np.asarray(self.calibration_batch(tf.constant(chosen)))

    def calibration_batch(self, indices: tf.Tensor) -> tf.Tensor:
        """The training examples at `indices`, unaugmented and prepared exactly as the eval images
        are for the model (what `scores` takes). Each reference that supports int8 says how."""
        raise UsageError(f"{type(self).__name__} does not support int8 yet: it defines no "
                         f"calibration_batch(indices) (its training examples prepared as the eval images)")

    def infer(self, example):
        return self._one_scores(example).numpy()

    # Devices and versions

    def synchronize(self) -> None:
        if self.gpu:
            tf.test.experimental.sync_devices()

    def framework_versions(self) -> dict[str, str]:
        threading = tf.config.threading
        versions = {"tensorflow": tf.__version__, "keras": keras.__version__,
                    # 0 means TensorFlow's default: as many threads as cores.
                    "intra_op_threads": str(threading.get_intra_op_parallelism_threads()),
                    "inter_op_threads": str(threading.get_inter_op_parallelism_threads()),
                    "onednn": onednn_enabled()}
        if tf.config.list_physical_devices("GPU"):
            # What the wheel was built against, as PyTorch reports torch.version.cuda; the CUDA found on
            # the machine is env.json's own field.
            build = tf.sysconfig.get_build_info()
            for key in ("cuda_version", "cudnn_version"):
                if build.get(key):
                    versions[key.removesuffix("_version")] = str(build[key])
        return versions


def onednn_enabled() -> str:
    """Whether TensorFlow runs its oneDNN kernels: what it decided, which differs from the
    environment variable where TensorFlow was imported before the reference set it."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # private, hence the fallback
        return str(bool(_pywrap_util_port.IsMklEnabled())).lower()
    except (ImportError, AttributeError):
        return "unknown (TF_ENABLE_ONEDNN_OPTS=" + os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset") + ")"


# ----------------------------------------------------------------------------------------------
# The strategy of one process: TPU, GPUs, logical CPUs or the default

# Where Cloud TPU names its TPU for TPUClusterResolver() (the TPU Node of 2018, GKE, Colab): with
# none of them set and no name given, the resolver refuses at once, without a network call.
TPU_ENVIRONMENT = ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG")
# The device files of TPU chips attached to a TPU VM (v2-v4: /dev/accel*; v5e and later: vfio).
TPU_DEVICE_FILES = ("/dev/accel[0-9]*", "/dev/vfio/[0-9]*")


def find_tpu(setting="auto", environ: Mapping[str, str] | None = None, device_files=None) -> str | None:
    """The `tpu` argument of TPUClusterResolver for `setting`, or None for no TPU. "auto": the TPU the
    environment names (TPUClusterResolver's own variables: ""), else "local" where TPU chips are
    attached to this machine (a TPU VM), else None; "none" (or empty): None; any other string is a
    TPU's name or its grpc:// address, passed on."""
    text = str(setting if setting is not None else "none").strip()
    if text.lower() in ("", "none", "false", "off"):
        return None
    if text.lower() != "auto":
        return text
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in TPU_ENVIRONMENT):
        return ""
    files = device_files if device_files is not None else [f for pattern in TPU_DEVICE_FILES for f in glob.glob(pattern)]
    return "local" if files else None


def split_cpu(replicas: int) -> list[str]:
    """Cut the CPU into `replicas` logical devices (their names). TensorFlow fixes its devices when
    it first runs an op: the split must come first, or be the one already made."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError:        # TensorFlow runs already: only a split made before it will do
        pass
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(names) != replicas:
        raise ValueError(f"cpu_replicas {replicas}: TensorFlow already runs with {len(names)} logical CPU(s), "
                         "and a process splits its CPU only before its first TensorFlow op")
    return names


def choose_strategy(tpu="auto", cpu_replicas: int = 1) -> tf.distribute.Strategy:
    """One process's strategy: TPUStrategy where `find_tpu(tpu)` names a TPU (connected and
    initialized here; a named TPU that does not answer is an error, not a fallback), else
    MirroredStrategy over this machine's GPUs where it has several, else, where `cpu_replicas` > 1
    and there is no GPU, MirroredStrategy over that many logical CPUs, else the default strategy."""
    address = find_tpu(tpu)
    if address is not None:
        # The documented sequence; connecting is a no-op where the TPU is local (a TPU VM).
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    if not gpus and int(cpu_replicas) > 1:
        return tf.distribute.MirroredStrategy(split_cpu(int(cpu_replicas)))
    return tf.distribute.get_strategy()
