"""MLPerf's official compliance checker (mlperf-logging, training 4.0.0 rules) accepts a real run's
events.jsonl under dawnbench's ruleset (dawnbench/data/mlperf/), rejects broken logs, and the
ruleset's copies of the package's files differ from them only as documented."""
from __future__ import annotations

import importlib.metadata
import json
import subprocess
import tomllib
from pathlib import Path

import mlperf_logging.compliance_checker
import pytest
import yaml
from conftest import PYTHON, REPO, cli_env

from dawnbench import compliance
from harness.events import PREFIX, read_events

REF = "fashion-mnist-cnn-pytorch"
RULES = REPO / "dawnbench" / "data" / "mlperf"
PACKAGE_RULES = Path(mlperf_logging.compliance_checker.__file__).parent / "training_4.0.0"
TASKS = tomllib.loads((REPO / "harness/data/tasks.toml").read_text())["tasks"]

# The documented changes (each file's header says them): (package text, ours), each found exactly once.
COPIES = {
    "common.yaml": [
        ("            'compile_time_mins': 0,\n        })",
         "            'compile_time_mins': 0,\n            'rules_dir': __import__('os').path.dirname(config_file),\n        })"),
        ("enqueue_config('training_4.0.0/{}_common.yaml'", "enqueue_config(s['rules_dir'] + '/{}_common.yaml'"),
    ],
    "open_common.yaml": [
        ("['resnet', 'ssd', 'stable_diffusion', 'maskrcnn', 'gpt3', 'dlrm_dcnv2', 'bert', 'rnnt', 'unet3d', 'gnn']",
         repr(sorted(TASKS))),       # dawnbench's tasks, as tasks.toml names them
        ("enqueue_config('training_4.0.0/open_{}.yaml'", "enqueue_config(s['rules_dir'] + '/open_{}.yaml'"),
    ],
}
OPEN_COMMON_BEGIN = """- BEGIN:
    CODE: " s.update({'rules_dir': __import__('os').path.dirname(config_file)}) "
"""


def checker(events: Path, tmp: Path) -> subprocess.CompletedProcess:
    """The official checker's command line, as its README gives it, with our ruleset."""
    return subprocess.run([PYTHON, "-m", "mlperf_logging.compliance_checker", "--ruleset", "4.0.0",
                           "--config", str(RULES / "common.yaml"), "--log_output", str(tmp / "checker.log"),
                           str(events)], cwd=tmp, capture_output=True, text=True, timeout=120)


def test_a_real_run_passes_the_official_checker(default_run, tmp_path):
    proc = checker(default_run / "events.jsonl", tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "SUCCESS" in out
    # all three levels were read: MLPerf's common rules, the open division, the task's rules
    for name in ("common.yaml", "open_common.yaml", "open_fashion-mnist.yaml"):
        assert f"Compliance checks: {RULES / name}" in out


def test_one_log_gives_both_readings(default_run):
    events = read_events(default_run / "events.jsonl")
    result = json.loads((default_run / "result.json").read_text())
    keys = [e["key"] for e in events]
    at = {e["key"]: e for e in events}
    assert keys.index("init_start") < keys.index("init_stop") < keys.index("run_start") < keys.index("epoch_start")
    assert keys.count("train_samples") == 1 and keys[-1] == "run_stop"
    assert all(e["metadata"]["samples"] > 0 for e in events if e["key"] == "epoch_stop")
    # DAWNBench counts from init_start (clock 0); MLPerf's run_start is where initialization ended
    assert at["init_start"]["metadata"]["clock_s"] == 0.0
    assert at["run_start"]["metadata"]["clock_s"] == at["init_stop"]["metadata"]["clock_s"] > 0
    assert result["wall_seconds"] == pytest.approx(at["run_stop"]["metadata"]["clock_s"], abs=1e-3)
    mlperf = (at["run_stop"]["time_ms"] - at["run_start"]["time_ms"]) / 1000
    assert mlperf == pytest.approx(result["wall_seconds"] - at["init_stop"]["metadata"]["clock_s"], abs=0.01)
    assert compliance.mlperf_seconds(default_run / "events.jsonl") == pytest.approx(mlperf)


def mutate(lines: list[str], case: str) -> list[str]:
    records = [json.loads(line[len(PREFIX):]) for line in lines]
    keys = [r["key"] for r in records]
    if case == "init_start after run_start":
        i = keys.index("init_start")
        records.insert(keys.index("run_start"), records.pop(i))
    elif case == "no cache_clear":
        records.pop(keys.index("cache_clear"))
    elif case == "train_samples every epoch":
        i = keys.index("train_samples")
        records.insert(i, {**records[i], "value": records[i]["value"] + 1})
    elif case == "epochs misnumbered":
        for r in records:
            if "epoch_num" in r["metadata"]:
                r["metadata"]["epoch_num"] += 1
    elif case == "another metric":
        records[keys.index("eval_accuracy")]["metadata"]["metric"] = "top5"
    elif case == "threshold not reached":
        records[keys.index("dawnbench_threshold")]["value"] = 0.999
    elif case == "a benchmark of MLPerf":
        records[keys.index("submission_benchmark")]["value"] = "resnet"
    return [PREFIX + json.dumps(r) for r in records]


# (case, what the checker's report must name): MLPerf's common rules first, then dawnbench's
BROKEN = [("init_start after run_start", "CHECK for 'init_start' failed"),
          ("no cache_clear", "occurrence of 'cache_clear' but found 0"),
          ("train_samples every epoch", "EXACTLY_ONE occurrence of 'train_samples' but found 2"),
          ("epochs misnumbered", "failed test: v['metadata']['epoch_num'] == s['epoch'] + 1"),
          ("another metric", "failed test: v['metadata']['metric'] == 'top1'"),
          ("threshold not reached", "Failed checks for eval_accuracy : v['value'] >= s['threshold']"),
          ("a benchmark of MLPerf", "open_resnet.yaml")]


@pytest.mark.parametrize("case,expected", BROKEN, ids=[c for c, _ in BROKEN])
def test_the_checker_rejects_a_broken_log(default_run, tmp_path, case, expected):
    good = (default_run / "events.jsonl").read_text().splitlines()
    bad = tmp_path / "events.jsonl"
    bad.write_text("\n".join(mutate(good, case)) + "\n")
    assert bad.read_text() != (default_run / "events.jsonl").read_text()
    proc = checker(bad, tmp_path)
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr


def test_dawnbench_compliance_prints_one_line(default_run, tmp_path):
    def dawnbench(*args):
        return subprocess.run([PYTHON, "-m", "dawnbench", "compliance", *args], cwd=tmp_path, env=cli_env(),
                              capture_output=True, text=True, timeout=120)

    ok = dawnbench(str(default_run))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("\n") == 1 and ": compliant (MLPerf training 4.0.0" in ok.stdout
    assert "MLPerf time run_start->run_stop" in ok.stdout and ok.stderr == ""

    bad = tmp_path / "run"
    bad.mkdir()
    (bad / "events.jsonl").write_text("\n".join(mutate((default_run / "events.jsonl").read_text().splitlines(),
                                                       "no cache_clear")) + "\n")
    no = dawnbench(str(bad))
    assert no.returncode == 1 and no.stdout.count("\n") == 1
    assert "NOT compliant" in no.stdout and "cache_clear" in no.stdout

    for arg, message in ((tmp_path / "nope", "does not exist"), (tmp_path, "has no events.jsonl")):
        proc = dawnbench(str(arg))
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", sorted(COPIES))
def test_the_copies_are_the_packages_files_with_the_documented_changes(name):
    package = (PACKAGE_RULES / name).read_text()
    for theirs, ours in COPIES[name]:
        assert package.count(theirs) == 1, theirs
        package = package.replace(theirs, ours)
    header, marker, body = (RULES / name).read_text().partition(
        f"# ---- mlperf-logging 4.1.68 training_4.0.0/{name} follows, changed only as said above ----\n")
    assert marker
    assert body.rstrip("\n") == package.rstrip("\n")
    if name == "open_common.yaml":        # the added BEGIN block, and nothing else, before the copy
        assert header.split("\n\n", 1)[1] == OPEN_COMMON_BEGIN


def test_the_pinned_package_is_the_one_installed():
    pins = (REPO / "requirements/tools.txt").read_text().splitlines()
    assert f"mlperf-logging=={importlib.metadata.version('mlperf-logging')}" in pins
    assert "mlperf-logging==4.1.68" in pins       # the version the copies' markers name


def keys(path: Path) -> dict:
    return {r["KEY"]["NAME"]: r["KEY"] for r in yaml.safe_load(path.read_text()) if "KEY" in r}


def test_the_task_files_keep_every_common_check_they_replace():
    common = keys(PACKAGE_RULES / "common.yaml")
    benchmarks = yaml.safe_load((RULES / "open_common.yaml").read_text())[1]["KEY"]["CHECK"]
    assert benchmarks.strip() == f"v['value'] in {sorted(TASKS)}"
    for task, spec in TASKS.items():
        rules = keys(RULES / f"open_{task}.yaml")
        for name, record in rules.items():
            if name in common:      # replaces common.yaml's record: its checks come first, word for word
                theirs = common[name].get("CHECK", [])
                theirs = [theirs] if isinstance(theirs, str) else theirs
                assert [c.strip() for c in record["CHECK"][:len(theirs)]] == [c.strip() for c in theirs], (task, name)
                assert record["REQ"] in (common[name]["REQ"], "AT_LEAST_ONE"), (task, name)
        assert f"v['metadata']['metric'] == '{spec['metric']}'" in rules["eval_accuracy"]["CHECK"]
        assert f"v['metadata']['metric'] == '{spec['metric']}'" in rules["dawnbench_threshold"]["CHECK"]
        assert str(spec["eval_examples"]) in rules["eval_samples"]["CHECK"][1]
