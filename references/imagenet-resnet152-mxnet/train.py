"""ImageNet to 93% top-5 with ResNet-152 in MXNet Gluon: the DAWNBench seed entry's framework and model.

DAWNBench v1's first ImageNet entry (Stanford DAWN, 2017) trained ResNet-152 with MXNet on 8 K80s.
This file is the whole recipe, written for this benchmark: the network (ResNet-152 v1 with
torchvision's layout and no convolution biases: 60,192,808 trainable parameters), the JPEG
pipeline (MXNet's own OpenCV decoder, `mx.image`), SGD with warm-up and cosine decay, label
smoothing, evaluation with flip test-time augmentation.

Devices: every local GPU in one process (a Gluon Trainer over a kvstore, "device" or "nccl"),
mixed precision with `mxnet.contrib.amp` on GPUs; on a machine without a GPU, the CPU with the
"local" kvstore. Only the CPU path has been run (see README.md).
"""
from __future__ import annotations

import math
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

from common import imagenet_files
from harness.reference import Context, Reference

# ImageNet's per-channel mean and standard deviation of RGB pixels in [0, 255].
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)


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
# Images travel as uint8 HWC arrays (a quarter of float32's bytes through the loader's worker
# processes) and become normalised float NCHW on the device (`to_input`).

def read_image(path: str) -> mx.nd.NDArray:
    """A file as RGB uint8 HWC. OpenCV (inside libmxnet) also reads the CMYK JPEGs and the one PNG
    named .JPEG of ImageNet's training set, and turns grayscale into three channels."""
    with open(path, "rb") as f:
        return mx.image.imdecode(f.read(), flag=1, to_rgb=True)


def random_resized_crop(img: mx.nd.NDArray, size: int, rng: np.random.Generator, scale=(0.08, 1.0),
                        ratio=(3 / 4, 4 / 3)) -> mx.nd.NDArray:
    """Inception-style crop: a random area fraction and aspect ratio of the image, resized to
    size x size. The box comes from `rng`, so a crop depends on the seed, the epoch and the image
    only, never on which loader worker made it; the whole image, centre-cropped to the ratio
    range, after ten misses."""
    h, w = img.shape[:2]
    area = h * w
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            break
    else:
        cw, ch = (w, min(h, int(round(w / ratio[0])))) if w / h < ratio[0] else (min(w, int(round(h * ratio[1]))), h)
        x0, y0 = (w - cw) // 2, (h - ch) // 2
    # interp=2: bicubic; cheaper filters alias visibly at ImageNet's 4x-8x downscales.
    return mx.image.fixed_crop(img, x0, y0, cw, ch, size=(size, size), interp=2)


def eval_image(img: mx.nd.NDArray, resize: int, crop: int) -> mx.nd.NDArray:
    """Short side resized to `resize`, then the central crop x crop."""
    img = mx.image.resize_short(img, resize, interp=2)
    return mx.image.center_crop(img, (crop, crop), interp=2)[0]


class TrainImages(gluon.data.Dataset):
    """(uint8 HWC crop of size x size, label) for an index; `epoch` is set before each epoch."""

    def __init__(self, paths: list[str], labels: np.ndarray, seed: int, size: int):
        self.paths, self.labels, self.seed, self.size = paths, labels, seed, size
        self.epoch = 1

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        rng = np.random.default_rng((self.seed, self.epoch, i))
        img = random_resized_crop(read_image(self.paths[i]), self.size, rng)
        if rng.random() < 0.5:
            img = mx.nd.flip(img, axis=1)
        return img, np.int32(self.labels[i])


class EvalImages(gluon.data.Dataset):
    """The validation images in canonical order, decoded and cropped on access: `predict` batches
    them, and `eval_inputs` hands them to `infer` one at a time, the decode inside the timed call."""

    def __init__(self, paths: list[str], resize: int, crop: int):
        self.paths, self.resize, self.crop = paths, resize, crop

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return eval_image(read_image(self.paths[i]), self.resize, self.crop)


def to_input(batch: mx.nd.NDArray, dtype: str = "float32") -> mx.nd.NDArray:
    """uint8 NHWC on the device -> normalised NCHW of `dtype`."""
    mean = mx.nd.array(MEAN, ctx=batch.context).reshape((1, 3, 1, 1))
    std = mx.nd.array(STD, ctx=batch.context).reshape((1, 3, 1, 1))
    x = (batch.astype("float32").transpose((0, 3, 1, 2)) - mean) / std
    return x.astype(dtype) if dtype != "float32" else x


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

class ImageNetResNet152(Reference):
    PARAMS = "model.params"

    def setup(self, ctx: Context) -> None:
        self.ctx_ = ctx
        cfg = self.cfg = ctx.config
        if ctx.world_size != 1:
            # One process drives every local GPU through the kvstore; MXNet's multi-machine kvstore
            # (dist_sync, with its own parameter servers) is not wired to the harness's launcher.
            raise RuntimeError("imagenet-resnet152-mxnet runs as one process (all local GPUs); run it without torchrun")
        mx.random.seed(ctx.seed)
        np.random.seed(ctx.seed)
        gpus = mx.context.num_gpus()
        self.devices = [mx.gpu(i) for i in range(gpus)] or [mx.cpu()]
        self.amp = flag(cfg["amp"], gpus > 0) and gpus > 0
        if self.amp:
            # Before the network is built: AMP patches the operators it will call to float16 where safe.
            from mxnet.contrib import amp
            amp.init()
        self.net = resnet152(cfg["num_classes"])
        self.net.initialize(mx.init.MSRAPrelu(factor_type="in", slope=0.0), ctx=self.devices)
        self.net.hybridize(static_alloc=True, static_shape=True)
        if ctx.trains:
            self._setup_training(ctx, cfg)
        else:
            self.eval_set = EvalImages(imagenet_files.val_files(ctx.data_root), cfg["eval_resize"], cfg["eval_crop"])

    def _setup_training(self, ctx: Context, cfg: dict) -> None:
        paths, labels, _ = imagenet_files.train_samples(ctx.data_root)
        self.train_set = TrainImages(paths, labels, ctx.seed, cfg["image_size"])
        batch = cfg["batch_size"]
        if batch % len(self.devices):
            raise ValueError(f"batch_size {batch} does not split over {len(self.devices)} GPUs")
        self.steps_per_epoch = max(1, len(paths) // batch)
        self.step = 0
        weight_decay_exempt(self.net)
        kvstore = cfg["kvstore"]
        if kvstore == "auto":
            # "device": gradients summed on the GPUs (peer to peer), not through host memory.
            kvstore = "device" if len(self.devices) > 1 else "local"
        self.trainer = gluon.Trainer(self.net.collect_params(), "sgd",
                                     {"learning_rate": learning_rate(0, self.steps_per_epoch, cfg),
                                      "momentum": cfg["momentum"], "wd": cfg["weight_decay"],
                                      "multi_precision": self.amp},
                                     kvstore=kvstore)
        if self.amp:
            from mxnet.contrib import amp
            amp.init_trainer(self.trainer)        # dynamic loss scaling
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def _loss(self, logits, labels):
        """Cross-entropy against labels smoothed by label_smoothing (Szegedy et al., 2016)."""
        eps = self.cfg["label_smoothing"]
        classes = self.cfg["num_classes"]
        target = mx.nd.one_hot(labels, classes, on_value=1 - eps + eps / classes, off_value=eps / classes)
        logp = mx.nd.log_softmax(logits.astype("float32"), axis=-1)
        return -(logp * target).sum(axis=-1)

    def train_epoch(self, epoch: int) -> dict[str, float]:
        cfg = self.cfg
        self.train_set.epoch = epoch
        batch = cfg["batch_size"]
        # One permutation per epoch from the seed; the incomplete last batch is dropped.
        order = np.random.default_rng((self.ctx_.seed, epoch)).permutation(len(self.train_set))
        batches = [order[i:i + batch].tolist() for i in range(0, len(order) - batch + 1, batch)]
        loader = gluon.data.DataLoader(self.train_set, batch_sampler=batches, num_workers=cfg["num_workers"],
                                       thread_pool=False)
        dtype = "float16" if self.amp else "float32"
        total, seen = mx.nd.zeros(1, ctx=self.devices[0]), 0
        lr = self.trainer.learning_rate
        for images, labels in self.ctx_.progress(loader, total=len(batches), desc=f"epoch {epoch}"):
            lr = learning_rate(self.step, self.steps_per_epoch, cfg)
            self.trainer.set_learning_rate(lr)
            xs = gluon.utils.split_and_load(images, self.devices, even_split=True)
            ys = gluon.utils.split_and_load(labels, self.devices, even_split=True)
            with autograd.record():
                losses = [self._loss(self.net(to_input(x, dtype)), y) for x, y in zip(xs, ys)]
                if self.amp:
                    from mxnet.contrib import amp
                    with amp.scale_loss(losses, self.trainer) as scaled:
                        autograd.backward(scaled)
                else:
                    autograd.backward(losses)
            self.trainer.step(len(images))      # gradients are summed over the batch: step divides
            # Summed on the device; read once per epoch, so the loop never waits for the GPU.
            total += mx.nd.add_n(*[loss.sum().as_in_context(self.devices[0]) for loss in losses])
            seen += len(images)
            self.step += 1
        return {"loss": float(total.asscalar()) / max(1, seen), "samples": seen, "lr": lr}

    def save(self, path: Path) -> None:
        # Weights and batch-norm statistics, in float32 (AMP keeps float32 master weights).
        Path(path).mkdir(parents=True, exist_ok=True)
        self.net.save_parameters(str(Path(path) / self.PARAMS))

    def load(self, path: Path) -> None:
        self.net.load_parameters(str(Path(path) / self.PARAMS), ctx=self.devices)

    def _scores(self, images: mx.nd.NDArray) -> np.ndarray:
        """Softmax of each image averaged with its mirror's: flip test-time augmentation."""
        device = self.devices[0]
        x = to_input(images.as_in_context(device), "float16" if self.amp else "float32")
        both = mx.nd.concat(x, mx.nd.flip(x, axis=3), dim=0)
        probs = mx.nd.softmax(self.net(both).astype("float32"), axis=-1)
        n = images.shape[0]
        return ((probs[:n] + probs[n:]) / 2).asnumpy()

    def predict(self) -> np.ndarray:
        # Eval runs on the first device only: off the clock, and simpler than splitting the mirror pairs.
        loader = gluon.data.DataLoader(self.eval_set, batch_size=self.cfg["eval_batch_size"], shuffle=False,
                                       num_workers=self.cfg["num_workers"], thread_pool=False)
        out = [self._scores(images) for images in self.ctx_.progress(loader, desc="eval")]
        return np.concatenate(out).astype(np.float32)

    def eval_inputs(self):
        return self.eval_set

    def infer(self, example) -> np.ndarray:
        return self._scores(example.expand_dims(0))[0]

    def synchronize(self) -> None:
        mx.nd.waitall()

    def framework_versions(self) -> dict[str, str]:
        features = mx.runtime.Features()
        return {"mxnet": mx.__version__, "cuda": str(features.is_enabled("CUDA")).lower(),
                "cudnn": str(features.is_enabled("CUDNN")).lower(), "gpus": str(mx.context.num_gpus())}
