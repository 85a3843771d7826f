"""ImageNet to 93% top-5 with ResNet-152 in MXNet Gluon: the DAWNBench seed entry's framework and model.

DAWNBench v1's first ImageNet entry (Stanford DAWN, 2017) trained ResNet-152 with MXNet on 8 K80s.
This file is the whole recipe, written for this benchmark: the network (ResNet-152 v1 with
torchvision's layout and no convolution biases: 60,192,808 trainable parameters), the data
(RecordIO read by MXNet's ImageRecordIter), SGD with warm-up and cosine decay, label smoothing,
evaluation with flip test-time augmentation.

Devices: every local GPU in one process (a Gluon Trainer over a kvstore: "device"; "dist_sync"
across machines), mixed precision with `mxnet.contrib.amp` on GPUs; on a machine without a GPU,
the CPU with the "local" kvstore. Only the CPU path has been run (see README.md).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

from harness.datasets import DatasetError
from harness.errors import UsageError
from harness.reference import Context, Reference

NAME = "imagenet-resnet152-mxnet"
# ImageNet's per-channel mean and standard deviation of RGB pixels in [0, 255].
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)
INTERP = 2          # bicubic: cheaper filters alias visibly at ImageNet's 4x-8x downscales


# ------------------------------------------------------------------------------------ the network
#
# Every layer names its input channels, so the parameters have their shapes (and can be counted)
# before the first batch; Gluon would otherwise defer their initialisation to it.

def conv(in_channels: int, channels: int, kernel: int, stride: int = 1) -> nn.Conv2D:
    # No bias: a batch norm follows every convolution, and its beta is the bias.
    return nn.Conv2D(channels, kernel, strides=stride, padding=kernel // 2, use_bias=False, in_channels=in_channels)


def batch_norm(channels: int, zero: bool = False) -> nn.BatchNorm:
    # zero=True on the last batch norm of a residual branch: each block starts as the identity,
    # which makes the 50 blocks of ResNet-152 trainable from the first step (Goyal et al., 2017).
    return nn.BatchNorm(in_channels=channels, momentum=0.9, epsilon=1e-5,
                        gamma_initializer="zeros" if zero else "ones")


class Bottleneck(gluon.HybridBlock):
    """1x1 reduce, 3x3, 1x1 expand (x4), each followed by batch norm, plus the shortcut. A block
    that changes the resolution strides in its 3x3 convolution (torchvision's choice, sometimes
    called v1.5: the 1x1 would otherwise skip three quarters of its input)."""

    def __init__(self, in_channels: int, width: int, stride: int):
        super().__init__()
        out = 4 * width
        self.body = nn.HybridSequential()
        self.body.add(conv(in_channels, width, 1), batch_norm(width), nn.Activation("relu"),
                      conv(width, width, 3, stride), batch_norm(width), nn.Activation("relu"),
                      conv(width, out, 1), batch_norm(out, zero=True))
        self.shortcut = None
        if stride != 1 or in_channels != out:
            # A projection only where the shape changes (the first block of each stage).
            self.shortcut = nn.HybridSequential()
            self.shortcut.add(conv(in_channels, out, 1, stride), batch_norm(out))

    def hybrid_forward(self, F, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        return F.Activation(self.body(x) + identity, act_type="relu")


class ResNet(gluon.HybridBlock):
    def __init__(self, blocks=(3, 8, 36, 3), num_classes: int = 1000):
        super().__init__()
        self.features = nn.HybridSequential()
        self.features.add(conv(3, 64, 7, 2), batch_norm(64), nn.Activation("relu"),
                          nn.MaxPool2D(pool_size=3, strides=2, padding=1))
        channels = 64
        for stage, count in enumerate(blocks):
            width = 64 * 2 ** stage
            for i in range(count):
                # The first stage keeps the stem's resolution; each later one halves it.
                stride = 2 if i == 0 and stage > 0 else 1
                self.features.add(Bottleneck(channels, width, stride))
                channels = 4 * width
        self.features.add(nn.GlobalAvgPool2D(), nn.Flatten())
        self.output = nn.Dense(num_classes, in_units=channels)

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


def resnet152(num_classes: int = 1000) -> ResNet:
    return ResNet((3, 8, 36, 3), num_classes)


def count_parameters(net: gluon.Block) -> int:
    """Trainable parameters: batch norm's running mean and variance (grad_req "null") are state."""
    return sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null")


def weight_decay_exempt(net: gluon.Block) -> None:
    """No weight decay on batch norm's gamma and beta and on the classifier's bias: decaying them
    only fights the normalisation."""
    for name, p in net.collect_params().items():
        if name.endswith(("gamma", "beta", "bias")):
            p.wd_mult = 0.0


# ------------------------------------------------------------------------------------ the data
#
# MXNet's own reader: `dawnbench data prepare imagenet --format recordio` packs the prepared JPEGs,
# byte for byte, into recordio/train/train.rec (header label: the class index; shuffled once) and
# recordio/val/val.rec (no label: -1, in the harness's order), each with its .idx. ImageRecordIter
# decodes and augments them in C++ threads (`num_workers`), prefetching batches, and hands out
# normalised float32 NCHW: no Python in the data path.

RECORDIO = "recordio"


def record_files(ctx: Context, split: str) -> tuple[str, str]:
    """(.rec, .idx) of a split ("train" or "val"), or the one-line error that says how to make them."""
    folder = ctx.dataset_dir / RECORDIO / split
    rec, idx = folder / f"{split}.rec", folder / f"{split}.idx"
    if not rec.is_file() or not idx.is_file():
        raise DatasetError(f"ImageNet RecordIO ({rec.name}, {idx.name}) not found in {folder}: {NAME} reads "
                           "RecordIO; run `dawnbench data prepare imagenet --from DIR --format recordio` (it packs "
                           "the prepared folders, and keeps them)")
    return str(rec), str(idx)


def normalisation() -> dict:
    return {**{f"mean_{c}": m for c, m in zip("rgb", MEAN)}, **{f"std_{c}": s for c, s in zip("rgb", STD)}}


def train_records(rec: str, idx: str, cfg: dict, seed: int, part_index: int, num_parts: int) -> mx.io.DataIter:
    """Inception-style crops (8%-100% of the area, aspect 3/4-4/3) resized to image_size, random
    flips, reshuffled at every reset; this worker reads its 1/num_parts of the records. The last
    batch is topped up with records that then open the next pass (round_batch): every batch is
    whole, and over the epochs every record is seen about equally often."""
    size = cfg["image_size"]
    return mx.io.ImageRecordIter(
        path_imgrec=rec, path_imgidx=idx, data_shape=(3, size, size), batch_size=cfg["batch_size"] // num_parts,
        shuffle=True, seed=seed, seed_aug=seed, num_parts=num_parts, part_index=part_index,
        random_resized_crop=True, min_random_area=0.08, max_random_area=1.0, min_aspect_ratio=3 / 4,
        max_aspect_ratio=4 / 3, rand_mirror=True, inter_method=INTERP, **normalisation(),
        preprocess_threads=max(1, cfg["num_workers"]), verbose=False)


def eval_records(rec: str, idx: str, cfg: dict) -> mx.io.DataIter:
    """Short side resized to eval_resize, the central eval_crop square, in record order (the
    harness's). No round_batch: with it the records left over at the end would start the next
    pass, shifting the order of every later predict; without it the last batch is filled with
    junk past the last record (its `pad` says 0), which `predict` cuts off."""
    crop = cfg["eval_crop"]
    return mx.io.ImageRecordIter(
        path_imgrec=rec, path_imgidx=idx, data_shape=(3, crop, crop), batch_size=cfg["eval_batch_size"],
        shuffle=False, round_batch=False, resize=cfg["eval_resize"], inter_method=INTERP, **normalisation(),
        preprocess_threads=max(1, cfg["num_workers"]), verbose=False)


class Records:
    """The records of a .rec/.idx pair one by one, as JPEG bytes: `infer` decodes the val ones inside
    the timed call."""

    def __init__(self, rec: str, idx: str):
        self.reader = mx.recordio.MXIndexedRecordIO(idx, rec, "r")

    def __len__(self):
        return len(self.reader.keys)

    def __getitem__(self, i: int) -> bytes:
        return mx.recordio.unpack(self.reader.read_idx(self.reader.keys[i]))[1]


def eval_image(jpeg: bytes, resize: int, crop: int) -> mx.nd.NDArray:
    """What eval_records does to one image, with the same OpenCV calls: normalised float32 CHW."""
    img = mx.image.resize_short(mx.image.imdecode(jpeg, flag=1, to_rgb=True), resize, interp=INTERP)
    img = mx.image.center_crop(img, (crop, crop), interp=INTERP)[0]
    mean, std = mx.nd.array(MEAN).reshape((1, 1, 3)), mx.nd.array(STD).reshape((1, 1, 3))
    return ((img.astype("float32") - mean) / std).transpose((2, 0, 1))


# ------------------------------------------------------------------------------------ the schedule

def learning_rate(step: int, steps_per_epoch: int, cfg: dict) -> float:
    """Linear warm-up from 0 over warmup_epochs, then a cosine to 0 at `epochs`, for a peak of
    lr x batch_size / 256 (Goyal et al.'s linear scaling); held at 0 past the end."""
    peak = cfg["lr"] * cfg["batch_size"] / 256
    warm = max(1, int(cfg["warmup_epochs"] * steps_per_epoch))
    total = max(warm + 1, cfg["epochs"] * steps_per_epoch)
    if step < warm:
        return peak * (step + 1) / warm
    progress = min(1.0, (step - warm) / (total - warm))
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


def flag(value, default: bool) -> bool:
    """A hyperparameter that is "auto" (then `default`), a bool or "true"/"false"."""
    if value == "auto":
        return default
    if isinstance(value, bool):
        return value
    return str(value).lower() in ("1", "true", "yes", "on")


# ------------------------------------------------------------------------------------ the reference

def kvstore_type(value: str, gpus: int, world_size: int) -> str:
    """The kvstore that sums the gradients: "auto" is "dist_sync" on several machines (MXNet's
    parameter servers), else "device" with GPUs (summed on the GPUs, peer to peer), else "local"."""
    if value != "auto":
        return value
    if world_size > 1:
        return "dist_sync"
    return "device" if gpus else "local"


class ImageNetResNet152(Reference):
    PARAMS = "model.params"

    def setup(self, ctx: Context) -> None:
        self.ctx_ = ctx
        cfg = self.cfg = ctx.config
        mx.random.seed(ctx.seed)
        np.random.seed(ctx.seed)
        gpus = mx.context.num_gpus()
        self.devices = [mx.gpu(i) for i in range(gpus)] or [mx.cpu()]
        self.amp = flag(cfg["amp"], gpus > 0) and gpus > 0
        if self.amp:
            # Before the network is built: AMP wraps MXNet's operators so that each runs in float16
            # where that is safe and float32 where not (softmax, norms); the weights stay float32.
            from mxnet.contrib import amp
            amp.init()
        self.net = resnet152(cfg["num_classes"])
        self.net.initialize(mx.init.MSRAPrelu(factor_type="in", slope=0.0), ctx=self.devices)
        self.net.hybridize(static_alloc=True, static_shape=True)
        if ctx.trains:
            self._setup_training(ctx, cfg, gpus)
        elif not ctx.serves:      # a predictor (infer's timed server has the model only: each record comes with its request)
            rec, idx = record_files(ctx, "val")
            self.eval_iter = eval_records(rec, idx, cfg)
            self.val_records = Records(rec, idx)

    def _setup_training(self, ctx: Context, cfg: dict, gpus: int) -> None:
        kind = kvstore_type(cfg["kvstore"], gpus, ctx.world_size)
        if kind.startswith("dist") and "DMLC_ROLE" not in os.environ:
            raise UsageError(f"kvstore {kind!r} needs MXNet's parameter servers (DMLC_ROLE, DMLC_PS_ROOT_URI, ...: "
                             "start every machine with MXNet's launcher); on one machine set kvstore=device or local")
        self.kvstore = mx.kv.create(kind)
        rec, idx = record_files(ctx, "train")
        # Each worker of a dist kvstore reads its own part of the records; one worker reads them all.
        self.train_iter = train_records(rec, idx, cfg, ctx.seed, self.kvstore.rank, self.kvstore.num_workers)
        batch = cfg["batch_size"] // self.kvstore.num_workers
        if batch % len(self.devices) or cfg["batch_size"] % self.kvstore.num_workers:
            raise UsageError(f"batch_size {cfg['batch_size']} does not split evenly over {self.kvstore.num_workers} "
                             f"worker(s) of {len(self.devices)} device(s); choose a multiple of their product")
        examples = len(Records(rec, idx))      # the records of the .idx (train ones here)
        self.steps_per_epoch = max(1, math.ceil(examples / cfg["batch_size"]))   # the last batch is topped up
        self.step = 0
        weight_decay_exempt(self.net)
        self.trainer = gluon.Trainer(self.net.collect_params(), "sgd",
                                     {"learning_rate": learning_rate(0, self.steps_per_epoch, cfg),
                                      "momentum": cfg["momentum"], "wd": cfg["weight_decay"]},
                                     kvstore=self.kvstore,
                                     # AMP skips a step whose gradients overflowed: the Trainer must
                                     # update the weights itself to see them, not inside the kvstore.
                                     update_on_kvstore=False if self.amp else None)
        if self.amp:
            from mxnet.contrib import amp
            amp.init_trainer(self.trainer)        # dynamic loss scaling
        self.epoch = 0

    def _loss(self, logits, labels):
        """Cross-entropy against labels smoothed by label_smoothing (Szegedy et al., 2016)."""
        eps = self.cfg["label_smoothing"]
        classes = self.cfg["num_classes"]
        target = mx.nd.one_hot(labels, classes, on_value=1 - eps + eps / classes, off_value=eps / classes)
        logp = mx.nd.log_softmax(logits.astype("float32"), axis=-1)
        return -(logp * target).sum(axis=-1)

    def train_precision(self):
        gpus = sum(d.device_type == "gpu" for d in self.devices)
        if self.amp:
            return "fp16", (f"amp = {json.dumps(self.cfg['amp'])} with {gpus} GPUs: mxnet.contrib.amp float16 "
                            f"(float32 where unsafe, the weights float32, the loss scaled)")
        return "fp32", f"amp = {json.dumps(self.cfg['amp'])}" + (" without a GPU" if not gpus else "") + ": float32"

    def train_epoch(self, epoch: int) -> dict[str, float]:
        cfg = self.cfg
        if self.epoch:
            self.train_iter.reset()         # a new shuffle of the records, new crops
        self.epoch = epoch
        total, seen = mx.nd.zeros(1, ctx=self.devices[0]), 0
        lr = self.trainer.learning_rate
        for batch in self.ctx_.progress(self.train_iter, total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            lr = learning_rate(self.step, self.steps_per_epoch, cfg)
            self.trainer.set_learning_rate(lr)
            xs = gluon.utils.split_and_load(batch.data[0], self.devices, even_split=True)
            ys = gluon.utils.split_and_load(batch.label[0], self.devices, even_split=True)
            with autograd.record():
                losses = [self._loss(self.net(x), y) for x, y in zip(xs, ys)]
                if self.amp:
                    from mxnet.contrib import amp
                    with amp.scale_loss(losses, self.trainer) as scaled:
                        autograd.backward(scaled)
                else:
                    autograd.backward(losses)
            size = batch.data[0].shape[0]
            # Gradients are summed over the batch and, by a dist kvstore, over the workers (Gluon's
            # Trainer does not divide by them): step divides by the global batch.
            self.trainer.step(size * self.kvstore.num_workers)
            # Summed on the device; read once per epoch, so the loop never waits for the GPU. The
            # batch.pad records that top up the last batch are counted in the next epoch.
            total += mx.nd.add_n(*[loss.sum().as_in_context(self.devices[0]) for loss in losses])
            seen += size - batch.pad
            self.step += 1
        return {"loss": float(total.asscalar()) / max(1, seen), "samples": seen, "lr": lr}

    def save(self, path: Path) -> None:
        # Weights and batch-norm statistics, in float32 (AMP keeps float32 weights).
        Path(path).mkdir(parents=True, exist_ok=True)
        self.net.save_parameters(str(Path(path) / self.PARAMS))

    def load(self, path: Path) -> None:
        self.net.load_parameters(str(Path(path) / self.PARAMS), ctx=self.devices)

    def _scores(self, images: mx.nd.NDArray) -> np.ndarray:
        """Softmax of each image averaged with its mirror's: flip test-time augmentation."""
        x = images.as_in_context(self.devices[0])
        both = mx.nd.concat(x, mx.nd.flip(x, axis=3), dim=0)
        probs = mx.nd.softmax(self.net(both).astype("float32"), axis=-1)
        n = images.shape[0]
        return ((probs[:n] + probs[n:]) / 2).asnumpy()

    def predict(self) -> np.ndarray:
        # Eval runs on the first device only: off the clock, and simpler than splitting the mirror pairs.
        self.eval_iter.reset()
        out = [self._scores(batch.data[0]) for batch in self.ctx_.progress(self.eval_iter, desc="eval")]
        return np.concatenate(out)[:len(self.val_records)].astype(np.float32)   # junk past the last record

    def eval_inputs(self):
        return self.val_records

    def infer(self, example: bytes) -> np.ndarray:
        image = eval_image(example, self.cfg["eval_resize"], self.cfg["eval_crop"])
        return self._scores(image.expand_dims(0))[0]

    def synchronize(self) -> None:
        mx.nd.waitall()

    def framework_versions(self) -> dict[str, str]:
        features = mx.runtime.Features()
        return {"mxnet": mx.__version__, "cuda": str(features.is_enabled("CUDA")).lower(),
                "cudnn": str(features.is_enabled("CUDNN")).lower(), "gpus": str(mx.context.num_gpus())}
