"""The MXNet half of tests/test_anchor_imagenet_resnet152.py's pair test, run by MXNet's interpreter
(.venv/imagenet-resnet152-mxnet: numpy 1.23.5, no TensorFlow) on a folder the test wrote:

    weights.npz   the Keras ResNet-152's weights in the order the Gluon one registers its parameters,
                  already in Gluon's layouts (arr_0, arr_1, ...)
    input.npy     the normalized images, NCHW

It loads them into imagenet-resnet152-mxnet's own network (train.py's resnet152), scores the images in
inference mode, and writes logits.npy and facts.json (how many parameters it set, and the reference's
normalization constants, for the test to compare with the Keras reference's)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import mxnet as mx
import numpy as np

from harness import registry


def main(folder: Path) -> None:
    spec = registry.load_spec("imagenet-resnet152-mxnet")
    train = sys.modules[spec.load_entry_class().__module__]
    net = train.resnet152()
    net.initialize()
    arrays = np.load(folder / "weights.npz")
    params = list(net.collect_params().values())
    if len(params) != len(arrays.files):
        raise SystemExit(f"{len(arrays.files)} arrays for {len(params)} parameters")
    for i, param in enumerate(params):
        value = arrays[f"arr_{i}"]
        if value.shape != param.shape:
            raise SystemExit(f"{param.name}: shape {param.shape}, given {value.shape}")
        param.set_data(mx.nd.array(value.astype(np.float32)))
    logits = net(mx.nd.array(np.load(folder / "input.npy"))).asnumpy()     # no autograd: BN's running statistics
    np.save(folder / "logits.npy", logits)
    (folder / "facts.json").write_text(json.dumps({"parameters": len(params), "mean": list(train.MEAN),
                                                   "std": list(train.STD)}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
