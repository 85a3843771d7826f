"""imagenet-resnet50-pytorch on a tiny prepared ImageNet, on CPU: the network (parameter count,
BlurPool placement), the schedules, the Pillow data pipeline (crops, eval geometry, class and file
order), a falling loss, and a smoke run as a run drives it: a trainer on the training folder only
(setup -> one epoch -> save), then a predictor on the validation folder only (setup -> load ->
predict -> infer). The DALI pipelines run (on DALI's CPU backend) where nvidia.dali imports.

The images are small (crops of 32 to 64 px) so that the full ResNet-50 stays fast on a small CPU."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from conftest import check_inference_entry, check_roles_see_only_their_files, role_views
from PIL import Image

from common import imagenet_files
from harness import datasets, registry
from harness.reference import Context

NAME = "imagenet-resnet50-pytorch"
PARAMETERS = 25_557_032
# Train at 32 px growing to 64 px from epoch 2 to 3; evaluate a 32 px centre crop of a 40 px resize.
SMALL = {"image_size_start": 32, "image_size_end": 64, "resize_start_epoch": 1, "resize_end_epoch": 3,
         "eval_resize": 40, "eval_crop": 32, "batch_size": 4, "eval_batch_size": 4, "num_workers": 0}
# Real WNIDs, written in an order that is not sorted: the class index is the sorted position.
WNIDS = ["n01484850", "n01440764", "n01443537"]
PER_CLASS = 4
VAL = 5


# ------------------------------------------------------------------------------ a tiny ImageNet

def jpeg(path, rng, size, mode="RGB"):
    """A random JPEG of `size` (width, height) in `mode` ("RGB" or "L")."""
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(path, quality=90)


def write_prepared_imagenet(root):
    """What `dawnbench data prepare imagenet` leaves, in miniature: train/<wnid>/<wnid>_<n>.JPEG for
    3 classes x 4 images and a flat val/ of 5 images, of assorted sizes, one of each grayscale."""
    rng = np.random.default_rng(0)
    base = root / "imagenet"
    for c, wnid in enumerate(WNIDS):
        folder = base / "train" / wnid
        folder.mkdir(parents=True)
        for n in range(PER_CLASS):
            size = (48 + 16 * n, 40 + 8 * c)
            jpeg(folder / f"{wnid}_{n + 1}.JPEG", rng, size, "L" if (c, n) == (1, 2) else "RGB")
    (base / "val").mkdir(parents=True)
    for i in reversed(range(VAL)):                      # written out of order: the order is the names'
        jpeg(base / "val" / f"ILSVRC2012_val_{i + 1:08d}.JPEG", rng, (60 + 4 * i, 50), "L" if i == 3 else "RGB")
    return root


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    """{"root": the whole tiny ImageNet, "train"/"predict": a data root holding only that role's
    folder (symlinks), as the harness's views give them}."""
    tmp = tmp_path_factory.mktemp("imagenet")
    root = write_prepared_imagenet(tmp / "data")
    views = {"root": root}
    for role, split in (("train", "train"), ("predict", "val")):
        view = tmp / f"view-{role}" / "imagenet"
        view.mkdir(parents=True)
        (view / split).symlink_to(root / "imagenet" / split)
        views[role] = view.parent
    return views


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    """The reference's module (train.py)."""
    import sys
    return sys.modules[spec.load_entry_class().__module__]


def context(spec, data_root, role="train", **overrides):
    config = dict(spec.hyperparameters, **SMALL)
    config.update(overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, show_progress=False, role=role)


def make(spec, imagenet, role="train", **overrides):
    ref = spec.load_entry_class()()
    ref.setup(context(spec, imagenet[role], role, **overrides))
    return ref


# ------------------------------------------------------------------------------------ the network

def test_spec_and_parameter_count(spec, train):
    assert spec.task.name == "imagenet" and spec.framework == "pytorch" and spec.gpus
    cfg = spec.hyperparameters
    assert cfg["num_classes"] == 1000 and cfg["epochs"] == 56 and spec.max_epochs == 56
    assert (cfg["compile"], cfg["bf16"], cfg["channels_last"], cfg["infer_compile"], cfg["data_loader"]) == \
        ("auto",) * 5
    net = train.resnet50(num_classes=1000, blur=True)
    print(f"{NAME}: {train.count_parameters(net):,} trainable parameters")
    assert train.count_parameters(net) == sum(p.numel() for p in net.parameters()) == PARAMETERS
    assert train.count_parameters(train.resnet50(blur=False)) == PARAMETERS      # the filters are buffers
    with torch.no_grad():
        assert net.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 1000)


def test_blurpool_sits_exactly_on_the_strided_convolutions(train):
    net = train.resnet50()
    blurred, strided = [], []
    for module in net.modules():
        children = list(module.children())
        for before, after in zip(children, children[1:]):
            if isinstance(before, train.Blur):
                assert isinstance(after, nn.Conv2d) and after.stride == (2, 2), after
                assert before.channels == after.in_channels
                blurred.append(after)
        strided += [m for m in children if isinstance(m, nn.Conv2d) and m.stride != (1, 1)]
    stem = net.stem[0]
    # Every strided convolution but the 3-channel stem's (as in ffcv: a low pass of raw pixels is
    # only a blurrier input): stages 2-4, each in its 3x3 convolution and its shortcut.
    assert {id(m) for m in blurred} == {id(m) for m in strided if m is not stem} and len(blurred) == 6
    assert sum(isinstance(m, train.Blur) for m in net.modules()) == 6
    assert not any(isinstance(m, train.Blur) for m in train.resnet50(blur=False).modules())
    kernel = net.layers[3].conv2[0].kernel
    assert kernel.shape == (128, 1, 3, 3) and torch.allclose(kernel.sum((1, 2, 3)), torch.ones(128))
    assert not any("kernel" in k for k in net.state_dict())                # a fixed filter: never saved


# ------------------------------------------------------------------------------------ schedules

def test_image_size_and_learning_rate_schedules(spec, train, imagenet):
    cfg = spec.hyperparameters
    sizes = [train.image_size(epoch, cfg) for epoch in range(1, 57)]
    assert sizes == [160] * 45 + [192] * 11                     # ffcv's 56-epoch config: 160 px, then 192
    assert all(s % 32 == 0 for s in sizes)
    small = dict(cfg, image_size_start=32, image_size_end=96, resize_start_epoch=2, resize_end_epoch=6)
    assert [train.image_size(e, small) for e in range(1, 8)] == [32, 32, 64, 64, 96, 96, 96]   # 48 and 80 round up
    assert train.peak_lr(cfg) == pytest.approx(1.7 * 1024 / 4096)

    ref = make(spec, imagenet, epochs=4, warmup_epochs=1)       # 12 images, batch 4: 3 steps an epoch
    peak = train.peak_lr(ref.ctx.config)
    assert ref.steps_per_epoch == 3
    assert ref.lr_at(0) == pytest.approx(peak * 1e-4)
    assert ref.lr_at(3) == pytest.approx(peak)                  # the end of the warm-up epoch
    assert ref.lr_at(12) == 0.0 and ref.lr_at(20) == 0.0        # the end of the schedule, and past it
    assert ref.lr_at(1) < ref.lr_at(2) < ref.lr_at(3) > ref.lr_at(6) > ref.lr_at(9)


def test_rank_batches_split_every_global_batch(train):
    cfg = {"batch_size": 8}
    whole = train.rank_batches(30, cfg, seed=1, epoch=2, rank=0, world_size=1)
    assert len(whole) == 3 and all(len(b) == 8 for b in whole)               # 30 // 8: the rest is dropped
    halves = [train.rank_batches(30, cfg, 1, 2, rank, 2) for rank in (0, 1)]
    assert all(len(h) == 3 and all(len(b) == 4 for b in h) for h in halves)
    for step in range(3):
        assert np.array_equal(np.concatenate([halves[0][step], halves[1][step]]), whole[step])
    assert len(set(np.concatenate(whole).tolist())) == 24
    other = train.rank_batches(30, cfg, 1, 3, 0, 1)
    assert not np.array_equal(np.concatenate(other), np.concatenate(whole))   # a new order every epoch


# ------------------------------------------------------------------------------------ data

def test_file_lists_class_and_canonical_order(imagenet):
    paths, labels, wnids = imagenet_files.train_samples(imagenet["train"])
    assert wnids == sorted(WNIDS) and len(paths) == len(labels) == 12 and labels.dtype == np.int64
    for path, label in zip(paths, labels):
        assert path.split("/")[-2] == wnids[label]            # the index is the sorted WNID position
    assert labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    files = imagenet_files.val_files(imagenet["predict"])
    names = [p.rsplit("/", 1)[1] for p in files]
    assert names == [f"ILSVRC2012_val_{i:08d}.JPEG" for i in range(1, VAL + 1)]
    with pytest.raises(datasets.DatasetError, match="not found in"):
        imagenet_files.val_files(imagenet["train"])
    with pytest.raises(datasets.DatasetError, match="not found in"):
        imagenet_files.train_samples(imagenet["predict"])


def test_random_resized_crop(train):
    rng = np.random.default_rng(0)
    for width, height in [(500, 375), (64, 48), (1000, 10), (10, 1000), (1, 1)]:
        for _ in range(200):
            left, top, w, h = train.random_crop_box(width, height, rng)
            assert 0 <= left and 0 <= top and 0 < w and 0 < h and left + w <= width and top + h <= height
    areas, aspects = [], []
    for _ in range(2000):
        _, _, w, h = train.random_crop_box(500, 375, rng)
        areas.append(w * h / (500 * 375))
        aspects.append(w / h)
    assert 0.07 < min(areas) < 0.15 and max(areas) <= 1.0 and 0.74 < min(aspects) and max(aspects) < 1.34
    # A strip: no random crop fits its aspect range, so the centred fallback keeps the allowed ratio.
    assert train.random_crop_box(1000, 10, rng) == (493, 0, 13, 10)


def test_train_and_eval_images(train, imagenet, tmp_path):
    paths, labels, _ = imagenet_files.train_samples(imagenet["train"])
    images = train.TrainImages(paths, labels, seed=0)
    x, y = images[(5, 1, 48)]
    assert x.shape == (3, 48, 48) and x.dtype == torch.uint8 and y == 1
    assert torch.equal(images[(5, 1, 48)][0], x)                       # the key fixes the crop and flip
    assert not torch.equal(images[(5, 2, 48)][0], x)                   # another epoch, another crop
    gray = paths.index(next(p for p in paths if p.endswith(f"{WNIDS[1]}_3.JPEG")))
    assert Image.open(paths[gray]).mode == "L"
    g, _ = images[(gray, 1, 32)]
    assert g.shape == (3, 32, 32) and torch.equal(g[0], g[1]) and torch.equal(g[1], g[2])

    # Eval geometry: resize the short side to `resize`, keep the centre crop x crop.
    assert train.center_crop_box(80, 40, resize=40, crop=32) == (24.0, 4.0, 32.0, 32.0)
    assert train.center_crop_box(300, 600, resize=292, crop=256) == pytest.approx((18.49, 18.49 + 150, 263.01, 263.01),
                                                                                   abs=0.01)
    # A bar image whose columns say where they came from: the centre survives, the sides do not.
    columns = np.repeat(np.repeat(np.arange(80, dtype=np.uint8)[None, :] * 3, 40, axis=0)[:, :, None], 3, axis=2)
    Image.fromarray(columns).save(tmp_path / "bars.png")
    out = train.EvalImages([str(tmp_path / "bars.png")], resize=40, crop=32)[0]
    assert out.shape == (3, 32, 32) and out.dtype == torch.uint8
    row = out[0, 16].numpy() / 3.0
    assert abs(row[0] - 24.5) < 1.0 and abs(row[-1] - 55.5) < 1.0 and np.all(np.diff(row) > 0)
    evals = train.EvalImages(imagenet_files.val_files(imagenet["predict"]), resize=40, crop=32)
    assert len(evals) == VAL and all(evals[i].shape == (3, 32, 32) for i in range(VAL))
    with pytest.raises(ValueError, match="larger than eval_resize"):
        train.EvalImages([], resize=32, crop=40)


def test_user_mistakes_are_one_line(spec, imagenet):
    with pytest.raises(ValueError, match="not divisible by 3 processes") as caught:
        spec.load_entry_class()().setup(dataclasses.replace(context(spec, imagenet["train"]), world_size=3))
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="larger than the 12 training images"):
        make(spec, imagenet, batch_size=16)
    with pytest.raises(ValueError, match="data_loader 'fast'"):
        make(spec, imagenet, data_loader="fast")
    with pytest.raises(ValueError, match="switch value"):
        make(spec, imagenet, bf16="maybe")


# ------------------------------------------------------------------------------------ training

def test_loss_falls_on_a_repeated_batch(spec, imagenet):
    torch.manual_seed(0)
    ref = make(spec, imagenet)
    x, y = next(iter(ref.loader.epoch(1)))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.uint8 and y.dtype == torch.int64
    for group in ref.opt.param_groups:
        group["lr"] = 0.05
    losses = [ref.train_step(x, y).item() for _ in range(6)]
    assert all(math.isfinite(v) for v in losses)
    assert losses[0] > 6.0 and losses[-1] < 0.7 * losses[0], losses      # from about ln 1000


def test_auto_switches_resolve_off_on_cpu(spec, train, imagenet, monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert train.resolve_switch("auto", cpu) is False and train.resolve_switch("auto", cuda) is True
    assert train.resolve_switch("true", cpu) is True and train.resolve_switch(False, cuda) is False
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: 'auto' means on")
    ref = make(spec, imagenet)
    assert (ref.use_compile, ref.use_bf16, ref.memory_format, ref.data_loader) == \
        (False, False, torch.contiguous_format, "pil")
    assert ref.model is ref.net                                          # neither compiled nor wrapped
    assert ref.train_precision() == ("fp32", 'bf16 = "auto" on cpu: float32')      # what the run records

    # infer_compile: "auto" is eager on the CPU; "true" compiles the network infer() uses, once.
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda net, **kw: compiled.append((net, kw)) or net)
    for setting, expect in (("auto", 0), ("false", 0), ("true", 1)):
        compiled.clear()
        predictor = make(spec, imagenet, "predict", infer_compile=setting)
        inputs = predictor.eval_inputs()
        predictor.infer(inputs[0])
        predictor.infer(inputs[1])
        assert len(compiled) == expect and predictor.infer_net is predictor.net
        if expect:
            assert compiled[0] == (predictor.net, {"dynamic": False})


# ------------------------------------------------------------------------------- end to end, CPU

@pytest.mark.recipe_run
def test_reference_smoke(spec, imagenet, tmp_path):
    torch.manual_seed(0)
    trainer = make(spec, imagenet)
    assert not hasattr(trainer, "val")
    stats = trainer.train_epoch(1)
    assert math.isfinite(stats["loss"]) and stats["samples"] == 12 and stats["lr"] > 0
    assert stats["image_size"] == 32
    assert trainer.train_epoch(2)["image_size"] == 64                     # progressive resizing (48 rounds up)
    trainer.save(tmp_path / "model")
    saved = torch.load(tmp_path / "model" / "model.pt")
    assert saved.keys() == trainer.net.state_dict().keys()
    assert all(torch.equal(saved[k], v) for k, v in trainer.net.state_dict().items())

    predictor = make(spec, imagenet, "predict")
    assert not hasattr(predictor, "loader") and not hasattr(predictor, "opt")
    predictor.load(tmp_path / "model")
    scores = predictor.predict()
    assert isinstance(scores, np.ndarray) and scores.shape == (VAL, 1000) and scores.dtype == np.float32
    assert np.isfinite(scores).all()
    inputs = predictor.eval_inputs()
    assert len(inputs) == VAL
    # Canonical order: row i is the i-th file name in sorted order, with flip test-time augmentation.
    written = sorted(p.name for p in (imagenet["root"] / "imagenet" / "val").iterdir())
    assert [p.rsplit("/", 1)[1] for p in inputs.paths] == written
    for i in range(VAL):
        one = predictor.infer(inputs[i])
        assert one.shape == (1000,) and one.dtype == np.float32
        np.testing.assert_allclose(one, scores[i], rtol=1e-4, atol=1e-4)
    # The trainer's own network, on the same images with their mirrors: the predictor scores the
    # weights the trainer saved.
    trainer.net.eval()
    x = trainer.to_input(torch.stack([inputs[i] for i in range(VAL)]))
    with torch.no_grad():
        by_trainer = ((trainer.net(x) + trainer.net(x.flip(3))) / 2).numpy()
    np.testing.assert_allclose(scores, by_trainer, rtol=1e-4, atol=1e-4)


def test_roles_see_only_their_files(spec, imagenet):
    check_roles_see_only_their_files(spec.load_entry_class(), lambda role, root: context(spec, root, role), imagenet)


def test_inference_entry(spec, imagenet_root, tmp_path):
    """`dawnbench infer`'s code path on a saved model, on the fixture `prepare` made from the
    official formats (conftest's `imagenet_root`) and the harness's views of it."""
    root = imagenet_root
    views = role_views("imagenet", root, tmp_path)
    trainer = make(spec, views)
    trainer.train_epoch(1)
    trainer.save(tmp_path / "model")
    predictor = make(spec, views, "predict")
    predictor.load(tmp_path / "model")
    check_inference_entry(spec, tmp_path / "model", predictor.ctx.config, root, tmp_path / "infer",
                          predictor.predict(), items=3)


# ------------------------------------------------------------------------------- DALI (CPU backend)

def test_dali_pipelines(spec, train, imagenet):
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        pytest.skip("NVIDIA DALI is not installed (it is in the GPU image only): "
                    "pip install nvidia-dali-cuda130==2.4.0 to run this test on DALI's CPU backend")
    torch.manual_seed(0)
    trainer = make(spec, imagenet, data_loader="dali", dali_threads=1)
    assert trainer.data_loader == "dali"
    batches = list(trainer.loader.epoch(1))
    assert len(batches) == 3
    for x, y in batches:
        assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (4,) and y.dtype == torch.int64
        assert abs(float(x.mean())) < 3 and 0.2 < float(x.std()) < 3                  # normalized
    labels = torch.cat([y for _, y in batches]).sort().values
    assert labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4                             # each image once an epoch
    x, _ = next(iter(trainer.loader.epoch(2)))
    assert x.shape == (4, 3, 64, 64)                                                   # the next epoch's size
    assert math.isfinite(trainer.train_step(*batches[0]).item())                       # DALI's batches train
    stream = train.TrainStream(*imagenet_files.train_samples(imagenet["train"])[:2], trainer.ctx.config, 0, 1, 2)
    jpegs, labels, sizes = stream()
    assert len(jpegs) == len(labels) == len(sizes) == 2 and sizes[0] == 32 and stream.epoch == 1

    predictor = make(spec, imagenet, "predict", data_loader="dali", dali_threads=1, eval_batch_size=2)
    scores = predictor.predict()                                                       # 3 batches: 2, 2, 1
    assert scores.shape == (VAL, 1000) and np.isfinite(scores).all()
    np.testing.assert_allclose(predictor.predict(), scores, rtol=1e-5, atol=1e-5)     # the next pass: the same
    # DALI's eval images are Pillow's, up to the resampling filters.
    eval_batches = train.dali_batches(train.dali_eval_pipeline(train.EvalStream(predictor.val.paths, VAL),
                                                               VAL, torch.device("cpu"), predictor.ctx.config,
                                                               False, False), ["images"])
    by_dali = next(eval_batches)["images"]
    by_pillow = torch.stack([predictor.to_input(predictor.val[i].unsqueeze(0))[0] for i in range(VAL)])
    assert by_dali.shape == by_pillow.shape == (VAL, 3, 32, 32)
    assert float((by_dali - by_pillow).abs().mean()) < 0.15
