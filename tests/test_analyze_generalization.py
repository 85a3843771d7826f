"""`dawnbench analyze generalization`: a real harnessed CIFAR-10 run's stored model scored by the
harness on its eval set and on a CIFAR-10.1 fixture (the published .npy format) whose expected
accuracy is computed here from the run's own stored predictions; the intervals against hand
formulas; the one lines for a task with no fresh set and for a fresh set not on the machine."""
from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cifar10_1_fixture import manifest_lines, write_cifar10_1
from cifar10_fixture import fixture_manifest, write_cifar10_batches
from conftest import PYTHON, REPO, cli_env

from dawnbench import analyze_generalization as gen
from dawnbench.cli import main
from harness import datasets, eval_labels

PNG = b"\x89PNG\r\n\x1a\n"
N_TEST = 300                    # the fixture's eval set: a prediction pass is a second on the CPU
FRESH = np.arange(0, N_TEST, 3)  # the eval images copied into the fresh set (100)


@pytest.fixture(scope="module")
def cifar_run(tmp_path_factory) -> tuple[Path, Path, Path, dict]:
    """(run folder, data root, manifest, the test batch): one epoch of cifar10-resnet20-pytorch on a
    CIFAR-10 fixture, to a lowered threshold, model saved; and a CIFAR-10.1 fixture made of eval images."""
    tmp = tmp_path_factory.mktemp("generalization")
    batches_dir = tmp / "data" / "cifar10" / "cifar-10-batches-py"
    batches = write_cifar10_batches(batches_dir, per_batch=8, n_test=N_TEST)
    manifest = fixture_manifest(tmp / "datasets.toml", batches_dir=batches_dir)
    test = batches["test_batch"]
    images = test[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)[FRESH]
    labels = np.asarray(test[b"labels"])[FRESH]
    # every other copied image relabelled: the fresh accuracy then differs from the original's
    labels = np.where(np.arange(len(labels)) % 2 == 0, labels, (labels + 1) % 10)
    fresh_dir = tmp / "data" / "cifar10.1"
    write_cifar10_1(fresh_dir, images, labels)
    with open(manifest, "a", encoding="utf-8") as f:
        f.write("\n".join(manifest_lines(fresh_dir)) + "\n")
    env = cli_env(**{datasets.MANIFEST_ENV: str(manifest), "OMP_NUM_THREADS": "2"})
    proc = subprocess.run([PYTHON, "-m", "dawnbench", "run", "cifar10-resnet20-pytorch", "--data", str(tmp / "data"),
                           "--results", str(tmp / "results"), "--set", "batch_size=16", "--threshold", "0.01",
                           "--max-epochs", "1", "--no-progress", "--seed", "1"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (tmp / "results" / "cifar10-resnet20-pytorch").iterdir()
    return run_dir, tmp / "data", manifest, {"labels": np.asarray(test[b"labels"]), "fresh_labels": labels}


def stored_top1(run_dir: Path) -> np.ndarray:
    """The top-1 class of each eval image, from the converging epoch's stored predictions (the
    file its eval_accuracy event names: an .npz of ranked ids), read with numpy, not the harness."""
    lines = [json.loads(line[len(":::MLLOG "):]) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    (event,) = [e for e in lines if e["key"] == "eval_accuracy"]
    with np.load(run_dir / event["metadata"]["predictions_file"], allow_pickle=False) as stored:
        return stored["ids"][:, 0]


def test_gap_of_a_real_run_on_a_fresh_set_of_known_accuracy(cifar_run, tmp_path, capsys, monkeypatch):
    run_dir, data_root, manifest, truth = cifar_run
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    out = tmp_path / "out"
    code = main(["analyze", "generalization", str(run_dir), "--out", str(out), "--data", str(data_root),
                 "--references", str(REPO / "references")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert printed.out.split() == [str(out / "generalization.png"), str(out / "generalization.json")]
    assert (out / "generalization.png").read_bytes()[:8] == PNG
    numbers = json.loads((out / "generalization.json").read_text())
    (row,) = numbers["inputs"]

    top1 = stored_top1(run_dir)
    original = float(np.mean(top1 == truth["labels"]))
    fresh = float(np.mean(top1[FRESH] == truth["fresh_labels"]))
    result = json.loads((run_dir / "result.json").read_text())
    assert original == pytest.approx(result["metric_value"])        # what the run scored, read independently
    assert row["fresh_set"] == "cifar10.1" and row["metric"] == "top1"
    assert row["original"]["accuracy"] == pytest.approx(original) and row["original"]["examples"] == N_TEST
    assert row["fresh"]["accuracy"] == pytest.approx(fresh) and row["fresh"]["examples"] == len(FRESH)
    assert row["gap_points"] == pytest.approx(100 * (original - fresh))
    low, high = row["fresh"]["interval_95"]
    assert low <= fresh <= high
    g_low, g_high = row["gap_interval_95_points"]
    assert g_low <= row["gap_points"] <= g_high
    assert row["published_gap_points"]["low_points"] == 4.0 and "1806.00451" in row["published_gap_points"]["source"]
    assert numbers["ranked"] is False


def test_wilson_and_newcombe_match_hand_values():
    # Newcombe (1998), Statistics in Medicine 17:857, table II, example (a): 56/70 vs 48/80,
    # method 10 gives 0.0524 to 0.3339 (its Wilson intervals in, so they are checked too)
    low, high = gen.newcombe(56, 70, 48, 80)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)
    w_low, w_high = gen.wilson(56, 70)
    p, n, z = 0.8, 70, gen.Z95
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert (w_low, w_high) == pytest.approx((centre - half, centre + half))
    assert gen.wilson(0, 10)[0] == 0.0 and round(gen.wilson(0, 10)[1], 4) == 0.2775     # 0 of 10: z^2 / (n + z^2)


def test_a_task_with_no_fresh_set_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"reference": "fashion-mnist-cnn-pytorch", "task": "fashion-mnist"}))
    out = tmp_path / "out"
    assert main(["analyze", "generalization", str(run), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    assert "no fresh test set of Fashion-MNIST" in line and "a split of the training set is no stand-in" in line
    (row,) = json.loads((out / "generalization.json").read_text())["inputs"]
    assert row["fresh_set"] is None and "gap_points" not in row


def test_a_fresh_set_not_on_the_machine_says_how_to_fetch_it(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"reference": "cifar10-resnet20-pytorch", "task": "cifar10"}))
    code = main(["analyze", "generalization", str(run), "--out", str(tmp_path / "out"), "--data", str(tmp_path)])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "cifar10.1" in line and "data fetch cifar10.1" in line
    assert not (tmp_path / "out").exists()


def test_fetch_cifar10_1_checks_git_object_ids(http_server, tmp_path, monkeypatch, capsys):
    """`dawnbench data fetch cifar10.1` from the mirror variable: files pinned by git object id (as the
    official data file is) are written; a corrupt one is refused and nothing is left under its name."""
    from dawnbench.fetch import fetch
    source = tmp_path / "published"
    rng = np.random.default_rng(0)
    write_cifar10_1(source, rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8), np.arange(20) % 10)
    manifest = tmp_path / "datasets.toml"
    manifest.write_text("\n".join(manifest_lines(source, git_ids=True)) + "\n")
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    files = {f"mirror/{p.name}": p.read_bytes() for p in source.iterdir()}
    url, requests = http_server(files)
    monkeypatch.setenv("DAWNBENCH_CIFAR10_1_URL", url + "mirror/")
    root = tmp_path / "data"
    fetch("cifar10.1", root, progress=False)
    assert sorted(requests) == sorted(files)
    assert eval_labels.load_eval_labels("cifar10.1", root).tolist() == (np.arange(20) % 10).tolist()
    # Same size, one byte changed: the git object id differs
    bad = bytearray(files["mirror/cifar10.1_v6_data.npy"])
    bad[-1] ^= 1
    url, _ = http_server({**files, "mirror/cifar10.1_v6_data.npy": bytes(bad)})
    monkeypatch.setenv("DAWNBENCH_CIFAR10_1_URL", url + "mirror/")
    (root / "cifar10.1" / "cifar10.1_v6_data.npy").unlink()
    with pytest.raises(datasets.DatasetError, match="expected git_sha1"):
        fetch("cifar10.1", root, progress=False)
    assert not (root / "cifar10.1" / "cifar10.1_v6_data.npy").exists()


def test_manifest_pins_the_official_files():
    """The built-in entry: the official URL, and the labels' two checksums agree on the published
    size (2,000 int32 + the 128-byte .npy header), as does the data's (2,000 x 3,072 bytes + 128)."""
    entry = datasets.manifest("cifar10.1")
    assert entry["url_base"] == "https://github.com/modestyachts/CIFAR-10.1/raw/master/datasets/"
    assert entry["files"]["cifar10.1_v6_labels.npy"]["size"] == 2000 * 4 + 128
    assert entry["files"]["cifar10.1_v6_data.npy"]["size"] == 2000 * 3072 + 128
    assert entry["fresh_for"] == "cifar10" and entry["url_env"] == "DAWNBENCH_CIFAR10_1_URL"


def test_the_entry_page_shows_the_gap(tmp_path, capsys):
    pytest.importorskip("jinja2", reason="the site needs jinja2; `make test` runs this with it")
    from leaderboard_fixture import write_entries

    from dawnbench import entries, site
    tree = write_entries(tmp_path / "entries")
    cifar, squad = (entries.load(tree / t / "train" / f"{n}.json") for t, n in (
        ("CIFAR10", "alice_resnet18_p3.2xlarge_pytorch"), ("SQuAD", "ivan_bidaf_k80_tensorflow")))
    assert "Generalization" not in site.entry_page(cifar, [], None, None)          # no run folder: no row
    for entry in (cifar, squad):
        folder = entries.run_folder(entry.path)
        folder.mkdir()
        (folder / "result.json").write_text("{}")
    numbers = {"analysis": "generalization", "inputs": [{
        "source": str(entries.run_folder(cifar.path)), "fresh_set": "cifar10.1", "metric": "top1",
        "original": {"dataset": "cifar10", "accuracy": 0.94}, "fresh": {"dataset": "cifar10.1", "accuracy": 0.865,
                                                                      "examples": 2000},
        "gap_points": 7.5, "gap_interval_95_points": [6.0, 9.1],
        "published_gap_points": {"low_points": 4.0, "high_points": 10.0}}]}
    rows = site.generalization_lines(numbers)
    page = site.entry_page(cifar, [], None, None, generalization=rows)
    assert ("<tr><th>Generalization</th><td>gap 7.5 points (95% interval 6.0 to 9.1): top1 94.00% on cifar10, "
            "86.50% on cifar10.1 (2000 images); published for standard models: 4 to 10 points") in page
    assert "not analysed (dawnbench analyze generalization" in site.entry_page(cifar, [], None, None)
    assert "no fresh test set of SQuAD v1.1 is in the manifest" in site.entry_page(squad, [], None, None,
                                                                                  generalization=rows)
    (tmp_path / "other.json").write_text(json.dumps({"analysis": "roofline"}))
    code = main(["leaderboard", str(tree), "--out", str(tmp_path / "site"), "--generalization", str(tmp_path / "other.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "not a generalization analysis" in err[0]
    (tmp_path / "generalization.json").write_text(json.dumps(numbers))
    assert main(["leaderboard", str(tree), "--out", str(tmp_path / "site"),
                 "--generalization", str(tmp_path / "generalization.json")]) == 0


# ------------------------------------------------------------------ ImageNet and ImageNetV2

IMAGENET_REF = "imagenet-resnet50-pytorch"
COLOURS = [(0, 0, 0), (255, 255, 255), (230, 20, 20), (20, 20, 230)]
IMAGENET_SMALL = ["image_size_start=32", "image_size_end=32", "eval_resize=40", "eval_crop=32", "batch_size=4",
                  "eval_batch_size=6", "num_workers=0", "num_classes=5"]     # 5 outputs: top-5 is every class


@pytest.fixture(scope="module")
def imagenet_run(tmp_path_factory):
    """(run folder, data root, manifest, {val file: class index}, {class folder: [val files]}): one epoch of
    imagenet-resnet50-pytorch on the prepared tiny ImageNet, model saved; then an ImageNetV2 fixture tar
    (the published layout) made of its val images, fetched with `data fetch imagenetv2` from a file://
    mirror. Each class folder holds 3 val images chosen by the run's stored predictions (the harness is
    not asked): ones predicted as its class where there are any, so the fresh accuracy is known and, by
    one image swapped if need be, not the original's."""
    from imagenet_fixture import fixture_manifest, write_imagenet_fixture
    from imagenetv2_fixture import TAR, manifest_lines, tar_gz

    from dawnbench.prepare_imagenet import prepare
    tmp = tmp_path_factory.mktemp("generalization-imagenet")
    # Flat colours far apart, one per class: even a model one epoch old tells some of them apart, and
    # a model that predicts one class for everything could not show which images its predictor saw.
    fixture = write_imagenet_fixture(tmp / "official-files", draw=lambda c, rng: np.full((30, 40, 3), COLOURS[c], np.uint8))
    data = tmp / "data"
    prepare(fixture.folder, data, allow_unverified=True, progress=False)
    override = fixture_manifest(tmp / "datasets-imagenet.toml", fixture)
    env = cli_env(**{datasets.MANIFEST_ENV: str(override), "OMP_NUM_THREADS": "2"})
    proc = subprocess.run([PYTHON, "-m", "dawnbench", "run", IMAGENET_REF, "--data", str(data), "--results",
                           str(tmp / "results"), "--threshold", "0.01", "--max-epochs", "1", "--no-progress",
                           "--seed", "1", *[a for s in IMAGENET_SMALL for a in ("--set", s)]],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (tmp / "results" / IMAGENET_REF).iterdir()

    synsets = (data / "imagenet" / "synsets.txt").read_text().split()
    val = sorted(p.name for p in (data / "imagenet" / "val").iterdir())
    classes = dict(zip(val, (synsets.index(w) for w in (data / "imagenet" / "val_labels.txt").read_text().split())))
    predicted = dict(zip(val, stored_top1(run_dir)))
    folders = {}
    for c in range(len(synsets)):
        right = [name for name in val if predicted[name] == c]
        folders[c] = (right * 3)[:3] if right else [name for name in val if predicted[name] != c][:3]
    right = sum(predicted[name] == c for c, names in folders.items() for name in names)
    if right == sum(predicted[name] == classes[name] for name in val):
        c = next(c for c, names in folders.items() if predicted[names[0]] == c)
        folders[c][0] = next(name for name in val if predicted[name] != c)
    images = {c: [(data / "imagenet" / "val" / name).read_bytes() for name in names] for c, names in folders.items()}
    tar = tar_gz(images)
    (tmp / TAR).write_bytes(tar)
    manifest = tmp / "datasets.toml"
    manifest.write_text(override.read_text() + "\n".join(manifest_lines(tar, images, synsets)) + "\n")
    env.update({datasets.MANIFEST_ENV: str(manifest), "DAWNBENCH_IMAGENETV2_URL": (tmp / TAR).as_uri()})
    fetched = subprocess.run([PYTHON, "-m", "dawnbench", "data", "fetch", "imagenetv2", "--data", str(data)],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    return run_dir, data, manifest, classes, folders


@pytest.mark.recipe_run         # trains imagenet-resnet50-pytorch one epoch on the fixture
def test_gap_of_a_real_imagenet_run_on_imagenetv2_of_known_accuracy(imagenet_run, tmp_path, capsys, monkeypatch):
    run_dir, data, manifest, classes, folders = imagenet_run
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    out = tmp_path / "out"
    code = main(["analyze", "generalization", str(run_dir), "--out", str(out), "--data", str(data),
                 "--references", str(REPO / "references")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    (row,) = json.loads((out / "generalization.json").read_text())["inputs"]

    # Expected, from the run's own stored predictions (the val images, in file-name order) and the
    # folders each val image was put in: a fresh image's prediction is its val twin's.
    val = sorted(classes)
    top1 = dict(zip(val, stored_top1(run_dir)))
    original = float(np.mean([top1[name] == classes[name] for name in val]))
    fresh = float(np.mean([top1[name] == c for c, names in folders.items() for name in names]))
    assert original != fresh
    assert row["fresh_set"] == "imagenetv2" and row["metric"] == "top1"
    assert row["original"]["accuracy"] == pytest.approx(original) and row["original"]["examples"] == len(val)
    assert row["fresh"]["accuracy"] == pytest.approx(fresh) and row["fresh"]["examples"] == 12
    assert row["gap_points"] == pytest.approx(100 * (original - fresh))
    assert row["published_gap_points"]["low_points"] == 11.0 and "1902.10811" in row["published_gap_points"]["source"]


def test_imagenetv2_not_on_the_machine_says_how_to_fetch_it(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"reference": IMAGENET_REF, "task": "imagenet"}))
    code = main(["analyze", "generalization", str(run), "--out", str(tmp_path / "out"), "--data", str(tmp_path)])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "imagenetv2" in line and "data fetch imagenetv2" in line and "DAWNBENCH_IMAGENETV2_URL=file://" in line
    assert not (tmp_path / "out").exists()
