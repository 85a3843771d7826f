"""What TensorFlow / Keras references share: the default predict / save / load / eval_inputs /
infer of a classifier, the clock's device hook, and the versions worth recording.

A TensorFlow reference subclasses KerasReference instead of harness.Reference and in `setup`
sets `self.ctx`, `self.model` (the Keras model) and `self.gpu = True` when it runs on a GPU, in
both roles; then, in the trainer (`ctx.trains`), the training data and what training needs, and
in the predictor `self.eval_x` (the eval images, ready for the model, where the model runs); in the
server of timed inference requests (`ctx.serves`) nothing more: each example comes with its request. It
then writes only `setup` and `train_epoch`, and overrides `scores` for test-time augmentation or
`evaluated` to predict and save with other weights than `self.model`'s. The trainer's `save`
writes `evaluated()`'s weights; the predictor's `load` reads them back into it. `SETUP_SETS` declares
what setup must set; the worker checks it after setup and names what is missing.

Inference runs through two tf.functions with fixed input signatures, traced once each: one for
the eval batches, one for a single example, which XLA compiles when the hyperparameter
`xla_inference` is true.

`choose_strategy` picks the tf.distribute strategy of one process, whatever the hardware: a Cloud
TPU where one answers, else the machine's GPUs, else the default strategy; or, asked for, several
logical CPUs (what tests of the multi-replica code path run on a machine without accelerators).

`check_cuda_libraries`, which every KerasReference runs when it is made (before `setup`, in the
trainer and the predictor), stops a GPU run with one line where the CUDA libraries it would load
are not the ones this TensorFlow was built with: a cuDNN of a lower minor (TensorFlow itself
refuses it only at the first convolution, deep in a traceback), a CUDA runtime of another
major.minor, no ptxas or libdevice for XLA, or GPUs on the machine that TensorFlow cannot use.
It says nothing where TensorFlow is a CPU build or the machine has no NVIDIA GPU.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import importlib.metadata
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from harness.errors import UsageError
from harness.reference import Context, Reference, SetupSets

WEIGHTS_FILE = "model.weights.h5"
CONFIG_FILE = "config.json"
EVAL_BATCH_SIZE = 1000          # when the reference.toml names no eval_batch_size


# The Keras dtype policies the references set, as harness.precision's words.
KERAS_PRECISIONS = {"float32": ("fp32", "float32 throughout"),
                    "mixed_bfloat16": ("bf16", "bfloat16 compute, float32 variables"),
                    "mixed_float16": ("fp16", "float16 compute, float32 variables, the loss scaled")}


def policy_precision(policy: str, setting: str, value, device: str = "") -> tuple[str, str]:
    """(precision, why) for `train_precision`: the Keras dtype policy that `setup` chose from the
    hyperparameter `setting` = `value` (on `device`, where it decided)."""
    word, how = KERAS_PRECISIONS[policy]
    return word, f"{setting} = {json.dumps(value)}{' on ' + device if device else ''}: Keras policy {policy} ({how})"


class KerasReference(Reference):
    ctx: Context
    model: keras.Model
    eval_x: tf.Tensor
    train_x: tf.Tensor
    gpu: bool = False
    SETUP_SETS = (
        SetupSets("ctx", ("train", "predict", "serve"), what="ctx (the Context setup gets)"),
        # The trainer's: a predictor may build its model in load (squad-bidaf-tensorflow does).
        SetupSets("model", ("train",), ("evaluated",), what="the Keras model"),
        # infer reads it through example_spec's default only
        SetupSets("eval_x", ("predict",), ("predict", "eval_inputs", ("infer", "example_spec")),
                  what="the eval images as the model takes them"),
        SetupSets("train_x", ("train",), ("calibration_inputs",), only_with="calibration_batch",
                  what="the training examples calibration_batch indexes"),
    )

    def __init__(self):
        super().__init__()
        # Before setup, in both roles: the references resolve their device in setup, which a
        # fork edits; a wrong cuDNN would otherwise surface at the first convolution.
        check_cuda_libraries()

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
        with. From `self.eval_x` unless overridden (a reference that decodes its images on demand);
        in the server of timed requests, which has no eval_x, from the first example it was sent."""
        if not hasattr(self, "eval_x") and hasattr(self, "_wire_spec"):
            return self._wire_spec
        return tf.TensorSpec(self.eval_x.shape[1:], self.eval_x.dtype)

    def example_from_wire(self, example):
        """A timed request's example (an array): the traced function takes it as it is. An image file's
        bytes (ImageNet's timed requests carry the file, harness.inference): decoded here, inside the
        timed call, by the reference's `decode_image_file`, traced once."""
        if isinstance(example, bytes):
            return self._decode_file(tf.constant(example))
        if isinstance(example, np.ndarray) and not hasattr(self, "_wire_spec"):
            self._wire_spec = tf.TensorSpec(example.shape, tf.as_dtype(example.dtype))
        return example

    def decode_image_file(self, data: tf.Tensor) -> tf.Tensor:
        """One image file's bytes (a scalar string) -> the eval example `infer` takes, prepared as the
        predictor prepares it. The ImageNet references define it."""
        raise UsageError(f"{type(self).__name__} has no decode_image_file(): its timed requests carry image files")

    @functools.cached_property
    def _decode_file(self):
        return tf.function(self.decode_image_file, autograph=False, input_signature=[tf.TensorSpec((), tf.string)])

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


# ----------------------------------------------------------------------------------------------
# The CUDA libraries a GPU run loads, against the ones this TensorFlow was built with

NVIDIA_DEVICE_FILES = "/dev/nvidia[0-9]*"


def version_tuple(text: str | None) -> tuple[int, ...]:
    """"12.5.1" -> (12, 5, 1); "" or None -> ()."""
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:3])


def cuda_problem(built: Mapping[str, str], found: Mapping[str, str | None], gpus_listed: bool = True) -> str | None:
    """Why TensorFlow cannot run on the CUDA libraries found, as one line, or None. `built`: the
    "cuda" and "cudnn" versions the build was compiled against ("9" where only the major is known);
    `found`: those of the libraries this process would load ("cuda", "cudnn", None where none is)
    and the "ptxas" and "libdevice" files XLA would use. A cuDNN must have the build's major and at
    least its minor (TensorFlow's own rule); the CUDA runtime the build's major and at least its
    minor (CUDA's minor-version compatibility)."""
    problems = []
    for lib, name in (("cudnn", "cuDNN"), ("cuda", "CUDA runtime")):
        want, have = version_tuple(built.get(lib)), version_tuple(found.get(lib))
        if not want:
            continue
        where = f" ({found[lib + '_path']})" if found.get(lib + "_path") else ""
        if not have:
            problems.append(f"no {name} {want[0]} library found")
        elif have[0] != want[0]:
            problems.append(f"it loads {name} {found[lib]}{where}, not {name} {want[0]}")
        elif have[1:2] < want[1:2]:
            problems.append(f"it loads {name} {found[lib]}{where}, older than the {want[0]}.{want[1]} it was built with")
    for tool in ("ptxas", "libdevice"):
        if not found.get(tool):
            problems.append(f"XLA finds no {tool}")
    if not gpus_listed:
        problems.insert(0, "it sees none of this machine's NVIDIA GPUs")
    elif not problems:
        return None
    return (f"TensorFlow {tf.__version__} (built with CUDA {built.get('cuda')} and cuDNN {built.get('cudnn')}): "
            + "; ".join(problems) + ". Install tensorflow[and-cuda] with the nvidia-*-cu12 wheels of its "
            "extra (the TensorFlow references' requirements.txt pins them), or use a base image whose "
            "libraries are at least those versions")


def built_versions(build_info: Mapping) -> dict[str, str]:
    """The CUDA and cuDNN this TensorFlow was compiled against. get_build_info names cuDNN's major
    only ("9"); the minimum its [and-cuda] extra asks of nvidia-cudnn-cu12 (9.3.0.75 for 2.21) is
    the version it was built with, and gives the minor."""
    cudnn = str(build_info.get("cudnn_version", ""))
    requirements = []
    # The distribution that installed the tensorflow package: tensorflow in the images.
    for dist in importlib.metadata.packages_distributions().get("tensorflow", ["tensorflow"]):
        try:
            requirements += importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            pass
    for line in requirements:
        match = re.match(r"nvidia-cudnn-cu\d+\s*[^;]*?>=\s*([\d.]+)", line)
        if match and version_tuple(match.group(1))[:1] == version_tuple(cudnn)[:1]:
            cudnn = match.group(1)
    return {"cuda": str(build_info.get("cuda_version", "")), "cudnn": cudnn}


def _library_version(soname: str, directories, ask) -> tuple[str | None, str | None]:
    """(version, path) of the first `soname` found where TensorFlow's loader looks: the given
    directories in order, then the system's (ld.so.cache and default directories)."""
    for path in [os.path.join(d, soname) for d in directories if d] + [soname]:
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        return ask(library), path
    return None, None


def cudnn_version_text(v: int) -> str:
    """cudnnGetVersion()'s number as major.minor.patch: cuDNN 9 encodes major * 10000 + minor * 100
    + patch, cuDNN 8 and older major * 1000 + minor * 100 + patch."""
    major, rest = (v // 10000, v % 10000) if v >= 90000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def cudart_version_text(v: int) -> str:
    """cudaRuntimeGetVersion()'s number (major * 1000 + minor * 10) as major.minor."""
    return f"{v // 1000}.{v % 1000 // 10}"


def _cudnn_version(library) -> str:
    library.cudnnGetVersion.restype = ctypes.c_size_t
    return cudnn_version_text(int(library.cudnnGetVersion()))


def _cudart_version(library) -> str | None:
    v = ctypes.c_int()
    return cudart_version_text(v.value) if library.cudaRuntimeGetVersion(ctypes.byref(v)) == 0 else None


def found_libraries(built: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The cuDNN and CUDA runtime versions this process would load, and the ptxas and libdevice XLA
    would use, looked for where TensorFlow looks: dlopen from libtensorflow_framework.so.2 searches
    LD_LIBRARY_PATH, then its RUNPATH (site-packages/nvidia/<library>/lib), then the system; XLA
    searches --xla_gpu_cuda_data_dir, /usr/local/cuda, /opt/cuda and site-packages/nvidia/cuda_nvcc
    (openxla/xla xla/tsl/platform/default/cuda_root_path.cc, CandidateCudaRoots), and PATH first
    for ptxas."""
    environ = os.environ if environ is None else environ
    site = os.path.dirname(os.path.dirname(os.path.abspath(tf.__file__)))
    search = environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    found = {}
    for key, folder, soname, ask in (("cudnn", "cudnn", "libcudnn.so", _cudnn_version),
                                     ("cuda", "cuda_runtime", "libcudart.so", _cudart_version)):
        major = version_tuple(built.get(key))[:1]
        name = f"{soname}.{major[0]}" if major else soname
        found[key], found[key + "_path"] = _library_version(
            name, search + [os.path.join(site, "nvidia", folder, "lib")], ask)
    data_dir = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", environ.get("XLA_FLAGS", ""))
    roots = ([data_dir.group(1)] if data_dir else []) + ["/usr/local/cuda", "/opt/cuda",
                                                         os.path.join(site, "nvidia", "cuda_nvcc")]
    ptxas = [os.path.join(d, "ptxas") for d in environ.get("PATH", "").split(os.pathsep) if d]
    ptxas += [os.path.join(r, "bin", "ptxas") for r in roots]
    libdevice = [os.path.join(r, "nvvm", "libdevice", "libdevice.10.bc") for r in roots]
    found["ptxas"] = next((p for p in ptxas if os.access(p, os.X_OK)), None)
    found["libdevice"] = next((p for p in libdevice if os.path.isfile(p)), None)
    return found


def gpus_hidden(environ: Mapping[str, str]) -> bool:
    """CUDA_VISIBLE_DEVICES set to hide every GPU: a CPU run asked for on a GPU machine."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    return value is not None and value.strip() in ("", "-1")


def check_cuda_libraries(environ: Mapping[str, str] | None = None) -> None:
    """Raise UsageError (one line) where a GPU run would load CUDA libraries this TensorFlow was not
    built for; nothing on a CPU build or a machine without NVIDIA GPUs."""
    environ = os.environ if environ is None else environ
    build_info = tf.sysconfig.get_build_info()
    if not build_info.get("is_cuda_build") or gpus_hidden(environ):
        return
    listed = bool(tf.config.list_physical_devices("GPU"))
    if not listed and not glob.glob(NVIDIA_DEVICE_FILES):
        return
    built = built_versions(build_info)
    problem = cuda_problem(built, found_libraries(built, environ), gpus_listed=listed)
    if problem:
        raise UsageError(problem)
