"""`dawnbench analyze lesion`: the techniques a reference declares (data, checked like --set), that each
`off` really reaches the recipe, and a real lesion study of the default reference on a small
Fashion-MNIST in the official format, one of whose variants is known to be worse (a learning rate
too low to learn in an epoch). The expected figures are read back here from the runs' result.json."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import PYTHON, REPO, cli_env
from fashion_mnist_fixture import fixture_manifest, write_fashion_mnist

from dawnbench import analyze_lesion
from harness import datasets, registry
from harness.errors import UsageError
from harness.reference import Context

REF = "fashion-mnist-cnn-pytorch"
SLOW = 'slow = { off = "lr=0.000001", about = "a learning rate that cannot learn in an epoch (the test\'s)" }'


@pytest.fixture(scope="module")
def fixture_data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lesion-data")
    write_fashion_mnist(tmp / "data" / "fashion-mnist", n_train=1280, n_test=500, seed=0)
    manifest = fixture_manifest(tmp / "datasets.toml", tmp / "data" / "fashion-mnist")
    return tmp / "data", manifest


def references_with(tmp_path, techniques: str, name: str = REF):
    """A references folder holding a copy of the default whose [techniques] table is `techniques`."""
    root = tmp_path / "references"
    shutil.copytree(REPO / "references" / REF, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    toml = root / name / "reference.toml"
    text = re.sub(r"(?ms)^\[techniques\]\n.*?(?=^\[)", lambda m: "[techniques]\n" + techniques + "\n\n",
                  toml.read_text())
    assert "[techniques]\n" + techniques in text
    toml.write_text(text)
    return root


# ---------------------------------------------------------------- the declared techniques

def test_the_default_declares_its_techniques():
    spec = registry.load_spec(REF)
    assert spec.techniques["label_smoothing"]["off"] == ["label_smoothing=0"]
    assert spec.techniques["warmup"]["off"] == ["warmup_fraction=0", "lr_start_fraction=1"]
    assert set(spec.techniques) == {"label_smoothing", "flip", "flip_tta", "warmup"}
    for name, technique in spec.techniques.items():
        assert technique["about"], name
        assert registry.resolve_hyperparameters(spec, technique["off"]) != spec.hyperparameters, name


@pytest.mark.parametrize("table, message", [
    ('slow = { off = "lr=__import__(\'os\')" }', "'lr' takes a finite number"),      # data, never code
    ('slow = { off = "no_such=1" }', "has no hyperparameter 'no_such'"),
    ('slow = { off = "lr=0.2" }', "it turns nothing off"),
    ('slow = { off = "lr=0.1", run = "rm -rf /" }', "unknown field 'run'"),
    ('slow = { about = "no off" }', "'off' must be a --set assignment"),
    ('Slow = { off = "lr=0.1" }', "a name is lower-case letters"),
    ('slow = "lr=0.1"', "must be a table"),
])
def test_a_bad_technique_is_one_line(tmp_path, table, message):
    root = references_with(tmp_path, table, name="fork")
    with pytest.raises(UsageError, match=message) as e:
        registry.load_spec("fork", root)
    assert "\n" not in str(e.value) and "technique" in str(e.value)


def test_the_plan_of_a_lesion_and_of_a_factor_analysis():
    spec = registry.load_spec(REF)
    lesion = analyze_lesion.variants(spec, ["flip", "label_smoothing"], factor=False)
    assert [(v["label"], v["sets"]) for v in lesion] == [
        ("recipe", []), ("without flip", ["flip=false"]), ("without label_smoothing", ["label_smoothing=0"])]
    factor = analyze_lesion.variants(spec, ["flip", "label_smoothing"], factor=True)
    assert [(v["label"], v["sets"]) for v in factor] == [
        ("none of them", ["flip=false", "label_smoothing=0"]), ("+ flip", ["label_smoothing=0"]),
        ("+ flip + label_smoothing", [])]
    with pytest.raises(UsageError, match="declares no technique 'mixup'; declared: label_smoothing, flip"):
        analyze_lesion.variants(spec, ["mixup"], factor=False)
    with pytest.raises(UsageError, match="--off flip is given twice"):
        analyze_lesion.variants(spec, ["flip", "flip"], factor=False)


def test_the_interval_is_students_t():
    assert analyze_lesion.interval([1.0]) is None
    lo, hi = analyze_lesion.interval([10.0, 12.0, 14.0])
    # mean 12, sample sd 2, t(0.975, 2) = 4.302653: 12 -+ 4.302653 * 2 / sqrt(3)
    assert (lo, hi) == pytest.approx((12 - 4.968275, 12 + 4.968275), abs=1e-5)


# ---------------------------------------------------------------- each off reaches the recipe

def trainer(data, tmp_path, sets: list[str], role: str = "train"):
    spec = registry.load_spec(REF)
    config = registry.resolve_hyperparameters(spec, sets)
    ref = spec.load_entry_class()()
    ref.setup(Context(config=config, data_root=data, seed=0, task=spec.task, work_dir=tmp_path,
                      show_progress=False, role=role))
    return ref


def test_each_off_reaches_the_recipe(fixture_data, tmp_path, monkeypatch):
    import torch
    import torch.nn.functional as F

    data, manifest = fixture_data
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    spec = registry.load_spec(REF)

    def first_batch(sets):
        ref = trainer(data, tmp_path, sets)
        seen = []
        ref.train_step = lambda x, y: seen.append((x.clone(), y.clone())) or torch.zeros(())
        ref.train_epoch(1)
        return ref, seen[0]

    ref, (x, y) = first_batch([])
    _, (x_off, _) = first_batch(spec.techniques["flip"]["off"])
    order, flips = sys.modules[type(ref).__module__].epoch_draw(len(ref.train_x), 0, 1)
    idx = order[:ref.batch]
    assert flips[idx].any()
    assert torch.equal(x_off, ref.train_x[idx])                 # flip off: the images as they are
    assert not torch.equal(x, ref.train_x[idx])                 # on: some of them mirrored

    # float32 (bf16=false): the step's loss is compared with float32's cross entropy to 1e-5
    plain = trainer(data, tmp_path, spec.techniques["label_smoothing"]["off"] + ["bf16=false"])
    xs, ys = plain.train_x[:32], plain.train_y[:32]
    logits = plain.model(xs)
    assert plain.train_step(xs, ys).item() == pytest.approx(F.cross_entropy(logits, ys).item(), rel=1e-5)
    assert plain.ctx.config["label_smoothing"] == 0

    warm, cold = trainer(data, tmp_path, []), trainer(data, tmp_path, spec.techniques["warmup"]["off"])
    assert warm.lr_at(0) == pytest.approx(0.2 * 0.04) and cold.lr_at(0) == pytest.approx(0.2)

    for sets, expect_tta in (([], True), (spec.techniques["flip_tta"]["off"], False)):
        predictor = trainer(data, tmp_path, sets, role="predict")
        predictor.net.eval()
        images = predictor.eval_x[:8]
        with torch.no_grad():
            alone = predictor.net(images)
            both = (alone + predictor.net(images.flip(3))) / 2
        assert torch.allclose(predictor.scores(images), both if expect_tta else alone)
        assert not torch.allclose(alone, both)


def test_the_lesion_plot_says_time_to_threshold(tmp_path, monkeypatch):
    """The time axis is named as analyze thresholds names it (a task's target may be an error rate,
    met at or under it): time to threshold, never time to accuracy."""
    from dawnbench import plots
    labels = []
    monkeypatch.setattr(plots, "save", lambda fig, plt, path: labels.extend(ax.get_ylabel() for ax in fig.axes))
    variants = [{"label": label, "converged": 2, "n": 2, "tta_seconds": analyze_lesion.stats([t, t + 1]),
                 "final_metric": analyze_lesion.stats([0.9, 0.91])} for label, t in (("recipe", 10.0), ("without flip", 12.0))]
    analyze_lesion.plot_lesion({"variants": variants, "metric": "top1", "threshold": 0.8, "reference": REF,
                                "kind": "lesion"}, tmp_path / "lesion.png")
    time_axis, metric_axis = labels
    assert time_axis.split(" (")[0] == "time to threshold" and "accuracy" not in time_axis
    assert metric_axis.startswith("final top1")


# ---------------------------------------------------------------- a real lesion study

@pytest.mark.recipe_run
def test_a_lesion_study_of_the_default(fixture_data, tmp_path):
    data, manifest = fixture_data
    default = (REPO / "references" / REF / "reference.toml").read_text()
    declared = re.search(r"(?ms)^\[techniques\]\n(.*?)\n*(?=^\[)", default).group(1)
    references = references_with(tmp_path, declared + "\n" + SLOW)
    out, results = tmp_path / "out", tmp_path / "results"
    proc = subprocess.run([PYTHON, "-m", "dawnbench", "analyze", "lesion", REF, "--off", "label_smoothing",
                           "--off", "slow", "--references", str(references), "--data", str(data), "--max-epochs", "1",
                           "--set", "epochs=1", "--threshold", "0.25", "--no-progress", "--no-save",
                           "--results", str(results), "--out", str(out)],
                          cwd=REPO, env=cli_env(**{datasets.MANIFEST_ENV: str(manifest)}), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-2:] == [str(out / "lesion.png"), str(out / "lesion.json")]
    assert (out / "lesion.png").read_bytes()[:4] == b"\x89PNG"
    numbers = json.loads((out / "lesion.json").read_text())
    recipe, smoothing, slow = numbers["variants"]
    assert [v["label"] for v in numbers["variants"]] == ["recipe", "without label_smoothing", "without slow"]

    def result(variant):
        (run_dir,) = [p.parent for p in Path(variant["series"]).parent.glob("seed*/result.json")]
        return json.loads((run_dir / "result.json").read_text())

    runs = {v["label"]: result(v) for v in numbers["variants"]}
    # what each variant ran with is what the harness recorded, and only its technique differs
    assert runs["without label_smoothing"]["hyperparameters"]["label_smoothing"] == 0
    assert runs["without slow"]["hyperparameters"]["lr"] == 1e-6
    assert runs["recipe"]["hyperparameters"]["label_smoothing"] == 0.1 and runs["recipe"]["hyperparameters"]["lr"] == 0.2
    for variant in (recipe, smoothing):
        run = runs[variant["label"]]
        assert run["status"] == "converged" and variant["converged"] == variant["n"] == 1
        assert variant["tta_seconds"]["median"] == run["tta_seconds"]
        assert variant["epochs_to_converge"]["median"] == run["epochs"]
        assert variant["final_metric"]["mean"] == run["metric_value"]
        assert variant["tta_seconds"]["interval95"] is None                  # one run: no interval
    assert smoothing["tta_vs_recipe"] == pytest.approx(runs["without label_smoothing"]["tta_seconds"] /
                                                       runs["recipe"]["tta_seconds"])
    # the variant known to be worse: it did not converge, says so, and ends lower
    assert runs["without slow"]["status"] == "DNC"
    assert (slow["converged"], slow["tta_seconds"]["median"], slow["tta_vs_recipe"]) == (0, None, None)
    assert slow["note"] == "no run of 1 converged"
    assert slow["final_metric"]["mean"] == runs["without slow"]["metric_value"] < 0.25 < recipe["final_metric"]["mean"]
    assert np.isclose(slow["final_metric"]["mean"], runs["without slow"]["history"][-1]["top1"])


def test_the_launcher_routes_a_lesion_study_as_a_run_of_its_reference():
    """Its runs' workers need the reference's framework, the study the tools' plotting: a lesion routed
    as the other analyses are ran its trainers in the tools environment, which has no PyTorch."""
    from dawnbench import launcher

    r = launcher.route(["analyze", "lesion", "--off", "flip", REF, "--factor", "--out", "x"])
    assert (r.env, r.workers) == (REF, True)
    assert {"torch", "matplotlib", "scipy"} <= set(r.needs)
    assert launcher.route(["analyze", "lesion", REF, "--help"]).env == launcher.TOOLS_ENV
    assert launcher.route(["analyze", "scaling", "x", "--out", "y"]).workers is False


def test_a_bad_lesion_is_one_line_before_any_run(tmp_path, capsys):
    from dawnbench.cli import main

    for argv, message in (([REF, "--off", "mixup"], "declares no technique 'mixup'"),
                          ([REF, "--off", "flip", "--set", "flip=true"], "'flip' is given twice"),
                          ([REF], "the following arguments are required: --off"),
                          ([REF, "--off", "flip", "--runs", "0"], "--runs 0: give a whole number from 1")):
        code = main(["analyze", "lesion", *argv, "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], err
        assert err[0].startswith("dawnbench analyze: error: ")
    assert not (tmp_path / "results").exists() and not (tmp_path / "out").exists()
