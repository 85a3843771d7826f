"""A real series of the default (`dawnbench run fashion-mnist-cnn-pytorch --runs 3`, one epoch each to a
lowered threshold, on a fifth of Fashion-MNIST: conftest's shared `default_series`): its summary.json carries the evidence
(dawnbench.evidence), `verify` recomputes it from the run folders, and neither an edited summary.json
nor an edited entry passes."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from scipy import stats

from dawnbench import validate_entries
from dawnbench.cli import main

KEYS = {"rule", "n", "n_min", "alpha", "threshold", "metric_mean", "metric_stdev", "p_value", "tta_mean_seconds",
        "tta_median_seconds", "tta_ci95_seconds", "ci_method", "verdict", "reason", "by_rule"}


def results_of(series):
    return [json.loads((series / f"seed{k}" / "result.json").read_text()) for k in range(3)]


def edited(path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value, indent=2))


def test_the_series_summary_carries_its_evidence_and_verifies(default_series, on_fashion_subset, capsys):
    a = json.loads((default_series / "summary.json").read_text())["acceptance"]
    assert set(a) == KEYS and (a["rule"], a["n"], a["threshold"], a["ci_method"]) == ("single", 3, 0.5, "t")
    runs = results_of(default_series)
    metrics = [r["metric_value"] for r in runs]
    times = [r["tta_seconds"] for r in runs]
    assert all(r["status"] == "converged" for r in runs) and a["verdict"] == "accepted"
    assert a["metric_mean"] == pytest.approx(np.mean(metrics)) and a["metric_stdev"] == pytest.approx(np.std(metrics, ddof=1))
    assert a["p_value"] == pytest.approx(stats.ttest_1samp(metrics, 0.5, alternative="greater").pvalue, rel=1e-9)
    lo, hi = stats.t.interval(0.95, 2, loc=np.mean(times), scale=stats.sem(times))
    assert a["tta_ci95_seconds"] == [pytest.approx(lo), pytest.approx(hi)]
    assert (a["tta_mean_seconds"], a["tta_median_seconds"]) == (pytest.approx(np.mean(times)), np.median(times))
    assert main(["verify", str(default_series), "--data", str(on_fashion_subset)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:3]] == ["ok   seed0", "ok   seed1", "ok   seed2"]
    assert out[-1].startswith("verified: a series of 3 runs and its summary"), out


@pytest.mark.parametrize("change, says", [
    (lambda s: s["acceptance"].update(p_value=0.0001), "summary.json's acceptance.p_value is 0.0001, its runs give "),
    (lambda s: s["acceptance"].update(verdict="refused"), "summary.json's acceptance.verdict is refused"),
    (lambda s: s["acceptance"].update(tta_ci95_seconds=[1.0, 2.0]), "acceptance.tta_ci95_seconds[0] is 1.0"),
    (lambda s: s["tta_seconds"].update(median=0.5), "summary.json's tta_seconds.median is 0.5"),
], ids=["p_value", "verdict", "interval", "median"])
def test_a_hand_edited_summary_does_not_verify_nor_submit(default_series, on_fashion_subset, tmp_path, capsys, change, says):
    series = shutil.copytree(default_series, tmp_path / "series")
    edited(series / "summary.json", change)
    assert main(["verify", str(series), "--data", str(on_fashion_subset)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("disagreement: ") and says in lines[-1], lines[-1]
    assert main(["submit", str(series), "--out", str(tmp_path / "entries"), "--allow-unofficial",
                 "--data", str(on_fashion_subset)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "entries").exists()


def test_a_run_taken_out_of_a_series_does_not_verify(default_series, on_fashion_subset, tmp_path, capsys):
    """A run taken out of the middle and summary.json rewritten to match (by the series' own writer): a
    series runs consecutive seeds, so the gap shows. (Its first or last run taken out leaves a shorter
    series, which its folder alone cannot tell from one run so: docs/RULES.md, "Acceptance rules".)"""
    from dawnbench import series as series_module
    series = shutil.copytree(default_series, tmp_path / "series")
    shutil.rmtree(series / "seed1")
    kept = [{**r, "run_dir": f"seed{k}"} for k, r in enumerate(results_of(default_series)) if k != 1]
    series_module._write_summary(series, kept, 2, interrupted=False, in_progress=False)
    assert main(["verify", str(series), "--data", str(on_fashion_subset)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed1/ is missing between seed0 and seed2" in err[0], err


def test_the_entry_of_a_series_carries_its_acceptance_and_an_edited_one_does_not_validate(
        default_series, on_fashion_subset, tmp_path, capsys):
    out = tmp_path / "entries"
    assert main(["submit", str(default_series), "--out", str(out), "--allow-unofficial", "--data", str(on_fashion_subset),
                 "--code-url", "https://example.org/evidence-test"]) == 0
    (entry,) = (out / "FashionMNIST" / "train").glob("*.json")
    fields = json.loads(entry.read_text())
    summary = json.loads((default_series / "summary.json").read_text())
    assert fields["runs"]["acceptance"] == summary["acceptance"]
    assert sorted(p.name for p in entry.with_suffix(".series").iterdir()) == ["seed0", "seed1", "seed2"]
    capsys.readouterr()
    assert validate_entries.main([str(out), "--allow-unofficial"]) == 0, capsys.readouterr().out
    capsys.readouterr()

    for change, field in ((lambda f: f["runs"]["acceptance"].update(p_value=1e-9), "runs.acceptance.p_value"),
                          (lambda f: f["runs"]["acceptance"].update(rule="mean"), "runs.acceptance.rule"),
                          (lambda f: f["runs"].update(median_tta_seconds=0.1), "runs.median_tta_seconds")):
        tree = shutil.copytree(out, tmp_path / f"edited-{field}")
        edited(tree / entry.relative_to(out), change)
        assert validate_entries.main([str(tree), "--allow-unofficial"]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert any(f": {field}: " in line and "is not what its series' runs give" in line for line in lines), lines

    tree = shutil.copytree(out, tmp_path / "without-a-run")
    shutil.rmtree(tree / entry.relative_to(out).with_suffix(".series") / "seed1")
    assert validate_entries.main([str(tree), "--allow-unofficial"]) == 1
    assert "seed1/ is missing between seed0 and seed2" in capsys.readouterr().out
