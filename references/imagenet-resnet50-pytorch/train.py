"""ImageNet to 93% top-5 with ResNet-50: the network, the data pipelines and the recipe, in one file.

Read top to bottom; fork the directory and edit this file to make an entry of your own. The recipe
follows the ideas of ffcv's public ResNet-50 configurations (93.7% top-5 after 56 epochs on 8 A100s),
written afresh here; no code is copied:
  - ResNet-50 v1.5 (the stride of a downsampling bottleneck sits in its 3x3 convolution; 25,557,032
    parameters) with BlurPool: every strided convolution first low-pass filters its input with a
    fixed 3x3 binomial filter (a buffer, not a parameter), so that downsampling aliases less; the
    last batch norm of each block starts at zero, so each block starts as the identity;
  - random-resized crops (8% to 100% of the image, aspect 3/4 to 4/3) and horizontal flips;
  - progressive resizing: the crops are `image_size_start` px (160) up to epoch `resize_start_epoch`,
    then grow linearly, rounded to a multiple of 32, to `image_size_end` px (192) at
    `resize_end_epoch`: early epochs are cheap, the last ones see the detail;
  - evaluation as ffcv evaluates: a centre crop of 224/256 of the short side, at 256 px
    (`eval_resize = 292`, `eval_crop = 256`: resize the short side to 292, keep the centre 256x256),
    larger than the training crops because a random-resized crop magnifies objects ("Fixing the
    train-test resolution discrepancy", Touvron et al. 2019); plus flip test-time augmentation;
  - SGD, momentum 0.9, weight decay 1e-4 on convolution and linear weights only (none on batch-norm
    parameters and biases), label smoothing 0.1;
  - one learning-rate cycle over `epochs` (40), updated every step: linear warm-up from almost 0 over
    the first 2 epochs, then linear decay to 0; the peak scales linearly with the global batch:
    lr x batch_size / lr_batch (ffcv's 1.7 at 4,096 images, i.e. 0.425 at the default 1,024);
  - the global batch is fixed and split across the processes of a torchrun (DistributedDataParallel);
  - on a CUDA GPU: NVIDIA DALI decodes the JPEGs on the GPU (nvJPEG and the hardware decoder) and
    crops, flips and normalizes there; bf16 autocast, channels_last and torch.compile. Each is a
    switch in reference.toml: "auto" turns it on with CUDA and off on the CPU; "true" / "false" force
    it. Without DALI (or on the CPU) Pillow decodes in DataLoader worker processes.
The harness times and scores everything; this file never sees a validation label.
"""
from __future__ import annotations

import io
import math
from collections import deque
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.nn.parallel import DistributedDataParallel

from common.imagenet_files import train_samples, val_files
from common.schedules import image_size, one_cycle
from common.torch_base import TorchReference, resolve_switch, switch_precision

# Per-channel pixel statistics of the ImageNet training images, on the 0-255 scale.
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CROP_AREA = (0.08, 1.0)               # random-resized crop: fraction of the image's area ...
CROP_RATIO = (3 / 4, 4 / 3)           # ... and aspect ratio (width / height)
CROP_ATTEMPTS = 10                    # tries before falling back to a centre crop


# ----------------------------------------------------------------------------------------------
# The network: ResNet-50 v1.5 with BlurPool

class Blur(nn.Module):
    """A fixed depthwise [1 2 1] x [1 2 1] / 16 filter, stride 1: the low pass before a strided conv."""

    def __init__(self, channels: int):
        super().__init__()
        taps = torch.tensor([1.0, 2.0, 1.0])
        kernel = (taps[:, None] * taps[None, :]) / 16.0
        self.register_buffer("kernel", kernel.expand(channels, 1, 3, 3).clone(), persistent=False)
        self.channels = channels

    def forward(self, x):
        return F.conv2d(x, self.kernel.to(x.dtype), padding=1, groups=self.channels)


def conv(c_in: int, c_out: int, kernel: int, stride: int = 1, blur: bool = False) -> nn.Module:
    layer = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False)
    return nn.Sequential(Blur(c_in), layer) if blur and stride > 1 else layer


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int, blur: bool):
        super().__init__()
        c_out = width * self.expansion
        self.conv1, self.bn1 = conv(c_in, width, 1), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = conv(width, width, 3, stride, blur), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = conv(width, c_out, 1), nn.BatchNorm2d(c_out)
        nn.init.zeros_(self.bn3.weight)      # each block starts as the identity: trains faster, deeper
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(conv(c_in, c_out, 1, stride, blur), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = F.relu(self.bn2(self.conv2(out)), inplace=True)
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)), inplace=True)


class ResNet(nn.Module):
    def __init__(self, blocks=(3, 4, 6, 3), num_classes: int = 1000, blur: bool = True):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        layers, c_in = [], 64
        for stage, count in enumerate(blocks):
            width = 64 * 2 ** stage
            for i in range(count):
                layers.append(Bottleneck(c_in, width, 2 if (i == 0 and stage > 0) else 1, blur))
                c_in = width * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(num_classes: int = 1000, blur: bool = True) -> ResNet:
    """ResNet-50 v1.5 (25,557,032 parameters with 1,000 classes), BlurPool on its strided convs."""
    return ResNet((3, 4, 6, 3), num_classes, blur)


def count_parameters(net: nn.Module) -> int:
    """Trainable parameters (the BlurPool filters are buffers: not counted)."""
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------------------------
# The schedules: the image size (progressive resizing: common.schedules.image_size) and the
# learning rate

def peak_lr(cfg: dict) -> float:
    """Linear scaling: `lr` is the peak for a global batch of `lr_batch`."""
    return cfg["lr"] * cfg["batch_size"] / cfg["lr_batch"]


def rank_batches(n: int, cfg: dict, seed: int, epoch: int, rank: int, world_size: int) -> list[np.ndarray]:
    """This rank's share of every global batch of an epoch. Every rank draws the same permutation
    (from the seed and the epoch) and takes its slice of each global batch; the incomplete last
    global batch is dropped, so every rank takes the same number of steps."""
    order = np.random.default_rng((seed, epoch)).permutation(n)
    batch, per_rank = cfg["batch_size"], cfg["batch_size"] // world_size
    return [order[step * batch + rank * per_rank: step * batch + (rank + 1) * per_rank]
            for step in range(n // batch)]


# ----------------------------------------------------------------------------------------------
# Data on the CPU: Pillow decoding, numpy crops (tests, and GPUs without DALI)

def random_crop_box(width: int, height: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(left, top, width, height) of a random-resized crop: an area of CROP_AREA of the image and an
    aspect ratio log-uniform in CROP_RATIO; after CROP_ATTEMPTS misses, the largest centred crop
    whose aspect ratio is within CROP_RATIO."""
    for _ in range(CROP_ATTEMPTS):
        area = width * height * rng.uniform(*CROP_AREA)
        aspect = math.exp(rng.uniform(math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1)), w, h
    aspect = min(max(width / height, CROP_RATIO[0]), CROP_RATIO[1])
    w, h = (width, round(width / aspect)) if width / height < aspect else (round(height * aspect), height)
    w, h = min(w, width), min(h, height)
    return (width - w) // 2, (height - h) // 2, w, h


def center_crop_box(width: int, height: int, resize: int, crop: int) -> tuple[float, float, float, float]:
    """The region that "resize the short side to `resize`, keep the centre crop x crop" keeps."""
    side = min(width, height) * crop / resize
    return (width - side) / 2, (height - side) / 2, side, side


def load_region(image: Image.Image, box, size: int) -> np.ndarray:
    """The region `box` (left, top, width, height) of an opened image, resized to size x size RGB:
    uint8 (3, size, size). A JPEG is decoded at 1/2, 1/4 or 1/8 scale when the region still keeps
    at least `size` pixels each way (Pillow's draft mode): far less work for large images."""
    left, top, w, h = box
    full_w, full_h = image.size
    image.draft("RGB", (math.ceil(full_w * size / w), math.ceil(full_h * size / h)))
    sx, sy = image.size[0] / full_w, image.size[1] / full_h
    region = (left * sx, top * sy, (left + w) * sx, (top + h) * sy)
    # Grayscale and CMYK JPEGs exist in ImageNet's training set: every image becomes RGB.
    rgb = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR, box=region)
    return np.asarray(rgb).transpose(2, 0, 1)


class TrainImages(torch.utils.data.Dataset):
    """Training images, decoded and augmented on demand. Indexed by (index, epoch, size) keys, so a
    crop depends only on the seed, the epoch and the image: not on the worker that made it."""

    def __init__(self, paths: Sequence[str], labels: np.ndarray, seed: int):
        self.paths, self.labels, self.seed = paths, labels, seed

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, key):
        index, epoch, size = key
        rng = np.random.default_rng((self.seed, epoch, index))
        with Image.open(self.paths[index]) as image:
            pixels = load_region(image, random_crop_box(*image.size, rng), size)
        if rng.random() < 0.5:
            pixels = pixels[:, :, ::-1]                                 # horizontal flip
        return torch.from_numpy(pixels.copy()), int(self.labels[index])


class EvalImages(Sequence):
    """The validation images in canonical order, each decoded on demand: resized so that the short
    side is `resize`, centre crop `crop` x `crop`, uint8 (3, crop, crop). What `infer` is timed on."""

    def __init__(self, paths: Sequence[str], resize: int, crop: int):
        if crop > resize:
            raise ValueError(f"eval_crop {crop} is larger than eval_resize {resize}: the crop is taken from the resized image")
        self.paths, self.resize, self.crop = paths, resize, crop

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        if not isinstance(index, (int, np.integer)):
            raise TypeError("EvalImages takes one index at a time")
        return eval_image(self.paths[index], self.resize, self.crop)


def eval_image(source, resize: int, crop: int) -> torch.Tensor:
    """One validation image, from its path or its file's bytes (what a timed inference request carries):
    the short side resized to `resize`, centre crop `crop` x `crop`, uint8 (3, crop, crop)."""
    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
        box = center_crop_box(*image.size, resize, crop)
        return torch.from_numpy(load_region(image, box, crop).copy())


class PillowTrainLoader:
    """An epoch's batches from DataLoader workers: uint8 (B, 3, S, S) images and int64 labels."""

    def __init__(self, paths, labels, cfg, seed, rank, world_size, pin_memory):
        self.dataset = TrainImages(paths, labels, seed)
        self.cfg, self.seed, self.rank, self.world_size, self.pin_memory = cfg, seed, rank, world_size, pin_memory

    def epoch(self, epoch: int):
        size = image_size(epoch, self.cfg)
        keys = [[(int(i), epoch, size) for i in batch]
                for batch in rank_batches(len(self.dataset), self.cfg, self.seed, epoch, self.rank, self.world_size)]
        workers = self.cfg["num_workers"]
        return torch.utils.data.DataLoader(self.dataset, batch_sampler=keys, num_workers=workers,
                                           pin_memory=self.pin_memory, prefetch_factor=4 if workers else None)


# ----------------------------------------------------------------------------------------------
# Data on the GPU: NVIDIA DALI (imported only here, only when the data_loader says so)

def dali_available() -> bool:
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


class TrainStream:
    """DALI's external source for training: this rank's batches, epoch after epoch, as the encoded
    JPEG bytes, the labels and the crop size of each image. The same batches as the Pillow loader
    (rank_batches); each batch carries its epoch's size, so batches DALI prefetches across an epoch
    boundary already have the next epoch's size."""

    def __init__(self, paths, labels, cfg, seed, rank, world_size):
        self.paths, self.labels, self.cfg = paths, labels, cfg
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch, self.pending = 0, deque()

    def __call__(self):
        if not self.pending:
            self.epoch += 1
            self.pending.extend(rank_batches(len(self.paths), self.cfg, self.seed, self.epoch, self.rank,
                                             self.world_size))
        batch = self.pending.popleft()
        size = np.float32(image_size(self.epoch, self.cfg))
        return ([np.fromfile(self.paths[i], dtype=np.uint8) for i in batch],
                [self.labels[i:i + 1] for i in batch], [size] * len(batch))


class EvalStream:
    """DALI's external source for evaluation: the validation files in canonical order, batch after
    batch (the last one short), starting over after the last: one pass per predict()."""

    def __init__(self, paths, batch_size):
        self.paths, self.batch_size, self.next = paths, batch_size, 0

    def __call__(self):
        batch = self.paths[self.next:self.next + self.batch_size]
        self.next = 0 if self.next + self.batch_size >= len(self.paths) else self.next + self.batch_size
        return [np.fromfile(path, dtype=np.uint8) for path in batch]


def dali_device(device: torch.device) -> tuple[int | None, str]:
    """(DALI's device_id, the decoder's device): the GPU's "mixed" decoder (nvJPEG), or DALI's CPU
    pipeline where there is no GPU (tests)."""
    return (device.index or 0, "mixed") if device.type == "cuda" else (None, "cpu")


def dali_train_pipeline(stream: TrainStream, batch: int, device: torch.device, cfg: dict, seed: int,
                        half: bool, channels_last: bool):
    """Decode + random-resized crop (one step: only the crop's blocks are decoded), resize to the
    batch's size, flip half the images, normalize: float NCHW (NHWC with channels_last) on the GPU."""
    from nvidia.dali import fn, pipeline_def, types

    device_id, decoder = dali_device(device)

    @pipeline_def(batch_size=batch, num_threads=cfg["dali_threads"], device_id=device_id, seed=seed,
                  prefetch_queue_depth=2)
    def pipeline():
        jpegs, labels, sizes = fn.external_source(source=stream, num_outputs=3, batch=True,
                                                  dtype=[types.UINT8, types.INT64, types.FLOAT])
        images = fn.decoders.image_random_crop(jpegs, device=decoder, output_type=types.RGB,
                                               random_area=list(CROP_AREA), random_aspect_ratio=list(CROP_RATIO),
                                               num_attempts=CROP_ATTEMPTS)
        images = fn.resize(images, resize_x=sizes, resize_y=sizes, interp_type=types.INTERP_LINEAR, antialias=False)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16 if half else types.FLOAT,
                                          output_layout="HWC" if channels_last else "CHW",
                                          mean=list(MEAN), std=list(STD), mirror=fn.random.coin_flip(probability=0.5))
        return images, labels.gpu() if decoder == "mixed" else labels

    return pipeline()


def dali_eval_pipeline(stream: EvalStream, batch: int, device: torch.device, cfg: dict, half: bool,
                       channels_last: bool):
    """Decode, resize the short side to eval_resize (antialiased), centre crop eval_crop, normalize."""
    from nvidia.dali import fn, pipeline_def, types

    device_id, decoder = dali_device(device)

    @pipeline_def(batch_size=batch, num_threads=cfg["dali_threads"], device_id=device_id, prefetch_queue_depth=2)
    def pipeline():
        jpegs = fn.external_source(source=stream, batch=True, dtype=types.UINT8)
        images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB)
        images = fn.resize(images, resize_shorter=cfg["eval_resize"], interp_type=types.INTERP_TRIANGULAR)
        return fn.crop_mirror_normalize(images, crop=(cfg["eval_crop"], cfg["eval_crop"]),
                                        dtype=types.FLOAT16 if half else types.FLOAT,
                                        output_layout="HWC" if channels_last else "CHW", mean=list(MEAN), std=list(STD))

    return pipeline()


def dali_batches(pipeline, names: list[str]):
    """An endless iterator of {name: torch tensor} batches from a built DALI pipeline."""
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    for batch in DALIGenericIterator(pipeline, names):
        yield batch[0]


class DaliTrainLoader:
    """An epoch's batches from DALI: normalized images (B, 3, S, S) and int64 labels, on the device."""

    def __init__(self, paths, labels, cfg, seed, rank, world_size, device, half, channels_last):
        self.stream = TrainStream(paths, labels, cfg, seed, rank, world_size)
        self.steps = len(paths) // cfg["batch_size"]
        pipeline = dali_train_pipeline(self.stream, cfg["batch_size"] // world_size, device, cfg,
                                       seed * 1000 + rank, half, channels_last)
        self.batches = dali_batches(pipeline, ["images", "labels"])

    def epoch(self, epoch: int):
        for _ in range(self.steps):
            batch = next(self.batches)
            images = batch["images"]
            if images.shape[-1] == 3:                                     # NHWC: a channels_last view
                images = images.permute(0, 3, 1, 2)
            yield images, batch["labels"].view(-1)


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class ImageNetResNet50(TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        if cfg["batch_size"] % ctx.world_size:
            raise ValueError(f"batch_size {cfg['batch_size']} is not divisible by {ctx.world_size} processes: "
                             f"set a global batch_size that is a multiple of the process count")
        self.init_torch(ctx)
        self.use_compile = resolve_switch(cfg["compile"], self.device)
        self.use_bf16 = resolve_switch(cfg["bf16"], self.device)
        self.memory_format = (torch.channels_last if resolve_switch(cfg["channels_last"], self.device)
                              else torch.contiguous_format)
        self.data_loader = self.resolve_data_loader(cfg["data_loader"])
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        self.mean = torch.tensor(MEAN, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=self.device).view(1, 3, 1, 1)
        self.net = resnet50(cfg["num_classes"], cfg["blur"]).to(self.device, memory_format=self.memory_format)
        self.infer_net = None                                           # made on the first infer()

        if ctx.serves:      # infer's timed server: the model only, each example comes with its request
            return
        if not ctx.trains:      # a predictor: the validation files only; load() brings the weights
            self.val = EvalImages(val_files(ctx.data_root), cfg["eval_resize"], cfg["eval_crop"])
            self.eval_batches = None                                    # DALI's, made on the first predict()
            return

        paths, labels, wnids = train_samples(ctx.data_root)
        if len(wnids) > cfg["num_classes"]:
            raise ValueError(f"the training folder holds {len(wnids)} classes but num_classes is {cfg['num_classes']}")
        if len(paths) < cfg["batch_size"]:
            raise ValueError(f"batch_size {cfg['batch_size']} is larger than the {len(paths)} training images")
        self.steps_per_epoch = len(paths) // cfg["batch_size"]
        self.batch = cfg["batch_size"] // ctx.world_size                # per rank; the global batch is fixed
        if self.data_loader == "dali":
            self.loader = DaliTrainLoader(paths, labels, cfg, ctx.seed, ctx.rank, ctx.world_size, self.device,
                                          self.use_bf16, self.memory_format == torch.channels_last)
        else:
            self.loader = PillowTrainLoader(paths, labels, cfg, ctx.seed, ctx.rank, ctx.world_size,
                                            pin_memory=self.device.type == "cuda")

        self.model = (DistributedDataParallel(self.net, device_ids=[self.device.index] if self.device.type == "cuda"
                                              else None) if self.distributed else self.net)
        if self.use_compile:
            self.model = torch.compile(self.model)
        decay = [p for p in self.net.parameters() if p.ndim > 1]        # convolution and linear weights
        no_decay = [p for p in self.net.parameters() if p.ndim <= 1]    # batch-norm scales and shifts, biases
        self.opt = torch.optim.SGD([{"params": decay, "weight_decay": cfg["weight_decay"]},
                                    {"params": no_decay, "weight_decay": 0.0}], lr=peak_lr(cfg),
                                   momentum=cfg["momentum"])
        total = cfg["epochs"] * self.steps_per_epoch
        self.lr_at = lambda step: one_cycle(step, total, peak_lr(cfg), cfg["warmup_epochs"] / cfg["epochs"],
                                            cfg["lr_start_fraction"], 0.0)
        self.step = 0

    def resolve_data_loader(self, value) -> str:
        """"auto": DALI on CUDA when it imports, else Pillow; "dali" (also on the CPU) or "pil"."""
        text = str(value).strip().lower()
        if text == "auto":
            return "dali" if self.device.type == "cuda" and dali_available() else "pil"
        if text == "dali" and not dali_available():
            raise ValueError("data_loader = \"dali\" needs NVIDIA DALI: pip install nvidia-dali-cuda130==2.4.0, "
                             "or set data_loader = \"pil\"")
        if text not in ("dali", "pil"):
            raise ValueError(f"data_loader {value!r}: expected \"auto\", \"dali\" or \"pil\"")
        return text

    def to_input(self, x: torch.Tensor) -> torch.Tensor:
        """A batch as the network takes it: on the device, float, normalized (uint8 images from the
        Pillow loaders are normalized here; DALI's already are), in the network's memory format."""
        x = x.to(self.device, non_blocking=True)
        if x.dtype == torch.uint8:
            x = (x.float() - self.mean) / self.std
        return x.contiguous(memory_format=self.memory_format)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step on a batch (at the current learning rate); the loss."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits = self.model(self.to_input(x))
        loss = F.cross_entropy(logits.float(), y.to(self.device, non_blocking=True),
                               label_smoothing=self.ctx.config["label_smoothing"])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.step += 1
        return loss.detach()

    def train_precision(self):
        return switch_precision(self.ctx.config, self.device, bf16=self.use_bf16)

    def train_epoch(self, epoch):
        ctx = self.ctx
        self.model.train()
        total_loss = torch.zeros((), device=self.device)
        for x, y in ctx.progress(self.loader.epoch(epoch), total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            for group in self.opt.param_groups:
                group["lr"] = self.lr_at(self.step)
            total_loss += self.train_step(x, y)
        return {"loss": total_loss.item() / self.steps_per_epoch, "samples": self.steps_per_epoch * self.batch,
                "lr": self.lr_at(self.step), "image_size": image_size(epoch, ctx.config)}

    # Evaluation and inference: the bare network (what save() wrote), flip test-time augmentation.

    @torch.inference_mode()
    def scores(self, x: torch.Tensor, net: nn.Module | None = None) -> torch.Tensor:
        # The image and its mirror in one batch, logits averaged.
        x = self.to_input(x)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits = (net or self.net)(torch.cat([x, x.flip(3)])).float()
        return (logits[:len(x)] + logits[len(x):]) / 2

    def predict(self):
        self.net.eval()
        cfg = self.ctx.config
        step = cfg["eval_batch_size"]
        if self.data_loader == "dali":
            if self.eval_batches is None:
                stream = EvalStream(self.val.paths, step)
                self.eval_batches = dali_batches(dali_eval_pipeline(stream, step, self.device, cfg, self.use_bf16,
                                                                    self.memory_format == torch.channels_last),
                                                 ["images"])
            batches = (next(self.eval_batches)["images"] for _ in range(math.ceil(len(self.val) / step)))
            batches = (x.permute(0, 3, 1, 2) if x.shape[-1] == 3 else x for x in batches)
        else:
            workers = cfg["num_workers"]
            batches = torch.utils.data.DataLoader(self.val, batch_size=step, num_workers=workers,
                                                  pin_memory=self.device.type == "cuda",
                                                  prefetch_factor=4 if workers else None)
        return torch.cat([self.scores(x) for x in batches]).cpu().numpy()

    def eval_inputs(self):
        return self.val

    def example_from_wire(self, example):
        # ImageNet's timed request carries the image file (harness.inference): its decode is in the latency
        if isinstance(example, bytes):
            cfg = self.ctx.config
            return eval_image(example, cfg["eval_resize"], cfg["eval_crop"]).to(self.device)
        return super().example_from_wire(example)

    def infer(self, example):
        if self.infer_net is None:
            self.net.eval()
            compile_it = resolve_switch(self.ctx.config["infer_compile"], self.device)
            self.infer_net = torch.compile(self.net, dynamic=False) if compile_it else self.net
        return self.scores(example.unsqueeze(0), self.infer_net)[0].cpu().numpy()
