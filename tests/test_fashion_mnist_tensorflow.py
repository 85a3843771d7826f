"""fashion-mnist-cnn-tensorflow, the Keras counterpart of the default, on the real Fashion-MNIST data.

One run through the CLI at a lowered threshold (it ends after the first epoch), the saved model
through `dawnbench infer`, and the reference's own compiled step on one repeated batch in a
trainer that sees the training files only, its model then scored by a predictor that sees the eval
images only.
`dawnbench run fashion-mnist-cnn-tensorflow` measures the real time-to-accuracy at 92%.
"""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from conftest import PYTHON, REPO, check_roles_see_only_their_files, cli_env

from harness import registry
from harness.reference import Context

REF = "fashion-mnist-cnn-tensorflow"


def dawnbench(*args, timeout=600):
    return subprocess.run([PYTHON, "-m", "dawnbench", *args], cwd=REPO, env=cli_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.recipe_run
def test_runs_and_infers_through_the_cli(fashion_root, tmp_path):
    results = tmp_path / "results"
    proc = dawnbench("run", REF, "--threshold", "0.85", "--max-epochs", "2", "--results", str(results),
                     "--data", str(fashion_root), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = list((results / REF).iterdir())
    assert sorted(p.name for p in run_dir.iterdir()) == ["env.json", "events.jsonl", f"{REF}.tsv", "model",
                                                          "predictions", "result.json"]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "converged" and result["metric_value"] >= 0.85
    assert result["framework"].startswith("TensorFlow 2.")
    assert 0 < result["tta_seconds"] < result["wall_seconds"]
    extra = json.loads((run_dir / "env.json").read_text())["framework_extra"]
    assert extra["tensorflow"].startswith("2.") and extra["keras"].startswith("3.")
    assert extra["onednn"] == "true"        # set by the reference before TensorFlow is imported
    rows = [r.split("\t") for r in (run_dir / f"{REF}.tsv").read_text().splitlines()]
    assert rows[0] == ["epoch", "hours", "top1Accuracy"] and len(rows) - 1 == result["epochs"]
    assert float(rows[-1][2]) == pytest.approx(100 * result["metric_value"], abs=0.005)
    assert sorted(p.name for p in (run_dir / "model").iterdir()) == ["config.json", "model.weights.h5"]

    out = tmp_path / "infer"
    proc = dawnbench("infer", REF, "--model", str(run_dir / "model"), "--data", str(fashion_root),
                     "--limit", "300", "--warmup", "10", "--no-progress", "--out", str(out),
                     "--threshold", "0.85")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads((out / "inference.json").read_text())
    assert report["items"] == 300 and report["batch_size"] == 1 and report["complete_eval_set"] is False
    assert report["top1"] >= 0.85 and report["reached_threshold"] is True
    lat = report["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert report["framework"].startswith("TensorFlow 2.")

    # The Keras model exported to ONNX (tf2onnx) and run by ONNX Runtime in the harness's own
    # process: the same scores for the same 300 images.
    exported = tmp_path / "infer-onnxruntime"
    proc = dawnbench("infer", REF, "--model", str(run_dir / "model"), "--data", str(fashion_root),
                     "--limit", "300", "--warmup", "10", "--no-progress", "--out", str(exported),
                     "--threshold", "0.85", "--runtime", "onnxruntime", "--threads", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    onnx_report = json.loads((exported / "inference.json").read_text())
    assert onnx_report["runtime"] == "onnxruntime" and onnx_report["exported_model"]["opset"] == 17
    np.testing.assert_allclose(np.load(exported / "predictions.npy"), np.load(out / "predictions.npy"),
                               rtol=1e-4, atol=1e-4)
    assert onnx_report["top1"] == report["top1"]

    # int8: calibrated on 256 training images in a trainer-role worker, run by OpenVINO; a lower
    # precision may cost accuracy, not much of it
    int8 = tmp_path / "infer-int8"
    proc = dawnbench("infer", REF, "--model", str(run_dir / "model"), "--data", str(fashion_root),
                     "--limit", "300", "--warmup", "10", "--no-progress", "--out", str(int8),
                     "--threshold", "0.85", "--runtime", "openvino", "--precision", "int8", "--threads", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    int8_report = json.loads((int8 / "inference.json").read_text())
    assert int8_report["precision"]["requested"] == "int8" and int8_report["precision"]["used"].startswith("int8")
    assert int8_report["calibration"]["examples"] == 256
    assert int8_report["calibration"]["source"].startswith("training set")
    assert abs(int8_report["top1"] - report["top1"]) <= 0.02, (int8_report["top1"], report["top1"])


def test_loss_falls_on_one_repeated_batch(fashion_views, tmp_path):
    """The reference's own compiled step (gather, flip, schedule, momentum, weight decay), 20
    times on one unflipped batch of 64: the loss falls. Then save, load into a predictor: the
    trainer's scores, and infer() at batch 1 gives predict()'s scores."""
    spec = registry.load_spec(REF)
    # A constant learning rate of 0.05 over the first steps: the schedule's warm-up would start at 0.008.
    config = dict(spec.hyperparameters, lr=0.05, lr_start_fraction=1.0)

    def context(role, data_root):
        return Context(config=config, data_root=data_root, seed=0, task=spec.task, work_dir=tmp_path,
                       show_progress=False, role=role)

    trainer = spec.load_entry_class()()
    trainer.setup(context("train", fashion_views["train"]))
    assert not hasattr(trainer, "eval_x")
    import tensorflow as tf
    idx = tf.range(64, dtype=tf.int64)
    no_flip = tf.zeros([len(trainer.train_y)], tf.bool)
    losses = [float(trainer.train_step(idx, no_flip)) for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0], losses
    trainer.save(tmp_path / "model")

    predictor = spec.load_entry_class()()
    predictor.setup(context("predict", fashion_views["predict"]))
    assert not hasattr(predictor, "train_x") and not hasattr(predictor, "opt")
    predictor.load(tmp_path / "model")
    scores = predictor.predict()
    assert scores.shape == (10_000, 10) and np.isfinite(scores).all()
    np.testing.assert_allclose(scores[:500], trainer.scores(predictor.eval_x[:500]).numpy(), rtol=1e-4, atol=1e-4)
    inputs = predictor.eval_inputs()
    for i in (0, 1, 9_999):
        np.testing.assert_allclose(predictor.infer(inputs[i]), scores[i], rtol=1e-4, atol=1e-4)
    check_roles_see_only_their_files(spec.load_entry_class(), context, fashion_views)
