"""imagenet-resnet50-tensorflow: ImageNet to 93% top-5 with ResNet-50 v1.5 in TensorFlow 2 / Keras 3.

The two references imagenet-resnet50-tensorflow and imagenet-resnet152-tensorflow each carry this
same file; only this opening line differs, and `depth` (50 or 152) is a hyperparameter in their
reference.toml. Read top to bottom; to fork, `cp -r` this directory and edit this file.

The network (He et al. 2016, "Deep Residual Learning", table 1; v1.5 as torchvision and NVIDIA's
and Google's TF ResNet-50 have it):
  - a 7x7/2 convolution to 64 channels and a 3x3/2 max pool, then four stages of bottleneck blocks
    (1x1 reduce, 3x3, 1x1 expand by 4) at widths 64, 128, 256, 512: 3-4-6-3 blocks for ResNet-50,
    3-8-36-3 for ResNet-152; global average pooling and one dense layer (with bias) to 1,000 classes;
  - v1.5: a downsampling block strides in its 3x3 convolution, not its first 1x1 (v1 strides the 1x1
    and throws away three quarters of its input); a 1x1/2 projection (+ batch norm) shortcut where
    the shape changes;
  - no convolution biases (batch norm follows each one); the last batch norm of every block starts
    at zero, so each block starts as the identity (Goyal et al. 2017);
  - trainable parameters, as PyTorch counts them (batch-norm moving statistics excluded):
    ResNet-50 25,557,032 and ResNet-152 60,192,808, torchvision's counts.
Layer settings follow PyTorch's where Keras's differ (batch-norm momentum 0.9, epsilon 1e-5;
symmetric padding of strided convolutions and the max pool), so the TensorFlow and PyTorch
ImageNet references compute the same function of the same weights.

The recipe (documented choices, not tuned on ImageNet here; see the README):
  - SGD with momentum 0.9; the peak learning rate scales linearly with the global batch
    (`lr` for every `lr_batch` images, Goyal et al.'s 0.1 per 256); a linear warm-up over
    `warmup_epochs`, then linear decay to 0 at `epochs`, updated every step;
  - label smoothing 0.1; weight decay 1e-4 (`weight_decay`) on convolution and dense kernels only,
    none on batch-norm scales and shifts or the dense bias, added to the gradient before the momentum
    step as PyTorch's SGD(weight_decay=...) does;
  - random-resized crops (8% to 100% of the area, aspect 3/4 to 4/3) and horizontal flips, decoded
    with tf.io.decode_and_crop_jpeg, so only the crop's part of each JPEG is decoded; optional
    progressive resizing (`image_size_start` up to `resize_start_epoch`, then linear, multiples of
    32, to `image_size_end` at `resize_end_epoch`);
  - evaluation: the short side resized to `eval_resize`, the centre `eval_crop` square, the image and
    its mirror averaged (flip test-time augmentation);
  - tf.data reads the prepared JPEG folders (common/imagenet_files.py lists them) or, where
    `dawnbench data prepare imagenet --format tfrecord` packed them, the same JPEG bytes from
    TFRecord shards (`data_format`: "auto" takes the TFRecords when they are there); one decoding and
    augmentation for both; crops and flips are drawn from (seed, epoch, image), so they do not depend
    on which thread made them;
  - several GPUs of one machine: tf.distribute.MirroredStrategy; several machines (one harness
    process each, TF_CONFIG naming the workers): MultiWorkerMirroredStrategy. The global batch is
    fixed and split across replicas;
  - on a GPU only, Keras mixed precision (`mixed_precision`: "auto" is mixed_float16 with loss
    scaling on a GPU and float32 on the CPU); the logits and the loss stay float32.
The harness times and scores everything; this file never sees a validation label.
"""
from __future__ import annotations

import functools
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

from common.imagenet_files import DATASET, train_samples, val_files
from common.schedules import image_size, one_cycle
from common.tf_base import KerasReference, policy_precision

# Per-channel pixel statistics of the ImageNet training images, on the 0-255 scale.
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CROP_AREA = (0.08, 1.0)               # random-resized crop: fraction of the image's area ...
CROP_RATIO = (3 / 4, 4 / 3)           # ... and aspect ratio (width / height)
CROP_ATTEMPTS = 10                    # tries before the whole image is taken
STAGES = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}   # bottleneck blocks per stage
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
DATA_FORMATS = ("auto", "folders", "tfrecord")
RECORDS_INDEX = "records.json"        # dawnbench/pack_tfrecord.py's count of a split's records, per shard
READ_SHARDS = 16                      # TFRecord shards read at once: a mix of classes in every batch
SHUFFLE_BUFFER = 10_000               # TFRecords: records shuffled in memory (~1 GB of JPEGs), on top of
                                      # the packed order's shuffle and each epoch's shard order


# ----------------------------------------------------------------------------------------------
# The network (Keras functional API, channels last: the layout TensorFlow's kernels want)

def conv(x, filters: int, kernel: int, stride: int = 1, name: str = ""):
    """A bias-free convolution. A strided one with a kernel larger than 1 pads kernel // 2 pixels on
    every side, as PyTorch's padding does: Keras's "same" would pad only bottom and right."""
    if stride > 1 and kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
    # He initialization, normal with fan-out (PyTorch's kaiming_normal_(mode="fan_out")); a new
    # initializer per layer, since Keras fixes an initializer's seed when it is made.
    he_fan_out = keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")
    return layers.Conv2D(filters, kernel, strides=stride, use_bias=False, name=name,
                         padding="valid" if stride > 1 else "same", kernel_initializer=he_fan_out)(x)


def bn(x, name: str, zero: bool = False):
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=name,
                                     gamma_initializer="zeros" if zero else "ones")(x)


def bottleneck(x, width: int, stride: int, name: str):
    """1x1 reduce, 3x3 (strided: v1.5), 1x1 expand by 4; a 1x1 projection where the shape changes."""
    c_out = width * 4
    out = layers.ReLU(name=f"{name}_relu1")(bn(conv(x, width, 1, 1, f"{name}_conv1"), f"{name}_bn1"))
    out = layers.ReLU(name=f"{name}_relu2")(bn(conv(out, width, 3, stride, f"{name}_conv2"), f"{name}_bn2"))
    out = bn(conv(out, c_out, 1, 1, f"{name}_conv3"), f"{name}_bn3", zero=True)
    shortcut = x
    if stride != 1 or x.shape[-1] != c_out:
        shortcut = bn(conv(x, c_out, 1, stride, f"{name}_proj"), f"{name}_proj_bn")
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([out, shortcut]))


def build_model(depth: int, num_classes: int = 1000) -> keras.Model:
    """ResNet-`depth` v1.5: float (B, H, W, 3) normalized images, any H and W of 32 or more -> float32 logits."""
    if depth not in STAGES:
        raise ValueError(f"depth {depth}: expected one of {', '.join(map(str, STAGES))}")
    inputs = keras.Input((None, None, 3), name="image")
    x = layers.ReLU(name="stem_relu")(bn(conv(inputs, 64, 7, 2, "stem_conv"), "stem_bn"))
    # Zero padding is the same as -inf padding here: the max pool's input is >= 0 after the ReLU.
    x = layers.MaxPooling2D(3, strides=2, name="stem_pool")(layers.ZeroPadding2D(1, name="stem_pool_pad")(x))
    for stage, blocks in enumerate(STAGES[depth]):
        for i in range(blocks):
            x = bottleneck(x, 64 * 2 ** stage, 2 if stage > 0 and i == 0 else 1, f"stage{stage + 1}_block{i + 1}")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    # PyTorch's nn.Linear initialization: uniform in +-1/sqrt(fan_in) for weights and bias. float32
    # logits under mixed precision: the softmax and the loss need the range.
    bound = 1 / math.sqrt(x.shape[-1])
    logits = layers.Dense(num_classes, name="fc", dtype="float32",
                          kernel_initializer=keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform"),
                          bias_initializer=keras.initializers.RandomUniform(-bound, bound))(x)
    return keras.Model(inputs, logits, name=f"resnet{depth}_v1_5")


def count_parameters(model: keras.Model) -> int:
    """Trainable parameters (the batch-norm moving statistics are not)."""
    return int(sum(math.prod(v.shape) for v in model.trainable_variables))


def decays(variable) -> bool:
    """Weight decay applies to convolution and dense kernels only (rank > 1), not to batch-norm
    scales and shifts or the dense bias."""
    return len(variable.shape) > 1


# ----------------------------------------------------------------------------------------------
# The schedules: the image size (progressive resizing: common.schedules.image_size) and the
# learning rate

def peak_lr(cfg: dict) -> float:
    """Linear scaling: `lr` is the peak for a global batch of `lr_batch`."""
    return cfg["lr"] * cfg["batch_size"] / cfg["lr_batch"]


# ----------------------------------------------------------------------------------------------
# The optimizer and one step of it

def make_optimizer(cfg: dict, policy: str) -> keras.optimizers.Optimizer:
    """SGD with momentum; under mixed_float16 wrapped in Keras's LossScaleOptimizer, since float16
    gradients underflow without loss scaling. Call it in the strategy's scope."""
    opt = keras.optimizers.SGD(learning_rate=peak_lr(cfg), momentum=cfg["momentum"])
    return keras.optimizers.LossScaleOptimizer(opt) if policy == "mixed_float16" else opt


def minimize(opt: keras.optimizers.Optimizer, loss_fn, variables, weight_decay: float) -> tf.Tensor:
    """One step of `opt` on `loss_fn()` (this replica's part of the global batch's mean loss) plus
    L2 weight decay on the `decays` variables, as PyTorch's SGD(weight_decay=...): weight_decay x w
    joins the gradient before the momentum. Returns the loss.

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
    opt.apply_gradients([(g + decay * v if decays(v) else g, v) for g, v in zip(grads, variables)])
    return loss


# ----------------------------------------------------------------------------------------------
# Data: the JPEG bytes from the prepared folders or from TFRecords, one augmentation for both
#
# `dawnbench data prepare imagenet` writes the folders; `--format tfrecord` also packs the same JPEG
# bytes into <data root>/imagenet/tfrecord/{train,val}/ (dawnbench/pack_tfrecord.py), which reads
# faster from network disks (a few large files instead of 1.3 million small ones). A source gives
# tf.data the encoded images; everything after the bytes is shared, so both formats train and
# predict alike.

def data_format(cfg: dict, data_root, split: str) -> str:
    """"folders" or "tfrecord" for `split` ("train" or "val"): config `data_format` "auto" takes the
    TFRecords where they were packed."""
    value = str(cfg.get("data_format", "auto")).strip().lower()
    if value not in DATA_FORMATS:
        raise ValueError(f"data_format {cfg.get('data_format')!r}: expected one of {', '.join(DATA_FORMATS)}")
    packed = (record_folder(data_root, split) / RECORDS_INDEX).is_file()
    if value == "tfrecord" and not packed:
        raise ValueError(f"data_format \"tfrecord\": no TFRecords in {record_folder(data_root, split)}; run "
                         "`dawnbench data prepare imagenet --format tfrecord`, or set data_format to \"folders\"")
    return ("tfrecord" if packed else "folders") if value == "auto" else value


def record_folder(data_root, split: str) -> Path:
    return Path(data_root) / DATASET / "tfrecord" / split


def record_shards(data_root, split: str) -> tuple[list[str], int]:
    """(shard paths in order, record count) from the split's records.json, which the packer writes
    last: an epoch's length without reading the shards."""
    folder = record_folder(data_root, split)
    try:
        index = json.loads((folder / RECORDS_INDEX).read_text())
        files, count = [str(folder / name) for name in index["shards"]], int(index["records"])
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{folder / RECORDS_INDEX} is not a TFRecord index: run "
                         "`dawnbench data prepare imagenet --format tfrecord` again") from None
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise ValueError(f"TFRecord shard {missing[0]} is missing ({len(missing)} of {len(files)}): run "
                         "`dawnbench data prepare imagenet --format tfrecord` again")
    return files, count


def parse_train_record(raw):
    features = tf.io.parse_single_example(raw, {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                                                "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
    return features["image/encoded"], features["image/class/label"]


def parse_val_record(raw):
    return tf.io.parse_single_example(raw, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})["image/encoded"]


def epoch_order(n: int, cfg: dict, seed: int, epoch: int) -> np.ndarray:
    """The images of every full global batch of an epoch, (steps, batch_size): one permutation from
    (seed, epoch); the incomplete last batch is dropped."""
    order = np.random.default_rng((seed, epoch)).permutation(n)
    steps = n // cfg["batch_size"]
    return order[:steps * cfg["batch_size"]].reshape(steps, cfg["batch_size"])


class FolderTrain:
    """The training JPEGs as files (common/imagenet_files.py lists them, labels from the class folders)."""

    def __init__(self, data_root, cfg: dict):
        self.paths, self.labels, wnids = train_samples(data_root)
        self.count, self.classes, self.cfg = len(self.paths), len(wnids), cfg

    def examples(self, seed: int, epoch: int, pipeline: int, pipelines: int, share: int) -> tf.data.Dataset:
        """(JPEG bytes, label, key) of this pipeline's `share` of every global batch of the epoch, in
        order; the key (the image's index) seeds the image's crop and flip."""
        order = epoch_order(self.count, self.cfg, seed, epoch)
        mine = order[:, pipeline * share:(pipeline + 1) * share].reshape(-1)
        paths, labels = tf.constant(self.paths), tf.constant(self.labels)
        return tf.data.Dataset.from_tensor_slices(mine).map(
            lambda i: (tf.io.read_file(tf.gather(paths, i)), tf.gather(labels, i), i),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


class RecordTrain:
    """The training JPEGs as TFRecord shards, already in one shuffled order; each epoch reads the
    shards in its own order, interleaved, through a shuffle buffer."""

    def __init__(self, data_root, cfg: dict):
        self.files, self.count = record_shards(data_root, "train")
        # No class count to check: the packer labels every record with its line of synsets.txt (0 to 999).
        self.classes, self.cfg = None, cfg

    def examples(self, seed: int, epoch: int, pipeline: int, pipelines: int, share: int) -> tf.data.Dataset:
        steps = self.count // self.cfg["batch_size"]
        files = [self.files[i] for i in np.random.default_rng((seed, epoch)).permutation(len(self.files))]
        # Each machine reads its own shards where there are enough of them, else every record's turn.
        split_files = len(files) >= pipelines
        records = (tf.data.Dataset.from_tensor_slices(files[pipeline::pipelines] if split_files else files)
                   .interleave(tf.data.TFRecordDataset, cycle_length=min(READ_SHARDS, len(files)),
                               num_parallel_calls=tf.data.AUTOTUNE, deterministic=True))
        if not split_files:
            records = records.shard(pipelines, pipeline)
        # repeat: the machines' shards differ by a few records; each takes exactly its share of the steps.
        shuffle_seed = int(np.random.default_rng((seed, epoch, pipeline)).integers(2 ** 31))
        records = (records.shuffle(SHUFFLE_BUFFER, seed=shuffle_seed)
                   .repeat().take(steps * share).enumerate())
        return records.map(lambda key, raw: (*parse_train_record(raw), key),
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


class FolderVal:
    """The validation JPEGs as files, in canonical order (sorted file names)."""

    def __init__(self, data_root):
        self.paths = val_files(data_root)

    def __len__(self):
        return len(self.paths)

    def encoded(self) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(self.paths).map(tf.io.read_file)

    def encoded_at(self, index: int) -> tf.Tensor:
        return tf.io.read_file(self.paths[index])


class RecordVal:
    """The validation JPEGs as TFRecord shards, packed in canonical order and read in it (one shard
    after another, never interleaved). Read by position for `infer`: the harness asks for the
    examples in order, so a cursor moves forward and starts again only when asked for an earlier one."""

    def __init__(self, data_root):
        self.files, self.count = record_shards(data_root, "val")
        self._cursor, self._next = None, 0

    def __len__(self):
        return self.count

    def encoded(self) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(self.files).map(parse_val_record)

    def encoded_at(self, index: int) -> tf.Tensor:
        if not 0 <= index < self.count:
            raise IndexError(index)
        if self._cursor is None or index < self._next:
            self._cursor, self._next = iter(self.encoded().skip(index)), index
        for _ in range(index - self._next):
            next(self._cursor)
        self._next = index + 1
        return next(self._cursor)


def normalize(x: tf.Tensor) -> tf.Tensor:
    """uint8 (..., 3) images -> float32, per-channel standardized."""
    return (tf.cast(x, tf.float32) - MEAN) / STD


def train_image(data, label, size, seed):
    """One training example from its JPEG bytes: a random-resized crop, decoded from that crop only,
    resized to size x size and flipped at random; uint8 (size, size, 3). `seed` (two int64s) fixes
    both draws."""
    box_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.io.extract_jpeg_shape(data), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=box_seed,
        min_object_covered=0.0, aspect_ratio_range=CROP_RATIO, area_range=CROP_AREA,
        max_attempts=CROP_ATTEMPTS, use_image_if_no_bounding_boxes=True)
    window = tf.stack([begin[0], begin[1], extent[0], extent[1]])
    # channels=3: grayscale JPEGs come out RGB (prepare re-encoded the CMYK ones and the PNG already).
    image = tf.io.decode_and_crop_jpeg(data, window, channels=3)
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return tf.cast(tf.round(tf.clip_by_value(image, 0, 255)), tf.uint8), label


def eval_image(data, resize: int, crop: int):
    """The centre crop x crop of the image (JPEG bytes) resized so that its short side is `resize`,
    decoded from that region only: uint8 (crop, crop, 3)."""
    shape = tf.io.extract_jpeg_shape(data)
    side = tf.cast(tf.round(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32) * crop / resize), tf.int32)
    side = tf.maximum(side, 1)
    window = tf.stack([(shape[0] - side) // 2, (shape[1] - side) // 2, side, side])
    image = tf.image.resize(tf.io.decode_and_crop_jpeg(data, window, channels=3), [crop, crop], method="bilinear")
    return tf.cast(tf.round(tf.clip_by_value(image, 0, 255)), tf.uint8)


class EvalImages(Sequence):
    """The validation images in canonical order, from either source, each decoded on demand as the
    predictor's batches decode them: uint8 (crop, crop, 3). What `infer` is timed on."""

    def __init__(self, source: FolderVal | RecordVal, resize: int, crop: int):
        if crop > resize:
            raise ValueError(f"eval_crop {crop} is larger than eval_resize {resize}: the crop is taken from the resized image")
        self.source, self.resize, self.crop = source, resize, crop
        self._decode = tf.function(lambda data: eval_image(data, resize, crop), autograph=False,
                                   input_signature=[tf.TensorSpec((), tf.string)])

    def __len__(self):
        return len(self.source)

    def __getitem__(self, index):
        if not isinstance(index, (int, np.integer)):
            raise TypeError("EvalImages takes one index at a time")
        return self._decode(self.source.encoded_at(int(index)))

    def dataset(self, batch: int) -> tf.data.Dataset:
        decode = functools.partial(eval_image, resize=self.resize, crop=self.crop)
        return (self.source.encoded().map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .batch(batch).prefetch(tf.data.AUTOTUNE))


# ----------------------------------------------------------------------------------------------
# Devices: the strategy and the precision
#
# One process per machine drives that machine's GPUs (MirroredStrategy). Across machines,
# MultiWorkerMirroredStrategy needs TF_CONFIG: the workers' addresses (host:port, one per machine) and
# this machine's index. The launcher sets it; where it names the cluster but no task, the index is
# this process's harness rank (RANK, as a launcher gives it for the harness's one clock), so every
# machine can be given the same TF_CONFIG.

def cluster_config(environ: dict, rank: int, world_size: int) -> dict | None:
    """TF_CONFIG for this process (its task index filled in from `rank`), or None on one machine.
    The harness's processes must be the TensorFlow workers: one per machine, as many as it names."""
    text = environ.get("TF_CONFIG", "").strip()
    if not text:
        if world_size > 1:
            raise ValueError(f"this run has {world_size} harness processes (WORLD_SIZE) but no TF_CONFIG: set "
                             "TF_CONFIG on every machine to '{\"cluster\": {\"worker\": [\"host0:port\", ...]}}' "
                             "(one process per machine; see the README's several machines)")
        return None
    try:
        config = json.loads(text)
        workers = list(config["cluster"]["worker"])
    except (ValueError, KeyError, TypeError):
        raise ValueError("TF_CONFIG is not JSON of the form {\"cluster\": {\"worker\": [\"host:port\", ...]}}: "
                         "see the README's several machines") from None
    if len(workers) <= 1 and world_size == 1:
        return None
    if len(workers) != world_size:
        raise ValueError(f"TF_CONFIG names {len(workers)} workers but the harness runs {world_size} process(es): "
                         f"start one harness per machine with WORLD_SIZE={len(workers)} and RANK=0..{len(workers) - 1}")
    task = config.setdefault("task", {"type": "worker", "index": rank})
    if task.get("type") != "worker" or task.get("index") != rank:
        raise ValueError(f"TF_CONFIG's task {task} is not worker {rank}, this harness process's RANK: "
                         "drop \"task\" from TF_CONFIG and let RANK say it")
    return config


def choose_strategy(ctx) -> tf.distribute.Strategy:
    """Several machines: MultiWorkerMirroredStrategy; several GPUs on one: MirroredStrategy; else the
    default strategy (one device)."""
    config = cluster_config(os.environ, ctx.rank, ctx.world_size)
    if config is not None:
        os.environ["TF_CONFIG"] = json.dumps(config)       # what the strategy reads, task index included
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def resolve_precision(value, gpu: bool) -> str:
    """The Keras dtype policy: "auto" is mixed_float16 on a GPU (tensor cores from the M60's successors
    on, float32 master weights and loss scaling) and float32 elsewhere (mixed precision on a CPU is
    slower, not faster)."""
    text = str(value).strip().lower()
    if text == "auto":
        return "mixed_float16" if gpu else "float32"
    if text not in POLICIES:
        raise ValueError(f"mixed_precision {value!r}: expected \"auto\" or one of {', '.join(POLICIES)}")
    if text != "float32" and not gpu:
        raise ValueError(f"mixed_precision {text!r} needs a GPU; on the CPU use \"auto\" or \"float32\"")
    return text


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class ImageNetResNetKeras(KerasReference):
    """save and load are KerasReference's (common/tf_base.py); predict, eval_inputs and infer
    stream the validation JPEGs instead of holding them in memory (50,000 images at 224 px would
    take 30 GB as float32)."""

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
        self.gpu = bool(tf.config.list_logical_devices("GPU"))
        self.policy = resolve_precision(cfg["mixed_precision"], self.gpu)
        # Only the trainer spans machines; the predictor runs on rank 0's alone.
        self.strategy = choose_strategy(ctx) if ctx.trains else tf.distribute.get_strategy()
        replicas = self.strategy.num_replicas_in_sync
        if cfg["batch_size"] % replicas:
            raise ValueError(f"batch_size {cfg['batch_size']} is not divisible by {replicas} replicas")
        if ctx.serves:      # infer's timed server: the model only, each example comes with its request
            self.model = self.build()
            return
        self.data_format = data_format(cfg, ctx.data_root, "train" if ctx.trains else "val")

        if not ctx.trains:      # a predictor: the validation images only; load() brings the weights
            source = RecordVal(ctx.data_root) if self.data_format == "tfrecord" else FolderVal(ctx.data_root)
            self.val = EvalImages(source, cfg["eval_resize"], cfg["eval_crop"])
            self.model = self.build()
            return

        self.source = (RecordTrain if self.data_format == "tfrecord" else FolderTrain)(ctx.data_root, cfg)
        if (self.source.classes or 0) > cfg["num_classes"]:
            raise ValueError(f"the training folder holds {self.source.classes} classes but num_classes is "
                             f"{cfg['num_classes']}")
        if self.source.count < cfg["batch_size"]:
            raise ValueError(f"batch_size {cfg['batch_size']} is larger than the {self.source.count} training images")
        self.steps_per_epoch = self.source.count // cfg["batch_size"]
        self.model = self.build()
        with self.strategy.scope():
            self.opt = make_optimizer(cfg, self.policy)
            self.opt.build(self.model.trainable_variables)          # its variables exist before tracing
        total = cfg["epochs"] * self.steps_per_epoch
        self.lr_at = lambda step: one_cycle(step, total, peak_lr(cfg), cfg["warmup_epochs"] / cfg["epochs"],
                                            cfg["lr_start_fraction"], 0.0)
        self.step = 0
        self.train_step = self._make_train_step()

    def build(self) -> keras.Model:
        """The network, under the precision policy and in the strategy's scope."""
        keras.mixed_precision.set_global_policy(self.policy)
        with self.strategy.scope():
            return build_model(self.ctx.config["depth"], self.ctx.config["num_classes"])

    def train_dataset(self, epoch: int):
        """This epoch's batches, one input pipeline per machine: each pipeline takes its share of
        every global batch from the source and cuts it into its replicas' batches."""
        cfg, seed = self.ctx.config, self.ctx.seed
        size = image_size(epoch, cfg)

        def pipeline(context: tf.distribute.InputContext):
            share = cfg["batch_size"] // context.num_input_pipelines
            examples = self.source.examples(seed, epoch, context.input_pipeline_id, context.num_input_pipelines,
                                            share)

            def augment(data, label, key):
                # The image's seed: (run seed, epoch * 2**32 + key), whatever thread decodes it.
                return train_image(data, label, size, tf.stack([tf.constant(seed, tf.int64), epoch * 2 ** 32 + key]))

            return (examples.map(augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                    .batch(context.get_per_replica_batch_size(cfg["batch_size"]), drop_remainder=True)
                    .prefetch(tf.data.AUTOTUNE))

        return self.strategy.distribute_datasets_from_function(pipeline), size

    def _make_train_step(self):
        """One compiled step: each replica contributes sum(loss) / global batch to gradients that the
        optimizer sums across replicas, plus its share of the weight decay (`minimize`)."""
        cfg, model, opt, strategy = self.ctx.config, self.model, self.opt, self.strategy
        global_batch, smoothing = cfg["batch_size"], cfg["label_smoothing"]

        def replica_step(x, y):
            def loss_fn():
                log_p = tf.nn.log_softmax(tf.cast(model(normalize(x), training=True), tf.float32))
                # Label smoothing as PyTorch's: the target is (1 - e) one-hot + e / classes.
                nll = -tf.gather(log_p, y, batch_dims=1)
                return tf.reduce_sum((1 - smoothing) * nll - smoothing * tf.reduce_mean(log_p, -1)) / global_batch

            return minimize(opt, loss_fn, model.trainable_variables, cfg["weight_decay"])

        @tf.function(autograph=False)
        def train_step(x, y):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(x, y)), axis=None)

        return train_step

    def train_precision(self):
        return policy_precision(self.policy, "mixed_precision", self.ctx.config["mixed_precision"],
                                "GPU" if self.gpu else "CPU")

    def train_epoch(self, epoch):
        ctx = self.ctx
        batches, size = self.train_dataset(epoch)
        total_loss = tf.zeros((), tf.float32)
        for x, y in ctx.progress(batches, total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            self.opt.learning_rate.assign(self.lr_at(self.step))
            total_loss += self.train_step(x, y)
            self.step += 1
        # Samples this process fed: its machine's share of every global batch.
        return {"loss": float(total_loss) / self.steps_per_epoch, "lr": self.lr_at(self.step),
                "samples": self.steps_per_epoch * ctx.config["batch_size"] // ctx.world_size, "image_size": size}

    # Evaluation and inference: the image and its mirror, logits averaged.

    def scores(self, x: tf.Tensor) -> tf.Tensor:
        x = normalize(x)
        logits = self.model(tf.concat([x, tf.reverse(x, [2])], 0), training=False)
        half = tf.shape(x)[0]
        return (logits[:half] + logits[half:]) / 2

    def example_spec(self):
        crop = self.ctx.config["eval_crop"]          # decoded on demand: uint8 (crop, crop, 3)
        return tf.TensorSpec((crop, crop, 3), tf.uint8)

    def decode_image_file(self, data):
        # a timed request carries the image file (harness.inference): its decode is in the latency
        return eval_image(data, self.ctx.config["eval_resize"], self.ctx.config["eval_crop"])

    def predict(self):
        batches = self.val.dataset(self.ctx.config["eval_batch_size"])
        return np.concatenate([self._batch_scores(x).numpy() for x in batches])

    def eval_inputs(self):
        return self.val

    def framework_versions(self) -> dict[str, str]:
        replicas = self.strategy.num_replicas_in_sync if hasattr(self, "strategy") else 1
        return {**super().framework_versions(), "replicas": str(replicas),
                "precision": getattr(self, "policy", "float32"), "data_format": getattr(self, "data_format", "")}
