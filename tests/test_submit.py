"""`dawnbench submit`: run and series folders as the harness writes them, into v1 entry files."""
from __future__ import annotations

import datetime
import json
import statistics
from pathlib import Path

import pytest
from leaderboard_fixture import REF, cifar10_labels, edit_json, make_run

from dawnbench import entries, prices, ranking, series, submit, validate_entries
from dawnbench.cli import main as cli_main
from harness import datasets, judge_hash
from harness.tasks import RULES_VERSION

STEM = "dawnbench_ResNet-56_1-x-NVIDIA-H100-80GB-HBM3_PyTorch-2.13.0"


@pytest.fixture(scope="module")
def cifar10_eval(tmp_path_factory) -> tuple[Path, Path]:
    return cifar10_labels(tmp_path_factory.mktemp("cifar10"))


@pytest.fixture(autouse=True)
def labels_here(cifar10_eval, monkeypatch) -> Path:
    """Every run here is scored, and verified by submit, against fixture CIFAR-10 labels."""
    data, manifest = cifar10_eval
    monkeypatch.setenv("DAWNBENCH_DATA", str(data))
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    return data

TREE = "e" * 64
LABELS_SHA = "1" * 64


def make_inference(folder: Path, *, reference=REF, top1=0.9497, threshold=0.94, items=10000,
                   cost_per_hour=0.9, mean_ms=28.688002700200006, infers_only=False, reasons=()) -> Path:
    """An inference folder as harness/inference.py leaves it."""
    folder.mkdir(parents=True)
    reasons = list(reasons) + ([] if threshold == 0.94 else [f"--threshold {threshold:g} is not the task's 0.94 "
                                                             f"(a smoke test)"])
    if items != 10000:
        reasons.append(f"--limit {items} times {items} of the 10000 eval items, not the whole eval set")
    result = {
        "version": "v1.0", "author": "dawnbench", "authorEmail": "", "model": "ResNet-56",
        "codeURL": "https://github.com/dawnbench/dawnbench/tree/main/references/" + reference,
        "reference": reference, "task": "cifar10", "rules_version": RULES_VERSION, "infers_only": infers_only,
        "model_path": "published/resnet56.pt", "items": items,
        "model_source": {"kind": "file", "path": "published/resnet56.pt",
                         "files": {"resnet56.pt": {"sha256": "a" * 64, "bytes": 3400000}}},
        "complete_eval_set": items == 10000, "batch_size": 1, "warmup_items": 50, "latency": mean_ms,
        "latency_ms": {"mean": mean_ms, "p50": 27.9, "p90": 30.1, "p99": 35.5, "min": 25.0, "max": 60.2},
        "metric": "top1", "metric_value": top1, "top1": top1, "threshold": threshold,
        "official_threshold": threshold == 0.94, "reached_threshold": top1 >= threshold,
        "costPerHour": cost_per_hour, "cost": cost_per_hour * mean_ms / 3.6e6,
        "cost_per_10k_items_usd": cost_per_hour * mean_ms / 3.6e6 * 1e4,
        "hardware": "1 x NVIDIA T4", "framework": "PyTorch 2.13.0", "threads": None,
        "image_digest": "sha256:" + "c" * 64, "timestamp": "2026-11-21", "commitHash": "de8b42f2138d",
        "git": {"commit": "de8b42f2138dedf08d189021a603340ac257828d", "dirty": False},
        "provenance": {"reference_tree_sha256": "d" * 64, "overrides": {}, "build": None, "judge_sha256": judge_hash.sha256(),
                       "datasets": {"cifar10": {"test_batch": {"md5": "40351d587109b95175f43aff81a1287e",
                                                               "size": 31035526}}}},
        "official": not reasons, "unofficial_reasons": reasons,
    }
    (folder / "inference.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return folder


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def refused(capsys, argv, words: str) -> str:
    code = submit.main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("dawnbench submit: error: ") and words in err[0], err[0]
    return err[0]


def test_run_folder_round_trip(tmp_path, capsys):
    run = make_run(tmp_path / "results" / REF / "20261120-seed0")
    out = tmp_path / "entries"
    assert submit.main([str(run), "--out", str(out)]) == 0
    train = out / "CIFAR10" / "train"
    assert sorted(p.name for p in train.iterdir()) == [f"{STEM}.json", f"{STEM}.run", f"{STEM}.tsv"]
    assert capsys.readouterr().out.split() == [str(train / f"{STEM}.tsv"), str(train / f"{STEM}.json"),
                                               str(train / f"{STEM}.run")]
    # the run goes with the entry, as verified: its log, result, TSV and the 30 epochs' predictions
    copied = train / f"{STEM}.run"
    assert sorted(str(p.relative_to(copied)) for p in copied.rglob("*") if p.is_file()) == sorted(
        ["events.jsonl", "result.json", f"{REF}.tsv"] + [f"predictions/epoch-{e:03d}.npz" for e in range(1, 31)])
    assert all((copied / name).read_bytes() == (run / name).read_bytes() for name in ("events.jsonl", f"{REF}.tsv"))
    assert cli_main(["verify", str(copied)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("verified: ")
    assert (train / f"{STEM}.tsv").read_bytes() == (run / f"{REF}.tsv").read_bytes()
    fields = json.loads((train / f"{STEM}.json").read_text())
    result = json.loads((run / "result.json").read_text())
    assert fields["logFilename"] == f"{STEM}.tsv" and fields["version"] == "v1.0"
    assert fields["tta_seconds"] == result["tta_seconds"] == round(30 * 0.0031 * 3600, 3)
    assert fields["cost_usd"] == pytest.approx(3.06 * 30 * 0.0031)
    assert fields["git_commit"] == result["git"]["commit"] and fields["runs"] is None
    assert (fields["nodes"], fields["instance"], fields["price"]) == (1, None, None)
    assert fields["misc"]["hyperparameters"] == {"lr": 0.4, "batch_size": 512}
    assert (fields["official"], fields["unofficial_reasons"]) == (True, [])
    assert fields["provenance"] == result["provenance"]
    assert validate_entries.main([str(out)]) == 0
    assert capsys.readouterr().out.strip() == "2 files checked: all valid"
    entry = entries.load(train / f"{STEM}.json")       # the shared reader ranks it
    assert entry.first_at_threshold()["top1Accuracy"] == 94.12


def test_inference_round_trip(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    infer = make_inference(tmp_path / "infer")
    out = tmp_path / "entries"
    assert submit.main([str(run), "--inference", str(infer), "--out", str(out), "--author", "Jane Doe",
                        "--author-email", "jane@example.org", "--hardware", "AWS p3.2xlarge (1 V100)"]) == 0
    stem = "Jane-Doe_ResNet-56_AWS-p3.2xlarge-1-V100_PyTorch-2.13.0"
    fields = json.loads((out / "CIFAR10" / "inference" / f"{stem}.json").read_text())
    assert fields["top1Accuracy"] == 94.97 and fields["latency"] == 28.688002700200006
    assert fields["cost"] == pytest.approx(7.172000675050001e-06)
    assert (fields["author"], fields["authorEmail"], fields["hardware"]) == (
        "Jane Doe", "jane@example.org", "AWS p3.2xlarge (1 V100)")
    assert fields["latency_ms"] == {"mean": 28.688002700200006, "p50": 27.9, "p90": 30.1, "p99": 35.5}
    assert fields["eval_examples"] == 10000 and "logFilename" not in fields
    assert (out / "CIFAR10" / "train" / f"{stem}.json").exists()
    capsys.readouterr()
    assert validate_entries.main([str(out)]) == 0, capsys.readouterr().out


def test_series_submits_the_median_converged_run(tmp_path, capsys):
    folder = tmp_path / "results" / REF / "series1"
    seeds = {0: 40, 1: 20, 2: 30, 3: None}      # epochs to converge (None: DNC)
    finished = []
    for seed, epochs in seeds.items():
        make_run(folder / f"seed{seed}", seed=seed, epochs=epochs or 30,
                 status="converged" if epochs else "DNC", final=0.9412 if epochs else 0.9)
        finished.append({**json.loads((folder / f"seed{seed}" / "result.json").read_text()), "run_dir": f"seed{seed}"})
    ttas = [r["tta_seconds"] for r in finished if r["tta_seconds"] is not None]
    series._write_summary(folder, finished, 4, interrupted=False, in_progress=False)
    out = tmp_path / "entries"
    assert cli_main(["submit", str(folder), "--out", str(out)]) == 0
    fields = json.loads((out / "CIFAR10" / "train" / f"{STEM}.json").read_text())
    assert fields["misc"]["seed"] == 2 and fields["tta_seconds"] == round(30 * 0.0031 * 3600, 3)
    assert (out / "CIFAR10" / "train" / f"{STEM}.tsv").read_bytes() == (folder / "seed2" / f"{REF}.tsv").read_bytes()
    r = fields["runs"]
    assert (r["n"], r["converged"], r["fraction_converged"], r["submitted_seed"]) == (4, 3, 0.75, 2)
    assert r["median_tta_seconds"] == statistics.median(ttas) == fields["tta_seconds"]
    assert [p["status"] for p in r["per_run"]] == ["converged", "converged", "converged", "DNC"]
    # the series goes with the entry, every run as verified, and its acceptance is recomputed from them
    copied = out / "CIFAR10" / "train" / f"{STEM}.series"
    assert sorted(p.name for p in copied.iterdir()) == ["seed0", "seed1", "seed2", "seed3"]
    assert r["acceptance"] == json.loads((folder / "summary.json").read_text())["acceptance"]
    assert (r["acceptance"]["rule"], r["acceptance"]["verdict"]) == ("single", "accepted")
    capsys.readouterr()
    assert validate_entries.main([str(out)]) == 0


def test_even_series_takes_the_slower_middle_run(tmp_path):
    folder = write_series(tmp_path / "series", [0, 1], requested=2, in_progress=False, interrupted=False)
    found, result, stats = submit.load_run(folder)
    assert found == folder / "seed1" and result["seed"] == 1 and stats["submitted_seed"] == 1


def test_refuses_a_dnc_run_and_writes_nothing(tmp_path, capsys):
    run = make_run(tmp_path / "run", status="DNC", final=0.9)
    refused(capsys, [run, "--out", tmp_path / "entries"], "only a converged run is an entry")
    assert not (tmp_path / "entries").exists()


def test_refuses_a_series_where_nothing_converged(tmp_path, capsys):
    series = tmp_path / "series"
    make_run(series / "seed0", status="DNC", final=0.9)
    from dawnbench import series as series_module
    series_module._write_summary(series, [{**json.loads((series / "seed0" / "result.json").read_text()),
                                           "run_dir": "seed0"}], 1, interrupted=False, in_progress=False)
    refused(capsys, [series, "--out", tmp_path / "entries"], "none of the 1 runs converged")


def write_series(folder: Path, seeds: list[int], requested: int, **state) -> Path:
    """A series folder as `dawnbench run --runs` leaves it: a converged run per seed, and summary.json
    written by the series' own writer (in_progress / interrupted as given)."""
    finished = []
    for seed in seeds:
        make_run(folder / f"seed{seed}", seed=seed, epochs=20 + 10 * seed)
        finished.append({**json.loads((folder / f"seed{seed}" / "result.json").read_text()), "run_dir": f"seed{seed}"})
    series._write_summary(folder, finished, requested, **state)
    return folder


@pytest.mark.parametrize("state, says", [
    ({"in_progress": True, "interrupted": False}, "it was killed, or is still running"),      # kill -9 of the series
    ({"in_progress": False, "interrupted": True}, "it was interrupted"),                      # Ctrl-C, SIGTERM
], ids=["killed", "interrupted"])
def test_refuses_a_series_killed_part_way(tmp_path, capsys, state, says):
    series_dir = write_series(tmp_path / "results" / REF / "series1", [0, 1], requested=3, **state)
    line = refused(capsys, [series_dir, "--out", tmp_path / "entries"], "the series is unfinished (2 of 3 runs; ")
    assert says in line and f"re-run the series (dawnbench run {REF} --runs 3)" in line, line
    assert f"or submit one finished run on its own ({series_dir}/seed<k>)" in line, line
    assert not (tmp_path / "entries").exists()
    # what it says to do works: one finished run of it on its own
    assert submit.main([str(series_dir / "seed1"), "--out", str(tmp_path / "entries")]) == 0


def test_a_finished_series_written_by_the_series_is_submitted(tmp_path, capsys):
    series_dir = write_series(tmp_path / "series", [0, 1, 2], requested=3, in_progress=False, interrupted=False)
    assert submit.main([str(series_dir), "--out", str(tmp_path / "entries")]) == 0
    fields = json.loads((tmp_path / "entries" / "CIFAR10" / "train" / f"{STEM}.json").read_text())
    assert fields["runs"]["n"] == 3 and fields["runs"]["submitted_seed"] == 1


def test_series_run_dir_cannot_leave_the_series(tmp_path, capsys):
    series = tmp_path / "series"
    series.mkdir()
    make_run(tmp_path / "elsewhere")
    (series / "summary.json").write_text(json.dumps({"runs": [
        {"seed": 0, "run_dir": "../elsewhere", "status": "converged", "tta_seconds": 10.0}]}))
    # the runs are the series folder's own seed<k>/, never what summary.json names
    refused(capsys, [series, "--out", tmp_path / "entries"], "no run folder (seed<k>/ with result.json)")


def test_unofficial_threshold_needs_the_flag(tmp_path, capsys):
    run = make_run(tmp_path / "run", threshold=0.5, final=0.55, epochs=3)
    out = tmp_path / "entries"
    refused(capsys, [run, "--out", out], "lowered threshold 0.5 (official 0.94)")
    assert not out.exists()
    assert submit.main([str(run), "--out", str(out), "--allow-unofficial"]) == 0
    fields = json.loads((out / "CIFAR10" / "train" / f"{STEM}.json").read_text())
    assert (fields["official_threshold"], fields["threshold"]) == (False, 0.5)
    capsys.readouterr()
    assert validate_entries.main([str(out)]) == 1          # not an entry for the leaderboard...
    assert "official_threshold: false" in capsys.readouterr().out
    assert validate_entries.main(["--allow-unofficial", str(out)]) == 0      # ...but well formed


DIRTY = "the code differs from commit de8b42f2138d: references/x/train.py changed or not committed (git status; ...)"
FORGED = "DAWNBENCH_GIT_COMMIT is set: an environment variable cannot name the commit (unset it)"


def test_a_run_that_is_not_official_is_refused_with_its_reasons(tmp_path, capsys):
    """Not official (uncommitted code, a forged commit): submit says why and writes nothing;
    --allow-unofficial writes it marked so, and validate and the leaderboard refuse it, with the reasons."""
    run = make_run(tmp_path / "run", reasons=[DIRTY, FORGED])
    out = tmp_path / "entries"
    line = refused(capsys, [run, "--out", out], "the run is not official: ")
    assert f"{DIRTY}; {FORGED}" in line and "--allow-unofficial" in line
    assert not out.exists()
    infer = make_inference(tmp_path / "infer")
    assert submit.main([str(run), "--inference", str(infer), "--out", str(out), "--allow-unofficial"]) == 0
    capsys.readouterr()
    for kind in ("train", "inference"):
        fields = json.loads((out / "CIFAR10" / kind / f"{STEM}.json").read_text())
        assert (fields["official"], fields["unofficial_reasons"]) == (False, [DIRTY, FORGED])
        assert fields["official_threshold"] is True
    assert validate_entries.main([str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert sum(f"official: false: the run was not official: {DIRTY}; {FORGED}" in x for x in lines) == 2, lines
    assert validate_entries.main(["--allow-unofficial", str(out)]) == 0
    capsys.readouterr()
    assert cli_main(["leaderboard", str(out), "--format", "json"]) == 0
    captured = capsys.readouterr()
    ranked = json.loads(captured.out)
    assert not any(ranked["tasks"]["CIFAR10"].values())
    assert sorted(x["kind"] for x in ranked["invalid"]) == ["inference", "train"]
    assert all(f"the run was not official: {DIRTY}; {FORGED}" in x["reason"] for x in ranked["invalid"])
    assert captured.err.count("not official") == 2


def test_an_entry_that_says_official_but_lists_reasons_is_invalid(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    out = tmp_path / "entries"
    assert submit.main([str(run), "--out", str(out)]) == 0
    path = out / "CIFAR10" / "train" / f"{STEM}.json"
    fields = json.loads(path.read_text())
    path.write_text(json.dumps({**fields, "unofficial_reasons": [FORGED]}))
    capsys.readouterr()
    assert validate_entries.main([str(out)]) == 1
    assert "unofficial_reasons: lists 1 reason the run is not official, but official is true" in capsys.readouterr().out


def test_a_result_without_provenance_is_not_official(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    result = json.loads((run / "result.json").read_text())
    del result["official"], result["unofficial_reasons"]
    (run / "result.json").write_text(json.dumps(result))
    refused(capsys, [run, "--out", tmp_path / "entries"], "not official: result.json records no provenance")


def test_refuses_inference_below_threshold_of_another_reference_or_partial(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    out = tmp_path / "entries"
    low = make_inference(tmp_path / "low", top1=0.9391)
    refused(capsys, [run, "--inference", low, "--out", out], "top1 93.91% is below the threshold 94.00%")
    other = make_inference(tmp_path / "other", reference="cifar10-fast-pytorch")
    refused(capsys, [run, "--inference", other, "--out", out], 'an inference of "cifar10-fast-pytorch"')
    partial = make_inference(tmp_path / "partial", items=100)
    refused(capsys, [run, "--inference", partial, "--out", out], "not the whole eval set")
    refused(capsys, [run, "--inference", tmp_path / "nowhere", "--out", out], "inference.json: missing")
    assert not out.exists()


def test_existing_entry_needs_force(tmp_path, capsys):
    out = tmp_path / "entries"
    first = make_run(tmp_path / "a", epochs=30)
    assert submit.main([str(first), "--out", str(out)]) == 0
    before = tree(out)
    # the same run again writes the same bytes: nothing is replaced, so it passes
    assert submit.main([str(first), "--out", str(out)]) == 0
    assert tree(out) == before
    second = make_run(tmp_path / "b", epochs=20)
    line = refused(capsys, [second, "--out", out], "--force replaces it")
    assert f"{out / 'CIFAR10' / 'train' / STEM}.json holds another entry (reference \"{REF}\"" in line
    assert f"the run {second} would replace it" in line and "(nothing was written)" in line
    assert tree(out) == before
    assert submit.main([str(second), "--out", str(out), "--force"]) == 0
    fields = json.loads((out / "CIFAR10" / "train" / f"{STEM}.json").read_text())
    assert fields["tta_seconds"] == round(20 * 0.0031 * 3600, 3)
    assert [p.name for p in out.iterdir()] == ["CIFAR10"]           # no staging folder left behind


def test_another_references_run_never_takes_an_entrys_name(tmp_path, capsys):
    """A fork that kept its original's author and model has the original's entry name: its run is
    refused, --force or not, with both the entry and the run named, and nothing is written."""
    out = tmp_path / "entries"
    assert submit.main([str(make_run(tmp_path / "a")), "--out", str(out)]) == 0
    before = tree(out)
    fork = make_run(tmp_path / "fork", reference="cifar10-myresnet-pytorch", epochs=20)
    for force in ([], ["--force"]):
        line = refused(capsys, [fork, "--out", out, *force], "would take its name")
        assert f"{out / 'CIFAR10' / 'train' / STEM}.json holds another entry (reference \"{REF}\"" in line
        assert f"the run {fork} of reference \"cifar10-myresnet-pytorch\"" in line
        assert "--force replaces an entry of the same reference only" in line
        assert tree(out) == before
    # under its own name (--author) it is an entry of its own, beside the original's
    assert submit.main([str(fork), "--out", str(out), "--author", "Fork Author"]) == 0
    assert len(list((out / "CIFAR10" / "train").glob("*.json"))) == 2


def test_submit_lists_every_reason_at_once(tmp_path, capsys):
    """A lowered threshold, uncommitted code and an override: one line names all three, so one
    rerun fixes them all."""
    lowered = "--threshold 0.5 is not the task's 0.94 (a smoke test)"
    run = make_run(tmp_path / "run", threshold=0.5, final=0.55, epochs=3, reasons=[lowered, DIRTY, FORGED])
    line = refused(capsys, [run, "--out", tmp_path / "entries"], "the run is not official: ")
    assert f"lowered threshold 0.5 (official 0.94): a smoke test, not an entry; rerun without --threshold; " \
           f"{DIRTY}; {FORGED} (--allow-unofficial" in line
    assert lowered not in line          # the threshold said once
    assert not (tmp_path / "entries").exists()


def test_bad_run_folders(tmp_path, capsys):
    refused(capsys, [tmp_path / "missing"], "not a folder")
    (tmp_path / "empty").mkdir()
    refused(capsys, [tmp_path / "empty"], "neither result.json")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "result.json").write_text("[1,")
    refused(capsys, [broken], "not readable JSON")
    run = make_run(tmp_path / "nolog")
    (run / f"{REF}.tsv").unlink()
    refused(capsys, [run, "--out", tmp_path / "entries"], "the run's log is missing")


def test_an_entry_that_would_not_validate_is_not_written(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    result = json.loads((run / "result.json").read_text())
    (run / "result.json").write_text(json.dumps({**result, "timestamp": "2026-02-30"}))
    line = refused(capsys, [run, "--out", tmp_path / "entries"], "would not pass `dawnbench validate`")
    assert f"{STEM}.json:" in line and "timestamp" in line
    assert not any(p.is_file() for p in (tmp_path / "entries").rglob("*"))


def test_usage_errors_are_one_line(capsys):
    refused(capsys, [], "RUN_DIR")
    refused(capsys, ["x", "--bogus"], "unrecognized arguments: --bogus")


def test_a_result_json_off_its_schema_is_refused(tmp_path, capsys):
    """result.json is checked against harness/data/result.schema.json before it becomes an entry."""
    run = make_run(tmp_path / "run")
    result = json.loads((run / "result.json").read_text())
    (run / "result.json").write_text(json.dumps({**result, "seed": "zero"}))
    line = refused(capsys, [run, "--out", tmp_path / "entries"], "result.json: seed: 'zero' is not of type")
    assert "result.schema.json" in line
    assert not (tmp_path / "entries").exists()


def test_a_run_that_does_not_verify_is_refused(tmp_path, monkeypatch, capsys):
    """submit verifies first: a changed TSV, a run of an older harness (no stored predictions) or a
    machine without the eval labels are refused in one line, and nothing is written."""
    out = tmp_path / "entries"
    changed = make_run(tmp_path / "changed", epochs=3)
    tsv = changed / f"{REF}.tsv"
    tsv.write_text(tsv.read_text().replace("\t94.12", "\t94.13"))
    refused(capsys, [changed, "--out", out], "does not verify: tsv: ")
    older = make_run(tmp_path / "older", epochs=3)
    events = older / "events.jsonl"
    events.write_text("".join(line.split(', "predictions_file"')[0] + "}}\n" if "predictions_file" in line else line + "\n"
                              for line in events.read_text().splitlines()))
    refused(capsys, [older, "--out", out], "the run stored no predictions")
    honest = make_run(tmp_path / "honest", epochs=3)
    monkeypatch.setenv("DAWNBENCH_DATA", str(tmp_path / "no-data"))
    refused(capsys, [honest, "--out", out], "cannot be verified here: no cifar10 eval labels on this machine")
    assert not out.exists()


INFER_ONLY = "cifar10-resnet56-cpu-inference"


def test_an_inference_only_reference_submits_without_a_run(tmp_path, capsys):
    """No RUN_DIR: the entry of a reference that only infers comes from its inference.json alone,
    names where its model came from, validates and is ranked."""
    infer = make_inference(tmp_path / "infer", reference=INFER_ONLY, infers_only=True)
    out = tmp_path / "entries"
    assert submit.main(["--inference", str(infer), "--out", str(out)]) == 0
    stem = "dawnbench_ResNet-56_1-x-NVIDIA-T4_PyTorch-2.13.0"
    path = out / "CIFAR10" / "inference" / f"{stem}.json"
    record = out / "CIFAR10" / "inference" / f"{stem}.run"       # the inference's record, beside its entry
    assert capsys.readouterr().out.split() == [str(path), str(record)]
    assert (record / "inference.json").read_bytes() == (infer / "inference.json").read_bytes()
    assert not (out / "CIFAR10" / "train").exists()          # no run, no training entry
    fields = json.loads(path.read_text())
    assert fields["reference"] == INFER_ONLY and fields["top1Accuracy"] == 94.97
    assert fields["misc"]["model_source"]["files"] == {"resnet56.pt": {"sha256": "a" * 64, "bytes": 3400000}}
    assert (fields["official"], fields["unofficial_reasons"]) == (True, [])
    assert fields["git_commit"] == "de8b42f2138dedf08d189021a603340ac257828d"
    assert fields["provenance"]["reference_tree_sha256"] == "d" * 64
    assert validate_entries.main([str(out)]) == 0
    assert capsys.readouterr().out.strip() == "1 file checked: all valid"
    assert cli_main(["leaderboard", str(out), "--format", "json"]) == 0
    ranked = json.loads(capsys.readouterr().out)
    # its model is a published file, no verified run's: ranked apart, and said so
    [row] = ranked["tasks"]["CIFAR10"]["inference_latency_unverified_model"]
    assert (row["entry"], row["verification"], row["model_provenance"]) == (stem, "verified", "model provenance unverified")
    assert ranked["tasks"]["CIFAR10"]["inference_latency"] == []
    assert ranked["invalid"] == [] and ranked["tasks"]["CIFAR10"]["train_time"] == []


def test_an_inference_only_entry_is_refused_when_it_is_not_one(tmp_path, capsys):
    out = tmp_path / "entries"
    refused(capsys, ["--out", out], "give a run folder (RUN_DIR), or --inference INFER_DIR alone")
    trains = make_inference(tmp_path / "trains")        # a training reference's inference needs its run
    line = refused(capsys, ["--inference", trains, "--out", out], "a reference that trains")
    assert f"dawnbench submit RUN_DIR --inference {trains}" in line
    partial = make_inference(tmp_path / "partial", reference=INFER_ONLY, infers_only=True, items=100)
    refused(capsys, ["--inference", partial, "--out", out], "not the whole eval set")
    dirty = make_inference(tmp_path / "dirty", reference=INFER_ONLY, infers_only=True, reasons=[DIRTY])
    line = refused(capsys, ["--inference", dirty, "--out", out], "the inference is not official: ")
    assert DIRTY in line and "--allow-unofficial" in line
    assert not out.exists()
    assert submit.main(["--inference", str(dirty), "--out", str(out), "--allow-unofficial"]) == 0
    capsys.readouterr()
    (written,) = (out / "CIFAR10" / "inference").glob("*.json")
    assert (json.loads(written.read_text())["official"], json.loads(written.read_text())["unofficial_reasons"]) == (
        False, [DIRTY])


def test_an_unofficial_inference_of_an_official_run_is_refused(tmp_path, capsys):
    """The run is official, the inference is not (uncommitted code when it ran): the entry is not
    official either, and the reasons are the inference's."""
    run = make_run(tmp_path / "run")
    infer = make_inference(tmp_path / "infer", reasons=[FORGED])
    out = tmp_path / "entries"
    assert FORGED in refused(capsys, [run, "--inference", infer, "--out", out], "the inference is not official: ")
    assert not out.exists()
    assert submit.main([str(run), "--inference", str(infer), "--out", str(out), "--allow-unofficial"]) == 0
    capsys.readouterr()
    fields = json.loads((out / "CIFAR10" / "inference" / f"{STEM}.json").read_text())
    assert (fields["official"], fields["unofficial_reasons"]) == (False, [FORGED])
    train = json.loads((out / "CIFAR10" / "train" / f"{STEM}.json").read_text())
    assert train["official"] is True        # the training entry is the run's alone


# ---------------------------------------------------------------- --out, and a price added at submit time

def test_out_that_is_a_file_or_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    run = make_run(tmp_path / "run")
    afile = tmp_path / "entries.txt"
    afile.write_text("not a folder\n")
    for out in (afile, afile / "below"):
        line = refused(capsys, [run, "--out", out], f"--out {afile}")
        assert "is a file, not a folder" in line and "--out entries/" in line and "Errno" not in line
    assert afile.read_text() == "not a folder\n" and sorted(p.name for p in tmp_path.iterdir()) == ["entries.txt", "run"]

    mkdtemp = submit.tempfile.mkdtemp

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "ro"))
    monkeypatch.setattr(submit.tempfile, "mkdtemp", denied)     # root ignores a chmod, so the OS is told to refuse
    line = refused(capsys, [run, "--out", tmp_path / "ro"], f"cannot write the entry under {tmp_path / 'ro'}: ")
    assert "Permission denied; give --out a folder you can write" in line and "Errno" not in line
    line = refused(capsys, [tmp_path / "no-such-run", "--out", tmp_path / "e"], "no-such-run: not a folder")
    assert "Errno" not in line
    monkeypatch.setattr(submit.tempfile, "mkdtemp", mkdtemp)

    def unreadable(source, target):
        raise PermissionError(13, "Permission denied", str(source))
    monkeypatch.setattr(submit.shutil, "copyfile", unreadable)    # a run file this user cannot read
    line = refused(capsys, [run, "--out", tmp_path / "e"], f"cannot read {run}/")
    assert line.endswith(": Permission denied (nothing was written)") and "Errno" not in line
    assert list((tmp_path / "e").iterdir()) == []          # the staging folder went too


def unpriced_run(folder: Path, nodes: int = 1) -> Path:
    run = make_run(folder, cost_per_hour=None)
    edit_json(run / "result.json", nodes=nodes)
    return run


def unpriced_inference(folder: Path) -> Path:
    infer = make_inference(folder)
    edit_json(infer / "inference.json", costPerHour=None, cost=None, cost_per_10k_items_usd=None)
    return infer


def test_a_price_given_at_submit_time_prices_both_entries(tmp_path, capsys):
    run, infer = unpriced_run(tmp_path / "run", nodes=2), unpriced_inference(tmp_path / "infer")
    out = tmp_path / "by-hand"
    assert submit.main([str(run), "--inference", str(infer), "--out", str(out), "--cost-per-hour", "1.25"]) == 0
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    train = json.loads((out / "CIFAR10" / "train" / f"{STEM}.json").read_text())
    tta = json.loads((run / "result.json").read_text())["tta_seconds"]
    assert train["costPerHour"] == 2.5 and train["cost_usd"] == pytest.approx(2.5 * tta / 3600)
    assert (train["price"], train["instance"]) == (None, None)
    assert train["price_added"] == {"by": "submit", "date": today, "option": "--cost-per-hour 1.25",
                                    "usd_per_hour": 1.25, "source": submit.SUBMITTER_SOURCE, "nodes": 2}
    inference = json.loads((out / "CIFAR10" / "inference" / f"{STEM}.json").read_text())
    assert inference["costPerHour"] == 1.25 and inference["price_added"]["nodes"] == 1     # it ran on one node
    assert inference["cost"] == pytest.approx(1.25 * inference["latency"] / 3.6e6)
    assert inference["cost_per_10k_items_usd"] == pytest.approx(inference["cost"] * 1e4)
    assert validate_entries.main([str(out)]) == 0
    capsys.readouterr()
    [row] = ranking.rank_task([entries.load(out / "CIFAR10" / "train" / f"{STEM}.json")])[0]["train_submitted"]
    assert row["cost_usd"] == pytest.approx(train["cost_usd"], rel=0.01)      # shown (not reproduced: apart)

    out = tmp_path / "table"
    assert submit.main([str(run), "--out", str(out), "--instance", "AWS:p3.2xlarge"]) == 0
    train = json.loads((out / "CIFAR10" / "train" / f"{STEM}.json").read_text())
    table = prices.lookup("aws:p3.2xlarge")
    assert train["price"] == table.record() and train["instance"] == "aws:p3.2xlarge"
    assert train["costPerHour"] == pytest.approx(2 * table.usd_per_hour)
    assert train["price_added"] == {"by": "submit", "date": today, "option": "--instance aws:p3.2xlarge",
                                    "usd_per_hour": table.usd_per_hour, "source": table.source,
                                    "source_date": table.date, "nodes": 2}
    assert validate_entries.main([str(out)]) == 0

    only = unpriced_inference(tmp_path / "only")       # an inference-only reference's entry is priced alike
    edit_json(only / "inference.json", reference=INFER_ONLY, infers_only=True)
    out = tmp_path / "only-entries"
    assert submit.main(["--inference", str(only), "--out", str(out), "--cost-per-hour", "0.5"]) == 0
    (path,) = (out / "CIFAR10" / "inference").glob("*.json")
    fields = json.loads(path.read_text())
    assert fields["costPerHour"] == 0.5 and fields["price_added"]["source"] == submit.SUBMITTER_SOURCE
    assert fields["cost"] == pytest.approx(0.5 * fields["latency"] / 3.6e6)


def test_a_price_at_submit_time_never_replaces_the_runs_and_is_bounded(tmp_path, capsys):
    priced = make_run(tmp_path / "priced", cost_per_hour=3.06)
    out = tmp_path / "entries"
    line = refused(capsys, [priced, "--out", out, "--cost-per-hour", "2"], "the run already has a price, costPerHour 3.06")
    assert "leave out --cost-per-hour" in line
    refused(capsys, [priced, "--out", out, "--instance", "aws:p2.xlarge"], "the run already has a price")
    assert not out.exists()
    # the same price is no change: the entry is the one the run gives without the option
    assert submit.main([str(priced), "--out", str(tmp_path / "plain")]) == 0
    assert submit.main([str(priced), "--out", str(out), "--instance", "aws:p3.2xlarge"]) == 0
    assert tree(out) == tree(tmp_path / "plain")

    run = unpriced_run(tmp_path / "run")
    for bad in ("nan", "inf", "-inf", "-0.5", "1e400"):
        line = refused(capsys, [run, "--out", out / "x", f"--cost-per-hour={bad}"], "--cost-per-hour ")
        assert "give a finite number above 0 and at most 1000" in line
    refused(capsys, [run, "--out", out / "x", "--cost-per-hour", "lots"], "--cost-per-hour lots: give a finite number")
    refused(capsys, [run, "--out", out / "x", "--cost-per-hour", "1", "--instance", "aws:p3.2xlarge"], "not allowed with")
    refused(capsys, [run, "--out", out / "x", "--instance", "aws:p9.nothing"], "unknown instance 'aws:p9.nothing'")
    assert not (out / "x").exists()
    for free in ("0", "-0", "1e300"):      # no price, or one that means nothing (issue 34): refused, nothing written
        refused(capsys, [run, "--out", out / "free", "--cost-per-hour", free],
                f"--cost-per-hour {free}: give a finite number above 0 and at most 1000")
    assert not (out / "free").exists()
