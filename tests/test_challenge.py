"""`dawnbench challenge` (issue 48): two entries timed against each other on one machine, interleaved pairs; the
paired statistics checked against scipy on synthetic pairs; and one shared end-to-end challenge of two forks
of a numpy reference (`dawnbench fork`, 1 epoch, a lowered threshold, 2 pairs) whose folder verifies, and does not
once a run is removed, two runs are swapped between the sides, or challenge.json is edited."""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from cheats import write_reference
from conftest import PYTHON, REPO, cli_env
from polling import wait_for
from scipy import stats

from bench import killed_run
from dawnbench import challenge, challenge_board, challenge_record, interleave, launcher, site, stoppable
from dawnbench.cli import main
from harness import datasets
from harness.tasks import TASKS

DEFAULT = "fashion-mnist-cnn-pytorch"
FORKED, CANDIDATE, INCUMBENT = "fmnist-numpy", "fmnist-fast-numpy", "fmnist-slow-numpy"


# ---------------------------------------------------------------- the statistics, against scipy

def _pairs(seed: int, n: int, speedup: float) -> tuple[list[float], list[float]]:
    """n pairs of times: the incumbent's around 20 s, the candidate's `speedup` times faster, each pair
    sharing a load factor (as two runs back to back do) and each run its own noise."""
    rng = np.random.default_rng(seed)
    load = rng.uniform(0.9, 1.3, n)
    incumbent = 20.0 * load * rng.lognormal(0, 0.03, n)
    candidate = 20.0 / speedup * load * rng.lognormal(0, 0.03, n)
    return candidate.tolist(), incumbent.tolist()


@pytest.mark.parametrize("seed, n, speedup", [(1, 8, 1.07), (2, 5, 1.0), (3, 3, 0.9), (4, 2, 1.2)])
def test_the_paired_statistics_are_scipy_s_paired_t_test_on_log_times(seed, n, speedup):
    candidate, incumbent = _pairs(seed, n, speedup)
    got = challenge_record.paired(candidate, incumbent)
    d = np.log(incumbent) - np.log(candidate)
    test = stats.ttest_rel(np.log(incumbent), np.log(candidate), alternative="greater")
    low, high = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert got["n"] == n
    assert got["ratio"] == pytest.approx(math.exp(d.mean()), rel=1e-12)
    assert got["p_value"] == pytest.approx(test.pvalue, rel=1e-9)
    assert got["ratio_ci95"] == pytest.approx([math.exp(low), math.exp(high)], rel=1e-9)
    # one verdict, two readings: p under 0.025 exactly when the 95% interval is wholly above 1
    assert (got["p_value"] < challenge_record.ALPHA) == (got["ratio_ci95"][0] > 1)


def test_a_clearly_faster_candidate_is_found_faster_and_a_slower_one_is_not():
    faster = challenge_record.paired(*_pairs(5, 6, 1.10))
    slower = challenge_record.paired(*_pairs(5, 6, 0.95))
    assert faster["ratio"] > 1.05 and faster["p_value"] < 0.01
    assert slower["ratio"] < 1 and slower["p_value"] > 0.9


def test_one_pair_gives_no_p_and_pairs_without_spread_give_0_or_1():
    assert challenge_record.paired([10.0], [11.0]) == {"n": 1, "ratio": pytest.approx(1.1), "ratio_ci95": None,
                                                       "p_value": None}
    same = challenge_record.paired([10.0, 10.0], [11.0, 11.0])
    assert same["p_value"] == 0.0 and same["ratio_ci95"] == pytest.approx([1.1, 1.1])
    assert challenge_record.paired([11.0, 11.0], [10.0, 10.0])["p_value"] == 1.0


def test_the_order_alternates_which_side_goes_first():
    assert interleave.order(["candidate", "incumbent"], 3) == [
        (0, "candidate"), (0, "incumbent"), (1, "incumbent"), (1, "candidate"), (2, "candidate"), (2, "incumbent")]


def _result(reference: str, seed: int, tta: float | None, metric: float = 0.93) -> dict:
    return {"reference": reference, "task": "fashion-mnist", "threshold": 0.92, "seed": seed, "hyperparameters": {},
            "provenance": {"reference_tree_sha256": reference * 2}, "status": "converged" if tta else "DNC",
            "tta_seconds": tta, "metric_value": metric, "epochs": 3, "run_id": f"x-{seed}"}


def test_the_figures_leave_out_a_pair_with_a_dnc_and_need_the_candidate_accepted():
    times = {0: (10.0, 11.0), 1: (10.2, 11.1), 2: (None, 11.0), 3: (9.9, 10.8)}
    runs = {}
    for k, (c, i) in times.items():
        runs[k, "candidate"] = _result("cand", k, c)
        runs[k, "incumbent"] = _result("inc", k, i)
    record = challenge_record.figures(runs, 4)
    assert record["pairs"] == 4 and record["pairs_timed"] == 3 and record["pair_times"][2]["ratio"] is None
    expected = challenge_record.paired([10.0, 10.2, 9.9], [11.0, 11.1, 10.8])
    assert record["ratio"] == expected["ratio"] and record["p_value"] == expected["p_value"] < 0.025
    assert record["candidate_faster"] is True and record["line"].startswith("cand is faster than inc on this machine")
    assert [(o["pair"], o["side"]) for o in record["order"]] == interleave.order(list(challenge_record.SIDES), 4)
    assert record["order"][0]["run"] == "runs/candidate/cand/candidate-pair0-seed0"
    assert record["verdicts"]["candidate"] == challenge_record.acceptance(
        [runs[k, "candidate"] for k in range(4)], TASKS["fashion-mnist"])
    # a candidate none of whose runs reached the threshold is not "faster", whatever its times
    refused = {key: ({**r, "status": "DNC", "tta_seconds": None} if key[1] == "candidate" else r)
               for key, r in runs.items()}
    record = challenge_record.figures(refused, 4)
    assert record["candidate_faster"] is False and record["verdicts"]["candidate"]["verdict"] == "refused"


# ---------------------------------------------------------------- refusals: one line, nothing written

@pytest.mark.parametrize("argv, words", [
    ([DEFAULT, "--against", DEFAULT], "give two entries, the candidate and the incumbent"),
    ([DEFAULT, "--against", "x", "--base-image", "debian:13"], "--base-image goes with --runtime docker"),
    ([DEFAULT, "--against", "x", "--runtime", "podman"], "--runtime 'podman': expected native"),
    ([DEFAULT, "--against", "no-such-reference"], "unknown reference 'no-such-reference'"),
    ([DEFAULT, "--against", DEFAULT, "--pairs", "0"], "--pairs"),
])
def test_challenge_refusals_are_one_line_and_write_nothing(argv, words, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["challenge", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dawnbench challenge: error: ") and words in err[0], err
    assert not out.exists()


def test_a_folder_that_names_no_entry_and_an_out_holding_a_challenge_are_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["challenge", str(tmp_path / "empty"), "--against", DEFAULT, "--out", str(tmp_path / "o")]) == 2
    assert "neither a reference folder" in capsys.readouterr().err
    taken = tmp_path / "taken"
    (taken / "runs").mkdir(parents=True)
    assert main(["challenge", DEFAULT, "--against", "x", "--out", str(taken)]) == 2
    assert "already holds a challenge" in capsys.readouterr().err and list(taken.iterdir()) == [taken / "runs"]


def test_verify_of_a_challenge_folder_runs_where_scipy_is(tmp_path):
    (tmp_path / "challenge.json").write_text("{}")
    assert launcher.route(["verify", str(tmp_path)]).needs == launcher.TOOLS
    assert launcher.route(["verify", str(tmp_path.parent)]).needs == launcher.BASE


def test_an_entry_side_is_the_code_its_run_names(default_run, fashion_root, tmp_path):
    side = challenge.resolve("incumbent", str(default_run), None, fashion_root, tmp_path)
    assert (side.name, side.references, side.sets) == (DEFAULT, REPO / "references", [])
    assert side.spec.task.name == "fashion-mnist" and "its tree sha256 is the run's" in side.source


# ---------------------------------------------------------------- one challenge, end to end

@pytest.fixture(scope="module")
def challenge_folder(tmp_path_factory, fashion_subset) -> Path:
    """Two forks (`dawnbench fork`) of a numpy reference that learns Fashion-MNIST (tests/cheats.py's base: one
    quick epoch past 0.5), challenged: 2 pairs, 1 epoch, threshold 0.5, on a fifth of Fashion-MNIST (conftest's
    `fashion_subset`; its tests verify with `on_fashion_subset`). What is checked is the challenge's folder, which
    needs four honest runs, not the default's training (four runs of it were most of three minutes of a worker).
    Read it, never change it: copy it first."""
    root, manifest = fashion_subset
    base = tmp_path_factory.mktemp("challenge")
    references = base / "references"
    write_reference(references, FORKED)
    for name in (CANDIDATE, INCUMBENT):
        proc = subprocess.run([PYTHON, "-m", "dawnbench.cli", "fork", FORKED, name, "--model", name, "--references",
                               str(references)], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    out = base / "c"
    proc = subprocess.run([PYTHON, "-m", "dawnbench.cli", "challenge", CANDIDATE, "--against", INCUMBENT, "--pairs", "2",
                           "--threshold", "0.5", "--max-epochs", "1",
                           "--references", str(references), "--data", str(root), "--out", str(out)],
                          cwd=REPO, env=cli_env(**{datasets.MANIFEST_ENV: str(manifest)}), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (out / "stdout.txt").write_text(proc.stdout)
    return out


def _verify(folder: Path, on_fashion_subset: Path, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["verify", str(folder), "--data", str(on_fashion_subset)])
    return code, capsys.readouterr().out.strip().splitlines()


@pytest.fixture
def copy(challenge_folder, tmp_path) -> Path:
    shutil.copytree(challenge_folder, tmp_path / "c")
    return tmp_path / "c"


def test_a_challenge_of_two_forks_writes_its_runs_and_verifies(challenge_folder, on_fashion_subset, capsys):
    record = json.loads((challenge_folder / "challenge.json").read_text())
    assert (record["candidate"], record["incumbent"], record["pairs"]) == ("fmnist-fast-numpy",
                                                                           "fmnist-slow-numpy", 2)
    assert [(o["side"], o["seed"]) for o in record["order"]] == [("candidate", 0), ("incumbent", 0),
                                                                 ("incumbent", 1), ("candidate", 1)]
    for o in record["order"]:
        result = json.loads((challenge_folder / o["run"] / "result.json").read_text())
        assert result["reference"] == record[o["side"]] and result["seed"] == o["seed"]
        assert result["status"] == "converged" and result["epochs"] == 1 and result["threshold"] == 0.5
    times = record["pair_times"]
    assert record["ratio"] == pytest.approx(math.sqrt(times[0]["ratio"] * times[1]["ratio"]))
    assert record["p_value"] is not None and len(record["ratio_ci95"]) == 2
    assert {v["verdict"] for v in record["verdicts"].values()} == {"accepted"}
    assert record["load"]["runs"] == 4 and record["load"] == interleave.machine_load(
        [interleave.env_load(challenge_folder / o["run"]) for o in record["order"]])
    assert record["given"] == {"candidate": "fmnist-fast-numpy", "incumbent": "fmnist-slow-numpy"}
    stdout = (challenge_folder / "stdout.txt").read_text().splitlines()
    assert stdout[-2] == f"verdict: {record['line']}" and stdout[-1].startswith("written: ")
    code, lines = _verify(challenge_folder, on_fashion_subset, capsys)
    assert code == 0 and lines[-1].startswith("verified: challenge of "), lines
    assert all(line.startswith("ok   ") for line in lines[:-1]) and len(lines) == 7, lines


def test_a_challenge_with_a_run_removed_does_not_verify(copy, on_fashion_subset, capsys):
    shutil.rmtree(copy / "runs" / "incumbent" / "fmnist-slow-numpy" / "incumbent-pair1-seed1")
    code, lines = _verify(copy, on_fashion_subset, capsys)
    assert code == 1 and lines[-1] == "disagreement: runs: the incumbent's run of pair 1 is missing", lines


def test_a_challenge_with_runs_swapped_between_sides_does_not_verify(copy, on_fashion_subset, capsys):
    cand = copy / "runs" / "candidate" / "fmnist-fast-numpy" / "candidate-pair0-seed0"
    inc = copy / "runs" / "incumbent" / "fmnist-slow-numpy" / "incumbent-pair0-seed0"
    cand.rename(copy / "tmp")
    inc.rename(cand)
    (copy / "tmp").rename(inc)
    code, lines = _verify(copy, on_fashion_subset, capsys)
    assert code == 1 and lines[-1].startswith("disagreement: run: runs/candidate/fmnist-fast-numpy/candidate-pair0-"
                                              "seed0: its result.json is of run 'incumbent-pair0-seed0'"), lines
    # with each result.json's run_id edited to its new folder's, the logs' clocks still say which ran first
    for run in (cand, inc):
        result = json.loads((run / "result.json").read_text())
        (run / "result.json").write_text(json.dumps({**result, "run_id": run.name}))
    code, lines = _verify(copy, on_fashion_subset, capsys)
    assert code == 1 and lines[-1].startswith("disagreement: order: runs/incumbent/fmnist-slow-numpy/incumbent-"
                                              "pair0-seed0 started before runs/candidate/"), lines
    assert any(line.startswith("FAIL sides: the candidate's runs differ in reference, reference_tree_sha256:")
               for line in lines), lines


@pytest.mark.parametrize("key, value", [("ratio", 1.5), ("p_value", 0.001), ("candidate_faster", True),
                                        ("incumbent", "fashion-mnist-cnn-pytorch")])
def test_a_challenge_json_edited_does_not_verify(copy, on_fashion_subset, capsys, key, value):
    record = json.loads((copy / "challenge.json").read_text())
    if record[key] == value:
        value = not value if isinstance(value, bool) else value
    record[key] = value
    (copy / "challenge.json").write_text(json.dumps(record))
    code, lines = _verify(copy, on_fashion_subset, capsys)
    assert code == 1 and lines[-1].startswith(f"disagreement: challenge.json: {key}: "), lines
    assert lines[-1].endswith("from the runs (edited, or not this folder's)"), lines


# ---------------------------------------------------------------- the board

def test_the_board_says_a_won_challenge_beside_the_entry_that_won_it():
    record = {"candidate": "a", "incumbent": "b", "ratio": 1.0712, "ratio_ci95": [1.031, 1.113], "p_value": 0.0031,
              "pairs_timed": 5, "candidate_faster": True,
              "sides": {"candidate": {"reference_tree_sha256": "t" * 64, "hyperparameters": {"lr": 0.1}}}}
    said = challenge_board.line(record, 1)
    assert said == "1.07x faster than #1 (b) on the same machine, p = 0.0031 (95% interval 1.03-1.11x, 5 interleaved pairs)"
    run = {"provenance": {"reference_tree_sha256": "t" * 64}, "hyperparameters": {"lr": 0.1}}
    assert challenge_board.won_by(run, [record]) == [record]
    # another recipe of the same code, other code, a challenge not won, a run that records no tree: no line
    assert challenge_board.won_by({**run, "hyperparameters": {"lr": 0.2}}, [record]) == []
    assert challenge_board.won_by({**run, "provenance": {"reference_tree_sha256": "u" * 64}}, [record]) == []
    assert challenge_board.won_by(run, [{**record, "candidate_faster": False}]) == []
    assert challenge_board.won_by({"hyperparameters": {"lr": 0.1}}, [record]) == []
    html = site.templates().get_template("challenges.html").render(challenges=[said, "<b>x</b>"])
    assert f"<li>{said}</li>" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert '{% include "challenges.html" %}' in (REPO / "dawnbench" / "templates" / "entry.html").read_text()


def test_the_board_finds_the_challenges_of_a_tree_that_verify(copy, on_fashion_subset, tmp_path):
    tree = tmp_path / "entries"
    (tree / "Fashion-MNIST" / "challenges").mkdir(parents=True)
    copy.rename(tree / "Fashion-MNIST" / "challenges" / "c")
    (record,) = challenge_board.verified(tree, on_fashion_subset)
    written = json.loads((tree / "Fashion-MNIST" / "challenges" / "c" / "challenge.json").read_text())
    assert {key: written[key] for key in record} == record and record["candidate"] == "fmnist-fast-numpy"
    (tree / "Fashion-MNIST" / "challenges" / "c" / "challenge.json").write_text(json.dumps({**record, "ratio": 9.0}))
    assert challenge_board.verified(tree, on_fashion_subset) == []


# ---------------------------------------------------------------- stopped by a signal

# The adversarial tests' numpy base (tests/cheats.py: one quick epoch past 0.5), whose run of seed 1 trains for
# ten minutes: pair 1's, under way when the challenge gets its signal.
SLOW_SECOND_PAIR = '''
import sys, time

class Cheat(Base):
    def train_epoch(self, epoch):
        if self.ctx.seed >= 1:
            print("DAWNBENCH-PAIR-1-TRAINING", file=sys.stderr, flush=True)
            time.sleep(600)
        return super().train_epoch(epoch)
'''


STOPPED_RUN = """
import signal, subprocess, sys, time
got = []
signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
kid = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                                              "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print(kid.pid, flush=True)
while not got:
    time.sleep(0.01)
time.sleep(0.5)                 # a second signal passed on would land here
print("stopped by", got, flush=True)
"""


def test_a_sigint_reaches_the_run_once_and_its_group_is_swept():
    """dawnbench.stoppable, the tools' side (challenge, compare, reproduce), with SIGINT: the tool's first signal
    is Stopped, a second is ignored; the run (in its own process group) gets it once and its last line is kept;
    what it left in its group (a process that ignores both signals) is killed."""
    with stoppable.signals_stop():
        proc = stoppable.popen([PYTHON, "-c", STOPPED_RUN], stdout=subprocess.PIPE, text=True)
        left = int(proc.stdout.readline())
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0) and os.getpgid(left) == proc.pid
        with pytest.raises(stoppable.Stopped) as stopped:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        os.kill(os.getpid(), signal.SIGINT)          # a second: ignored, here and by the run
        kept = []
        status = stoppable.stop(proc, stoppable.signum_of(stopped.value), kept.append)
    assert stopped.value.signum == signal.SIGINT and status == 0 and kept == [f"stopped by [{int(signal.SIGINT)}]\n"]
    assert wait_for(lambda: killed_run._state(left) in (None, "Z"), 5), killed_run.describe([left])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler      # the tool's own handlers are back


def test_a_sigterm_to_a_challenge_stops_its_run_keeps_what_it_has_and_leaves_no_process(tmp_path, fashion_root, capsys):
    """Issue 48: a SIGTERM to `dawnbench challenge` (a job scheduler's, `kill`) killed it at once and left the run
    under way training, with nobody to read it. Now it stops that run (its DNC kept), writes challenge.json of the
    pairs that finished, marked interrupted (it verifies, and is no verdict), says so in one line and exits 143;
    2 s later no process it started is left (the keeper, a child subreaper: bench/killed_run.py)."""
    references = tmp_path / "references"
    for name in ("sig-fast", "sig-slow"):
        write_reference(references, name, SLOW_SECOND_PAIR)
    out, log = tmp_path / "c", tmp_path / "stderr"
    with open(log, "w") as stderr:
        keeper, pid = killed_run.keep([PYTHON, "-m", "dawnbench.cli", "challenge", "sig-fast", "--against", "sig-slow",
                                       "--pairs", "2", "--threshold", "0.5", "--max-epochs", "1", "--references",
                                       str(references), "--data", str(fashion_root), "--out", str(out)],
                                      env=cli_env(), cwd=REPO, stderr=stderr)
    try:
        second = out / "runs" / "incumbent" / "incumbent-pair1-seed1.log"     # pair 1 runs the incumbent first
        assert wait_for(lambda: second.is_file() and "DAWNBENCH-PAIR-1-TRAINING" in second.read_text(), 300), \
            log.read_text()[-3000:]
        os.kill(pid, signal.SIGTERM)
        assert wait_for(lambda: killed_run._state(pid) is None, 120), "the challenge did not end within 120 s"
        status = int(keeper.stdout.readline())
        left = killed_run.left_after(keeper, 2)
        assert left == [], f"2 s after the challenge ended, still running: {left}"
    finally:
        killed_run.release(keeper)
    said = log.read_text()
    assert status == 128 + signal.SIGTERM and "Traceback" not in said, said[-3000:]
    line = [x for x in said.splitlines() if x.startswith("dawnbench challenge: error: ")]
    assert len(line) == 1 and line[0] == (
        f"dawnbench challenge: error: interrupted (SIGTERM): the run under way was stopped (its DNC kept); "
        f"{out / 'challenge.json'} covers the 1 finished pair of 2, marked interrupted (no verdict; "
        f"`dawnbench verify {out}` checks it), and every run folder is kept in {out / 'runs'}"), said[-3000:]
    record = json.loads((out / "challenge.json").read_text())
    cut = "runs/incumbent/sig-slow/incumbent-pair1-seed1"
    assert record["pairs"] == 1 and record["candidate_faster"] is False
    assert record["interrupted"] == {"signal": "SIGTERM", "pairs_requested": 2, "cut_short": [cut]}
    assert record["line"].startswith("interrupted (SIGTERM) after 1 of 2 pairs: no verdict")
    stopped_run = json.loads((out / cut / "result.json").read_text())
    assert stopped_run["status"] == "DNC" and "SIGTERM" in stopped_run["dnc_reason"], stopped_run["dnc_reason"]
    capsys.readouterr()
    assert main(["verify", str(out), "--data", str(fashion_root)]) == 0, capsys.readouterr().out
    lines = capsys.readouterr().out.splitlines()
    assert "1 run of pair 1 cut short, kept and not counted" in lines[0], lines
    # the cut run is never counted: as a run of a third pair, or with the mark taken out, it does not verify
    record["interrupted"]["pairs_requested"] = 1
    (out / "challenge.json").write_text(json.dumps(record))
    assert main(["verify", str(out), "--data", str(fashion_root)]) == 1
    assert "interrupted is " in capsys.readouterr().out
    del record["interrupted"]
    (out / "challenge.json").write_text(json.dumps(record))
    assert main(["verify", str(out), "--data", str(fashion_root)]) == 1
    assert f"{cut} is beyond the challenge's 1 pairs" in capsys.readouterr().out
