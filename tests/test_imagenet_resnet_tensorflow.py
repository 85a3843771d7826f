"""imagenet-resnet50-tensorflow and imagenet-resnet152-tensorflow (one train.py, two depths) on CPU:
the parameter counts against the PyTorch networks', the two copies are one recipe, the data
pipeline (crops, eval geometry, class and file order, folders or TFRecords), the strategy chooser,
a falling loss on a repeated batch, and smoke runs as a run drives them on the tiny ImageNet that
`prepare` makes and `pack_tfrecord` packs: a trainer on the training files only (setup -> one epoch
-> save), a predictor on the validation files only (setup -> load -> predict -> infer), and
`dawnbench infer`'s code path.

Speed (the whole file is meant to stay well under a minute on a 2-core CPU): the images are tiny
(32 px crops); each network is built once for the module (ResNet-152 takes seconds); ResNet-50's
training step, the slowest thing to make (a trace of ~10 s), is traced once and serves the epoch on
the folders, the epoch on the TFRecords and the falling loss; ResNet-152 runs its predictor eagerly,
which for 12 images costs less than tracing it."""
from __future__ import annotations

import functools
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, check_inference_entry, check_roles_see_only_their_files, role_views

from common import imagenet_files
from harness import datasets, inference, registry, runner, verify_run
from harness.reference import Context

PARAMETERS = {"imagenet-resnet50-tensorflow": (50, 25_557_032), "imagenet-resnet152-tensorflow": (152, 60_192_808)}
REFERENCES = sorted(PARAMETERS)
R50 = "imagenet-resnet50-tensorflow"
SMALL = {"image_size_start": 32, "image_size_end": 32, "eval_resize": 40, "eval_crop": 32,
         "batch_size": 4, "eval_batch_size": 5, "xla_inference": False}
pytestmark = pytest.mark.filterwarnings(
    "ignore:Even though the `tf.config.experimental_run_functions_eagerly`:UserWarning")


@functools.cache
def recipe(name=R50):
    """The reference's train.py module, loaded once: registry.load_entry_class executes the file
    anew at every call, and the tests patch this one module (reuse_network)."""
    return sys.modules[registry.load_spec(name).load_entry_class().__module__]


def context(spec, data_root, role="train", **overrides):
    config = dict(spec.hyperparameters, **SMALL)
    config.update(overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, show_progress=False, role=role)


def make(spec, data_root, role="train", **overrides):
    ref = getattr(recipe(spec.name), spec.entry.partition(":")[2])()
    ref.setup(context(spec, data_root, role, **overrides))
    return ref


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """conftest's `imagenet_root`, once for the module, packed into TFRecords too (3 train and 2 val
    shards), and the role views the harness gives: "folders" (the JPEG folders only) and "tfrecord"
    (the folders and the packed tfrecord/train or tfrecord/val, as harness/data_views.py shows them)."""
    from imagenet_fixture import fixture_manifest, write_imagenet_fixture

    from dawnbench import pack_tfrecord
    from dawnbench.prepare_imagenet import prepare

    tmp = tmp_path_factory.mktemp("imagenet")
    fixture = write_imagenet_fixture(tmp / "imagenet-files")
    root = tmp / "data"
    prepare(fixture.folder, root, allow_unverified=True, progress=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(datasets.MANIFEST_ENV, str(fixture_manifest(tmp / "datasets-imagenet-fixture.toml", fixture)))
        views = {"folders": role_views("imagenet", root, tmp / "folders")}
        # Packed in this process (prepare --format tfrecord would start a TensorFlow of its own),
        # then the manifest extended as prepare does, so a run checks the shards too.
        pack_tfrecord.pack(root / "imagenet", train_shards=3, val_shards=2)
        datasets.write_prepared_manifest(root / "imagenet", extend=True)
        views["tfrecord"] = role_views("imagenet", root, tmp / "tfrecord")
        yield {"root": root, **views}


@pytest.fixture(scope="module")
def networks():
    """{depth: the network}, each built once for the module (ResNet-152 takes seconds). The smoke
    runs train them, so tests of the initial weights read the initializers, not the values."""
    built = {}

    def get(depth):
        if depth not in built:
            built[depth] = recipe().build_model(depth)
        return built[depth]
    return get


@pytest.fixture
def reuse_network(monkeypatch, networks):
    """setup() takes the module's network of its depth instead of building one (both references:
    each imports its own copy of train.py)."""
    for name in REFERENCES:
        monkeypatch.setattr(recipe(name), "build_model", lambda depth, num_classes=1000: networks(depth))


@pytest.fixture
def eagerly():
    tf.config.run_functions_eagerly(True)
    yield
    tf.config.run_functions_eagerly(False)


# ------------------------------------------------------------------------------------ the network

@pytest.mark.parametrize("name", REFERENCES)
def test_spec_and_parameter_count(name, networks):
    spec = registry.load_spec(name)
    depth, count = PARAMETERS[name]
    cfg = spec.hyperparameters
    assert spec.task.name == "imagenet" and spec.framework == "tensorflow" and spec.gpus
    assert cfg["depth"] == depth and cfg["num_classes"] == 1000 and spec.max_epochs == cfg["epochs"]
    assert cfg["data_format"] == "auto" and cfg["mixed_precision"] == "auto"
    model = networks(depth)
    # torchvision's counts (resnet50: 25,557,032; resnet152: 60,192,808); the moving statistics are not trainable.
    assert recipe(name).count_parameters(model) == count
    moving = sum(math.prod(v.shape) for v in model.non_trainable_variables)
    assert moving == sum(2 * layer.gamma.shape[0] for layer in model.layers
                         if isinstance(layer, tf.keras.layers.BatchNormalization))


def test_copies_are_one_recipe():
    """The two references carry the same code; only their docstrings' opening lines differ."""
    codes = {}
    for name in REFERENCES:
        text = (registry.load_spec(name).directory / "train.py").read_text()
        codes[name] = text[text.index("The two references"):]
    assert len(set(codes.values())) == 1


def test_v1_5_strides_in_the_3x3_and_no_conv_biases(networks):
    train = recipe()
    model = networks(50)
    convs = {layer.name: layer for layer in model.layers if isinstance(layer, tf.keras.layers.Conv2D)}
    assert not any(c.use_bias for c in convs.values())
    strided = sorted(n for n, c in convs.items() if c.strides != (1, 1))
    assert strided == sorted(["stem_conv"] + [f"stage{s}_block1_{k}" for s in (2, 3, 4) for k in ("conv2", "proj")])
    # Each block starts as the identity: its last batch norm's scale starts at zero.
    zero_init = {layer.name for layer in model.layers if isinstance(layer, tf.keras.layers.BatchNormalization)
                 and type(layer.gamma_initializer).__name__ == "Zeros"}
    assert zero_init == {f"stage{s + 1}_block{b + 1}_bn3" for s, n in enumerate(train.STAGES[50]) for b in range(n)}
    decayed = [v for v in model.trainable_variables if train.decays(v)]
    assert len(decayed) == len(convs) + 1                                   # every kernel and the dense one
    assert model.layers[-1].compute_dtype == "float32"


# ------------------------------------------------------------------------------------ schedules, data

def test_schedules_and_user_mistakes(data, reuse_network):
    spec = registry.load_spec(R50)
    train = recipe()
    cfg = spec.hyperparameters
    sizes = [train.image_size(e, cfg) for e in range(1, 41)]
    assert sizes[0] == 160 and sizes[-1] == 224 and all(s % 32 == 0 for s in sizes) and sizes == sorted(sizes)
    assert train.peak_lr(cfg) == pytest.approx(0.4)
    ref = make(spec, data["folders"]["train"], epochs=4, warmup_epochs=1)     # 14 images, batch 4: 3 steps
    assert ref.steps_per_epoch == 3 and ref.lr_at(3) == pytest.approx(train.peak_lr(ref.ctx.config))
    assert ref.lr_at(0) < ref.lr_at(3) > ref.lr_at(6) > ref.lr_at(12) == 0.0
    order = train.epoch_order(14, ref.ctx.config, 0, 1)
    assert order.shape == (3, 4) and len(set(order.ravel().tolist())) == 12
    folders = data["folders"]["train"]
    for overrides, message in (({"batch_size": 16}, "larger than the 14 training images"),
                               ({"mixed_precision": "mixed_bfloat16"}, "needs a GPU"),
                               ({"mixed_precision": "half"}, "mixed_precision 'half'"),
                               ({"num_classes": 10}, "num_classes 10"),
                               ({"data_format": "zip"}, "data_format 'zip': expected one of auto, folders, tfrecord"),
                               ({"data_format": "tfrecord"},
                                "run `dawnbench data prepare imagenet --format tfrecord`, or set data_format")):
        with pytest.raises(ValueError, match=message) as caught:
            make(spec, folders, **overrides)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="depth 51"):
        train.build_model(51)
    with pytest.raises(ValueError, match="larger than eval_resize"):
        make(spec, data["folders"]["predict"], "predict", eval_crop=48)


def test_train_and_eval_images(data, tmp_path):
    train = recipe()
    paths, labels, wnids = imagenet_files.train_samples(data["folders"]["train"])
    for path, label in zip(paths, labels):
        assert path.split("/")[-2] == wnids[label]
    seed = tf.constant([0, 5], tf.int64)
    jpeg = tf.io.read_file(paths[5])
    x, y = train.train_image(jpeg, labels[5], 48, seed)
    assert x.shape == (48, 48, 3) and x.dtype == tf.uint8 and int(y) == labels[5]
    assert np.array_equal(train.train_image(jpeg, labels[5], 48, seed)[0], x)   # the seed fixes the draws
    assert not np.array_equal(train.train_image(jpeg, labels[5], 48, seed + [0, 1])[0], x)
    # Eval geometry: a bar image whose columns say where they came from; the centre survives.
    columns = np.repeat(np.repeat(np.arange(80, dtype=np.uint8)[None, :] * 3, 40, axis=0)[:, :, None], 3, axis=2)
    out = train.eval_image(tf.io.encode_jpeg(columns, quality=100), 40, 32).numpy()
    row = out[16, :, 0] / 3.0
    assert out.shape == (32, 32, 3) and abs(row[0] - 24.5) < 1.5 and abs(row[-1] - 55.5) < 1.5


def test_both_sources_give_the_same_images(data):
    """The TFRecord sources hand the augmentation the same JPEG bytes, with the same labels, as the
    folders: the val images in canonical order, an epoch's train images each once per epoch."""
    train, cfg = recipe(), dict(registry.load_spec(R50).hyperparameters, **SMALL)
    assert train.data_format(cfg, data["tfrecord"]["train"], "train") == "tfrecord"
    assert train.data_format(cfg, data["folders"]["train"], "train") == "folders"
    assert train.data_format(dict(cfg, data_format="folders"), data["tfrecord"]["train"], "train") == "folders"
    folder_val, record_val = train.FolderVal(data["folders"]["predict"]), train.RecordVal(data["tfrecord"]["predict"])
    expected = [p.read_bytes() for p in sorted((data["root"] / "imagenet" / "val").iterdir())]
    assert [t.numpy() for t in folder_val.encoded()] == expected == [t.numpy() for t in record_val.encoded()]
    assert len(record_val) == 12 and record_val.encoded_at(7).numpy() == expected[7]
    assert record_val.encoded_at(8).numpy() == expected[8] and record_val.encoded_at(2).numpy() == expected[2]

    folders, records = train.FolderTrain(data["folders"]["train"], cfg), train.RecordTrain(data["tfrecord"]["train"], cfg)
    assert folders.count == records.count == 14
    truth = {Path(path).read_bytes(): label for path, label in zip(folders.paths, folders.labels.tolist())}

    def epoch(source, pipelines, share):
        """(JPEG bytes, label) of every pipeline's share of epoch 1's 3 batches of 4."""
        out = [(bytes(d.numpy()), int(y)) for p in range(pipelines) for d, y, _ in
               source.examples(0, 1, p, pipelines, share)]
        assert all(truth[d] == y for d, y in out) and len(out) == 12
        return {d for d, _ in out}

    # One machine, or two (the folders' order split in halves; the records' shards dealt out, so
    # with 3 uneven shards a machine may wrap around: several machines need many shards), or four
    # (more machines than shards: each takes every fourth record).
    assert len(epoch(folders, 1, 4)) == len(epoch(folders, 2, 2)) == 12
    assert len(epoch(records, 1, 4)) == len(epoch(records, 4, 1)) == 12
    assert epoch(records, 2, 2) <= set(truth)

    broken = data["root"].parent / "broken"
    (broken / "imagenet" / "tfrecord" / "train").mkdir(parents=True)
    (broken / "imagenet" / "tfrecord" / "train" / "records.json").write_text('{"records": 5, "shards": {"gone": 5}}')
    with pytest.raises(ValueError, match="shard .*gone is missing .1 of 1.: run `dawnbench data prepare imagenet"):
        train.RecordTrain(broken, cfg)
    (broken / "imagenet" / "tfrecord" / "train" / "records.json").write_text("{")
    with pytest.raises(ValueError, match="is not a TFRecord index: run"):
        train.RecordTrain(broken, cfg)


# ------------------------------------------------------------------------------------ devices

def test_cluster_config_and_precision():
    train = recipe()
    workers = {"cluster": {"worker": ["host0:2222", "host1:2222"]}}
    assert train.cluster_config({}, 0, 1) is None
    assert train.cluster_config({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}})}, 0, 1) is None
    # The same TF_CONFIG on every machine: the harness rank says which worker this is.
    assert train.cluster_config({"TF_CONFIG": json.dumps(workers)}, 1, 2)["task"] == {"type": "worker", "index": 1}
    given = dict(workers, task={"type": "worker", "index": 0})
    assert train.cluster_config({"TF_CONFIG": json.dumps(given)}, 0, 2) == given
    for env, rank, world, message in (({}, 0, 2, "no TF_CONFIG"),
                                      ({"TF_CONFIG": "{nope"}, 0, 2, "TF_CONFIG is not JSON"),
                                      ({"TF_CONFIG": json.dumps(workers)}, 0, 1, "names 2 workers but the harness runs 1"),
                                      ({"TF_CONFIG": json.dumps(given)}, 1, 2, "is not worker 1")):
        with pytest.raises(ValueError, match=message) as caught:
            train.cluster_config(env, rank, world)
        assert "\n" not in str(caught.value)
    assert train.resolve_precision("auto", gpu=True) == "mixed_float16"
    assert train.resolve_precision("auto", gpu=False) == "float32"
    assert train.resolve_precision("mixed_bfloat16", gpu=True) == "mixed_bfloat16"


# ------------------------------------------------------------------------------- end to end, CPU

@pytest.fixture(scope="module")
def trained(data, networks, tmp_path_factory):
    """ResNet-50 trained one epoch on the folders (its step traced once) and saved, as a run's trainer
    does: (the trainer, the model folder)."""
    spec = registry.load_spec(R50)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recipe(), "build_model", lambda depth, num_classes=1000: networks(depth))
        trainer = make(spec, data["folders"]["train"])
    assert not hasattr(trainer, "val") and trainer.policy == "float32" and trainer.data_format == "folders"
    stats = trainer.train_epoch(1)
    assert math.isfinite(stats["loss"]) and stats["samples"] == 12 and stats["lr"] > 0 and stats["image_size"] == 32
    model = tmp_path_factory.mktemp("r50") / "model"
    trainer.save(model)
    return trainer, model


def predict_and_infer(spec, view, model):
    """A predictor on `view` loads `model`, predicts every val image and infers the last: it and its scores."""
    predictor = make(spec, view, "predict")
    assert not hasattr(predictor, "source") and not hasattr(predictor, "opt")
    predictor.load(model)
    scores, inputs = predictor.predict(), predictor.eval_inputs()
    assert isinstance(scores, np.ndarray) and scores.shape == (12, 1000) and scores.dtype == np.float32
    assert np.isfinite(scores).all() and len(inputs) == 12
    one = predictor.infer(inputs[11])
    np.testing.assert_allclose(one, scores[11], rtol=1e-4, atol=1e-4 * float(np.abs(scores[11]).max() + 1))
    return predictor, scores


@pytest.mark.recipe_run
def test_smoke_predict_folders_and_tfrecord_and_inference_entry(data, trained, networks, monkeypatch, tmp_path):
    """Predictors on the folders and on the TFRecords score the saved weights alike, in the same
    order; `dawnbench infer` serves them one image at a time."""
    trainer, model = trained
    spec = registry.load_spec(R50)
    predictor, scores = predict_and_infer(spec, data["folders"]["predict"], model)     # a network of its own
    assert predictor.data_format == "folders"
    # The predictor scores the weights the trainer saved (batch-norm statistics included).
    x = tf.stack([predictor.eval_inputs()[i] for i in range(3)])
    np.testing.assert_allclose(scores[:3], trainer.scores(x).numpy(), rtol=1e-4, atol=1e-4)
    # Canonical order: row i is the i-th file name in sorted order.
    written = sorted(p.name for p in (data["root"] / "imagenet" / "val").iterdir())
    assert [p.rsplit("/", 1)[1] for p in predictor.eval_inputs().source.paths] == written

    # The TFRecord predictor on the module's network, eagerly: the compiled path ran just above.
    monkeypatch.setattr(recipe(), "build_model", lambda depth, num_classes=1000: networks(depth))
    tf.config.run_functions_eagerly(True)
    try:
        on_records, from_records = predict_and_infer(spec, data["tfrecord"]["predict"], model)
    finally:
        tf.config.run_functions_eagerly(False)
    assert on_records.data_format == "tfrecord"
    np.testing.assert_allclose(from_records, scores, rtol=1e-4, atol=1e-4)

    check_inference_entry(spec, model, predictor.ctx.config, data["root"], tmp_path / "infer", scores, items=3)
    # The Keras ResNet-50 exported to ONNX (tf2onnx: uint8 crops in, scores out) and run by ONNX
    # Runtime in the harness's own process: the predictor's scores
    report = inference.infer(spec, model, predictor.ctx.config, data_root=data["root"], warmup=1, limit=3,
                             out_dir=tmp_path / "onnxruntime", progress=False, threshold=0.01,
                             runtime="onnxruntime", threads=1)
    assert report["runtime"] == "onnxruntime" and report["exported_model"]["opset"] == 17
    np.testing.assert_allclose(np.load(tmp_path / "onnxruntime" / "predictions.npy"), scores[:3], rtol=1e-3,
                               atol=1e-3 * float(np.abs(scores[:3]).max()))


def test_smoke_tfrecord_epoch(data, trained, reuse_network):
    """A trainer set up on the TFRecords reads them; its source feeds the compiled step the module
    traced (a step of its own would be traced again, as long as the rest of this file)."""
    trainer, _ = trained
    on_records = make(registry.load_spec(R50), data["tfrecord"]["train"])
    assert on_records.data_format == "tfrecord" and on_records.steps_per_epoch == 3
    folders, trainer.source = trainer.source, on_records.source
    try:
        stats = trainer.train_epoch(2)
    finally:
        trainer.source = folders
    assert math.isfinite(stats["loss"]) and stats["samples"] == 12


def test_loss_falls_on_a_repeated_batch(trained):
    """Through the compiled step the module traced."""
    trainer, _ = trained
    batches, size = trainer.train_dataset(3)
    x, y = next(iter(batches))
    assert size == 32 and x.shape == (4, 32, 32, 3) and x.dtype == tf.uint8 and y.dtype == tf.int64
    trainer.opt.learning_rate.assign(0.05)
    losses = [float(trainer.train_step(x, y)) for _ in range(5)]
    assert all(math.isfinite(v) for v in losses)
    assert losses[0] > 6.0 and losses[-1] < 0.7 * losses[0], losses          # from about ln 1000


def test_smoke_resnet152(data, reuse_network, eagerly):
    """The ResNet-152 reference's own spec through a trainer's setup and a predictor's calls (eagerly:
    tracing ResNet-152 takes longer than running it on 12 images). Its training epoch is ResNet-50's
    code (test_copies_are_one_recipe) at another depth, run above."""
    spec = registry.load_spec("imagenet-resnet152-tensorflow")
    trainer = make(spec, data["folders"]["train"])
    assert trainer.model.name == "resnet152_v1_5" and trainer.steps_per_epoch == 3
    predictor = make(spec, data["tfrecord"]["predict"], "predict", eval_batch_size=12)
    scores = predictor.predict()
    assert scores.shape == (12, 1000) and np.isfinite(scores).all()
    np.testing.assert_allclose(predictor.infer(predictor.eval_inputs()[0]), scores[0], rtol=1e-4, atol=1e-3)


def test_roles_see_only_their_files(data):
    spec = registry.load_spec(R50)
    check_roles_see_only_their_files(spec.load_entry_class(), lambda role, root: context(spec, root, role),
                                     data["folders"])


WORKER = """
import json, sys
import numpy as np, tensorflow as tf
from harness import registry
from harness.reference import Context

spec = registry.load_spec("imagenet-resnet50-tensorflow")
train = sys.modules[spec.load_entry_class().__module__]
rank = int(sys.argv[1])
ctx = Context(config={}, data_root=".", seed=0, task=spec.task, rank=rank, world_size=2)
strategy = train.choose_strategy(ctx)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, kernel_initializer="ones")])
    opt = tf.keras.optimizers.SGD(0.1)
    opt.build(model.trainable_variables)

def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x)) / 2
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

# Each worker feeds its own input (rank + 1): the gradients are summed across the two workers.
loss = strategy.run(tf.function(step), args=(tf.fill((1, 3), float(rank + 1)),))
total = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
print(json.dumps({"multi_worker": isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy),
                  "replicas": strategy.num_replicas_in_sync, "total": float(total),
                  "kernel": model.layers[0].kernel.numpy().tolist()}))
"""


@pytest.mark.multiprocess
def test_multi_worker_mirrored_strategy_runs_a_step_with_two_workers(tmp_path):
    """Two worker processes on this machine (TF_CONFIG with two localhost ports, no task: each takes
    its harness rank) make one MultiWorkerMirroredStrategy and take one step with summed gradients."""
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3",
               TF_CONFIG=json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]}}))
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(rank)], env=env, cwd=tmp_path, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank in (0, 1)]
    try:
        outputs = [w.communicate(timeout=120) for w in workers]
    finally:
        for w in workers:
            w.kill()
    results = []
    for w, (out, err) in zip(workers, outputs):
        assert w.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["multi_worker"] and r["replicas"] == 2 for r in results), results
    # Losses 3 and 6 (x = 1s and 2s through a kernel of ones, over 2 outputs, / 2): 9 in all. The
    # kernel's gradient sums both workers' inputs, (1 + 2) / 2 per weight: 1 - 0.1 x 1.5 = 0.85 everywhere.
    assert results[0]["total"] == results[1]["total"] == pytest.approx(9.0)
    assert results[0]["kernel"] == results[1]["kernel"]
    np.testing.assert_allclose(results[0]["kernel"], 0.85, rtol=1e-6)


@pytest.mark.recipe_run
def test_a_harness_run_on_tfrecords(data, tmp_path):
    """The whole chain on the packed fixture: the runner checks the manifest (shards included),
    shows the trainer tfrecord/train and the predictor tfrecord/val (sandboxed where bubblewrap is),
    the reference reads the TFRecords (data_format auto), and the run verifies offline."""
    spec = registry.load_spec(R50)
    result = runner.run(spec, dict(spec.hyperparameters, **SMALL, epochs=1, warmup_epochs=0),
                        runner.RunOptions(seed=1, max_epochs=1, threshold=0.01, results_root=tmp_path / "results",
                                          data_root=data["root"], progress=False))
    assert result["status"] in ("converged", "DNC") and len(result["history"]) == 1, result.get("dnc_reason")
    assert result["status"] == "converged" or "budget" in result["dnc_reason"]
    assert result["eval_examples"] == 12 and not result["official"]
    versions = json.loads((Path(result["run_dir"]) / "env.json").read_text())["framework_extra"]
    assert versions["data_format"] == "tfrecord", versions          # the trainer read the shards
    assert verify_run.verify(Path(result["run_dir"]), data["root"]).verified
