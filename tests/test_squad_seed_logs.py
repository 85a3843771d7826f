"""The seed's four BiDAF logs (dawn-bench-entries SQuAD/train/dawn_bidaf_*.tsv) against what the
BiDAF references state about them (issue 36): the epochs at which each first reaches F1 0.75 and
the margin of the [budget] max_epochs over them are computed from the logs by
bench.squad_seed_logs, never typed: the READMEs hold its output, the anchor rows and the
reference.toml comments its figures."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bench import squad_seed_logs

REPO = Path(__file__).resolve().parent.parent
REFS = ("squad-bidaf-pytorch", "squad-bidaf-tensorflow")


def test_the_seed_logs_as_read():
    logs = squad_seed_logs.summary()
    assert len(logs) == 4 and all(s["epochs"] == 20 for s in logs.values())
    assert {name: s["first"] for name, s in logs.items()} == {
        "dawn_bidaf_16vCPUs-gc_tensorflow": 9, "dawn_bidaf_1k80-ec2_tensorflow": 10,
        "dawn_bidaf_1k80-gc_tensorflow": 12, "dawn_bidaf_1p100-dawn_tensorflow": 10}
    assert max(s["best"] for s in logs.values()) < 0.76 and all(s["last"] < 0.75 for s in logs.values())


@pytest.mark.parametrize("name", REFS)
def test_the_readme_holds_the_logs_figures(name):
    text = (REPO / "references" / name / "README.md").read_text(encoding="utf-8")
    begin, end = text.index(squad_seed_logs.BEGIN), text.index(squad_seed_logs.END)
    with open(REPO / "references" / name / "reference.toml", "rb") as f:
        budget = tomllib.load(f)["budget"]["max_epochs"]
    assert text[begin + len(squad_seed_logs.BEGIN):end].strip() == squad_seed_logs.render(budget)


@pytest.mark.parametrize("name", REFS)
def test_the_budget_and_its_margin_as_stated(name):
    """The anchor's epochs row and reference.toml's budget comment quote the first crossings and the margin."""
    logs = squad_seed_logs.summary()
    firsts = sorted(s["first"] for s in logs.values())
    directory = REPO / "references" / name
    with open(directory / "reference.toml", "rb") as f:
        budget = tomllib.load(f)["budget"]["max_epochs"]
    stated = f"first reach F1 0.75 at epochs {firsts[0]}-{firsts[-1]}"
    margin = f"{budget - firsts[-1]} epochs"
    comment = next(line for line in (directory / "reference.toml").read_text().splitlines() if line.startswith("max_epochs"))
    assert stated in comment and f"{margin} of margin" in comment
    with open(directory / "anchor.toml", "rb") as f:
        (row,) = [r for r in tomllib.load(f)["row"] if r["item"] == "epochs"]
    assert f"at most {budget}" in row["ours"] and stated in row["deviation"]
    assert f"{margin} over the latest first crossing" in row["deviation"]
