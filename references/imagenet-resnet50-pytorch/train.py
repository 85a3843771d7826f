"""ImageNet to 93% top-5 with ResNet-50: the network (skeleton; the recipe follows in this file).

The network is ResNet-50 v1.5 as torchvision defines it (the stride of a downsampling bottleneck
sits in its 3x3 convolution; 25,557,032 parameters), with BlurPool: every strided convolution first
low-pass filters its input with a fixed 3x3 binomial filter, so that downsampling aliases less. The
filter is a buffer, not a parameter: the count is ResNet-50's.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


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
