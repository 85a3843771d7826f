"""Issue 33: nothing an entrant controls (the entry JSON, options, the reference folder) sets a ranked
figure, a bound or a tolerance; every figure the leaderboard ranks is recomputed from files the tools
verify, and a claim they cannot verify never reads as a pass. Each test is an attack that succeeded
before (the entry "all valid", "verified", ranked first) and is refused now, naming the rule."""
from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import sys
from pathlib import Path

import pytest
from leaderboard_fixture import MODEL_FILES, archive_args, edit_json, make_run, train, write_reproduction
from test_submit import cifar10_eval, labels_here, make_inference  # noqa: F401  (fixtures: the labels every run here is scored against)

from dawnbench import entry_status, prices, ranking, reproduce, site, submit, validate_entries
from dawnbench.cli import main as cli_main

STEM = "dawnbench_ResNet-56_1-x-NVIDIA-H100-80GB-HBM3_PyTorch-2.13.0"
RULE = "an entry's figures are its run's"




V100 = "1 x Tesla V100-SXM2-16GB"     # what an aws:p3.2xlarge run's harness records


def v100_run(folder: Path, **kw) -> Path:
    """make_run's run, as the harness records it on a p3.2xlarge; submitted under STEM's hardware name
    (`submit --hardware`), which renames the entry, not its run."""
    run = make_run(folder, **kw)
    edit_json(run / "result.json", hardware=V100)
    return run


def board(tree: Path, capsys, *extra: str) -> dict:
    assert cli_main(["leaderboard", str(tree), "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def reproduce_all(tree: Path) -> None:
    """Every training entry's run reproduced, at its claimed time (the record `dawnbench reproduce`
    writes): the verified tier, where the cost tables that tell the prices apart are."""
    for run in (tree / "CIFAR10" / "train").glob("*.run"):
        write_reproduction(run)


def ranked_names(result: dict, task: str = "CIFAR10") -> set[str]:
    return {r["entry"] for rows in result["tasks"][task].values() for r in rows}


def problems(path: Path, capsys) -> list[str]:
    code = validate_entries.main([str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1, lines
    return lines


def test_a_cost_per_hour_edited_in_an_honest_entry_is_invalid(tmp_path, capsys):
    """Attack 1: costPerHour 3.06 -> 0.0001 (cost_usd edited to agree) was "all valid", "verified",
    training-cost rank #1."""
    tree = tmp_path / "entries"
    assert submit.main([str(make_run(tmp_path / "run")), "--out", str(tree)]) == 0
    path = tree / "CIFAR10" / "train" / f"{STEM}.json"
    honest = json.loads(path.read_text())
    capsys.readouterr()
    edit_json(path, costPerHour=0.0001, cost_usd=honest["tta_seconds"] / 3600 * 0.0001)
    lines = problems(path, capsys)
    assert any(": costPerHour: 0.0001 is not what its run recorded, 3.06 " in line and
               f"({STEM}.run/result.json)" in line and RULE in line for line in lines), lines
    result = board(tree, capsys)
    assert STEM not in ranked_names(result)
    (invalid,) = [u for u in result["invalid"] if u["entry"] == STEM]
    assert "costPerHour: 0.0001 is not what its run recorded, 3.06" in invalid["reason"]


@pytest.mark.parametrize("field, value", [("tta_seconds", 1.0), ("nodes", 2), ("reference", "other-ref"),
                                          ("instance", "aws:p3.2xlarge")])
def test_every_field_with_a_file_behind_it_must_agree(tmp_path, capsys, field, value):
    tree = tmp_path / "entries"
    assert submit.main([str(make_run(tmp_path / "run")), "--out", str(tree)]) == 0
    capsys.readouterr()
    path = tree / "CIFAR10" / "train" / f"{STEM}.json"
    edit_json(path, **{field: value})
    assert any(f": {field}: " in line and "is not what its run recorded" in line for line in problems(path, capsys))


def inference_tree(tmp_path: Path, **model) -> tuple[Path, Path]:
    """An honest run and its inference (34.6 ms), submitted; the inference entry's path."""
    run = make_run(tmp_path / "run")
    infer = make_inference(tmp_path / "infer", mean_ms=34.6)
    if model:
        edit_json(infer / "inference.json", model_source=model)
    tree = tmp_path / "entries"
    assert submit.main([str(run), "--inference", str(infer), "--out", str(tree)]) == 0
    return tree, tree / "CIFAR10" / "inference" / f"{STEM}.json"


def run_model(tree: Path, files=MODEL_FILES) -> dict:
    """What `dawnbench infer --model <run>/model` records of the run's model: its result.json's sha256 and the
    files it loaded (by default the snapshot the fixture's runs scored)."""
    result = tree / "CIFAR10" / "train" / f"{STEM}.run" / "result.json"
    return {"kind": "run", "path": "results/x/model",
            "files": {rel: {"bytes": size, "sha256": sha} for rel, (size, sha) in files.items()},
            "run": {"reference": "cifar10-resnet56-pytorch", "official": True,
                    "result_sha256": hashlib.sha256(result.read_bytes()).hexdigest()}}


def test_an_inference_latency_edited_in_an_entry_is_invalid(tmp_path, capsys):
    """Attack 2: latency 34.6 ms -> 0.01 ms (latency_ms and cost edited to agree) was "all valid", rank
    #1; inference rows carried no verification at all."""
    tree, path = inference_tree(tmp_path)
    capsys.readouterr()
    written = path.read_text()
    fields = json.loads(written)
    edit_json(path, latency=0.01, latency_ms={**fields["latency_ms"], "mean": 0.01},
              cost=fields["costPerHour"] * 0.01 / 3.6e6, cost_per_10k_items_usd=fields["costPerHour"] * 0.01 / 3.6e2)
    lines = problems(path, capsys)
    assert any(": latency: 0.01 is not what its run recorded, 34.6 " in line and
               f"({STEM}.run/inference.json)" in line and RULE in line for line in lines), lines
    result = board(tree, capsys)
    assert str(path) not in {r["file"] for rows in result["tasks"]["CIFAR10"].values() for r in rows}
    assert any(u["file"] == str(path) and "latency: 0.01 is not what its run recorded" in u["reason"]
               for u in result["invalid"])
    # as submitted, its rows carry their verification, as training rows do
    path.write_text(written)
    honest = board(tree, capsys)
    rows = [r for rows in honest["tasks"]["CIFAR10"].values() for r in rows if r["file"] == str(path)]
    assert rows and all(r["verification"] == "verified" for r in rows)


@pytest.mark.parametrize("field, value", [("top1Accuracy", 99.9), ("nodes", 3)])
def test_an_inference_entry_agrees_with_its_record(tmp_path, capsys, field, value):
    _, path = inference_tree(tmp_path)
    capsys.readouterr()
    edit_json(path, **{field: value})
    assert any(f": {field}: " in line and "is not what its run recorded" in line for line in problems(path, capsys))


def test_removing_the_files_behind_an_entry_makes_it_invalid(tmp_path, capsys):
    """The files behind a submitted entry cannot be taken away to leave its figures unchecked."""
    tree, path = inference_tree(tmp_path)
    capsys.readouterr()
    (entry_status.run_folder(path) / "inference.json").unlink()
    assert any(".run/inference.json" in line for line in problems(path, capsys))
    shutil.rmtree(entry_status.run_folder(path))
    train_json = tree / "CIFAR10" / "train" / f"{STEM}.json"
    shutil.rmtree(entry_status.run_folder(train_json))
    for entry in (path, train_json):
        assert any(": rules_version: the entry is one `dawnbench submit` wrote, but its run" in line
                   for line in problems(entry, capsys))
    assert ranked_names(board(tree, capsys)) == set()


def test_a_model_from_a_file_is_ranked_apart_and_said_so(tmp_path, capsys):
    """Attack 5: `infer --model FILE` (a model trained on anything, the test set included) was
    "official: yes", inference rank #1. Its record says where the model came from: not a verified run's,
    so its row and page say "model provenance unverified" and it ranks apart."""
    tree, path = inference_tree(tmp_path)          # make_inference's model_source: a file
    capsys.readouterr()
    result = board(tree, capsys)
    cifar = result["tasks"]["CIFAR10"]
    assert STEM not in {r["entry"] for r in cifar["inference_latency"] + cifar["inference_cost"]}
    assert STEM not in {r["entry"] for r in cifar["inference_cost_given"]}
    (row,) = cifar["inference_latency_unverified_model"]
    assert (row["entry"], row["model_provenance"]) == (STEM, "model provenance unverified")
    site_dir = tmp_path / "site"
    assert cli_main(["leaderboard", str(tree), "--out", str(site_dir)]) == 0
    index = (site_dir / "index.html").read_text()
    assert "Inference latency (model provenance unverified)" in index
    assert '<td class="status model-provenance" data-sort="unverified"><span class="badge none" ' \
           'title="model provenance unverified">\u2013 unverified</span></td>' in index
    page = (site_dir / "CIFAR10" / "inference" / f"{STEM}.html").read_text()
    assert "<th>Model provenance</th><td>model provenance unverified</td>" in page

    # the run's own model (its result.json's hash, as `infer --model <run>/model` records it) ranks
    tree2, path2 = inference_tree(tmp_path / "again")
    capsys.readouterr()
    record = entry_status.run_folder(path2) / "inference.json"
    source = run_model(tree2)
    run_provenance = json.loads((entry_status.run_folder(path2.parent.parent / "train" / path2.name)
                                 / "result.json").read_text())["provenance"]
    edit_json(record, model_source=source, provenance=run_provenance)
    edit_json(path2, misc={**json.loads(path2.read_text())["misc"], "model_source": source})
    cifar = board(tree2, capsys)["tasks"]["CIFAR10"]
    (row,) = cifar["inference_latency"]
    assert row["model_provenance"].startswith("verified") and cifar["inference_latency_unverified_model"] == []

    # Issue 46, attack 8: the run's model fine-tuned on the public test set, timed, then put back (the run still
    # verifies): the record names the run, but the files it loaded are not the snapshot the run's log scored
    tuned = run_model(tree2, {"model.pt": (3400000, "0" * 64)})
    edit_json(record, model_source=tuned)
    edit_json(path2, misc={**json.loads(path2.read_text())["misc"], "model_source": tuned})
    cifar = board(tree2, capsys)["tasks"]["CIFAR10"]
    assert cifar["inference_latency"] == []
    (row,) = cifar["inference_latency_unverified_model"]
    assert row["model_provenance"] == "model provenance unverified"
    # and an inference of other code than the run's (a reference of the same name) is not the run's model either
    edit_json(record, model_source=source, provenance={**run_provenance, "reference_tree_sha256": "0" * 64})
    edit_json(path2, misc={**json.loads(path2.read_text())["misc"], "model_source": source})
    assert board(tree2, capsys)["tasks"]["CIFAR10"]["inference_latency"] == []


def test_submit_refuses_an_inference_of_a_model_changed_after_its_run(tmp_path, capsys):
    """Issue 46, attack 8: `infer --model <run>/model` of a model fine-tuned on the public test set (the
    original put back after, so the run still verifies), submitted with its run: refused in one line, nothing
    written. The inference of the run's own scored model, of the run's code, goes through."""
    run = make_run(tmp_path / "run")
    infer = make_inference(tmp_path / "infer")
    provenance = json.loads((run / "result.json").read_text())["provenance"]
    result_sha = hashlib.sha256((run / "result.json").read_bytes()).hexdigest()

    def source(files):
        return {"kind": "run", "path": "<outside the checkout>/model",      # as harness.paths.public writes it
                "files": {rel: {"bytes": size, "sha256": sha} for rel, (size, sha) in files.items()},
                "run": {"reference": "cifar10-resnet56-pytorch", "official": True, "result_sha256": result_sha}}
    argv = [str(run), "--inference", str(infer), "--out", str(tmp_path / "entries"), "--author", "Jane Doe",
            "--hardware", "AWS p3.2xlarge (1 V100)"]
    edit_json(infer / "inference.json", model_source=source({"model.pt": (3400000, "0" * 64)}), provenance=provenance)
    assert submit.main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is not the run's scored model" in line and f"--model {run}/model" in line, line
    assert not (tmp_path / "entries").exists()
    edit_json(infer / "inference.json", model_source=source(MODEL_FILES),
              provenance={**provenance, "reference_tree_sha256": "0" * 64})
    assert submit.main(argv) == 2
    assert "the inference ran other code than the run" in capsys.readouterr().err
    edit_json(infer / "inference.json", provenance=provenance)
    assert submit.main(argv) == 0, capsys.readouterr().err


def test_a_price_is_the_tables_never_the_entrants(tmp_path, capsys):
    """Attack 4: `run --price-record` set any price for a named instance (aws:p3.2xlarge at $0.03/h
    against the table's $3.06): the result stayed official and ranked first on cost."""
    table = prices.lookup("aws:p3.2xlarge")
    cheap = {**table.record(), "usd_per_hour": 0.03}
    # a bare harness run with it (the harness has no prices table) is refused by submit
    run = make_run(tmp_path / "run", cost_per_hour=0.03)
    edit_json(run / "result.json", instance="aws:p3.2xlarge", price=cheap, nodes=1)
    assert submit.main([str(run), "--out", str(tmp_path / "entries")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the prices table's" in err[0], err
    # the host refuses the option in one line, before anything runs
    with pytest.raises(prices.PriceError, match="not the prices table's"):
        prices.check_price_record(json.dumps(cheap))
    code = cli_main(["run", "fashion-mnist-cnn-pytorch", "--price-record", json.dumps(cheap),
                     "--results", str(tmp_path / "nothing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "aws:p3.2xlarge" in err[0] and "3.06" in err[0], err
    assert not (tmp_path / "nothing").exists()
    # and an entry carrying it, consistent with its run, is priced from the table anyway
    honest = v100_run(tmp_path / "honest", cost_per_hour=None)
    tree = tmp_path / "entries"
    assert submit.main([str(honest), "--out", str(tree), "--instance", "aws:p3.2xlarge",
                        "--hardware", "1 x NVIDIA H100 80GB HBM3"]) == 0
    capsys.readouterr()
    reproduce_all(tree)
    path = tree / "CIFAR10" / "train" / f"{STEM}.json"
    result = board(tree, capsys)
    (row,) = result["tasks"]["CIFAR10"]["train_cost"]
    hours = json.loads(path.read_text())["tta_seconds"] / 3600
    assert row["price_basis"] == "prices table" and row["cost_usd"] == pytest.approx(hours * table.usd_per_hour)
    for name in ("result.json",):          # the run's record edited too, consistently
        edit_json(entry_status.run_folder(path) / name, costPerHour=0.03, cost_usd=hours * 0.03, instance="aws:p3.2xlarge",
                  price=cheap)
    fields = json.loads(path.read_text())
    edit_json(path, costPerHour=0.03, cost_usd=hours * 0.03, price=cheap, price_added=None)
    del fields
    result = board(tree, capsys)
    # the board would price it from the table anyway; the entry file lies, so it is invalid (issue 46, section 9)
    assert result["tasks"]["CIFAR10"]["train_cost"] == []
    (invalid,) = result["invalid"]
    assert "price: aws:p3.2xlarge at 0.03 USD per hour is not the prices table's 3.06" in invalid["reason"]


def test_a_submitter_given_price_ranks_apart_from_the_table(tmp_path, capsys):
    tree = tmp_path / "entries"
    assert submit.main([str(make_run(tmp_path / "given", cost_per_hour=None)), "--out", str(tree),
                        "--cost-per-hour", "0.0001", "--author", "Given"]) == 0
    assert submit.main([str(v100_run(tmp_path / "table", cost_per_hour=None)), "--out", str(tree),
                        "--instance", "aws:p3.2xlarge", "--author", "Table"]) == 0
    capsys.readouterr()
    reproduce_all(tree)
    cifar = board(tree, capsys)["tasks"]["CIFAR10"]
    assert [r["author"] for r in cifar["train_cost"]] == ["Table"]
    assert [(r["author"], r["price_basis"]) for r in cifar["train_cost_given"]] == [("Given", "submitter-given price")]


def test_zero_hours_and_control_characters_in_a_name_are_invalid(tmp_path, capsys):
    train(tmp_path, "CIFAR10", "zero_m_h_f", [(1, 0.0, 95.0)], costPerHour=1.0)
    train(tmp_path, "CIFAR10", "ok_m_h_f", [(1, 0.5, 95.0)], costPerHour=1.0)
    train(tmp_path, "CIFAR10", "bell\x07_m_h_f", [(1, 0.5, 95.0)], costPerHour=1.0)
    result = board(tmp_path, capsys, *archive_args(tmp_path))
    assert ranked_names(result) == {"ok_m_h_f"}
    reasons = {u["entry"]: u["reason"] for u in result["invalid"]}
    assert "hours: 0 is not positive" in reasons["zero_m_h_f"]
    assert "control character" in reasons["bell\x07_m_h_f"]


def test_an_entry_page_says_where_its_figures_come_from(tmp_path, capsys):
    tree, path = inference_tree(tmp_path)
    capsys.readouterr()
    loaded, _ = ranking.load_all(tree)
    (entry,) = [e for e in loaded if e.path == path]
    page = site.entry_page(entry, [], None, None, "verified", None, "model provenance unverified")
    assert "<th>Verification</th><td>verified</td>" in page


# ---------------------------------------------------------------- reproduce: nothing of the entry sets a tolerance

def test_reproduce_takes_no_tolerance_from_the_entry(tmp_path):
    """Attack 3: `"runs": {"n": 3, "converged": 3, "cv": 10.0}` added to a forged entry set reproduce's
    time tolerance (+3000%), and a run forged to 0.2x its time was "reproduced". The tolerance is the
    judge's now: from its own runs' times, the only argument it takes besides --tolerance."""
    run = make_run(tmp_path / "run")
    original = reproduce.Original(run, json.loads((run / "result.json").read_text()), {},
                                  {"runs": {"n": 3, "converged": 3, "cv": 10.0}})
    claimed, env = reproduce.figures(original.result), reproduce.environment(original.result, {})
    again = {**claimed, "tta_seconds": claimed["tta_seconds"] * 5}
    tolerance, source = reproduce.time_tolerance([again["tta_seconds"]], None)
    assert tolerance == reproduce.ONE_RUN_TOLERANCE and "one run here measures no spread" in source
    verdict, differences, _ = reproduce.compare(claimed, env, [(again, env)], tolerance, 0.005)
    assert verdict == "not reproduced" and differences[0].startswith("time-to-accuracy: ")


def test_a_series_spread_the_entrant_wrote_never_widens_the_tolerance(tmp_path):
    """A series folder is the entrant's: its runs can be rewritten consistently with any spread. The
    tolerance of issue 33 came from its verified runs' cv; it comes from the judge's runs now."""
    series = tmp_path / "series"
    runs = [make_run(series / f"seed{k}", seed=k, hours_per_epoch=h) for k, h in enumerate((0.0020, 0.0031, 0.0050))]
    (series / "summary.json").write_text(json.dumps({"tta_seconds": {"cv": 10.0}, "runs": []}))
    times = [json.loads((r / "result.json").read_text())["tta_seconds"] for r in runs]
    assert statistics.stdev(times) / statistics.mean(times) > 0.3          # a spread of the entrant's making
    assert not hasattr(reproduce, "series_cv")
    assert reproduce.time_tolerance([times[1]] * 3, None)[0] == reproduce.MIN_TIME_TOLERANCE


# ---------------------------------------------------------------- reproduce: what the harness saw

def test_a_node_count_the_harness_never_saw_does_not_make_other_hardware(tmp_path):
    """Attack 6: `--nodes 2` claimed on a native run of one process turned the verdict into "reproduced:
    accuracy only", which the leaderboard showed as a pass."""
    def figs(tta):
        return {"status": "converged", "epochs": 3, "metric": "top1", "tta_seconds": tta,
                "curve": [{"epoch": n, "top1": v, "tta_seconds": None} for n, v in enumerate((0.5, 0.8, 0.95), 1)]}
    claimed = {"hardware": "2 x NVIDIA H100 80GB HBM3 (2 nodes)", "nodes": 2, "world_size": 1}
    here = {"hardware": "1 x NVIDIA H100 80GB HBM3", "nodes": 1, "world_size": 1}
    verdict, differences, _ = reproduce.compare(figs(2.0), claimed, [(figs(10.0), here)], 0.25, 0.005)
    assert verdict == "not reproduced" and differences[0].startswith("time-to-accuracy: 2.000 s claimed")
    # truly other hardware: the accuracy only, and it reads as such, not as reproduced
    elsewhere = {"hardware": "8 x NVIDIA Tesla V100-SXM2-16GB", "nodes": 1, "world_size": 1}
    verdict, _, _ = reproduce.compare(figs(2.0), elsewhere, [(figs(10.0), here)], 0.25, 0.005)
    assert verdict == entry_status.ACCURACY_ONLY == "accuracy reproduced, time not compared (other hardware)"
    assert not entry_status.is_reproduced(verdict) and entry_status.is_reproduced("reproduced")


def test_accuracy_only_is_not_counted_as_reproduced_on_the_board(tmp_path, capsys):
    tree = tmp_path / "entries"
    assert submit.main([str(make_run(tmp_path / "run")), "--out", str(tree)]) == 0
    capsys.readouterr()
    run = tree / "CIFAR10" / "train" / f"{STEM}.run"
    result = json.loads((run / "result.json").read_text())
    (run / entry_status.REPRODUCTION_RECORD).write_text(json.dumps({"verdict": "reproduced: accuracy only",      # an older record
                                                       "log_sha256": entry_status.log_sha256(run, result)}))
    (row,) = board(tree, capsys)["tasks"]["CIFAR10"]["train_submitted"]         # not the verified tier
    assert row["reproduction"] == "accuracy reproduced, time not compared (other hardware)"
    assert row["reproduced"] is False


def test_a_multi_rank_run_is_tried_where_the_ranks_are(tmp_path, monkeypatch, capsys):
    """Attack 6, second half: reproduce refused every run of several processes, so a forged NPROC=2
    folder stayed "not tried" forever. It is run with its ranks where the machine has them; elsewhere
    the record says what it needs."""
    tree = tmp_path / "entries"
    assert submit.main([str(make_run(tmp_path / "run")), "--out", str(tree)]) == 0
    capsys.readouterr()
    path = tree / "CIFAR10" / "train" / f"{STEM}.json"
    run = entry_status.run_folder(path)
    edit_json(run / "result.json", world_size=2)
    original = reproduce.read_original(path, None)            # no longer refused
    code = reproduce.Code(tmp_path / "references", tmp_path, "here")
    command = reproduce.run_command(original, code, "native", tmp_path, tmp_path / "results", ["--seed", "0"], None)
    # the judge's own launcher in the judge's interpreter, never the reference's torchrun (issue 46)
    assert command[:2] == [sys.executable, "-I"] and "torch.distributed.run" not in command
    assert command[4:8] == ["harness.local_ranks", "--nproc-per-node", "2", "-m"]
    monkeypatch.setattr(reproduce, "available_processes", lambda env: 8)
    assert reproduce.ranks_here(original, "docker", "", None)[0] == "native"
    monkeypatch.setattr(reproduce, "available_processes", lambda env: 1)
    with pytest.raises(reproduce.ReproduceError, match="not tried: .*needs 2 processes"):
        reproduce.ranks_here(original, "native", "", None)
    (row,) = board(tree, capsys)["tasks"]["CIFAR10"]["train_submitted"]
    assert row["reproduction"].startswith("not tried: needs 2 processes (the run's world size), this machine has 1")


def test_an_entry_is_its_runs_even_where_the_labels_are_not(tmp_path, capsys):
    """Without the eval labels a run cannot be re-scored ("not verified"), but the entry's log must still
    be its run's: a log edited to a faster time is invalid, not "not verified" and ranked."""
    tree = tmp_path / "entries"
    assert submit.main([str(make_run(tmp_path / "run")), "--out", str(tree)]) == 0
    capsys.readouterr()
    log = tree / "CIFAR10" / "train" / f"{STEM}.tsv"
    rows = log.read_text().splitlines()
    epoch, hours, accuracy = rows[-1].split("\t")
    log.write_text("\n".join(rows[:-1] + [f"{epoch}\t{float(hours) * 0.995:.6f}\t{accuracy}"]) + "\n")
    assert cli_main(["leaderboard", str(tree), "--format", "json", "--data", str(tmp_path / "nowhere")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert ranked_names(result) == set()
    (invalid,) = result["invalid"]
    assert "the entry's log is not the run's" in invalid["reason"]


def test_an_entry_page_shows_the_price_it_is_ranked_by(tmp_path, capsys):
    tree = tmp_path / "entries"
    assert submit.main([str(v100_run(tmp_path / "run", cost_per_hour=None)), "--out", str(tree),
                        "--instance", "aws:p3.2xlarge", "--hardware", "1 x NVIDIA H100 80GB HBM3"]) == 0
    capsys.readouterr()
    site_dir = tmp_path / "site"
    assert cli_main(["leaderboard", str(tree), "--out", str(site_dir)]) == 0
    page = (site_dir / "CIFAR10" / "train" / f"{STEM}.html").read_text()
    usd = prices.lookup("aws:p3.2xlarge").usd_per_hour
    assert f"<th>Cost per hour</th><td>${usd:.2f} (prices table)</td>" in page


def test_reproduce_reads_the_hardware_from_the_harness_log(tmp_path):
    """result.json's hardware edited alone (to claim other hardware, where time is not compared) is not
    what reproduce compares: the harness's own log says what it ran on."""
    run = make_run(tmp_path / "run")
    log = run / "events.jsonl"
    lines = log.read_text().splitlines()
    point = json.loads(lines[0].split(" ", 1)[1])
    lines.insert(1, ":::MLLOG " + json.dumps({**point, "key": "submission_platform",
                                              "value": "1 x NVIDIA H100 80GB HBM3", "metadata": {"clock_s": 0.0}}))
    log.write_text("\n".join(lines) + "\n")
    assert reproduce.logged_hardware(run, "8 x NVIDIA Tesla V100-SXM2-16GB") == "1 x NVIDIA H100 80GB HBM3"
    assert reproduce.logged_hardware(tmp_path / "nowhere", "as recorded") == "as recorded"


def test_a_table_price_is_for_the_hardware_the_run_recorded(tmp_path, capsys):
    """An instance priced from the table must be able to be the machine the harness recorded: an H100
    run (or 8 GPUs, or a CPU) submitted as a one-V100 aws:p3.2xlarge is not priced from the table."""
    tree = tmp_path / "entries"
    for author, hardware in (("H100", "1 x NVIDIA H100 80GB HBM3"), ("Eight", "8 x Tesla V100-SXM2-16GB"),
                             ("Cpu", "AMD EPYC (2 cores)"), ("Fits", V100)):
        run = make_run(tmp_path / author, cost_per_hour=None)
        edit_json(run / "result.json", hardware=hardware)
        assert submit.main([str(run), "--out", str(tree), "--instance", "aws:p3.2xlarge", "--author", author,
                            "--hardware", "same name"]) == 0
    capsys.readouterr()
    reproduce_all(tree)
    cifar = board(tree, capsys)["tasks"]["CIFAR10"]
    assert [r["author"] for r in cifar["train_cost"]] == ["Fits"]
    assert sorted(r["author"] for r in cifar["train_cost_given"]) == ["Cpu", "Eight", "H100"]


def test_infer_of_a_runs_model_says_when_the_files_are_not_the_scored_snapshot(default_run, tmp_path):
    """Issue 46, attack 8, at `infer --model <run>/model`: the record held the loaded files' hashes and compared
    them with nothing. It compares them with the run's log now: the run's own model is its run's; a model changed
    after the run (fine-tuned on the public test set) is not, and the inference is not official, in one reason."""
    from harness import inference
    run = Path(shutil.copytree(default_run, tmp_path / "run"))
    own = inference.model_source(run / "model")
    assert own["kind"] == "run" and own["is_the_runs_model"] is True
    assert own["sha256"] == own["run"]["scored_snapshot_sha256"]
    assert not [r for r in inference._inference_reasons(None, 10, own) if "not its run's" in r]
    weights = next(p for p in sorted((run / "model").rglob("*")) if p.is_file())
    weights.write_bytes(weights.read_bytes() + b"\0")          # tuned after the run
    tuned = inference.model_source(run / "model")
    assert tuned["is_the_runs_model"] is False
    (reason,) = [r for r in inference._inference_reasons(None, 10, tuned) if "not its run's" in r]
    assert reason.startswith(f"the model is not its run's: its files hash to {tuned['sha256'][:16]}...")
