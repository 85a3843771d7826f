"""imagenet-resnet152-mxnet on CPU: the network (exactly torchvision's 60,192,808 trainable
parameters), the crops, the schedule, a falling loss, and a smoke run on the prepared tiny ImageNet
(conftest's `imagenet_root`) as the harness drives it: a trainer on the training folder only (setup
-> one short epoch -> save), then a predictor on the validation folder only (setup -> load ->
predict -> infer), and `dawnbench infer`'s code path.

MXNet 1.9.1 needs numpy 1.23.5, so this file runs in the reference's own environment
(`make test-mxnet`); in any environment without MXNet (the main test venv) it is skipped.
Images are tiny (32 px crops) so that ResNet-152 stays quick on a small CPU."""
from __future__ import annotations

import math

import numpy as np
import pytest

mx = pytest.importorskip("mxnet", reason="MXNet is not installed here: `make test-mxnet` runs this file in "
                                         ".venv/imagenet-resnet152-mxnet (mxnet 1.9.1, numpy 1.23.5)")

from conftest import check_inference_entry, check_roles_see_only_their_files, role_views  # noqa: E402

from common import imagenet_files  # noqa: E402
from harness import registry  # noqa: E402
from harness.reference import Context  # noqa: E402

# MXNet 1.9.1 looks up scipy.sparse.csr.csr_matrix on every mx.nd.array: scipy 1.13 warns each time.
pytestmark = pytest.mark.filterwarnings("ignore:Please import `csr_matrix`:DeprecationWarning")

NAME = "imagenet-resnet152-mxnet"
PARAMETERS = 60_192_808               # torchvision's resnet152; the Gluon model zoo's (conv biases) has 60,252,648
SMALL = {"image_size": 32, "eval_resize": 40, "eval_crop": 32, "batch_size": 4, "eval_batch_size": 4,
         "num_workers": 0, "epochs": 2, "warmup_epochs": 1}


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    import sys
    return sys.modules[spec.load_entry_class().__module__]


@pytest.fixture
def views(imagenet_root, tmp_path):
    return role_views("imagenet", imagenet_root, tmp_path)


def context(spec, data_root, role="train", **overrides):
    config = dict(spec.hyperparameters, **SMALL)
    config.update(overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, show_progress=False, role=role)


def make(spec, data_root, role="train", **overrides):
    ref = spec.load_entry_class()()
    ref.setup(context(spec, data_root, role, **overrides))
    return ref


# ------------------------------------------------------------------------------------ the network

def test_spec_and_parameter_count(spec, train):
    assert spec.task.name == "imagenet" and spec.framework == "mxnet" and spec.gpus
    assert spec.hyperparameters["num_classes"] == 1000 and spec.max_epochs == spec.hyperparameters["epochs"]
    net = train.resnet152()
    print(f"{NAME}: {train.count_parameters(net):,} trainable parameters")
    assert train.count_parameters(net) == PARAMETERS
    params = net.collect_params()
    convs = [p for name, p in params.items() if "conv" in name]
    assert convs and not any(name.endswith("bias") for name, p in params.items() if "conv" in name)
    # Batch norm's running statistics are parameters in Gluon, but not trainable ones.
    stats = [p for name, p in params.items() if name.endswith(("running_mean", "running_var"))]
    assert stats and all(p.grad_req == "null" for p in stats)
    assert sum(int(np.prod(p.shape)) for p in params.values()) > PARAMETERS
    net.initialize()
    assert net(mx.nd.zeros((2, 3, 32, 32))).shape == (2, 1000)


def test_blocks_and_strides(train):
    net = train.resnet152()
    blocks = [b for b in net.features if isinstance(b, train.Bottleneck)]
    assert len(blocks) == 3 + 8 + 36 + 3
    projected = [i for i, b in enumerate(blocks) if b.shortcut is not None]
    assert projected == [0, 3, 11, 47]                              # the first block of each stage
    net.initialize()
    x = mx.nd.zeros((1, 3, 64, 64))
    for layer in net.features:
        x = layer(x)
    assert x.shape == (1, 2048)                                     # 64 px / 32, pooled
    assert [b.body[3]._kwargs["stride"] for b in blocks if b.shortcut is not None] == [(1, 1), (2, 2), (2, 2), (2, 2)]


# ------------------------------------------------------------------------------------ data, schedule

def test_crops_and_eval_geometry(train):
    img = mx.nd.array(np.random.default_rng(0).integers(0, 256, (50, 80, 3)), dtype="uint8")
    rng = np.random.default_rng(1)
    crops = [train.random_resized_crop(img, 32, rng) for _ in range(5)]
    assert all(c.shape == (32, 32, 3) and c.dtype == np.uint8 for c in crops)
    same = [train.random_resized_crop(img, 32, np.random.default_rng(1)) for _ in range(2)]
    assert (same[0].asnumpy() == same[1].asnumpy()).all()            # the crop depends on the rng only
    assert train.eval_image(img, 40, 32).shape == (32, 32, 3)


def test_learning_rate_schedule(spec, train):
    cfg = dict(spec.hyperparameters)
    peak = cfg["lr"] * cfg["batch_size"] / 256
    steps = 10
    lrs = [train.learning_rate(s, steps, cfg) for s in range(cfg["epochs"] * steps + 5)]
    warm = cfg["warmup_epochs"] * steps
    assert lrs[0] == pytest.approx(peak / warm) and lrs[warm - 1] == pytest.approx(peak)
    assert max(lrs) == pytest.approx(peak) and lrs[-1] == 0 and all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1:]))


def test_file_lists_follow_the_canonical_order(spec, views):
    trainer = make(spec, views["train"])
    paths, labels, wnids = imagenet_files.train_samples(views["train"])
    assert len(wnids) == 4 and len(paths) == 14
    assert trainer.train_set.paths == paths and (trainer.train_set.labels == labels).all()
    predictor = make(spec, views["predict"], "predict")
    assert predictor.eval_inputs().paths == imagenet_files.val_files(views["predict"])
    assert not hasattr(predictor, "trainer") and not hasattr(trainer, "eval_set")


# ------------------------------------------------------------------------------------ training

def test_loss_falls_on_a_repeated_batch(spec, views):
    mx.random.seed(0)
    ref = make(spec, views["train"])
    x, y = next(iter(mx.gluon.data.DataLoader(ref.train_set, batch_size=4)))
    assert x.shape == (4, 32, 32, 3) and x.dtype == np.uint8
    ref.trainer.set_learning_rate(0.05)
    losses = []
    for _ in range(6):
        with mx.autograd.record():
            loss = ref._loss(ref.net(ref_input(ref, x)), y)
        loss.backward()
        ref.trainer.step(4)
        losses.append(float(loss.mean().asscalar()))
    assert all(math.isfinite(v) for v in losses)
    assert losses[0] > 6.0 and losses[-1] < 0.7 * losses[0], losses     # from about ln 1000


def ref_input(ref, x):
    import sys
    return sys.modules[type(ref).__module__].to_input(x)


def test_cpu_path_resolves_auto(spec, views):
    if mx.context.num_gpus():
        pytest.skip("a GPU is present: 'auto' means AMP and the device kvstore")
    ref = make(spec, views["train"])
    assert ref.devices == [mx.cpu()] and not ref.amp and ref.trainer._kvstore_params["kvstore"] == "local"
    assert not make(spec, views["train"], amp="true").amp        # never float16 on the CPU


def test_user_mistakes_are_one_line(spec, views):
    import dataclasses
    with pytest.raises(RuntimeError, match="one process") as caught:
        spec.load_entry_class()().setup(dataclasses.replace(context(spec, views["train"]), world_size=2))
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------- end to end, CPU

def test_reference_smoke(spec, views, tmp_path):
    """The harness's order of calls, each role on its own view of the prepared fixture."""
    trainer = make(spec, views["train"])
    stats = trainer.train_epoch(1)
    n_train = len(imagenet_files.train_samples(views["train"])[0])
    assert math.isfinite(stats["loss"]) and stats["samples"] == n_train // 4 * 4 and stats["lr"] > 0
    trainer.synchronize()
    trainer.save(tmp_path / "model")
    assert (tmp_path / "model" / "model.params").is_file()

    predictor = make(spec, views["predict"], "predict")
    predictor.load(tmp_path / "model")
    # Weights and batch-norm statistics, by structural name (each instance has its own prefix).
    trained = trainer.net._collect_params_with_prefix()
    loaded = predictor.net._collect_params_with_prefix()
    assert loaded.keys() == trained.keys()
    for name, p in loaded.items():
        np.testing.assert_array_equal(p.data().asnumpy(), trained[name].data().asnumpy())
    scores = predictor.predict()
    n_val = len(imagenet_files.val_files(views["predict"]))
    assert isinstance(scores, np.ndarray) and scores.shape == (n_val, 1000) and scores.dtype == np.float32
    assert np.isfinite(scores).all() and np.allclose(scores.sum(1), 1, atol=1e-4)
    inputs = predictor.eval_inputs()
    assert len(inputs) == n_val
    for i in range(3):
        one = predictor.infer(inputs[i])
        assert one.shape == (1000,) and one.dtype == np.float32
        np.testing.assert_allclose(one, scores[i], rtol=1e-4, atol=1e-6)


def test_roles_see_only_their_files(spec, views):
    check_roles_see_only_their_files(spec.load_entry_class(), lambda role, root: context(spec, root, role), views)


def test_inference_entry(spec, imagenet_root, views, tmp_path):
    """`dawnbench infer`'s code path on a saved model."""
    trainer = make(spec, views["train"])
    trainer.train_epoch(1)
    trainer.save(tmp_path / "model")
    predictor = make(spec, views["predict"], "predict")
    predictor.load(tmp_path / "model")
    check_inference_entry(spec, tmp_path / "model", predictor.ctx_.config, imagenet_root, tmp_path / "infer",
                          predictor.predict(), items=3)
