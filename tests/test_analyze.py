"""The analyses: the right numbers on known inputs, their files, and one error line per bad input."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from leaderboard_fixture import inference, train, write_entries

from dawnbench import analyze, entries, plots
from dawnbench.cli import main
from harness.tasks import TASKS

CIFAR10 = TASKS["cifar10"]

PNG = b"\x89PNG\r\n\x1a\n"


def run_folder(root: Path, name: str, rows: list[tuple[int, float, float]], *, tsv: bool = True,
               threshold: float = 0.92, reference: str = "fashion-mnist-cnn-pytorch", **system: str) -> Path:
    """A run folder as harness/runner.py leaves it: result.json (with `history`) and <reference>.tsv.
    rows: (epoch, hours, top-1 percent)."""
    folder = root / name
    folder.mkdir(parents=True)
    history = [{"epoch": e, "tta_seconds": h * 3600, "wall_seconds": h * 3600 + 1, "top1": a / 100} for e, h, a in rows]
    reached = next((r for r in history if r["top1"] >= threshold), None)
    result = {"version": "v1.0", "reference": reference, "task": "fashion-mnist", "metric": "top1",
              "threshold": threshold, "official_threshold": threshold == 0.92, "logFilename": f"{reference}.tsv",
              "status": "converged" if reached else "DNC", "tta_seconds": reached and reached["tta_seconds"],
              "history": history, **system}
    (folder / "result.json").write_text(json.dumps(result))
    if tsv:
        lines = ["epoch\thours\ttop1Accuracy"] + [f"{e}\t{h:.6f}\t{a:.2f}" for e, h, a in rows]
        (folder / f"{reference}.tsv").write_text("\n".join(lines) + "\n")
    return folder


def run(argv, capsys):
    code = main(["analyze", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out.strip().splitlines(), captured.err.strip().splitlines()


def outputs(out: Path, name: str, printed: list[str]) -> dict:
    png, data = out / f"{name}.png", out / f"{name}.json"
    assert printed == [str(png), str(data)]
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 5000
    return json.loads(data.read_text())


def test_threshold_steps_are_the_running_maxima():
    points = [(0.1, 80.0), (0.2, 90.0), (0.3, 88.0), (0.4, 90.0), (0.5, 93.0), (0.6, 92.0), (0.7, 95.0)]
    assert analyze.threshold_steps(points, CIFAR10) == [(80.0, 0.1), (90.0, 0.2), (93.0, 0.5), (95.0, 0.7)]
    # the TTA at a threshold is the hours of the first point at or over it, whatever the steps say
    for threshold in (79.0, 80.0, 85.0, 90.0, 90.5, 93.0, 94.0, 95.0):
        expected = next(h for h, v in points if v >= threshold)
        assert analyze.tta_at(points, threshold, CIFAR10) == expected
        step = next(h for v, h in analyze.threshold_steps(points, CIFAR10) if v >= threshold)
        assert step == expected
    assert analyze.tta_at(points, 95.01, CIFAR10) is None


def test_thresholds_command_on_an_entry_and_run_folders(tmp_path, capsys):
    tree = write_entries(tmp_path / "entries")
    alice = tree / "CIFAR10" / "train" / "alice_resnet18_p3.2xlarge_pytorch.json"
    with_tsv = run_folder(tmp_path / "results", "run-a", [(1, 0.01, 85.0), (2, 0.02, 91.0), (3, 0.03, 92.5)])
    history_only = run_folder(tmp_path / "results", "run-b", [(1, 0.015, 89.0), (2, 0.025, 92.1)], tsv=False)
    out = tmp_path / "out"
    code, printed, err = run(["thresholds", alice, with_tsv, history_only / "result.json", "--out", out], capsys)
    assert code == 0 and err == []
    numbers = outputs(out, "thresholds", printed)
    a, b, c = numbers["inputs"]
    assert a["label"] == "alice_resnet18_p3.2xlarge_pytorch" and a["task"] == "CIFAR10"
    # alice's log: 80 @ 0.1 h, 92 @ 0.3 h, 94.1 @ 0.5 h, 95 @ 0.7 h: at 90% the first row >= 90 is 0.3 h
    steps = {s["threshold"]: s["hours"] for s in a["steps"]}
    assert steps == {80.0: 0.1, 92.0: 0.3, 94.1: 0.5, 95.0: 0.7}
    assert analyze.tta_at([(s["hours"], s["threshold"]) for s in a["steps"]], 90.0, CIFAR10) == 0.3
    assert (a["task_threshold"], a["tta_hours_at_task_threshold"], a["tta_hms_at_task_threshold"]) == (94.0, 0.5, "0:30:00")
    assert a["range"] == [80.0, 95.0]
    assert b["label"] == "fashion-mnist-cnn-pytorch/run-a" and b["tta_hours_at_task_threshold"] == 0.03
    # no TSV: the history's fractions, in percent, and its seconds, in hours
    assert c["range"] == [89.0, 92.1] and c["tta_hours_at_task_threshold"] == pytest.approx(0.025)


# The DAWNBench seed's log (stanford-futuredata/dawn-bench-entries SQuAD/train/
# dawn_bidaf_1k80-ec2_tensorflow.tsv), its first 12 epochs: F1 0.731 at epoch 5, 0.7523 at epoch 10.
SEED_SQUAD = [(1, 0.7638888888888888, 0.5369029641), (2, 1.5238381055555557, 0.6606892943),
              (3, 2.2855751, 0.700419426), (4, 3.0448481305555557, 0.7229908705), (5, 3.806446388888889, 0.731013),
              (6, 4.5750864, 0.7370445132), (7, 5.346703258333334, 0.7413719296), (8, 6.100346997222223, 0.741997242),
              (9, 6.875142355555556, 0.7433483601), (10, 7.635886186111111, 0.7522723079),
              (11, 8.400275022222223, 0.7480614781), (12, 9.155176827777778, 0.7458581328)]


def squad_run(root: Path, name: str, rows: list[tuple[int, float, float]]) -> Path:
    """A SQuAD run folder as harness/runner.py leaves it: F1 as a fraction in result.json's history
    and in the TSV's f1Score column."""
    folder, reference = root / name, "squad-bidaf-tensorflow"
    folder.mkdir(parents=True)
    history = [{"epoch": e, "tta_seconds": h * 3600, "wall_seconds": h * 3600 + 1, "f1": f} for e, h, f in rows]
    reached = next((r for r in history if r["f1"] >= 0.75), None)
    result = {"version": "v1.0", "reference": reference, "task": "squad", "metric": "f1", "threshold": 0.75,
              "official_threshold": True, "logFilename": f"{reference}.tsv",
              "status": "converged" if reached else "DNC", "tta_seconds": reached and reached["tta_seconds"],
              "history": history}
    (folder / "result.json").write_text(json.dumps(result))
    lines = ["epoch\thours\tf1Score"] + [f"{e}\t{h:.6f}\t{f:.4f}" for e, h, f in rows]
    (folder / f"{reference}.tsv").write_text("\n".join(lines) + "\n")
    return folder


def test_thresholds_on_a_squad_run_reads_both_dawnbench_thresholds(tmp_path, capsys):
    """SQuAD's threshold has two sources (docs/RULES.md, "Tasks"): the entries README's 0.73 and the
    leaderboard's 0.75 (the task's). A SQuAD run's analysis gives the time at each; other tasks
    only their own."""
    seed = squad_run(tmp_path / "results", "seed", SEED_SQUAD)
    short = squad_run(tmp_path / "results", "short", SEED_SQUAD[:7])
    other = run_folder(tmp_path / "results", "fashion", [(1, 0.01, 85.0), (2, 0.02, 92.5)])
    code, printed, err = run(["thresholds", seed, short, other, "--out", tmp_path / "out"], capsys)
    assert code == 0 and err == []
    a, b, c = outputs(tmp_path / "out", "thresholds", printed)["inputs"]
    assert [(x["threshold"], x["epoch"], x["hms"]) for x in a["crossings"]] == [(0.73, 5, "3:48:23"), (0.75, 10, "7:38:09")]
    assert a["crossings"][0]["hours"] == pytest.approx(3.806446) and "README" in a["crossings"][0]["source"]
    assert a["crossings"][1]["hours"] == a["tta_hours_at_task_threshold"] == pytest.approx(7.635886)
    assert "tasks.toml" in a["crossings"][1]["source"]
    # seven epochs: past 0.73, never 0.75
    assert [(x["threshold"], x["epoch"]) for x in b["crossings"]] == [(0.73, 5), (0.75, None)]
    assert b["crossings"][1]["hours"] is None and b["tta_hours_at_task_threshold"] is None
    assert [(x["threshold"], x["epoch"]) for x in c["crossings"]] == [(92.0, 2)]


def test_curves_command(tmp_path, capsys):
    a = run_folder(tmp_path, "seed0", [(1, 0.01, 85.0), (2, 0.02, 92.5)])
    b = run_folder(tmp_path, "seed1", [(1, 0.012, 80.0), (2, 0.024, 90.0), (3, 0.036, 91.0)], threshold=0.85)
    code, printed, err = run(["curves", a, b, "--out", tmp_path / "out"], capsys)
    assert code == 0 and err == []
    x, y = outputs(tmp_path / "out", "curves", printed)["inputs"]
    assert x["points"] == [{"hours": 0.01, "value": 85.0}, {"hours": 0.02, "value": 92.5}]
    assert (x["tta_hours"], x["task_threshold"], x["run_threshold"], x["status"]) == (0.02, 92.0, None, "converged")
    # seed1 converged at its lowered 85% (the plot marks it too) and never reaches the task's 92%
    assert (y["tta_hours"], y["run_threshold"], y["status"]) == (None, 85.0, "converged")


def test_a_dollar_in_a_label_is_text_not_mathtext(tmp_path, capsys):
    path = train(tmp_path / "entries", "CIFAR10", "me_$\\frac{1_$_x", [(1, 0.1, 94.5)])
    code, printed, err = run(["curves", path, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    assert outputs(tmp_path / "out", "curves", printed)["inputs"][0]["label"] == "me_$\\frac{1_$_x"


def summary(folder: Path, ttas: list[float | None], stats: bool = True) -> Path:
    folder.mkdir(parents=True)
    runs = [{"seed": k, "run_dir": f"seed{k}", "status": "converged" if t is not None else "DNC",
             "tta_seconds": t, "epochs": 3, "metric_value": 0.93} for k, t in enumerate(ttas)]
    done = [t for t in ttas if t is not None]
    data = {"reference": "fashion-mnist-cnn-pytorch", "task": "fashion-mnist", "metric": "top1", "threshold": 0.92,
            "official_threshold": True, "n": len(ttas), "converged": len(done),
            "fraction_converged": len(done) / len(ttas), "runs": runs}
    if stats:
        data["tta_seconds"] = {"n": len(done), "min": min(done), "median": 110.0, "max": max(done), "mean": 113.33,
                               "stdev": 15.28, "cv": 0.1348, "olympic_mean": 110.0}
    (folder / "summary.json").write_text(json.dumps(data))
    return folder


def test_stability_command(tmp_path, capsys):
    a = summary(tmp_path / "fashion-mnist-cnn-pytorch" / "series-a", [100.0, 110.0, None, 130.0])
    b = summary(tmp_path / "fashion-mnist-cnn-pytorch" / "series-b", [60.0, 80.0], stats=False)
    code, printed, err = run(["stability", a, b / "summary.json", "--out", tmp_path / "out"], capsys)
    assert code == 0 and err == []
    x, y = outputs(tmp_path / "out", "stability", printed)["series"]
    assert x["label"] == "fashion-mnist-cnn-pytorch/series-a"
    assert (x["n"], x["converged"], x["dnc"], x["fraction_converged"]) == (4, 3, 1, 0.75)
    assert x["tta_seconds"] == [100.0, 110.0, 130.0]
    assert (x["median_seconds"], x["cv"], x["olympic_mean_seconds"]) == (110.0, 0.1348, 110.0)   # as summary.json says
    # no statistics in the summary: computed from the runs (sample stdev / mean)
    assert (y["n"], y["dnc"], y["median_seconds"]) == (2, 0, 70.0)
    assert y["cv"] == pytest.approx(14.142135623730951 / 70.0)


def test_cost_vs_time_command(tmp_path, capsys):
    tree = write_entries(tmp_path / "entries")
    code, printed, err = run(["cost-vs-time", tree, "--out", tmp_path / "out"], capsys)
    assert code == 0
    assert len(err) == 2 and all("skipped:" in line for line in err)     # the two entries that do not load
    numbers = outputs(tmp_path / "out", "cost-vs-time", printed)
    # every task with entries has its plots; an empty one says why (ImageNet: one inference entry, no training)
    assert set(numbers["tasks"]) == {"CIFAR10", "SQuAD", "ImageNet"}
    assert numbers["tasks"]["ImageNet"]["why"] == {"cost_vs_time": "no training entry reaches the threshold",
                                                   "time_vs_latency": "no training entry reaches the threshold"}
    cifar = numbers["tasks"]["CIFAR10"]
    cost = {r["entry"]: (r["hours"], r["cost_usd"]) for r in cifar["cost_vs_time"]}
    assert cost["alice_resnet18_p3.2xlarge_pytorch"] == (0.5, pytest.approx(1.53))
    assert cost["dave_dip_v100_pytorch"] == (0.75, 1.5)       # the first row at 94, not the later 94.5
    assert cost["bob_resnet50_k80_tensorflow"] == (3.0, pytest.approx(2.7))
    assert "frank_noprice_tpu_tensorflow" not in cost and "carol_cnn_cpu_pytorch" not in cost
    # figure 5: alice has both a training and an inference entry of the same name
    assert cifar["time_vs_latency"] == [{"entry": "alice_resnet18_p3.2xlarge_pytorch", "model": "resnet18",
                                         "train_hours": 0.5, "time_basis": "claimed", "claimed_train_hours": 0.5,
                                         "latency_ms": 10.0, "paired_by": "name"}]
    assert numbers["tasks"]["SQuAD"]["cost_vs_time"][0]["cost_usd"] == pytest.approx(0.9)


def test_each_bad_input_gets_one_line_and_nothing_is_written(tmp_path, capsys):
    tree = write_entries(tmp_path / "entries")
    good = run_folder(tmp_path, "good", [(1, 0.01, 93.0)])
    bad_tsv = run_folder(tmp_path, "bad", [(1, 0.01, 93.0)])
    (bad_tsv / "fashion-mnist-cnn-pytorch.tsv").write_text("epoch\thours\ttop1Accuracy\n1\tlate\t93\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    inference_entry = tree / "CIFAR10" / "inference" / "old_resnet_k80_caffe.json"
    out = tmp_path / "out"
    for analysis in ("curves", "thresholds"):
        code, printed, err = run([analysis, good, tmp_path / "missing", bad_tsv, empty, inference_entry,
                                  "--out", out], capsys)
        assert code == 2 and printed == []
        assert len(err) == 4, err
        assert "missing: no such file" in err[0]
        assert "fashion-mnist-cnn-pytorch.tsv:2: not a number" in err[1]
        assert "not a run folder" in err[2]
        assert "inference entry has no training log" in err[3]
        assert all(line.startswith("dawnbench analyze: error: ") for line in err)
    code, printed, err = run(["stability", good, tmp_path / "nope.json", "--out", out], capsys)
    assert code == 2 and len(err) == 2 and "no summary.json" in err[0] and "no summary.json" in err[1]
    broken = tmp_path / "s"
    broken.mkdir()
    (broken / "summary.json").write_text('{"runs": 3}')
    code, printed, err = run(["stability", broken, "--out", out], capsys)
    assert code == 2 and len(err) == 1 and "not a series summary" in err[0]
    code, printed, err = run(["cost-vs-time", empty, tree / "CIFAR10" / "train" / "broken_x_y_z.json",
                              "--out", out], capsys)
    assert code == 2 and len(err) == 2 and "no entries in it" in err[0] and "not readable JSON" in err[1]
    assert not out.exists()


# ---------------------------------------------------------------- what the figures look like

@pytest.fixture
def figures(monkeypatch) -> list:
    """Every figure the analyses save, kept (and drawn with Agg) for a look at its axes and legends."""
    kept, save = [], plots.save

    def keep(fig, plt, path):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        save(fig, plt, path)
        FigureCanvasAgg(fig).draw()          # closing it left a canvas that cannot draw
        kept.append(fig)
    monkeypatch.setattr(plots, "save", keep)
    return kept


def legends(fig) -> list:
    return [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]


def assert_legends_outside(fig) -> None:
    renderer = fig.canvas.get_renderer()
    found = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]
    assert found
    for ax, legend in found:
        box, data = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert not box.overlaps(data) and box.x0 > data.x1, (box, data)     # right of the data area, clear of it


def test_cost_vs_time_labels_stay_inside_the_axes(tmp_path, figures):
    """A point's label was always drawn to its upper right, so the points near the right and top edges
    had theirs cut by the axes ("BiDA" for BiDAF). Each label now lies whole inside its axes."""
    tree = tmp_path / "entries"
    for k, (hours, price) in enumerate([(0.1, 1.0), (1.0, 1.0), (10.0, 1.0), (10.5, 9.0), (5.0, 9.5)]):
        train(tree, "CIFAR10", f"a{k}_AVeryLongModelNameIndeed-{k}_gpu_pytorch", [(1, hours, 95.0)], costPerHour=price)
        inference(tree, "CIFAR10", f"a{k}_AVeryLongModelNameIndeed-{k}_gpu_pytorch", latency=100.0 - 20 * k,
                  top1Accuracy=95.0)
    numbers = analyze.cost_vs_time_numbers(analyze.read_entries([tree], lambda line: None))
    analyze.plot_cost_vs_time(numbers, tmp_path / "plot.png")
    [fig] = figures
    renderer = fig.canvas.get_renderer()
    labelled = [(ax, t) for ax in fig.axes for t in ax.texts if t.get_text().startswith("AVeryLong")]
    assert len(labelled) == 10
    for ax, text in labelled:
        box, area = text.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0 and box.y1 <= area.y1, text.get_text()


def test_curves_legends_name_the_time_framework_and_hardware_outside_the_axes(tmp_path, capsys, figures):
    h100 = run_folder(tmp_path / "a", "seed0", [(1, 0.01, 85.0), (2, 0.02, 92.5)],
                      framework="PyTorch 2.13.0", hardware="1 x NVIDIA H100 80GB HBM3")
    cpu = run_folder(tmp_path / "b", "seed0", [(1, 0.5, 91.0)], framework="PyTorch 2.12.1", hardware="AMD EPYC (16 cores)")
    bare = run_folder(tmp_path / "c", "seed1", [(1, 0.03, 93.0)])
    code, printed, err = run(["curves", h100, cpu, bare, "--out", tmp_path / "out"], capsys)
    assert code == 0 and err == []
    numbers = outputs(tmp_path / "out", "curves", printed)["inputs"]
    assert [(i["framework"], i["hardware"]) for i in numbers] == [
        ("PyTorch 2.13.0", "1 x NVIDIA H100 80GB HBM3"), ("PyTorch 2.12.1", "AMD EPYC (16 cores)"), (None, None)]
    [fig] = figures
    [legend] = legends(fig)
    assert [t.get_text() for t in legend.get_texts()][:3] == [
        "fashion-mnist-cnn-pytorch/seed0 (TTA 0:01:12)\nPyTorch 2.13.0 on 1 x NVIDIA H100 80GB HBM3",
        "fashion-mnist-cnn-pytorch/seed0 (threshold not reached)\nPyTorch 2.12.1 on AMD EPYC (16 cores)",
        "fashion-mnist-cnn-pytorch/seed1 (TTA 0:01:48)"]
    assert_legends_outside(fig)


def test_thresholds_and_stability_legends_sit_outside_the_axes(tmp_path, capsys, figures):
    runs = [run_folder(tmp_path, f"seed{k}", [(1, 0.01, 80.0 + k), (2, 0.02, 92.5), (3, 0.03, 95.0)]) for k in range(6)]
    assert run(["thresholds", *runs, "--out", tmp_path / "t"], capsys)[0] == 0
    series = [summary(tmp_path / "fashion-mnist-cnn-pytorch" / f"s{k}", [100.0, 110.0 + k, None]) for k in range(3)]
    assert run(["stability", *series, "--out", tmp_path / "s"], capsys)[0] == 0
    assert len(figures) == 2
    for fig in figures:
        assert_legends_outside(fig)


def assert_spread_around(lo: float, hi: float, value: float) -> None:
    margin = 0.1 * abs(value)
    assert math.isfinite(lo) and math.isfinite(hi) and lo <= value - margin and value + margin <= hi, (lo, hi, value)


def test_a_single_point_gets_limits_around_it(tmp_path, capsys, figures):
    one = run_folder(tmp_path, "one", [(1, 0.02, 93.0)])
    assert run(["curves", one, "--out", tmp_path / "c"], capsys)[0] == 0
    assert run(["thresholds", one, "--out", tmp_path / "t"], capsys)[0] == 0
    tree = tmp_path / "entries"
    train(tree, "CIFAR10", "solo_net_v100_pytorch", [(1, 0.25, 93.0), (2, 0.5, 94.5)], costPerHour=3.06)
    assert run(["cost-vs-time", tree, "--out", tmp_path / "v"], capsys)[0] == 0
    curves, thresholds, cost = figures
    [ax] = curves.axes
    assert_spread_around(*ax.get_xlim(), 0.02 * 3600)         # one epoch at 72 s (the axis in seconds)
    [ax] = thresholds.axes
    assert_spread_around(*ax.get_ylim(), 0.02 * 3600)
    ax = cost.axes[0]
    assert_spread_around(*ax.get_xlim(), 0.5)
    assert_spread_around(*ax.get_ylim(), 0.5 * 3.06)
    empty = cost.axes[1]             # no inference entry: no latency panel data, and no scale pretending there is
    assert (list(empty.get_xticks()), list(empty.get_yticks())) == ([], [])
    # the same on a log axis: a decade around the value
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.set_yscale("log")
    ax.plot([2.0], [40.0], "o")
    plots.single_values_spread(ax)
    assert_spread_around(*ax.get_xlim(), 2.0)
    assert_spread_around(*ax.get_ylim(), 40.0) and ax.get_ylim()[0] > 0
    plt.close(fig)


def test_training_time_vs_latency_pairs_the_v1_imagenet_entries_by_team_and_model(tmp_path):
    """Issue 47: ImageNet's "training time vs inference latency" plot said "no entries" beside 27 training and
    22 inference entries: DAWNBench v1 named an ImageNet entry's training and inference files apart
    (dawn_resnet152_b_8k80_ec2_mxnet, dawn_resnet152_1k80-ec2_mxnet). A pair is now also a team's model
    ("ResNet152" is "ResNet 152"): its fastest training beside its lowest latency; a plot with no point says why."""
    from v1_official_order import ENTRIES

    from dawnbench import ranking
    loaded, _ = ranking.load_all(ENTRIES)
    numbers = analyze.cost_vs_time_numbers(loaded)
    imagenet = numbers["tasks"]["ImageNet"]
    pairs = {(p["entry"], p.get("inference_entry")): p for p in imagenet["time_vs_latency"]}
    assert imagenet["why"]["time_vs_latency"] is None and {p["paired_by"] for p in pairs.values()} == {"team and model"}
    dawn = pairs[("dawn_resnet152_b_8k80_ec2_mxnet", "dawn_resnet152_1p100-gc_tensorflow")]    # fastest, lowest
    assert dawn["model"] == "ResNet152" and dawn["latency_ms"] == min(
        entries.latency_ms(e) for e in loaded if e.task.display_name == "ImageNet" and e.kind == "inference"
        and e.fields["author"] == "Stanford DAWN")
    assert {p[0].split("_")[0] for p in pairs} >= {"dawn", "Intel", "huaweicloud"}
    # CIFAR10's same-named pairs are as before; a tree whose entries share nothing says so
    assert {p["paired_by"] for p in numbers["tasks"]["CIFAR10"]["time_vs_latency"]} == {"name"}
    train(tmp_path, "FashionMNIST", "a_cnn_cpu_pytorch", [(1, 0.1, 93.0)])
    inference(tmp_path, "FashionMNIST", "b_mlp_cpu_pytorch", latency=1.0, top1Accuracy=93.0)
    alone = analyze.cost_vs_time_numbers(entries.load_tree(tmp_path)[0])["tasks"]["FashionMNIST"]
    assert alone["why"] == {"cost_vs_time": "no priced entries: 1 training entry has no price",
                            "time_vs_latency": "no training and inference entry share a name or a team and model "
                                               "(1 training, 1 inference entries)"}
    analyze.plot_cost_vs_time({"tasks": {"FashionMNIST": alone}}, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 5_000
