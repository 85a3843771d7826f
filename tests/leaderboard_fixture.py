"""Hand-written DAWNBench v1 entries with known rankings, for the leaderboard, site and analysis tests.

CIFAR10 (threshold 94%) training entries, by hours of the first log row at or over 94:
  alice 0.5 h ($3.06/h)  erin 0.75 h (2018-05-01, $2/h)  gina 0.75 h (2018-05-01, $2/h: the name breaks the tie)
  dave 0.75 h (reaches 94.0, dips to 93.5, reaches 94.5 at 1.25 h; 2018-06-01, $2/h)  frank 1.0 h (no price)
  evil 2.0 h (hostile strings everywhere, $1/h)  bob 3.0 h (crosses late, $0.9/h)  carol never reaches it.
CIFAR10 inference: alice 10 ms (costPerHour only), henry 20 ms (no price), old 50 ms (only the v1 `cost`),
  slow 5 ms but 93% (under the threshold). Plus an entry that is not JSON and one whose log has text in a
  number column (both skipped), a SQuAD entry with F1 as a fraction and an ImageNet inference entry named `..`.
Those are DAWNBench v1 entries, typed by hand: they have no run behind them, so the leaderboard shows them
"not verified" on purpose, and ranks them only as an archive's (`archive_args`, `archived`: the list of their
files' sha256, as dawnbench/data/v1-archive.sha256 lists the published v1 entries), in the archive's tables
(`ARCHIVE`); without it they rank nowhere.

Run folders as harness/runner.py leaves them (`make_run`: result.json, TSV, events.jsonl and stored
predictions, all consistent, so `dawnbench verify` passes) are scored against CIFAR-10 eval labels
of our own (`cifar10_labels`: 10,000 labels in the official pickle, registered through
$DAWNBENCH_DATASETS_MANIFEST), so tests need neither the network nor the real dataset.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import numpy as np
from cifar10_fixture import fixture_manifest, make_batch, py2_pickle

from dawnbench import archive
from harness import datasets, eval_labels, judge_hash, snapshots, stored_predictions
from harness.events import EventLog
from harness.tasks import RULES_VERSION, TASKS

# The model every fake run scored (no model/ is kept): {path: (bytes, sha256)}, its hash in each eval_accuracy
MODEL_FILES = {"model.pt": (3400000, "f" * 64)}

XSS = {
    "author": "<script>alert(1)</script>",
    "model": '"><img src=x onerror=alert(1)>',
    "hardware": "<b onmouseover=alert(1)>x</b>",
    "framework": "'\"><svg onload=alert(1)>",
    "codeURL": "javascript:alert(1)",
    "commitHash": "<script>alert(2)</script>",
}
EVIL_STEM = 'evil_"><img src=x onerror=alert(1)>'
HEADERS = {"CIFAR10": "epoch\thours\ttop1Accuracy", "SQuAD": "epoch\thours\tf1Score",
           "ImageNet": "epoch\thours\ttop1Accuracy\ttop5Accuracy", "FashionMNIST": "epoch\thours\ttop1Accuracy"}


def _fields(stem: str, **extra) -> dict:
    author, model, hardware, framework = (stem.split("_") + ["x"] * 4)[:4]
    fields = {"version": "v1.0", "author": author, "authorEmail": f"{author}@example.org", "framework": framework,
              "codeURL": f"https://example.org/{author}/code", "model": model, "hardware": hardware,
              "timestamp": "2018-04-20", "misc": {}}
    fields.update(extra)
    return {k: v for k, v in fields.items() if v is not None}


def train(root: Path, task: str, stem: str, rows: list[tuple], **extra) -> Path:
    folder = Path(root) / task / "train"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(_fields(stem, **extra)))
    lines = [HEADERS[task]] + ["\t".join(str(c) for c in row) for row in rows]
    (folder / f"{stem}.tsv").write_text("\n".join(lines) + "\n")
    return path


def inference(root: Path, task: str, stem: str, **extra) -> Path:
    folder = Path(root) / task / "inference"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(_fields(stem, **extra)))
    return path


def write_entries(root: Path) -> Path:
    root = Path(root)
    train(root, "CIFAR10", "alice_resnet18_p3.2xlarge_pytorch",
          [(1, 0.1, 80.0), (2, 0.3, 92.0), (3, 0.5, 94.1), (4, 0.7, 95.0)], costPerHour=3.06,
          commitHash="abc123")
    train(root, "CIFAR10", "bob_resnet50_k80_tensorflow",
          [(1, 0.5, 70.0), (5, 2.5, 93.9), (6, 3.0, 94.0)], costPerHour=0.9, timestamp="2017-10-01")
    train(root, "CIFAR10", "carol_cnn_cpu_pytorch", [(1, 1.0, 90.0), (2, 2.0, 93.99)], costPerHour=0.5)
    train(root, "CIFAR10", "dave_dip_v100_pytorch",
          [(1, 0.25, 90.0), (2, 0.75, 94.0), (3, 1.0, 93.5), (4, 1.25, 94.5)], costPerHour=2.0,
          timestamp="2018-06-01")
    train(root, "CIFAR10", "erin_tie_v100_pytorch", [(1, 0.75, 94.2)], costPerHour=2.0, timestamp="2018-05-01")
    train(root, "CIFAR10", "gina_tie_v100_pytorch", [(1, 0.75, 94.2)], costPerHour=2.0, timestamp="2018-05-01")
    train(root, "CIFAR10", "frank_noprice_tpu_tensorflow", [(1, 1.0, 94.5)], timestamp="2018-05-01")
    train(root, "CIFAR10", EVIL_STEM, [(1, 1.0, 60.0), (2, 2.0, 94.0)], costPerHour=1.0,
          **XSS)
    inference(root, "CIFAR10", "alice_resnet18_p3.2xlarge_pytorch", latency=10.0, top1Accuracy=94.2,
              costPerHour=3.06)
    inference(root, "CIFAR10", "henry_nocost_cpu_onnx", latency=20.0, top1Accuracy=94.0)
    inference(root, "CIFAR10", "old_resnet_k80_caffe", latency=50.0, top1Accuracy=94.5, cost=2e-5)
    inference(root, "CIFAR10", "slow_cnn_cpu_pytorch", latency=5.0, top1Accuracy=93.0, costPerHour=0.1)
    (root / "CIFAR10" / "train" / "broken_x_y_z.json").write_text("{not json")
    train(root, "CIFAR10", "textlog_x_y_z", [(1, "soon", 95.0)])
    train(root, "SQuAD", "ivan_bidaf_k80_tensorflow", [(1, 0.5, 0.70), (2, 1.0, 0.76)], costPerHour=0.9)
    inference(root, "ImageNet", "..", latency=7.0, top5Accuracy=93.5, **XSS)
    return root


# The tables the hand-typed entries rank in, as the archive's: {the verified tier's table: the archive's}
ARCHIVE = {"train_time": "train_time_archive", "train_cost_given": "train_cost_archive",
           "inference_latency": "inference_latency_archive", "inference_cost_given": "inference_cost_archive"}


def archive_list(root: Path) -> Path:
    """The archive list (dawnbench.archive) of every entry file under the tree `root`, written beside the
    tree, never in it (the tree is the entrant's): what `leaderboard --archive` takes to rank these
    hand-typed entries as the published v1 entries rank."""
    root = Path(root)
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(root).as_posix()}"
             for p in sorted(root.glob("*/*/*")) if p.is_file() and not p.is_symlink() and p.suffix in (".json", ".tsv")
             and p.stat().st_size < archive.MAX_BYTES]
    listed = root.with_name(root.name + ".archive.sha256")
    listed.write_text("\n".join(lines) + "\n")
    return listed


def archive_args(root: Path) -> list[str]:
    return ["--archive", str(archive_list(root))]


def archived(root: Path) -> frozenset:
    return archive.load(archive_list(root))


TRAIN_TIME_ORDER = ["alice_resnet18_p3.2xlarge_pytorch", "erin_tie_v100_pytorch", "gina_tie_v100_pytorch",
                    "dave_dip_v100_pytorch", "frank_noprice_tpu_tensorflow", EVIL_STEM,
                    "bob_resnet50_k80_tensorflow"]
TRAIN_COST_ORDER = ["erin_tie_v100_pytorch", "gina_tie_v100_pytorch", "dave_dip_v100_pytorch",
                    "alice_resnet18_p3.2xlarge_pytorch", EVIL_STEM, "bob_resnet50_k80_tensorflow"]
LATENCY_ORDER = ["alice_resnet18_p3.2xlarge_pytorch", "henry_nocost_cpu_onnx", "old_resnet_k80_caffe"]
INFERENCE_COST_ORDER = ["alice_resnet18_p3.2xlarge_pytorch", "old_resnet_k80_caffe"]


# ---------------------------------------------------------------- run folders, verifiable

REF = "cifar10-resnet56-pytorch"
RESULT_SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "harness" / "data" / "result.schema.json").read_text())
START_UNIX = 1_795_000_000.0        # the run's start, as the events' time_ms count it


def cifar10_labels(root: Path) -> tuple[Path, Path]:
    """(a data root whose cifar10 test_batch holds 10,000 labels, the manifest that vouches for it).
    Set DAWNBENCH_DATA and $DAWNBENCH_DATASETS_MANIFEST to them (`use_cifar10_labels`)."""
    root = Path(root)
    folder = root / "data" / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    batch = make_batch(b"testing batch 1 of 1", 10_000, np.random.default_rng(0), "test")
    (folder / "test_batch").write_bytes(py2_pickle(batch))
    manifest = fixture_manifest(root / "manifest.toml", batches_dir=folder)
    return root / "data", manifest


def use_cifar10_labels(monkeypatch, root: Path) -> Path:
    data, manifest = cifar10_labels(root)
    monkeypatch.setenv("DAWNBENCH_DATA", str(data))
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    return data


def predictions_at(labels: np.ndarray, accuracy: float, classes: int = 10) -> np.ndarray:
    """One-hot class scores whose top-1 accuracy on `labels` is round(accuracy x N) / N."""
    preds = labels.copy()
    wrong = len(labels) - int(round(accuracy * len(labels)))
    preds[:wrong] = (preds[:wrong] + 1) % classes
    return np.eye(classes, dtype=np.float32)[preds]


def make_run(folder: Path, *, task="cifar10", reference=REF, epochs=30, final=0.9412, status="converged",
             threshold=None, cost_per_hour=3.06, seed=0, hours_per_epoch=0.0031, eval_seconds=2.0,
             labels: np.ndarray | None = None, reasons=(), precision: str | None = None) -> Path:
    """A run folder as harness/runner.py leaves it: result.json (schema-valid), <reference>.tsv,
    events.jsonl and predictions/, which agree with each other, so the run verifies against `labels`
    (default: the eval labels of $DAWNBENCH_DATA, e.g. `use_cifar10_labels`). The accuracy climbs
    below the threshold and reaches `final` at the last epoch; each eval takes `eval_seconds`."""
    t = TASKS[task]
    threshold = t.threshold if threshold is None else threshold
    labels = eval_labels.load_eval_labels(t.dataset) if labels is None else labels
    folder = Path(folder)
    folder.mkdir(parents=True)
    log = EventLog(folder / "events.jsonl", lambda s: int(round((START_UNIX + s) * 1000)))
    for key, value in (("submission_benchmark", task), ("seed", seed), ("eval_samples", t.eval_examples)):
        log.point(key, value)
    log.point("dawnbench_threshold", threshold, metric=t.metric)
    log.start("run_start", 0.0)
    log.start("init_start", 0.0)
    if precision:       # the reference's report, logged at the end of the trainer's init (harness.precision)
        log.point("dawnbench_precision", precision, 1.0, reason=f"the reference chose {precision} on this device")
    log.end("init_stop", 1.0)
    tsv, history, clock = ["\t".join(t.tsv_columns)], [], 1.0
    for epoch in range(1, epochs + 1):
        target = final if epoch == epochs else threshold * (0.6 + 0.39 * epoch / epochs)   # below it until the end
        predictions = predictions_at(labels, target)
        scores = t.score(predictions, labels)
        on_clock = 3600 * hours_per_epoch * epoch
        log.start("epoch_start", clock, epoch_num=epoch)
        clock = on_clock + eval_seconds * (epoch - 1)
        log.point("train_samples", 50_000, clock, epoch_num=epoch)
        log.end("epoch_stop", clock, epoch_num=epoch, loss=1.0 / epoch)
        log.start("eval_start", clock, epoch_num=epoch)
        clock += eval_seconds
        stored = stored_predictions.save(folder, epoch, t, predictions)
        log.point("eval_accuracy", scores[t.metric], clock, epoch_num=epoch, metric=t.metric,
                  **{k: v for k, v in scores.items() if k != t.metric},
                  predictions_file=stored["file"], predictions_sha256=stored["sha256"],
                  snapshot_sha256=snapshots.manifest_sha256(MODEL_FILES))
        log.end("eval_stop", clock, epoch_num=epoch)
        tsv.append("\t".join(t.tsv_row(epoch, on_clock / 3600, scores)))
        history.append({"epoch": epoch, "tta_seconds": round(on_clock, 3), "wall_seconds": round(clock, 3),
                        **scores, "loss": 1.0 / epoch})
    converged = status == "converged"
    wall = clock + 5
    dnc_reason = None if converged else f"budget: max_epochs={epochs} reached without top1 >= {threshold}"
    log.end("run_stop", wall, status="success" if converged else "aborted", dawnbench_status=status,
            reason=dnc_reason or "")
    log.close()
    (folder / f"{reference}.tsv").write_text("\n".join(tsv) + "\n", encoding="utf-8")
    tta = history[-1]["tta_seconds"] if converged else None
    result = {
        "version": "v1.0", "author": "dawnbench", "authorEmail": "", "framework": "PyTorch 2.13.0",
        "codeURL": "https://github.com/dawnbench/dawnbench/tree/main/references/" + reference,
        "model": "ResNet-56", "hardware": "1 x NVIDIA H100 80GB HBM3", "costPerHour": cost_per_hour,
        "timestamp": "2026-11-20", "logFilename": f"{reference}.tsv", "commitHash": "de8b42f",
        "misc": {"reference": reference, "description": "ResNet-56, SGD with a one-cycle schedule"},
        "reference": reference, "task": task, "rules_version": RULES_VERSION, "run_id": folder.name,
        "status": status, "dnc_reason": dnc_reason,
        "metric": t.metric, "metric_value": history[-1][t.metric], "threshold": threshold,
        "official_threshold": threshold == t.threshold, "tta_seconds": tta,
        "wall_seconds": round(wall, 3),
        "cost_usd": cost_per_hour * tta / 3600 if cost_per_hour is not None and tta is not None else None,
        "epochs": epochs, "eval_examples": t.eval_examples, "seed": seed, "world_size": 1,
        "hyperparameters": {"lr": 0.4, "batch_size": 512}, "spans_seconds": {"init": 1.0, "train": tta or 1.0,
                                                                            "eval": eval_seconds * epochs,
                                                                            "checkpoint": 0.4},
        "history": history, "git": {"commit": "de8b42f2138dedf08d189021a603340ac257828d", "dirty": False},
        "image_digest": "sha256:" + "b" * 64,
        **({"precision": {"train": precision, "reason": f"the reference chose {precision} on this device"}}
           if precision else {}),
        "provenance": {"reference_tree_sha256": "e" * 64, "overrides": {"DAWNBENCH_DATA": "/data"}, "build": None,
                       "judge_sha256": judge_hash.sha256(),       # judged by this checkout's harness, as a run here is
                       "datasets": {"cifar10": {"test_batch": {"md5": "40351d587109b95175f43aff81a1287e",
                                                               "size": 31035526}}}},
    }
    reasons = list(reasons) + ([] if threshold == t.threshold else [f"--threshold {threshold:g} is not the task's "
                                                                    f"{t.threshold:g} (a smoke test)"])
    result.update(official=not reasons, unofficial_reasons=reasons)
    jsonschema.validate(result, RESULT_SCHEMA)
    (folder / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return folder


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}, indent=2))



def write_reproduction(run_dir: Path, *, tta_factor: float = 1.0, hardware: str | None = None,
                       tta_factors: tuple[float, ...] = ()) -> dict:
    """The reproduction.json `dawnbench reproduce` would write into `run_dir` had the run been run again
    and taken `tta_factor` times its claimed time (one run; `tta_factors`: one run per factor), on
    `hardware` (default: the run's); tolerance, figures and verdict from the command's own functions;
    returns it."""
    from dawnbench import entry_status, reproduce
    result = json.loads((run_dir / "result.json").read_text())
    claimed, env = reproduce.figures(result), reproduce.environment(result, {})
    runs = [({**claimed, "tta_seconds": round(claimed["tta_seconds"] * factor, 3)},
             {**env, "hardware": hardware or env["hardware"]}) for factor in tta_factors or (tta_factor,)]
    tolerance, source = reproduce.time_tolerance([figures["tta_seconds"] for figures, _ in runs], None)
    verdict, differences, notes = reproduce.compare(claimed, env, runs, tolerance,
                                                    reproduce.DEFAULT_METRIC_TOLERANCE)
    record = {"verdict": verdict, "differences": differences, "notes": notes,
              "log_sha256": entry_status.log_sha256(run_dir, result),
              "tolerance": {"time": tolerance, "time_source": source},
              "claimed": {"figures": claimed, "environment": env},
              "reproduced": [{"figures": figures, "environment": again} for figures, again in runs]}
    reproduce.write_record(run_dir, record)
    return record


# ---------------------------------------------------------------- issue 48's fields, as their producers write them

def series_runs(epochs: int, hours_per_epoch: list[float], finals: list[float]) -> list[dict]:
    """submit_series's runs: one per hours_per_epoch and final, every run `epochs` long (one fixed schedule)."""
    return [{"epochs": epochs, "hours_per_epoch": h, "final": f} for h, f in zip(hours_per_epoch, finals, strict=True)]


def submit_series(tree: Path, work: Path, author: str, runs: list[dict], *, hardware: str | None = None,
                  precision: str | None = None) -> str:
    """A series as `dawnbench run REF --runs N` leaves it, submitted into `tree` by `author` as a user submits
    one (`dawnbench submit SERIES`), so that the entry's `runs` block, its acceptance included, is the one
    submit and validate compute from the runs: `work`/<author>/seed<k>/ for each of `runs` (make_run's
    epochs, hours_per_epoch and final; a final under the threshold ends the run DNC) and summary.json by the
    series' own writer. With what issue 48's producers add to every run's result.json: the `hardware` the
    harness recorded and the `precision` record. Returns the entry's stem."""
    from dawnbench import series, submit
    folder, finished = Path(work) / author, []
    for seed, run in enumerate(runs):
        converged = run["final"] >= TASKS["cifar10"].threshold
        made = make_run(folder / f"seed{seed}", seed=seed, status="converged" if converged else "DNC",
                        precision=precision, **run)
        if hardware:
            edit_json(made / "result.json", hardware=hardware)
        finished.append({**json.loads((made / "result.json").read_text()), "run_dir": made.name})
    series._write_summary(folder, finished, len(runs), interrupted=False, in_progress=False)
    assert submit.main([str(folder), "--out", str(tree), "--author", author]) == 0
    (path,) = (Path(tree) / "CIFAR10" / "train").glob(f"{author}_*.json")
    assert json.loads(path.read_text()).get("precision") == precision       # submit carries the run's word
    return path.stem
