"""The convergence guard (dawnbench.convergence): a run that claims a fixed recipe's hyperparameters but
converges in significantly fewer epochs than the recipe's published distribution is flagged for review."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from leaderboard_fixture import make_run
from scipy import stats

from dawnbench import convergence, submit, validate_entries
from harness.tasks import TASKS

REPO = Path(__file__).resolve().parent.parent
(DEFAULT,) = [r for r in convergence.load() if r.name == "fashion-mnist-cnn-pytorch"]


def run(epochs: int, **hyperparameters) -> dict:
    return {"status": "converged", "task": "fashion-mnist", "threshold": 0.92, "epochs": epochs,
            "hyperparameters": {**DEFAULT.hyperparameters, "seed_note": "extra keys claim nothing", **hyperparameters}}


def test_each_recipe_is_its_reference_s_as_it_is_now():
    """The distribution was measured on these hyperparameters: a recipe changed since is measured again."""
    for recipe in convergence.load():
        with open(REPO / "references" / recipe.name / "reference.toml", "rb") as f:
            toml = tomllib.load(f)
        assert recipe.hyperparameters == toml["hyperparameters"], recipe.name
        assert (recipe.task, recipe.threshold) == (toml["task"], TASKS[toml["task"]].threshold)
        assert recipe.source and len(recipe.epochs) >= 5


def test_a_run_claiming_the_recipe_in_fewer_epochs_is_flagged():
    (flag,) = convergence.review_flags([run(3)])
    p = stats.ttest_1samp(DEFAULT.epochs, 3, alternative="greater").pvalue
    assert p < 0.05 and f"p = {p:.2g} < 0.05" in flag and "with the hyperparameters of fashion-mnist-cnn-pytorch" in flag
    assert "issue37-bf16-seeds.txt" in flag         # the distribution's source is named
    # a series: Welch's test of its epochs against the recipe's
    series = [run(3), run(3), run(4)]
    expected = stats.ttest_ind([3, 3, 4], DEFAULT.epochs, equal_var=False, alternative="less").pvalue
    assert convergence.p_fewer([3, 3, 4], DEFAULT.epochs) == pytest.approx(expected)
    assert bool(convergence.review_flags(series)) == (expected < 0.05)


@pytest.mark.parametrize("result", [
    run(4),                                               # the recipe's own epochs
    run(5),
    run(2, lr=0.3),                                       # another recipe: it claims nothing
    {**run(2), "threshold": 0.5},                         # a lowered threshold converges sooner anyway
    {**run(2), "status": "DNC"},
    {**run(2), "task": "cifar10"},
], ids=["same", "slower", "other-lr", "lowered", "dnc", "other-task"])
def test_what_is_not_flagged(result):
    assert convergence.review_flags([result]) == []


def test_validate_flags_the_entry_and_submit_writes_it(fashion_root, tmp_path, monkeypatch, capsys):
    """A fork of the default that keeps its hyperparameters and claims 92% after 2 epochs (the files
    agree with each other: its code is what is suspicious): valid, and for review on its page."""
    monkeypatch.setenv("DAWNBENCH_DATA", str(fashion_root))
    folder = make_run(tmp_path / "run", task="fashion-mnist", reference="fashion-mnist-fast-pytorch", epochs=2,
                      final=0.925)
    result = json.loads((folder / "result.json").read_text())
    result["hyperparameters"] = dict(DEFAULT.hyperparameters)
    (folder / "result.json").write_text(json.dumps(result, indent=2))
    out = tmp_path / "entries"
    assert submit.main([str(folder), "--out", str(out), "--allow-unofficial", "--code-url",
                        "https://example.org/fork"]) == 0
    capsys.readouterr()
    assert validate_entries.main([str(out), "--allow-unofficial"]) == 0
    said = capsys.readouterr().out
    assert ": review_flags: warning: for review: converges in 2 epochs" in said and "(1 entry for review" in said, said
    (path,) = (out / "FashionMNIST" / "train").glob("*.json")
    entry, _ = validate_entries.load_entry(path, out)
    assert len(entry.review_flags) == 1 and not entry.notes
