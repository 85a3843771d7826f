"""imagenet-resnet152-mxnet on CPU: `dawnbench data prepare imagenet --format recordio`'s packer
(lossless, labels, order), the network (exactly torchvision's 60,192,808 trainable parameters), the
schedule, a falling loss, and a smoke run on the tiny ImageNet prepared and packed as RecordIO
(conftest's `imagenet_root`, then the packer) as the harness drives it: a trainer on the training
records only (setup -> one short epoch -> save), then a predictor on the validation records only
(setup -> load -> predict -> infer), and `dawnbench infer`'s code path.

MXNet 1.9.1 needs numpy 1.23.5, so this file runs in the reference's own environment
(`make test-mxnet`); in any environment without MXNet (the main test venv) it is skipped.
Images are tiny (32 px crops) so that ResNet-152 stays quick on a small CPU."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mxnet", reason="MXNet is not installed here: `make test-mxnet` runs this file in "
                                         ".venv/imagenet-resnet152-mxnet (mxnet 1.9.1, numpy 1.23.5)")

from conftest import check_inference_entry, check_roles_see_only_their_files, role_views  # noqa: E402

from dawnbench import pack_recordio, prepare_imagenet  # noqa: E402
from harness import datasets, registry, runner, verify_run  # noqa: E402
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
def packed_root(imagenet_root):
    """conftest's prepared tiny ImageNet, packed as `data prepare --format recordio` packs it: the
    packer run as a subprocess by this interpreter (MXNet's), the record and manifest rewritten."""
    prepare_imagenet.pack(imagenet_root / "imagenet", "recordio", sys.executable)
    return imagenet_root


@pytest.fixture
def views(packed_root, tmp_path):
    return role_views("imagenet", packed_root, tmp_path)


def read_records(folder, split):
    reader = mx.recordio.MXIndexedRecordIO(str(folder / f"{split}.idx"), str(folder / f"{split}.rec"), "r")
    try:
        return [mx.recordio.unpack(reader.read_idx(key)) for key in reader.keys]
    finally:
        reader.close()


# ------------------------------------------------------------------------------------ the packer

def test_packing_is_lossless_labelled_in_train_and_unlabelled_in_order_in_val(packed_root):
    target = packed_root / "imagenet"
    summary = json.loads((target / "dawnbench-prepared.json").read_text())["packed"]["recordio"]
    synsets = (target / "synsets.txt").read_text().split()
    train = read_records(target / "recordio" / "train", "train")
    names = (target / "recordio" / "train" / pack_recordio.NAMES).read_text().splitlines()
    assert len(train) == len(names) == summary["counts"]["train"] == 14
    assert sorted(names) == sorted(p.relative_to(target).as_posix() for p in (target / "train").rglob("*.JPEG"))
    assert names != sorted(names) and summary["shuffle_seed"] == pack_recordio.SHUFFLE_SEED   # shuffled, reproducibly
    for position, ((header, payload), name) in enumerate(zip(train, names)):
        assert payload == (target / name).read_bytes()                   # the prepared JPEG's bytes
        assert header.id == position and header.label == synsets.index(name.split("/")[1])
    val = read_records(target / "recordio" / "val", "val")
    val_names = (target / "recordio" / "val" / pack_recordio.NAMES).read_text().splitlines()
    assert val_names == sorted(val_names) == [f"val/{p.name}" for p in sorted((target / "val").iterdir())]
    assert "files" not in summary       # the name lists live beside the records, not in the record
    assert len(val) == 12
    for position, ((header, payload), name) in enumerate(zip(val, val_names)):
        assert payload == (target / name).read_bytes() and header.id == position and header.label == -1
    # The manifest was rewritten after the packing: the packed files are checked with the rest.
    assert datasets.verify_prepared(target, full=True)["count"] == 14 + 12 + 3 + 6


def test_the_packer_refuses_a_folder_that_is_not_prepared_in_one_line(tmp_path):
    process = subprocess.run([sys.executable, "-m", "dawnbench.pack_recordio", str(tmp_path)],
                             capture_output=True, text=True)
    assert process.returncode == 2 and process.stdout == ""
    assert process.stderr.startswith("dawnbench: error: ") and process.stderr.count("\n") == 1
    assert "dawnbench data prepare imagenet" in process.stderr
    assert not (tmp_path / "recordio").exists() and not (tmp_path / ".recordio.partial").exists()


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

def test_eval_records_and_infer_decode_alike(spec, train, views):
    """predict reads the val records through ImageRecordIter, infer decodes one JPEG itself: the
    same pixels go in (OpenCV's resize and crop, the same normalisation)."""
    cfg = dict(spec.hyperparameters, **SMALL)
    folder = views["predict"] / "imagenet" / "recordio" / "val"
    rec, idx = str(folder / "val.rec"), str(folder / "val.idx")
    batch = next(iter(train.eval_records(rec, idx, cfg)))
    assert batch.data[0].shape == (4, 3, 32, 32) and batch.data[0].dtype == np.float32
    assert (batch.label[0].asnumpy() == -1).all()                           # no label in a val record
    records = train.Records(rec, idx)
    for i in range(4):
        one = train.eval_image(records[i], cfg["eval_resize"], cfg["eval_crop"])
        np.testing.assert_allclose(one.asnumpy(), batch.data[0][i].asnumpy(), atol=1e-3)


def test_learning_rate_schedule(spec, train):
    cfg = dict(spec.hyperparameters)
    peak = cfg["lr"] * cfg["batch_size"] / 256
    steps = 10
    lrs = [train.learning_rate(s, steps, cfg) for s in range(cfg["epochs"] * steps + 5)]
    warm = cfg["warmup_epochs"] * steps
    assert lrs[0] == pytest.approx(peak / warm) and lrs[warm - 1] == pytest.approx(peak)
    assert max(lrs) == pytest.approx(peak) and lrs[-1] == 0 and all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1:]))


def test_each_role_reads_its_own_records(spec, views):
    trainer = make(spec, views["train"])
    assert trainer.train_iter.provide_data[0].shape == (4, 3, 32, 32)
    assert trainer.kvstore.num_workers == 1 and trainer.steps_per_epoch == 4      # ceil(14 / 4)
    predictor = make(spec, views["predict"], "predict")
    assert len(predictor.eval_inputs()) == 12
    assert not hasattr(predictor, "trainer") and not hasattr(trainer, "eval_iter")


def test_without_records_setup_says_how_to_pack_them(spec, imagenet_root, tmp_path):
    unpacked = role_views("imagenet", imagenet_root, tmp_path / "unpacked")
    for role in ("train", "predict"):
        with pytest.raises(datasets.DatasetError) as caught:
            make(spec, unpacked[role], role)
        assert "\n" not in str(caught.value)
        assert "dawnbench data prepare imagenet --from DIR --format recordio" in str(caught.value)


# ------------------------------------------------------------------------------------ training

def test_loss_falls_on_a_repeated_batch(spec, views):
    mx.random.seed(0)
    ref = make(spec, views["train"])
    batch = next(iter(ref.train_iter))
    x, y = batch.data[0].as_in_context(mx.cpu()), batch.label[0].as_in_context(mx.cpu())   # from pinned memory
    assert x.shape == (4, 3, 32, 32) and x.dtype == np.float32 and abs(float(x.mean().asscalar())) < 2
    assert set(y.asnumpy().tolist()) <= {0.0, 1.0, 2.0, 3.0}                # the fixture's 4 classes
    ref.trainer.set_learning_rate(0.05)
    losses = []
    for _ in range(6):
        with mx.autograd.record():
            loss = ref._loss(ref.net(x), y)
        loss.backward()
        ref.trainer.step(4)
        losses.append(float(loss.mean().asscalar()))
    assert all(math.isfinite(v) for v in losses)
    assert losses[0] > 6.0 and losses[-1] < 0.7 * losses[0], losses     # from about ln 1000


def test_cpu_path_resolves_auto(spec, views):
    if mx.context.num_gpus():
        pytest.skip("a GPU is present: 'auto' means AMP and the device kvstore")
    ref = make(spec, views["train"])
    assert ref.devices == [mx.cpu()] and not ref.amp and ref.kvstore.type == "local"
    assert ref.trainer._kvstore_params["kvstore"] is ref.kvstore
    assert not make(spec, views["train"], amp="true").amp        # never float16 on the CPU


def test_kvstore_auto(train):
    assert train.kvstore_type("auto", 0, 1) == "local" and train.kvstore_type("auto", 8, 1) == "device"
    assert train.kvstore_type("auto", 8, 2) == "dist_sync" and train.kvstore_type("nccl", 8, 1) == "nccl"


def test_user_mistakes_are_one_line(spec, views, monkeypatch):
    import dataclasses

    from harness.errors import UsageError
    monkeypatch.delenv("DMLC_ROLE", raising=False)
    with pytest.raises(UsageError, match="parameter servers") as caught:
        spec.load_entry_class()().setup(dataclasses.replace(context(spec, views["train"]), world_size=2))
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------- end to end, CPU

def test_reference_smoke(spec, views, tmp_path):
    """The harness's order of calls, each role on its own view of the prepared fixture."""
    trainer = make(spec, views["train"])
    stats = trainer.train_epoch(1)
    # 14 records in batches of 4: the last topped up with 2 that open the next pass, not counted here
    assert math.isfinite(stats["loss"]) and stats["samples"] == 14 and stats["lr"] > 0 and trainer.step == 4
    stats = trainer.train_epoch(2)      # after a reset: those 2, then 3 batches
    assert math.isfinite(stats["loss"]) and 0 < stats["samples"] <= 14 and trainer.step > 4
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
    n_val = 12
    assert isinstance(scores, np.ndarray) and scores.shape == (n_val, 1000) and scores.dtype == np.float32
    assert np.isfinite(scores).all() and np.allclose(scores.sum(1), 1, atol=1e-4)
    inputs = predictor.eval_inputs()
    assert len(inputs) == n_val
    for i in range(n_val):        # infer's record i is predict's row i: the harness's order
        one = predictor.infer(inputs[i])
        assert one.shape == (1000,) and one.dtype == np.float32
        np.testing.assert_allclose(one, scores[i], rtol=1e-3, atol=1e-5)
    np.testing.assert_array_equal(predictor.predict(), scores)          # a second predict: the same


def test_roles_see_only_their_files(spec, views):
    check_roles_see_only_their_files(spec.load_entry_class(), lambda role, root: context(spec, root, role), views)


def test_inference_entry(spec, packed_root, views, tmp_path):
    """`dawnbench infer`'s code path on a saved model."""
    trainer = make(spec, views["train"])
    trainer.train_epoch(1)
    trainer.save(tmp_path / "model")
    predictor = make(spec, views["predict"], "predict")
    predictor.load(tmp_path / "model")
    check_inference_entry(spec, tmp_path / "model", predictor.ctx_.config, packed_root, tmp_path / "infer",
                          predictor.predict(), items=3)


def test_a_harness_run_on_the_packed_fixture(spec, packed_root, tmp_path):
    """The whole chain: the runner checks the manifest (packed files included), binds each worker
    its folders (recordio/train to the trainer, recordio/val to the predictor, sandboxed where
    bubblewrap is), scores the predictions against its own labels, and the run verifies offline."""
    result = runner.run(spec, dict(spec.hyperparameters, **SMALL),
                        runner.RunOptions(seed=1, max_epochs=1, threshold=0.01, results_root=tmp_path / "results",
                                          data_root=packed_root, progress=False))
    # One epoch of an untrained ResNet-152 on 12 images: the score may be 0, which is not the point here.
    assert result["status"] in ("converged", "DNC") and len(result["history"]) == 1, result.get("dnc_reason")
    assert result["status"] == "converged" or "budget" in result["dnc_reason"]
    assert result["eval_examples"] == 12 and not result["official"]
    assert verify_run.verify(Path(result["run_dir"]), packed_root).verified
