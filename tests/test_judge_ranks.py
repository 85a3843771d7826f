"""Issue 46, sections 4 and 9: the board ranks what the judge measured, not what the entrant claims.

Each test is an attack that went through on 427ce43, rebuilt as an entrant would: a run folder whose
clock was scaled by 0.85 (consistent, so `verify` passes) ranked first by its claim and was
"reproduced" within the one-sided 25%; a hand-typed v1-format entry for a task v1 never had ranked
#1 "not verified"; an entry whose `price` record was made under a prices table of its own validated.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from leaderboard_fixture import edit_json, make_run, train, write_reproduction
from test_submit import cifar10_eval, labels_here  # noqa: F401  (fixtures: the labels every run here is scored against)

from dawnbench import entries, prices, ranking, submit, validate_entries
from dawnbench.cli import main as cli_main

H100 = "1 x NVIDIA H100 80GB HBM3"      # what make_run's harness records


def board(tree: Path, capsys) -> dict:
    assert cli_main(["leaderboard", str(tree), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def submitted(tree: Path, run: Path, author: str) -> Path:
    assert submit.main([str(run), "--out", str(tree), "--author", author]) == 0
    (entry,) = (tree / "CIFAR10" / "train").glob(f"{author}_*.json")
    return entry


# ---------------------------------------------------------------- attack 5: a forged time within the tolerance

def test_a_clock_forged_to_0_85_is_ranked_by_the_judges_measurement_never_its_claim(tmp_path, capsys):
    """Honest's run takes 1.0 of a unit; Forged's code is slower (1.06) but its folder's clock readings
    were scaled by 0.85 (0.90: a consistent folder, it verifies), so its claim ranked it first. The judge
    runs both again: on its own machine the forgery is 15% off its measurement, outside the spread the
    judge measured, and ranks apart as submitted; and where the judge's machine is so noisy that the
    forgery passes, the verified tier ranks the judge's time, where the forgery is second."""
    tree = tmp_path / "entries"
    honest = submitted(tree, make_run(tmp_path / "honest", hours_per_epoch=0.0030), "Honest")
    forged = submitted(tree, make_run(tmp_path / "forged", hours_per_epoch=0.0032 * 0.85), "Forged")
    capsys.readouterr()
    claimed = {p: json.loads(p.read_text())["tta_seconds"] for p in (honest, forged)}
    assert claimed[forged] < claimed[honest]                  # by its claim, first
    write_reproduction(entries.run_folder(honest), tta_factors=(1.0, 1.01, 0.99))
    quiet = write_reproduction(entries.run_folder(forged), tta_factors=tuple(f / 0.85 for f in (1.0, 1.01, 0.99)))
    assert quiet["verdict"] == "not reproduced" and "(the claim -15% of it, tolerance \u00b15%)" in quiet["differences"][0]

    cifar = board(tree, capsys)["tasks"]["CIFAR10"]
    (row,) = cifar["train_time"]
    assert row["entry"] == honest.stem and row["time_basis"] == "judge" and row["judge_runs"] == 3
    assert row["hours"] == pytest.approx(claimed[honest] / 3600, rel=1e-3) and row["judge_hardware"] == H100
    (apart,) = cifar["train_submitted"]
    assert apart["entry"] == forged.stem and apart["time_basis"] == "claimed" and apart["reproduced"] is False
    assert all(forged.stem not in {r["entry"] for r in cifar[t]} for t in ("train_time", "train_cost", "train_cost_given"))

    # a noisy judge (cv 12%: tolerance 36%) lets the forgery through as reproduced: it still gains nothing
    noisy = write_reproduction(entries.run_folder(forged), tta_factors=tuple(f / 0.85 for f in (1.0, 1.12, 0.88)))
    assert noisy["verdict"] == "reproduced"
    cifar = board(tree, capsys)["tasks"]["CIFAR10"]
    assert [r["entry"] for r in cifar["train_time"]] == [honest.stem, forged.stem]
    second = cifar["train_time"][1]
    assert second["hours"] == pytest.approx(claimed[forged] / 0.85 / 3600, rel=1e-3)      # the judge's median
    assert second["claimed_hours"] == pytest.approx(claimed[forged] / 3600, rel=1e-3)     # the claim, beside it
    assert second["cost_usd"] == pytest.approx(second["hours"] * second["costPerHour"])
    assert cifar["train_submitted"] == []


def test_the_boards_cost_vs_time_plot_draws_the_judges_measurement_the_claim_beside_it(tmp_path, capsys, monkeypatch):
    """Forged's claim (0.85 of its time) is what the board's cost-vs-time plot drew, in the verified tier
    too: the judge's measurement ranked it second in the table while the plot showed it the fastest and
    cheapest. The plot draws what the tables rank: the judge's median for a reproduced entry, its claim
    beside it (and joined to it), and a claim only for an entry that ranks apart as submitted."""
    from dawnbench import analyze
    tree = tmp_path / "entries"
    honest = submitted(tree, make_run(tmp_path / "honest", hours_per_epoch=0.0030), "Honest")
    forged = submitted(tree, make_run(tmp_path / "forged", hours_per_epoch=0.0032 * 0.85), "Forged")
    claimant = submitted(tree, make_run(tmp_path / "claimant", hours_per_epoch=0.0031), "Claimant")
    capsys.readouterr()
    write_reproduction(entries.run_folder(honest), tta_factors=(1.0, 1.01, 0.99))
    assert write_reproduction(entries.run_folder(forged),
                              tta_factors=tuple(f / 0.85 for f in (1.0, 1.12, 0.88)))["verdict"] == "reproduced"
    claimed = {p.stem: json.loads(p.read_text())["tta_seconds"] / 3600 for p in (honest, forged, claimant)}
    drawn, draw = [], analyze.plot_cost_vs_time

    def recorded(numbers, path, tasks=None):
        drawn.append(numbers["tasks"]["CIFAR10"])
        draw(numbers, path, tasks)          # and drawn: the claims' markers and the legend must plot
    monkeypatch.setattr(analyze, "plot_cost_vs_time", recorded)
    out = tmp_path / "site"
    assert cli_main(["leaderboard", str(tree), "--out", str(out)]) == 0
    capsys.readouterr()
    assert (out / "CIFAR10" / "cost-vs-time.png").stat().st_size > 0
    (cifar,) = drawn
    points = {r["entry"]: r for r in cifar["cost_vs_time"]}
    assert set(points) == {honest.stem, forged.stem, claimant.stem}
    table = {r["entry"]: r for r in board(tree, capsys)["tasks"]["CIFAR10"]["train_time"]}
    for stem in (forged.stem, honest.stem):        # the verified tier: the judge's time, as the table ranks it
        p = points[stem]
        assert p["hours"] == pytest.approx(table[stem]["hours"]) and p.get("time_basis") == "judge"
        assert p["claimed_hours"] == pytest.approx(claimed[stem]) and p["cost_usd"] == pytest.approx(table[stem]["cost_usd"])
    assert points[forged.stem]["hours"] == pytest.approx(claimed[forged.stem] / 0.85, rel=1e-3)
    assert points[forged.stem]["hours"] > points[honest.stem]["hours"]       # second, as in the table
    assert (points[claimant.stem]["time_basis"], points[claimant.stem]["hours"]) == ("claimed", claimed[claimant.stem])
    beside = {p["entry"]: xy for xy, p in analyze._claims_beside(cifar["cost_vs_time"], "cost_vs_time")}
    assert beside[forged.stem] == pytest.approx((claimed[forged.stem], claimed[forged.stem] * points[forged.stem]["costPerHour"]))
    assert claimant.stem not in beside


def test_a_reproduction_record_without_a_measured_time_is_not_ranked_by_the_judge(tmp_path, capsys):
    """A record that says "reproduced" but names no time of the judge's (edited, or of another tool) is
    not what the verified tier ranks by: shown as not tried, the entry ranks apart by its claim."""
    tree = tmp_path / "entries"
    entry = submitted(tree, make_run(tmp_path / "run"), "Claim")
    capsys.readouterr()
    record = write_reproduction(entries.run_folder(entry))
    path = entries.run_folder(entry) / "reproduction.json"
    for runs in ([], [{"figures": {"tta_seconds": -1.0}, "environment": {"hardware": H100}}],
                 [{"figures": {"tta_seconds": 5.0}, "environment": {"hardware": H100}},
                  {"figures": {"tta_seconds": 5.0}, "environment": {"hardware": "8 x NVIDIA H100 80GB HBM3"}}]):
        path.write_text(json.dumps({**record, "reproduced": runs}))
        cifar = board(tree, capsys)["tasks"]["CIFAR10"]
        assert cifar["train_time"] == []
        (row,) = cifar["train_submitted"]
        assert row["reproduction"].startswith("not tried: reproduction.json holds no time the reproduction measured")


def test_a_reproduction_in_the_references_image_is_not_the_judges_measurement(tmp_path, capsys):
    """`reproduce` chose docker by default wherever an engine answered, and in the reference's image the judge
    is the image's: `/opt/harness` and its interpreter sit in layers the entry's own Dockerfile builds, which
    could halve its clock there, and the verified tier ranked that time. Now a reproduction runs natively (this
    checkout's judge) unless asked, and one run in the image ranks apart, saying so."""
    from dawnbench import entry_status, reproduce
    tree = tmp_path / "entries"
    entry = submitted(tree, make_run(tmp_path / "run"), "Imaged")
    capsys.readouterr()
    record = write_reproduction(entries.run_folder(entry), tta_factors=(1.0, 1.01, 0.99))
    assert record["verdict"] == "reproduced"
    in_image = [{**r, "environment": {**r["environment"], "runtime": "docker"}} for r in record["reproduced"]]
    (entries.run_folder(entry) / "reproduction.json").write_text(json.dumps({**record, "runtime": "docker",
                                                                            "reproduced": in_image}))
    cifar = board(tree, capsys)["tasks"]["CIFAR10"]
    assert cifar["train_time"] == []
    (row,) = cifar["train_submitted"]
    assert row["reproduction"] == f"not tried: {entry_status.IMAGE_JUDGE}" and row["time_basis"] == "claimed"
    assert reproduce.choose_runtime(None)[0] == reproduce.choose_runtime("native")[0] == "native"


# ---------------------------------------------------------------- attack 11: an entry with no run folder

def test_a_hand_typed_v1_entry_for_a_new_task_ranks_nowhere(tmp_path, capsys):
    """A v1-format entry typed by hand (no run folder) for FashionMNIST, a task v1 never had, ranked #1
    with a "not verified" badge. An entry with no run ranks only as a published v1 entry, by its files'
    sha256 (the archive list); this one is listed as not ranked, with the reason and what to do."""
    train(tmp_path, "FashionMNIST", "typed_cnn_cpu_pytorch", [(1, 0.001, 93.0)], costPerHour=0.1)
    result = board(tmp_path, capsys)
    assert all(rows == [] for rows in result["tasks"]["FashionMNIST"].values())
    (unranked,) = result["unranked"]
    assert unranked["entry"] == "typed_cnn_cpu_pytorch" and unranked["reason"] == ranking.NOT_ARCHIVED
    assert "dawnbench submit" in unranked["reason"]
    # the same file under a maintainer's archive list ranks there, apart from every other tier
    listed = tmp_path.with_name(tmp_path.name + ".sha256")
    listed.write_text(f"{hashlib.sha256((tmp_path / 'FashionMNIST/train/typed_cnn_cpu_pytorch.json').read_bytes()).hexdigest()}"
                      f"  FashionMNIST/train/typed_cnn_cpu_pytorch.json\n")
    assert cli_main(["leaderboard", str(tmp_path), "--format", "json", "--archive", str(listed)]) == 0
    assert json.loads(capsys.readouterr().out)["unranked"] != []        # its TSV is not listed: not the archive's
    with listed.open("a") as f:
        f.write(f"{hashlib.sha256((tmp_path / 'FashionMNIST/train/typed_cnn_cpu_pytorch.tsv').read_bytes()).hexdigest()}"
                f"  FashionMNIST/train/typed_cnn_cpu_pytorch.tsv\n")
    assert cli_main(["leaderboard", str(tmp_path), "--format", "json", "--archive", str(listed)]) == 0
    fashion = json.loads(capsys.readouterr().out)["tasks"]["FashionMNIST"]
    assert {t for t, rows in fashion.items() if rows} == {"train_time_archive", "train_cost_archive"}
    # a bad archive list is one line
    listed.write_text("not a hash  x.json\n")
    assert cli_main(["leaderboard", str(tmp_path), "--format", "json", "--archive", str(listed)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--archive {listed}:1: not `sha256  <Task>/<kind>/<file>`" in err[0], err


# ---------------------------------------------------------------- attack 11: a price the entrant's table made

def test_a_price_record_from_a_table_of_the_entrants_is_refused_by_validate(tmp_path, capsys, monkeypatch):
    """The entrant runs and submits with $DAWNBENCH_PRICES naming a table of its own (aws:p3.2xlarge at
    $0.03): the run's record and the entry agree with each other, and validate accepted the lie. validate
    checks the price against its own table, and $DAWNBENCH_PRICES does not swap it: submit and validate
    read this checkout's dawnbench/data/prices.yaml, and say so when the variable is set."""
    table = prices.lookup("aws:p3.2xlarge")
    cheap = {**table.record(), "usd_per_hour": 0.03}
    run = make_run(tmp_path / "run", cost_per_hour=0.03)
    edit_json(run / "result.json", hardware="1 x Tesla V100-SXM2-16GB", instance="aws:p3.2xlarge", price=cheap, nodes=1)
    fake = tmp_path / "mine.yaml"
    fake.write_text(Path(prices.PRICES_FILE).read_text().replace("usd_per_hour: 3.06", "usd_per_hour: 0.03"))
    monkeypatch.setenv(prices.PRICES_ENV, str(fake))
    assert prices.lookup("aws:p3.2xlarge").usd_per_hour == 0.03            # a run may still be priced by it...
    tree = tmp_path / "entries"
    assert submit.main([str(run), "--out", str(tree)]) == 2                # ...but submit checks the checkout's
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not the prices table's 3.06" in err[-1], err
    assert err[0] == (f"dawnbench submit: note: ${prices.PRICES_ENV} ({fake}) is not read here: an entry's price is "
                      f"checked against {prices.PRICES_FILE}, the table the leaderboard prices from")

    # the entry written as that submit would have written it (the run's record, copied): validate refuses it
    monkeypatch.delenv(prices.PRICES_ENV)
    edit_json(run / "result.json", price=table.record(), costPerHour=table.usd_per_hour,
              cost_usd=table.usd_per_hour * json.loads((run / "result.json").read_text())["tta_seconds"] / 3600)
    assert submit.main([str(run), "--out", str(tree)]) == 0
    capsys.readouterr()
    (entry,) = (tree / "CIFAR10" / "train").glob("*.json")
    hours = json.loads(entry.read_text())["tta_seconds"] / 3600
    for path in (entry, entries.run_folder(entry) / "result.json"):
        edit_json(path, price=cheap, costPerHour=0.03, cost_usd=hours * 0.03)
    code = validate_entries.main([str(entry)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1 and any("price: aws:p3.2xlarge at 0.03 USD per hour is not the prices table's 3.06" in line
                             for line in lines), lines


# ---------------------------------------------------------------- attack 11: fits() compares cores and variants

@pytest.mark.parametrize("instance, hardware, nodes, fits", [
    ("aws:p3.2xlarge", "1 x Tesla V100-SXM2-16GB", 1, True),
    ("aws:p3.2xlarge", "1 x Tesla V100-SXM2-32GB", 1, False),             # the 32 GB V100 on the 16 GB's price
    ("azure:NC6s_v3", "1 x Tesla V100-SXM2-16GB", 1, False),              # an SXM2 V100 on a PCIe instance's
    ("azure:NC6s_v3", "1 x Tesla V100-PCIE-16GB", 1, True),
    ("aws:p4d.24xlarge", "8 x NVIDIA A100-SXM4-80GB", 1, False),          # 80 GB A100s on the 40 GB's price
    ("aws:p4d.24xlarge", "8 x NVIDIA A100-SXM4-40GB", 1, True),
    ("gcp:a2-highgpu-1g", "1 x NVIDIA A100-SXM4-40GB", 1, True),          # the instance names no form factor
    ("gcp:a2-highgpu-1g", "1 x NVIDIA A100 80GB PCIe", 1, False),
    ("aws:p5.48xlarge", "8 x NVIDIA H100 PCIe", 1, False),                # PCIe H100s on the SXM5 price
    ("aws:p5.48xlarge", "8 x NVIDIA H100 80GB HBM3", 1, True),            # the SXM H100 as nvidia-smi names it
    ("aws:c5.4xlarge", "Intel Xeon Platinum (16 cores)", 1, True),
    ("aws:c5.4xlarge", "AMD EPYC 9654 (192 cores)", 1, False),            # 192 cores on a 16-vCPU price
    ("aws:c5.4xlarge", "AMD EPYC 9654 (16 cores, 2 processes, 2 nodes)", 2, True),     # cores per node
    ("aws:c5.4xlarge", "AMD EPYC 9654 (32 cores, 2 processes, 2 nodes)", 2, False),
    ("aws:c5.4xlarge", "AMD EPYC 9654 (cores unknown)", 1, False),
    ("aws:c5.4xlarge", "1 x Tesla V100-SXM2-16GB", 1, False),
])
def test_a_table_price_fits_the_cores_and_the_gpu_variant_recorded(instance, hardware, nodes, fits):
    """fits() matched a CPU instance to any CPU run and a GPU instance by its model token only: 40 and 80
    GB, PCIe and SXM were one price, and a 192-core host took a 16-vCPU instance's."""
    assert entries.fits(prices.lookup(instance), hardware, nodes) is fits
