"""A noisy machine (issue 35, section 5): env.json's load, measured by the harness from /proc, the
warnings on stderr before and after a run, verify's load line and the entry page's Machine load row."""
import json
import os
import subprocess
import sys
import time

import pytest
from leaderboard_fixture import write_entries

from dawnbench import entries, site
from dawnbench.cli import main
from harness import load

pytestmark = pytest.mark.harness

WARNING = "warning: other processes used"


@pytest.fixture(autouse=True)
def _refs(references_root, fashion_root):
    pass


def run(tmp_path, *args):
    """A short scripted run (two epochs of a trainer that mostly sleeps); its folder and env.json's load."""
    code = main(["run", "scripted-test", "--results", str(tmp_path / "results"), "--no-progress",
                 "--set", "accuracies=0.5,0.95", "--set", "train_sleep=0.6", *args])
    (run_dir,) = (tmp_path / "results" / "scripted-test").iterdir()
    assert code == 0
    return run_dir, json.loads((run_dir / "env.json").read_text())["load"]


def test_a_run_records_the_machine_load_and_warns_only_over_the_threshold(tmp_path, capsys):
    # Whatever else this machine runs now (CI machines are noisy): the record is there and sane, and
    # the warning is printed exactly when the recorded share is over the threshold.
    run_dir, got = run(tmp_path)
    err = capsys.readouterr().err
    cpus = len(os.sched_getaffinity(0))
    assert got["usable_cpus"] == cpus and got["logical_cpus"] == os.cpu_count()
    assert len(got["loadavg_before"]) == 3 and len(got["loadavg_after"]) == 3
    assert got["wall_s"] >= 1.2                          # two epochs of 0.6 s sleep, at least
    parts = got["run_cpu_s"]
    assert set(parts) == {"trainer", "predictors", "harness", "total"}
    assert all(v >= 0 for v in parts.values())
    assert parts["total"] == pytest.approx(parts["trainer"] + parts["predictors"] + parts["harness"], abs=0.02)
    assert 0 <= got["busy_cpu_s"] <= got["wall_s"] * cpus * 1.05
    assert got["others_cpu_s"] == pytest.approx(max(got["busy_cpu_s"] - parts["total"], 0), abs=0.02)
    assert got["others_share"] == pytest.approx(got["others_cpu_s"] / (got["wall_s"] * cpus), abs=0.002)
    assert got["threshold"] == load.OTHERS_THRESHOLD
    assert got["busy"] is (got["others_share"] > load.OTHERS_THRESHOLD)
    assert (WARNING in err) is got["busy"]
    # the result's figures are untouched: no load field in result.json
    assert "load" not in json.loads((run_dir / "result.json").read_text())


def test_a_run_beside_busy_processes_records_them_and_warns(tmp_path, capsys):
    cpus = len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:
        time.sleep(0.3)
        _, got = run(tmp_path)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    err = capsys.readouterr().err
    # `cpus` busy loops on `cpus` CPUs beside a trainer that sleeps: others take most of the machine
    assert got["others_share"] > 0.5 and got["busy"] is True
    line = [x for x in err.splitlines() if x.startswith(WARNING)]
    assert line == [f"{WARNING} {100 * got['others_share']:.0f}% of the {cpus} CPUs this run may use during the "
                    f"run: its time is not the hardware's alone (see env.json's load)"]


def test_a_busy_machine_before_the_run_is_said_before_it(tmp_path, capsys, monkeypatch):
    # The 1-minute load average climbs over a minute: a test cannot wait for it, so it is given.
    monkeypatch.setattr(load.os, "getloadavg", lambda: (3.0 * (os.cpu_count() or 1), 1.0, 0.5))
    run(tmp_path)
    err = capsys.readouterr().err.splitlines()
    before = [i for i, x in enumerate(err) if x.startswith("warning: this machine is busy before the run")]
    first_epoch = next(i for i, x in enumerate(err) if x.startswith("epoch   1/"))
    assert len(before) == 1 and before[0] < first_epoch
    assert f"1-minute load average is {3.0 * (os.cpu_count() or 1):g}, above its {os.cpu_count()} CPUs" in err[before[0]]


def test_verify_prints_the_load_line(tmp_path, capsys):
    run_dir, got = run(tmp_path)
    capsys.readouterr()
    assert main(["verify", str(run_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    (line,) = [x for x in out if " load: " in x]
    share = f"other processes used {100 * got['others_share']:.0f}% of the {got['usable_cpus']} CPUs"
    assert line.startswith(("note load: " if got["busy"] else "ok   load: ") + share)
    # a busy record is a note, never a failure; a hand-edited one is one line, skipped
    env = json.loads((run_dir / "env.json").read_text())
    env["load"].update(others_share=0.61, busy=True)
    (run_dir / "env.json").write_text(json.dumps(env))
    assert main(["verify", str(run_dir)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if " load: " in x]
    assert line.startswith("note load: other processes used 61% of the")
    assert "its time is not the hardware's alone" in line
    env["load"]["others_share"] = "lots"
    (run_dir / "env.json").write_text(json.dumps(env))
    assert main(["verify", str(run_dir)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if " load: " in x]
    assert line == "skip load: env.json's load.others_share is 'lots', not a share of the CPUs: not shown"


def test_the_entry_page_shows_the_machine_load(tmp_path):
    # the site is a host tool (jinja2): the harness-only environment (make test-harness-numpy1) has none
    pytest.importorskip("jinja2", reason="the site needs jinja2; `make test` runs this with it")
    tree = write_entries(tmp_path / "entries")
    path = next(p for p in sorted(tree.rglob("train/*.json")))
    entry = entries.load(path)
    assert "Machine load" not in site.entry_page(entry, [], None, None)      # no run folder: no row
    folder = entries.run_folder(path)
    folder.mkdir()
    record = {"usable_cpus": 2, "others_share": 0.61, "run_share": 0.37, "loadavg_before": [2.5, 2.0, 1.0]}
    (folder / "env.json").write_text(json.dumps({"load": record}))
    page = site.entry_page(entry, [], None, None)
    assert ("<tr><th>Machine load</th><td>busy: other processes used 61% of the 2 CPUs the run could use during "
            "the run (the run&#39;s own 37%): its time is not the hardware&#39;s alone; 1-minute load average 2.5 "
            "before the run</td></tr>") in page
    (folder / "env.json").write_text(json.dumps({"hostname": "x"}))
    assert "<th>Machine load</th><td>not shown: env.json has no load record (a run before issue 35)</td>" in \
        site.entry_page(entry, [], None, None)
