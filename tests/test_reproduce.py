"""`dawnbench reproduce`: an entry run again from its provenance and compared with its claim. An
honest run is reproduced (the scripted reference, and once the real default); a folder whose clock
was scaled by 0.2 and rewritten to agree with itself passes `verify` but is not reproduced, with both
figures side by side (and one scaled by 0.85, the comparison's rule on the judge's own spread); other
hardware compares accuracy only; code that is not at hand, and every bad input, is one line."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cheats import speed_up
from leaderboard_fixture import edit_json, write_entries

from dawnbench import entries, entry_status, reproduce, submit
from dawnbench.cli import main as dawnbench_main
from harness import judge_hash, local_ranks, paths, verify_run, worker_env

REPO = paths.PACKAGE_PARENT

# Each epoch sleeps, so that the time-to-accuracy is mostly the reference's own and a forged fifth of
# it stands far outside any tolerance, however loaded the machine.
SLEEPY = ("--set", "train_sleep=0.4")


def scripted_run(references: Path, data: Path, results: Path, *args: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "scripted-test", "--references", str(references),
                           "--data", str(data), "--results", str(results), "--no-progress", "--run-id", "claimed",
                           *SLEEPY, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return results / "scripted-test" / "claimed"


@pytest.fixture
def honest(references_root, fashion_root, tmp_path) -> Path:
    return scripted_run(references_root, fashion_root, tmp_path / "results")


def run_reproduce(target: Path, data: Path, tmp_path: Path, capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = dawnbench_main(["reproduce", str(target), "--runtime", "native", "--data", str(data),
                           "--results", str(tmp_path / "reproduced"), *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / entry_status.REPRODUCTION_RECORD).read_text())


def row(lines: list[str], label: str) -> list[str]:
    """A row of the side-by-side table: its cells after the label."""
    (line,) = [line for line in lines if line.startswith(label + "  ")]
    return line[len(label):].split()


def test_an_honest_run_is_reproduced_and_an_earlier_record_is_kept(honest, fashion_root, tmp_path, capsys):
    code, out, err = run_reproduce(honest, fashion_root, tmp_path, capsys, "--tolerance", "1000%")
    assert code == 0, out + err
    assert out[-1].startswith(f"reproduced: {honest}: converged at epoch 3, top1 curve within 0.005, "
                              f"time-to-accuracy within \u00b11000% of the reproduction (--tolerance) [native; "), out[-1]
    assert "dawnbench reproduce: runtime: native (--runtime native)" in err
    assert any(line.startswith("dawnbench reproduce: code: ") and "tree sha256 is the run's" in line for line in err)
    assert row(out, "epochs") == ["3", "3"] and row(out, "top1 at epoch 3") == ["0.9500", "0.9500"]
    claimed, = [json.loads((honest / "result.json").read_text())]
    first = record(honest)
    assert first["verdict"] == "reproduced" and first["differences"] == []
    assert first["claimed"]["figures"]["tta_seconds"] == claimed["tta_seconds"]
    (again,) = first["reproduced"]
    rerun = json.loads((Path(again["run"]) / "result.json").read_text())
    assert again["figures"]["tta_seconds"] == rerun["tta_seconds"] and rerun["seed"] == claimed["seed"]
    assert rerun["hyperparameters"] == claimed["hyperparameters"]          # train_sleep=0.4 given again
    assert again["environment"]["hardware"] == first["claimed"]["environment"]["hardware"]
    assert again["environment"]["reference_tree_sha256"] == claimed["provenance"]["reference_tree_sha256"]
    assert entry_status.reproduction_status(honest, honest) == "reproduced"

    # a second reproduction keeps the first record beside it
    assert run_reproduce(honest, fashion_root, tmp_path, capsys, "--tolerance", "1000%")[0] == 0
    assert json.loads((honest / "reproduction-1.json").read_text()) == first
    assert record(honest)["reproduced"][0]["run"] != again["run"]


def test_an_entry_is_reproduced_from_its_run_and_the_record_lands_beside_it(honest, fashion_root, tmp_path, capsys,
                                                                           monkeypatch):
    monkeypatch.setenv("DAWNBENCH_DATA", str(fashion_root))
    tree = tmp_path / "entries"
    assert submit.main([str(honest), "--out", str(tree), "--allow-unofficial"]) == 0      # not in git: unofficial
    (entry,) = (tree / "FashionMNIST" / "train").glob("*.json")
    capsys.readouterr()
    code, out, err = run_reproduce(entry, fashion_root, tmp_path, capsys, "--tolerance", "1000%")
    assert code == 0 and out[-1].startswith(f"reproduced: {entry.with_suffix('.run')}: "), out + err
    assert record(entry.with_suffix(".run"))["verdict"] == "reproduced"
    assert not (honest / entry_status.REPRODUCTION_RECORD).exists()           # the entry's run, not the folder it came from
    assert entry_status.reproduction_statuses([entries.load(entry)]) == {str(entry): "reproduced"}
    assert dawnbench_main(["validate", "--allow-unofficial", str(tree)]) == 0     # the record is no entry
    capsys.readouterr()
    # issue 46, attack 6: submit carries env.json, whose record the reproduction was compared with...
    carried = json.loads((entry.with_suffix(".run") / "env.json").read_text())
    recorded = json.loads((honest / "env.json").read_text())
    # the same record, with the machine's folders written as public names (an entry is public)
    assert carried["worker_environment"]["sha256"] == recorded["worker_environment"]["sha256"]
    assert carried["worker_environment"]["distributions"] == recorded["worker_environment"]["distributions"]
    assert str(honest.parent) not in json.dumps(carried) and "<outside the checkout>/" in json.dumps(carried)
    assert not any("the claim records none" in note for note in record(entry.with_suffix(".run"))["notes"])
    # ...and an entry's run without it does not verify: result.json names a record nobody can check
    (entry.with_suffix(".run") / "env.json").unlink()
    failure = verify_run.verify(entry.with_suffix(".run"), fashion_root).first_failure
    assert failure.name == "environment" and failure.detail.startswith(
        "result.json names the workers' environment sha256 "), failure
    assert failure.detail.endswith("but env.json records none (no env.json, or no worker_environment in it): give "
                                   "the run's env.json")


def test_a_run_whose_clock_was_scaled_verifies_but_is_not_reproduced(honest, fashion_root, tmp_path, capsys):
    forged = Path(shutil.copytree(honest, tmp_path / "forged"))
    speed_up(forged, 0.2)
    checked = verify_run.verify(forged, fashion_root)
    assert checked.verified, checked.lines()          # consistent: verify cannot tell
    claimed = json.loads((forged / "result.json").read_text())["tta_seconds"]

    code, out, err = run_reproduce(forged, fashion_root, tmp_path, capsys)
    assert code == 1, out + err
    rec = record(forged)
    # one run measures no spread: the stated tolerance, said where it came from
    assert rec["verdict"] == "not reproduced" and rec["tolerance"]["time"] == reproduce.ONE_RUN_TOLERANCE
    assert "one run here measures no spread" in rec["tolerance"]["time_source"]
    again = rec["reproduced"][0]["figures"]["tta_seconds"]
    assert again > 2 * claimed
    # both figures side by side, and in the verdict line
    assert row(out, "time-to-accuracy (s)") == [f"{claimed:.3f}", f"{again:.3f}"]
    assert row(out, "epochs") == ["3", "3"]
    assert out[-1].startswith(f"not reproduced: {forged}: time-to-accuracy: {claimed:.3f} s claimed, {again:.3f} s "
                              f"reproduced (the claim -"), out[-1]
    assert "tolerance \u00b110%" in out[-1]
    assert entry_status.reproduction_status(forged, forged) == f"not reproduced: {rec['differences'][0]}"


def test_other_hardware_compares_accuracy_only(honest, fashion_root, tmp_path, capsys):
    elsewhere = Path(shutil.copytree(honest, tmp_path / "elsewhere"))
    speed_up(elsewhere, 0.2)                          # a time no machine here could match...
    edit_json(elsewhere / "result.json", hardware="8 x NVIDIA Tesla V100-SXM2-16GB")   # ...on other hardware,
    log = elsewhere / "events.jsonl"                  # as the harness's own log says it (what reproduce reads)
    platform = json.loads((honest / "result.json").read_text())["hardware"]
    log.write_text(log.read_text().replace(json.dumps(platform), json.dumps("8 x NVIDIA Tesla V100-SXM2-16GB")))
    code, out, err = run_reproduce(elsewhere, fashion_root, tmp_path, capsys)
    assert code == 0, out + err
    assert out[-1].startswith(f"accuracy reproduced, time not compared (other hardware): {elsewhere}: converged at "
                              f"epoch 3, top1 curve within "), out
    assert "time-to-accuracy within" not in out[-1]
    assert any(line.startswith("note: hardware: 8 x NVIDIA Tesla V100-SXM2-16GB claimed, ") and
               "time is not comparable" in line for line in out)
    assert entry_status.reproduction_status(elsewhere, elsewhere) == "accuracy reproduced, time not compared (other hardware)"


def test_the_code_at_the_runs_commit_is_taken_from_the_repository(references_root, fashion_root, tmp_path, capsys):
    git = ["git", "-C", str(references_root), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "scripted"], check=True)
    run = scripted_run(references_root, fashion_root, tmp_path / "results")
    commit = json.loads((run / "result.json").read_text())["git"]["commit"]
    assert commit
    with open(references_root / "scripted-test" / "scripted.py", "a") as f:
        f.write("\n# changed after the run\n")
    code, out, err = run_reproduce(run, fashion_root, tmp_path, capsys, "--tolerance", "1000%")
    assert code == 0, out + err
    assert f"dawnbench reproduce: code: commit {commit[:12]} of {references_root.resolve()} (its scripted-test " \
           f"tree sha256 is the run's; harness/ and common/ of this checkout)" in err
    assert record(run)["verdict"] == "reproduced"

    # a commit this repository does not have: one line saying what is missing, and how to get it
    edit_json(run / "result.json", git={"commit": "0" * 40, "dirty": False})
    code, out, err = run_reproduce(run, fashion_root, tmp_path, capsys)
    assert code == 2 and out == [] and len(err) == 1, out + err
    assert err[0].startswith("dawnbench reproduce: error: the code of scripted-test is not at hand: ")
    assert f"commit {'0' * 12} is not in the repository at {references_root.resolve()} (fetch it: " in err[0]


def test_a_fork_that_edits_the_harness_is_reproduced_by_this_checkouts_harness(references_root, fashion_root,
                                                                              tmp_path, capsys):
    """Issue 46, attack 1: a fork commits its reference with an edited harness/__init__.py (here it only
    leaves a mark where it runs). Reproduce takes the reference folder from that commit and nothing else:
    this checkout's harness runs, and every file the commit changes outside the reference is named."""
    repo = references_root.parent
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    shutil.copytree(REPO / "harness", repo / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the maintainer's"], check=True)
    subprocess.run([*git, "checkout", "-q", "-b", "fork"], check=True)
    mark = tmp_path / "the-forks-harness-ran"
    with open(repo / "harness" / "__init__.py", "a") as f:
        f.write(f"\nopen({str(mark)!r}, 'a').close()\n")
    (repo / "harness" / "extra.py").write_text("# a file the fork adds\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the fork"], check=True)
    run = scripted_run(references_root, fashion_root, tmp_path / "results")   # run by this checkout's harness
    commit = json.loads((run / "result.json").read_text())["git"]["commit"]
    subprocess.run([*git, "checkout", "-q", "main"], check=True)
    with open(references_root / "scripted-test" / "scripted.py", "a") as f:   # the folder is taken from the commit
        f.write("\n# changed after the run\n")
    code, out, err = run_reproduce(run, fashion_root, tmp_path, capsys, "--tolerance", "1000%")
    assert not mark.exists(), "the fork's harness ran"
    assert code == 0, out + err
    assert f"dawnbench reproduce: code: commit {commit[:12]} of {repo.resolve()} (its scripted-test tree sha256 is " \
           f"the run's; harness/ and common/ of this checkout)" in err
    said = [line for line in err if "outside its reference folder" in line]
    assert said == [f"dawnbench reproduce: the run's commit changes harness/{name} outside its reference folder: not "
                    f"run, this checkout's judge runs" for name in ("__init__.py (modified)", "extra.py (added)")], err
    assert record(run)["changed_outside_reference"] == ["harness/__init__.py (modified)", "harness/extra.py (added)"]
    (again,) = record(run)["reproduced"]
    judged = json.loads((Path(again["run"]) / "result.json").read_text())["provenance"]["judge_sha256"]
    assert judged == judge_hash.sha256()                               # this checkout's judge, recorded as such


def test_code_that_is_not_at_hand_is_one_line(honest, references_root, fashion_root, tmp_path, capsys):
    with open(references_root / "scripted-test" / "scripted.py", "a") as f:
        f.write("\n# changed after the run\n")
    before = sorted(p.name for p in honest.iterdir())
    code, out, err = run_reproduce(honest, fashion_root, tmp_path, capsys)
    assert code == 2 and out == [] and len(err) == 1, err
    assert err[0].startswith("dawnbench reproduce: error: the code of scripted-test is not at hand: "
                             f"{references_root.resolve() / 'scripted-test'} hashes ")
    assert err[0].endswith("and the run names no commit")         # the references are in no repository
    assert sorted(p.name for p in honest.iterdir()) == before and not (tmp_path / "reproduced").exists()

    # a DAWNBench v1 entry has no run behind it: nothing names its code
    tree = write_entries(tmp_path / "entries")
    entry = tree / "CIFAR10" / "train" / "alice_resnet18_p3.2xlarge_pytorch.json"
    code, out, err = run_reproduce(entry, fashion_root, tmp_path, capsys)
    assert code == 2 and len(err) == 1
    assert err[0] == (f"dawnbench reproduce: error: {entry}: the code is not at hand: the entry has no run folder "
                      f"alice_resnet18_p3.2xlarge_pytorch.run/ beside it (a DAWNBench v1 entry, or one submitted "
                      f"without its run), so it names no reference, seed or code to run again")


def test_bad_inputs_are_one_line(honest, fashion_root, tmp_path, capsys):
    tampered = Path(shutil.copytree(honest, tmp_path / "tampered"))
    (tampered / "predictions" / "epoch-002.npz").unlink()
    series = tmp_path / "series"
    series.mkdir()
    (series / "summary.json").write_text("{}")
    cases = {
        (str(tmp_path / "nowhere"),): "no such run folder or entry",
        (str(tmp_path),): "no result.json: give a run folder",
        (str(series),): "no run folder (seed<k>/ with result.json): give a series folder",
        (str(honest), "--runs", "0"): "--runs 0: give a whole number from 1 to 1,000",
        (str(honest), "--tolerance=-5%"): "--tolerance -5%: give a positive fraction or percentage",
        (str(honest), "--tolerance", "wide"): "--tolerance wide: give a positive fraction",
        (str(honest), "--runtime", "podman"): "--runtime podman: expected docker or native",
        (str(honest), "--metric-tolerance", "nan"): "--metric-tolerance nan: give a finite number 0 or more",
        (str(honest), "--bogus"): "unrecognized arguments: --bogus",
        (str(tampered),): "does not verify (failed: predictions: epoch 2",
    }
    for argv, says in cases.items():
        code = dawnbench_main(["reproduce", *argv, "--data", str(fashion_root)])
        out, err = capsys.readouterr()
        lines = err.splitlines()
        assert code == 2 and out == "" and len(lines) == 1 and says in lines[0], (argv, lines)
        assert lines[0].startswith("dawnbench reproduce: error: ") and "Traceback" not in err
    assert not (honest / entry_status.REPRODUCTION_RECORD).exists() and not (tampered / entry_status.REPRODUCTION_RECORD).exists()


def test_the_comparison_names_each_difference_with_both_figures():
    def figs(status="converged", epochs=3, curve=(0.5, 0.8, 0.95), tta=10.0):
        return {"status": status, "epochs": epochs, "metric": "top1", "tta_seconds": tta,
                "curve": [{"epoch": n, "top1": v, "tta_seconds": None} for n, v in enumerate(curve, start=1)]}
    held = {"distributions": [{"name": "numpy", "version": "2.4.6"}, {"name": "torch", "version": "2.13.0"}], "pth": []}
    here = {"hardware": "cpu", "nodes": 1, "runtime": "native",
            "worker_environment": {**held, "sha256": worker_env.digest(held)}}
    assert reproduce.compare(figs(), here, [(figs(tta=11.0), here)], 0.25, 0.005)[:2] == ("reproduced", [])
    # two-sided, relative to the judge's time: a claim faster than the code runs here is a difference (a
    # forgery's signature), and so is one slower
    assert reproduce.compare(figs(), here, [(figs(tta=4.0), here)], 0.25, 0.005)[1] == [
        "time-to-accuracy: 10.000 s claimed, 4.000 s reproduced (the claim +150% of it, tolerance \u00b125%)"]
    assert reproduce.compare(figs(), here, [(figs(tta=13.4), here)], 0.25, 0.005)[1] == [
        "time-to-accuracy: 10.000 s claimed, 13.400 s reproduced (the claim -25% of it, tolerance \u00b125%)"]
    verdict, differences, _ = reproduce.compare(figs(), here, [(figs(status="DNC", epochs=4, curve=(0.5, 0.8, 0.9, 0.91),
                                                                     tta=None), here)], 0.25, 0.005)
    assert verdict == "not reproduced" and differences == [
        "status: converged claimed, DNC reproduced", "epoch of convergence: 3 claimed, 4 reproduced",
        "top1 at epoch 3: 0.9500 claimed, 0.9000 reproduced (tolerance 0.005)"]
    # several runs: time by their median, each run's differences named
    verdict, differences, notes = reproduce.compare(figs(), here, [(figs(tta=t), here) for t in (9.0, 14.0, 30.0)],
                                                    0.25, 0.005)
    assert verdict == "not reproduced" and differences == [
        "time-to-accuracy: 10.000 s claimed, 14.000 s reproduced (median) (the claim -29% of it, tolerance \u00b125%)"]
    # the workers' environment (issue 33): a different distribution or a planted start-up file is named
    other = {"distributions": [{"name": "numpy", "version": "2.4.6"}, {"name": "torch", "version": "2.12.0"}],
             "pth": [{"file": "/v/site-packages/clock.pth", "owner": None, "sha256": "ab" * 32}]}
    there = {**here, "worker_environment": {**other, "sha256": worker_env.digest(other)}}
    verdict, differences, _ = reproduce.compare(figs(), here, [(figs(), there)], 0.25, 0.005)
    assert verdict == "not reproduced" and differences == [
        "workers' environment: claimed vs reproduced: torch 2.13.0 vs 2.12.0; clock.pth absent vs present"]
    # a claim from before the record: said, not held against it; an image against a native run: not compared
    assert reproduce.compare(figs(), {**here, "worker_environment": None}, [(figs(), there)], 0.25, 0.005)[2][0] == (
        "workers' environment: the claim records none (a run before issue 33); not compared")
    assert reproduce.compare(figs(), here, [(figs(), {**there, "runtime": "docker"})], 0.25, 0.005)[:2] == (
        "reproduced", [])
    # the tolerance is the judge's: its own runs' spread (at least 5%), a stated 10% for one run, or --tolerance
    assert reproduce.time_tolerance([10.0], None)[0] == reproduce.ONE_RUN_TOLERANCE == 0.10
    assert reproduce.time_tolerance([10.0, 10.1, 9.9], None)[0] == reproduce.MIN_TIME_TOLERANCE
    assert reproduce.time_tolerance([10.0, 12.0, 8.0], None)[0] == pytest.approx(3 * 0.2)
    assert reproduce.time_tolerance([10.0, 12.0], 0.5) == (0.5, "--tolerance")


def test_a_clock_scaled_by_0_85_is_not_reproduced_by_the_judges_own_spread():
    """Attack 5 (issue 46): an honest run's clock readings all scaled by 0.85 keep the folder consistent
    (verify passes), and the one-sided 25% tolerance called it reproduced on the same machine (any
    forgery, on a quieter one). The claim is compared two-sided with the judge's median, within the
    spread the judge measured (3 x the cv of its runs, at least 5%)."""
    judge = [100.0, 101.0, 99.0]                     # three reproduction runs on the judge's machine: cv 1%
    tolerance, source = reproduce.time_tolerance(judge, None)
    assert tolerance == reproduce.MIN_TIME_TOLERANCE and "of the 3 reproduction runs here" in source
    within, words = reproduce.time_check(85.0, judge, tolerance)
    assert not within and words == ("time-to-accuracy: 85.000 s claimed, 100.000 s reproduced (median) "
                                    "(the claim -15% of it, tolerance \u00b15%)")
    assert reproduce.time_check(100.5, judge, tolerance)[0]            # the honest claim is
    # a quieter judge (10% faster than the entrant's machine) no longer excuses a forgery either
    assert not reproduce.time_check(85.0, [90.0, 90.5, 89.5], reproduce.time_tolerance([90.0, 90.5, 89.5], None)[0])[0]
    # and one run, which measures no spread, holds it to the stated 10%
    assert not reproduce.time_check(85.0, [100.0], reproduce.time_tolerance([100.0], None)[0])[0]
    claimed = {"status": "converged", "epochs": 1, "metric": "top1", "tta_seconds": 85.0,
               "curve": [{"epoch": 1, "top1": 0.95, "tta_seconds": 85.0}]}
    env = {"hardware": "cpu", "nodes": 1, "runtime": "native", "worker_environment": None}
    runs = [({**claimed, "tta_seconds": t}, env) for t in judge]
    assert reproduce.compare(claimed, env, runs, tolerance, 0.005)[0] == "not reproduced"


def test_the_real_default_is_reproduced(default_series, on_fashion_subset, tmp_path, capsys):
    """A real run of the default, run again natively and found the same: the first run of the suite's shared
    series (conftest's `default_series`: one epoch on a fifth of Fashion-MNIST, made once for the tests that
    read a series), so that the one run this test adds is a fifth of a full epoch."""
    run = Path(shutil.copytree(default_series / "seed0", tmp_path / "run"))
    code, out, err = run_reproduce(run, on_fashion_subset, tmp_path, capsys, "--tolerance", "1000%", "--python", sys.executable)
    assert code == 0, out + err
    assert out[-1].startswith(f"reproduced: {run}: converged at epoch 1, top1 curve within 0.005, "), out
    claimed, again = row(out, "top1 at epoch 1")
    assert abs(float(claimed) - float(again)) <= 0.005
    assert record(run)["reproduced"][0]["environment"]["framework"].startswith("PyTorch")


def test_a_run_of_two_processes_is_run_again_with_two_ranks(on_fashion_subset, tmp_path, capsys):
    """A run of NPROC=2 was refused outright, so a forged one stayed "not tried" forever (issue 33).
    Where the machine has the ranks it is run again with them (the judge's local-rank launcher), and a copy
    whose clock was scaled by 0.2 is not reproduced. Both runs are one epoch on a fifth of Fashion-MNIST
    (conftest's `fashion_subset`, its manifest in the environment both inherit): the ranks, not the data, are
    what is tried."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two ranks need two usable CPUs")
    results = tmp_path / "results"
    proc = subprocess.run([*local_ranks.launcher_command(2), "run", "fashion-mnist-cnn-pytorch",
                           "--data", str(on_fashion_subset), "--results", str(results), "--threshold", "0.5",
                           "--max-epochs", "1", "--run-id", "claimed", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    claimed = results / "fashion-mnist-cnn-pytorch" / "claimed"
    assert json.loads((claimed / "result.json").read_text())["world_size"] == 2
    forged = Path(shutil.copytree(claimed, tmp_path / "forged"))
    speed_up(forged, 0.2)
    code, out, err = run_reproduce(forged, on_fashion_subset, tmp_path, capsys, "--python", sys.executable)
    assert code == 1, out + err
    assert any("native, 2 local ranks" in line for line in err), err
    rec = record(forged)
    assert rec["verdict"] == "not reproduced" and rec["reproduced"][0]["environment"]["world_size"] == 2
    assert rec["differences"][0].startswith("time-to-accuracy: ")


# ---------------------------------------------------------------- a series (issue 48)

def scripted_series(references: Path, data: Path, results: Path) -> Path:
    """`dawnbench run scripted-test --runs 2` (seeds 0 and 1, each converging at its third epoch)."""
    proc = subprocess.run([sys.executable, "-m", "dawnbench.cli", "run", "scripted-test", "--runs", "2",
                           "--references", str(references), "--data", str(data), "--results", str(results),
                           "--no-progress", *SLEEPY], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (series,) = (results / "scripted-test").iterdir()
    return series


def test_a_series_entry_is_reproduced_seed_by_seed_and_a_forged_series_is_not(references_root, fashion_root, tmp_path,
                                                                             capsys, monkeypatch):
    """`reproduce` of a series entry runs each of its seeds again under the judge and applies the series' rule
    to the judge's runs: the record holds both sides' acceptance, and the verified tier's time is the judge's
    median with the interval of the judge's runs. A series whose every clock was scaled by 0.2, and its
    summary rewritten to match, verifies but is not reproduced. (Before: "a series folder: reproduce one of
    its runs", and an entry of a series reproduced its one submitted run.)"""
    from dawnbench import series as series_module
    from dawnbench import series_record
    monkeypatch.setenv("DAWNBENCH_DATA", str(fashion_root))
    series = scripted_series(references_root, fashion_root, tmp_path / "results")
    tree = tmp_path / "entries"
    assert submit.main([str(series), "--out", str(tree), "--allow-unofficial"]) == 0
    (entry,) = (tree / "FashionMNIST" / "train").glob("*.json")
    capsys.readouterr()
    code, out, err = run_reproduce(entry, fashion_root, tmp_path, capsys, "--tolerance", "1000%")
    assert code == 0, out + err
    assert out[-1].startswith(f"reproduced: series {entry.with_suffix('.series')}: its 2 seeds run again: each seed's "
                              f"status, epochs and top1 curve within 0.005, the single rule accepted on both sides, "
                              f"its time within \u00b11000% of the judge's (--tolerance)"), out[-1]
    rec = record(entry.with_suffix(".run"))
    assert rec["verdict"] == "reproduced" and rec["series"]["rule"] == "single" and rec["series"]["seeds"] == [0, 1]
    judged_runs = [json.loads((Path(r["run"]) / "result.json").read_text()) for r in rec["reproduced"]]
    assert [r["seed"] for r in judged_runs] == [0, 1] and all(r["status"] == "converged" for r in judged_runs)
    times = [r["tta_seconds"] for r in judged_runs]
    assert rec["series"]["reproduced"]["tta_median_seconds"] == pytest.approx(sorted(times)[1] / 2 + sorted(times)[0] / 2)
    # the verified tier's figure: the judge's median over its runs of the seeds, with their 95% interval
    (judged,) = entry_status.judged_times([entries.load(entry)]).values()
    assert judged.runs == 2 and judged.seconds == pytest.approx(sum(times) / 2) and judged.statistic == "median"
    lo, hi = judged.interval
    assert lo < judged.seconds < hi
    assert [lo, hi] == pytest.approx(rec["series"]["reproduced"]["tta_ci95_seconds"])

    # a forged series: every run's clock scaled by 0.2 and summary.json rewritten by the series' own writer
    forged = Path(shutil.copytree(series, tmp_path / "forged"))
    for run in ("seed0", "seed1"):
        speed_up(forged / run, 0.2)
    series_module._write_summary(forged, series_record.read_runs(forged), 2, interrupted=False, in_progress=False)
    assert series_record.verify(forged, fashion_root, emit=lambda line: None) == 0       # consistent
    assert run_reproduce(forged, fashion_root, tmp_path, capsys, "--runs", "3")[0] == 2       # more seeds than it has
    code, out, err = run_reproduce(forged, fashion_root, tmp_path, capsys, "--runs", "1")
    assert code == 1, out + err
    rec = record(forged)
    assert rec["series"]["seeds"] == [0] and rec["tolerance"]["time"] == reproduce.ONE_RUN_TOLERANCE
    assert out[-1].startswith(f"not reproduced: series {forged}: series time-to-accuracy (single rule, the median of "
                              f"1 seeds' runs): "), out[-1]
    assert row(out, "     0")[:2] == ["converged", "3"]
