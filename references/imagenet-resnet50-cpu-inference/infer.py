"""ResNet-50 batch-1 inference on CPUs: an entry that only infers, in one file.

DAWNBench v1's inference winner was Intel's optimized Caffe: ResNet-50 at 93.07% top-5, 9.96 ms per
image on a c5.18xlarge. Caffe is packaged nowhere here; today's equivalents are ONNX Runtime and
OpenVINO. This entry never trains. `dawnbench infer imagenet-resnet50-cpu-inference --model PATH`
takes its model from one of two places, and the harness records which, with the sha256 of every file:
  - a published weights file in torchvision's ResNet-50 layout (a state dict: conv1, bn1, layer1..4
    with downsample, fc), e.g. torchvision's IMAGENET1K_V2 `resnet50-11ad3fa6.pth` (its published
    top-5 is 95.434% at resize 232 / crop 224, this entry's defaults), evaluated as torchvision
    evaluates it: short side resized to `eval_resize` (bilinear, antialiased), the centre
    `eval_crop` square, no test-time augmentation;
  - the model folder of an `imagenet-resnet50-pytorch` run (model.pt and config.json): its keys are
    renamed into this layout, with BlurPool where that run had it, and it is evaluated exactly as its
    run scored it (its eval_resize and eval_crop, flip test-time augmentation).
The network takes uint8 pixels (N, 3, crop, crop): the normalization and the flip are part of the
graph that is exported to ONNX, so `--runtime onnxruntime|openvino` times all of it. For int8 the
harness starts this entry in the trainer role too, whose view holds the training images only: the
calibration images are drawn from them with the run's seed and prepared as the eval images are.
The harness times and scores everything; this file never sees a validation label.
"""
from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image

from common.imagenet_files import train_samples, val_files
from common.torch_base import TorchReference
from harness.errors import UsageError
from harness.reference import InferenceReference

# Per-channel pixel statistics of the ImageNet training images, on the 0-255 scale (torchvision's).
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
RUN_WEIGHTS, RUN_CONFIG = "model.pt", "config.json"     # what a TorchReference run saves


# ----------------------------------------------------------------------------------------------
# The network: ResNet-50 v1.5 in torchvision's layout (names and shapes), BlurPool optional

class Blur(nn.Module):
    """A fixed depthwise [1 2 1] x [1 2 1] / 16 filter: the low pass of imagenet-resnet50-pytorch's BlurPool."""

    def __init__(self, channels: int):
        super().__init__()
        taps = torch.tensor([1.0, 2.0, 1.0])
        self.register_buffer("kernel", ((taps[:, None] * taps[None, :]) / 16.0).expand(channels, 1, 3, 3).clone(),
                             persistent=False)
        self.channels = channels

    def forward(self, x):
        return F.conv2d(x, self.kernel, padding=1, groups=self.channels)


def conv(c_in: int, c_out: int, kernel: int, stride: int = 1, blur: bool = False) -> nn.Module:
    layer = nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False)
    return nn.Sequential(Blur(c_in), layer) if blur and stride > 1 else layer


class Bottleneck(nn.Module):
    def __init__(self, c_in: int, width: int, stride: int, blur: bool):
        super().__init__()
        c_out = width * 4
        self.conv1, self.bn1 = conv(c_in, width, 1), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = conv(width, width, 3, stride, blur), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = conv(width, c_out, 1), nn.BatchNorm2d(c_out)
        self.downsample = (nn.Sequential(conv(c_in, c_out, 1, stride, blur), nn.BatchNorm2d(c_out))
                           if stride != 1 or c_in != c_out else None)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


BLOCKS = (3, 4, 6, 3)


class ResNet50(nn.Module):
    """25,557,032 parameters with 1,000 classes."""

    def __init__(self, num_classes: int = 1000, blur: bool = False):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        c_in = 64
        for stage, count in enumerate(BLOCKS):
            width = 64 * 2 ** stage
            blocks = []
            for i in range(count):
                blocks.append(Bottleneck(c_in, width, 2 if (i == 0 and stage > 0) else 1, blur))
                c_in = width * 4
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Scores(nn.Module):
    """What is timed and exported: uint8 pixels in, class scores out (normalization, network, and the
    mirrored image's scores averaged in when `flip`)."""

    def __init__(self, net: nn.Module, flip: bool):
        super().__init__()
        self.net, self.flip = net, flip
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, pixels):
        x = (pixels.float() - self.mean) / self.std
        if not self.flip:
            return self.net(x)
        logits = self.net(torch.cat([x, x.flip(3)]))
        return (logits[:len(x)] + logits[len(x):]) / 2


def from_run_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An imagenet-resnet50-pytorch state dict (stem.*, layers.<k>.*, shortcut.*) in this layout."""
    starts = np.cumsum((0,) + BLOCKS)
    renamed = {}
    for key, value in state.items():
        head, _, rest = key.partition(".")
        if head == "stem":
            index, _, tail = rest.partition(".")
            key = {"0": "conv1", "1": "bn1"}[index] + "." + tail
        elif head == "layers":
            index, _, tail = rest.partition(".")
            stage = int(np.searchsorted(starts, int(index), side="right")) - 1
            key = f"layer{stage + 1}.{int(index) - starts[stage]}.{tail.replace('shortcut.', 'downsample.', 1)}"
        renamed[key] = value
    return renamed


# ----------------------------------------------------------------------------------------------
# The images: torchvision's evaluation transform, on uint8

def eval_pixels(source, resize: int, crop: int) -> np.ndarray:
    """Resize the short side to `resize` (bilinear, antialiased: Pillow's), keep the centre crop x crop:
    uint8 (3, crop, crop), as torchvision's Resize + CenterCrop do it (sizes truncated, offsets rounded).
    `source`: the image's path, or its file's bytes (what a timed inference request carries)."""
    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
        image = image.convert("RGB")        # grayscale and CMYK JPEGs exist in ImageNet
        w, h = image.size
        size = (resize, int(resize * h / w)) if w <= h else (int(resize * w / h), resize)
        image = image.resize(size, Image.Resampling.BILINEAR)
        left, top = int(round((size[0] - crop) / 2.0)), int(round((size[1] - crop) / 2.0))
        return np.asarray(image.crop((left, top, left + crop, top + crop))).transpose(2, 0, 1).copy()


class EvalImages(Sequence):
    """Images in a fixed order, each decoded on demand: uint8 tensors (3, crop, crop)."""

    def __init__(self, paths: Sequence[str], resize: int, crop: int):
        if crop > resize:
            raise ValueError(f"eval_crop {crop} is larger than eval_resize {resize}: the crop is taken from the resized image")
        self.paths, self.resize, self.crop = list(paths), resize, crop

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return torch.from_numpy(eval_pixels(self.paths[int(index)], self.resize, self.crop))


# ----------------------------------------------------------------------------------------------
# The entry the harness drives

class ResNet50CPUInference(InferenceReference, TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        self.blur, self.flip = cfg["blur"], cfg["flip_tta"]
        self.resize, self.crop = cfg["eval_resize"], cfg["eval_crop"]
        self.net = ResNet50(cfg["num_classes"], self.blur).eval()
        self.scorer = Scores(self.net, self.flip).eval()
        if ctx.trains:      # int8 calibration only: the training images, never trained on
            self.train_paths = train_samples(ctx.data_root)[0]
        elif not ctx.serves:      # a predictor (infer's timed server has the model only: each image comes with its request)
            self.val = EvalImages(val_files(ctx.data_root), self.resize, self.crop)

    def load(self, path):
        folder = Path(path)
        files = sorted(p for p in folder.iterdir() if p.is_file())
        if (folder / RUN_WEIGHTS).is_file() and (folder / RUN_CONFIG).is_file():
            # An imagenet-resnet50-pytorch run: its network and its evaluation, as its run scored it.
            run = json.loads((folder / RUN_CONFIG).read_text())
            self.blur, self.flip = bool(run.get("blur", True)), True
            self.resize, self.crop = int(run["eval_resize"]), int(run["eval_crop"])
            state = from_run_layout(torch.load(folder / RUN_WEIGHTS, map_location="cpu", weights_only=True))
        elif len(files) == 1:
            # A published state dict in torchvision's layout, evaluated with this entry's settings.
            state = torch.load(files[0], map_location="cpu", weights_only=True)
            if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
                state = state["state_dict"]
        else:
            raise UsageError(f"--model: expected one weights file (torchvision's ResNet-50 layout) or an "
                             f"imagenet-resnet50-pytorch run's model folder ({RUN_WEIGHTS} and {RUN_CONFIG}); got "
                             f"{', '.join(p.name for p in files) or 'an empty folder'}")
        if not isinstance(state, dict):
            raise UsageError(f"--model: {type(state).__name__} is not a state dict of ResNet-50 weights")
        self.net = ResNet50(self.ctx.config["num_classes"], self.blur)
        missing, unexpected = self.net.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise UsageError(f"--model: not ResNet-50 weights in torchvision's layout ({len(missing)} missing, e.g. "
                             f"{(missing or ['-'])[0]}; {len(unexpected)} unexpected, e.g. {(unexpected or ['-'])[0]})")
        self.net.eval()
        self.scorer = Scores(self.net, self.flip).eval()
        cfg = self.ctx.config
        if self.ctx.serves and (self.resize, self.crop) != (cfg["eval_resize"], cfg["eval_crop"]):
            # The images are prepared by a predictor that never has the model: they are this entry's size.
            raise UsageError(f"--model is a run evaluated at eval_resize {self.resize}, eval_crop {self.crop}, and the "
                             f"eval images are prepared without the model: give --set eval_resize={self.resize} "
                             f"--set eval_crop={self.crop}")
        if hasattr(self, "val"):
            self.val = EvalImages(self.val.paths, self.resize, self.crop)

    def evaluated(self):
        return self.scorer

    def predict(self):
        step = self.ctx.config["eval_batch_size"]
        return torch.cat([self.scores(torch.stack([self.val[j] for j in range(i, min(i + step, len(self.val)))]))
                          for i in range(0, len(self.val), step)]).numpy()

    def eval_inputs(self):
        return self.val

    def example_from_wire(self, example):
        # ImageNet's timed request carries the image file (harness.inference): its decode is in the latency
        if isinstance(example, bytes):
            return torch.from_numpy(eval_pixels(example, self.resize, self.crop))
        return super().example_from_wire(example)

    def calibration_inputs(self, n: int) -> np.ndarray:
        """`n` training images drawn with the run's seed, prepared as the eval images are."""
        rng = np.random.default_rng(self.ctx.seed)
        chosen = np.sort(rng.choice(len(self.train_paths), size=min(n, len(self.train_paths)), replace=False))
        return np.stack([eval_pixels(self.train_paths[i], self.resize, self.crop) for i in chosen])
