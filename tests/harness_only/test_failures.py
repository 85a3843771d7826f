"""Failure paths: each user mistake or broken environment is one line (exit 2) before anything is
written, or, once a run has started, stops it without leaving a file that looks complete.

Names that would leave the results folder, a mistyped reference.toml, budgets that make no sense,
a corrupt dataset file, a read-only or full results folder (a real size-limited tmpfs in a user and
mount namespace), and a series whose parent is killed."""
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTHON, cli_env

from dawnbench import containers
from dawnbench.cli import main
from harness import cli as harness_cli
from harness import datasets, paths, registry, safe_write
from harness.errors import UsageError

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too

# A reference that needs no labels and no framework: class 0 for every example, so top-1 is exactly
# 10% on Fashion-MNIST (1,000 of each class) and `--threshold 0.05` converges at the first epoch
# (the real fashion-mnist-cnn-pytorch takes minutes an epoch on this 2-core machine).
STEADY = '''
import time
import numpy as np
from harness.reference import Reference


class Steady(Reference):
    def setup(self, ctx):
        self.ctx, self.cfg = ctx, ctx.config

    def train_epoch(self, epoch):
        time.sleep(60 if self.ctx.seed == self.cfg["slow_seed"] else self.cfg["train_sleep"])
        return {"loss": 1.0 / epoch, "samples": 100, "lr": 0.1}

    def predict(self):
        scores = np.zeros((self.ctx.task.eval_examples, 10), dtype=np.float32)
        scores[:, 0] = 1.0
        return scores

    def save(self, path):
        path.mkdir(parents=True, exist_ok=True)
        (path / "model.txt").write_text("steady")

    def load(self, path):
        pass

    def eval_inputs(self):
        return list(range(self.ctx.task.eval_examples))

    def infer(self, i):
        return np.eye(10, dtype=np.float32)[0]
'''

STEADY_TOML = '''
task = "fashion-mnist"
framework = "numpy"
model = "steady"
entry = "steady:Steady"
author = "tests"

[hyperparameters]
train_sleep = 0.0
slow_seed = -1            # the run of this seed takes a minute an epoch

[budget]
max_epochs = 3
'''

QUICK = ["--threshold", "0.05", "--no-progress"]


@pytest.fixture
def refs(references_root, fashion_root):
    ref = references_root / "steady-test"
    ref.mkdir()
    (ref / "steady.py").write_text(STEADY)
    (ref / "reference.toml").write_text(STEADY_TOML)
    return references_root


def error_line(capsys, argv) -> str:
    """The one line of a refused command (exit 2, nothing else on stderr)."""
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("dawnbench: error: ")
    return err[0]


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# --- 1. names that would leave their folder --------------------------------------------------------

UNSAFE = ["../../x", "a/b", "a\\b", "..", "x..y", ".hidden", "-rf", "a\0b", "a b", "a\nb", "é", "", "x" * 129]


@pytest.mark.parametrize("name", UNSAFE)
def test_check_name_refuses_what_could_leave_its_folder(name):
    with pytest.raises(UsageError) as e:
        paths.check_name(name, "--run-id")
    assert "\n" not in str(e.value) and "--run-id" in str(e.value) and "not a plain folder name" in str(e.value)


@pytest.mark.parametrize("name", ["baseline-1", "20261123-142700-seed0", "fashion-mnist-cnn-pytorch", "v1.2_b+c"])
def test_check_name_takes_plain_names(name):
    assert paths.check_name(name, "--run-id") == name


@pytest.mark.parametrize("run_id", ["../../escaped", "../escaped", "/tmp/escaped", ".hidden", "-x", "a\0b"])
def test_a_run_id_that_leaves_the_results_folder_is_refused(refs, tmp_path, capsys, run_id):
    results = tmp_path / "box" / "results"
    line = error_line(capsys, ["run", "steady-test", "--results", str(results), f"--run-id={run_id}", *QUICK])
    assert "--run-id" in line and "not a plain folder name" in line
    assert tree(tmp_path / "box") == [] and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("name", ["../references/steady-test", "steady-test/../steady-test", ".steady"])
def test_a_reference_name_with_a_path_is_refused(refs, tmp_path, capsys, name):
    line = error_line(capsys, ["run", name, "--results", str(tmp_path / "r"), *QUICK])
    assert "reference name" in line and "not a plain folder name" in line
    assert not (tmp_path / "r").exists()
    with pytest.raises(UsageError, match="reference name"):
        registry.load_spec(name)


def test_a_series_with_an_unsafe_reference_name_writes_nothing(refs, tmp_path, capsys):
    line = error_line(capsys, ["run", "../x", "--runs", "2", "--results", str(tmp_path / "r")])
    assert "reference name '../x'" in line and not (tmp_path / "r").exists()


def test_the_container_runner_refuses_an_unsafe_run_id_before_building(refs, monkeypatch):
    monkeypatch.setattr(containers, "engine", lambda: pytest.fail("the engine was asked: the check came too late"))
    for args in (["--run-id", "../x"], ["--run-id=../x"], ["--run-id"]):
        with pytest.raises(UsageError, match="--run-id"):
            containers.run("steady-test", args)
    with pytest.raises(UsageError, match="reference name"):
        containers.run("../steady-test", [])


def test_the_run_folder_must_resolve_under_the_results_root(tmp_path):
    results = tmp_path / "results"
    (results / "ref").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (results / "ref" / "linked").symlink_to(outside)
    # a link named like the run id is an existing entry: never reused
    with pytest.raises(UsageError, match="already exists"):
        safe_write.new_run_dir(results, "ref", 0, run_id="linked")
    # results/<REF> itself a link out of the results root: refused, and nothing is made out there
    (results / "elsewhere").symlink_to(outside)
    with pytest.raises(UsageError, match="outside the results folder"):
        safe_write.new_run_dir(results, "elsewhere", 0, run_id="r1")
    assert list(outside.iterdir()) == []
    made = safe_write.new_run_dir(results, "ref", 0, run_id="r1", series_id="s1")
    assert made == results / "ref" / "s1" / "r1" and made.is_dir()


# --- 2. reference.toml, typed --------------------------------------------------------------------

BAD_TOML = [
    ('max_epochs = 3', 'max_epochs = 0', "'budget.max_epochs' = 0", "1 or more"),
    ('max_epochs = 3', 'max_epochs = 2.5', "'budget.max_epochs' = 2.5", "whole number"),
    ('max_epochs = 3', 'max_epochs = "3"', "'budget.max_epochs' = '3'", "whole number"),
    ('max_epochs = 3', 'max_epochs = true', "'budget.max_epochs' = True", "whole number"),
    ('max_epochs = 3', 'max_epochs = 3\nmax_seconds = 0', "'budget.max_seconds' = 0", "positive number"),
    ('max_epochs = 3', 'max_epochs = 3\nmax_seconds = -5.0', "'budget.max_seconds' = -5.0", "positive number"),
    ('max_epochs = 3', 'max_epochs = 3\nmax_seconds = nan', "'budget.max_seconds' = nan", "positive number"),
    ('max_epochs = 3', 'max_epochs = 3\nmax_seconds = inf', "'budget.max_seconds' = inf", "positive number"),
    ('max_epochs = 3', 'max_epochs = 3\nmax_seconds = 1e308', "'budget.max_seconds' = 1e+308", "at most 8,640,000"),
    ('max_epochs = 3', 'max_epochs = 3\nmax_epoch = 4', "unknown field 'budget.max_epoch'", "max_epochs, max_seconds"),
    # issue 33: the eval bound's passes are the task's; a reference raised them up to 8x
    ('max_epochs = 3', 'max_epochs = 3\neval_passes = 3', "'budget.eval_passes' is not a reference's to set",
     "remove the field"),
    # issue 33: the snapshot's cap is the task's; a reference that raised it let a third of the training set through
    ('max_epochs = 3', 'max_epochs = 3\nmax_snapshot_mib = 64', "'budget.max_snapshot_mib' is not a reference's to set",
     "remove the field"),
    ('[hyperparameters]\ntrain_sleep = 0.0', 'hyperparameters = 1\n[x]\ntrain_sleep = 0.0', "unknown field 'x'",
     "valid: task, framework"),
    ('author = "tests"', 'author = 3', "field 'author' = 3 must be a string", 'author = "..."'),
    ('author = "tests"', 'author = "t"\ndescription = ["a"]', "field 'description' = ['a'] must be a string", ""),
    ('author = "tests"', 'author = "t"\ncode_url = 1', "field 'code_url' = 1 must be a string", ""),
    ('author = "tests"', 'author = "t"\nauthor_email = false', "field 'author_email' = False", ""),
    ('author = "tests"', 'author = "t"\nauthr = "x"', "unknown field 'authr'", "valid: task, framework, model"),
    ('entry = "steady:Steady"', 'entry = "os.path:join"', "field 'entry' = 'os.path:join'", "'module:Class'"),
    ('entry = "steady:Steady"', 'entry = "steady"', "field 'entry' = 'steady'", "'module:Class'"),
    ('entry = "steady:Steady"', 'entry = "steady:Not A Class"', "field 'entry'", "'module:Class'"),
    ('entry = "steady:Steady"', 'entry = "../x:Steady"', "field 'entry'", "'module:Class'"),
    ('entry = "steady:Steady"', 'entry = 3', "field 'entry' is missing or not a string", ""),
    ('max_epochs = 3', 'max_epochs = 3\n[container]\ngpu = true', "unknown field 'container.gpu'", "valid: gpus"),
]


@pytest.mark.parametrize("old, new, says, fix", BAD_TOML)
def test_a_mistyped_reference_toml_is_one_line_naming_file_and_field(refs, tmp_path, capsys, old, new, says, fix):
    toml = refs / "steady-test" / "reference.toml"
    assert old in STEADY_TOML
    toml.write_text(STEADY_TOML.replace(old, new))
    line = error_line(capsys, ["run", "steady-test", "--results", str(tmp_path / "r"), *QUICK])
    assert str(toml) in line and says in line and fix in line, line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("table", ["hyperparameters", "budget", "container"])
def test_a_table_given_as_a_value_is_refused(refs, tmp_path, capsys, table):
    toml = refs / "steady-test" / "reference.toml"
    head = STEADY_TOML.split("[hyperparameters]")[0]
    toml.write_text(head + f"{table} = 3\n")
    line = error_line(capsys, ["run", "steady-test", "--results", str(tmp_path / "r"), *QUICK])
    assert f"{toml}: '{table}' must be a table: write it as a [{table}] section" in line


@pytest.mark.parametrize("entry, names", [
    ("steady:join", "names a function, not a class"),
    ("steady:Path", "names the class pathlib.Path, which does not subclass harness.reference.Reference"),
    ("steady:NOT_A_CLASS", "names a int, not a class"),
])
def test_an_entry_that_is_not_a_reference_class_is_refused(refs, entry, names):
    ref = refs / "steady-test"
    (ref / "steady.py").write_text(STEADY + "\nfrom os.path import join\nfrom pathlib import Path\nNOT_A_CLASS = 3\n")
    (ref / "reference.toml").write_text(STEADY_TOML.replace('"steady:Steady"', f'"{entry}"'))
    spec = registry.load_spec("steady-test")
    with pytest.raises(UsageError) as e:
        spec.load_entry_class()
    assert names in str(e.value) and str(ref / "reference.toml") in str(e.value) and "\n" not in str(e.value)
    module = __import__("sys").modules["dawnbench_ref_steady_test"]
    with pytest.raises(UsageError, match="not a class|does not subclass"):
        registry.check_entry_class(getattr(module, entry.partition(":")[2]), spec)
    registry.check_entry_class(module.Steady, spec)      # the contract's own class passes


def test_every_shipped_reference_toml_still_loads():
    for name in registry.available(paths.checkout_root() / "references"):
        spec = registry.load_spec(name, paths.checkout_root() / "references")
        assert spec.max_epochs >= 1 and spec.max_seconds > 0


# --- 2b. the reference's code: its mistakes named as the entrant wrote them --------------------------

def run_steady(tmp_path: Path, fashion_root: Path) -> tuple[subprocess.CompletedProcess, dict | None, Path | None]:
    """`dawnbench run steady-test` in a process of its own, so that stderr is all of it (the workers' too)."""
    results = tmp_path / "r"
    proc = subprocess.run([PYTHON, "-m", "dawnbench", "run", "steady-test", "--results", str(results),
                           "--data", str(fashion_root), *QUICK], env=cli_env(), capture_output=True, text=True,
                          timeout=300)
    runs = list((results / "steady-test").iterdir()) if (results / "steady-test").is_dir() else []
    result = json.loads((runs[0] / "result.json").read_text()) if runs else None
    return proc, result, runs[0] if runs else None


def test_a_missing_entry_class_is_one_line_naming_the_users_file(refs, tmp_path, capsys):
    ref = refs / "steady-test"
    (ref / "reference.toml").write_text(STEADY_TOML.replace('"steady:Steady"', '"steady:Nope"'))
    for command in (["run", "steady-test", "--results", str(tmp_path / "r"), *QUICK],
                    ["run", "steady-test", "--runs", "2", "--results", str(tmp_path / "r"), *QUICK],
                    ["infer", "steady-test", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "o")]):
        line = error_line(capsys, command)
        assert f'{ref / "steady.py"} has no class Nope (reference.toml entry = "steady:Nope"); it defines Steady' \
            in line, line
        assert "scratch" not in line
    assert not (tmp_path / "r").exists() and not (tmp_path / "o").exists()      # refused before anything ran


@pytest.mark.parametrize("binding", [
    "Nope = Steady", "from os.path import join as Nope", "class Nope(Steady):\n    pass",
    "from harness.reference import *", "globals()['No' + 'pe'] = Steady", "def __getattr__(name):\n    return Steady",
])
def test_an_entry_class_the_source_may_bind_is_left_to_the_import(refs, binding):
    """The harness reads the source, never runs it: it refuses only a class that certainly is not there."""
    ref = refs / "steady-test"
    (ref / "steady.py").write_text(STEADY + "\n" + binding + "\n")
    (ref / "reference.toml").write_text(STEADY_TOML.replace('"steady:Steady"', '"steady:Nope"'))
    registry.check_entry_defined(registry.load_spec("steady-test"))


def test_an_entry_class_missing_at_import_names_the_users_folder_not_the_sandbox(refs, tmp_path, fashion_root):
    """A name the source spells but never binds passes the harness's reading; the worker's import
    finds it missing, and names the user's file, not the path of its sandboxed copy."""
    ref = refs / "steady-test"
    (ref / "steady.py").write_text(STEADY + "\nif False:\n    Nope = Steady\n")
    (ref / "reference.toml").write_text(STEADY_TOML.replace('"steady:Steady"', '"steady:Nope"'))
    proc, result, run_dir = run_steady(tmp_path, fashion_root)
    says = 'steady-test/steady.py has no class Nope (reference.toml entry = "steady:Nope")'
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in proc.stderr.splitlines() if says in line and "DNC" not in line] == \
        [f"steady-test: train init: UsageError: {ref.parent.resolve()}/{says}: "
         f"set entry to \"steady:<the reference's class>\""], proc.stderr
    assert "/dawnbench/" not in proc.stderr and "scratch" not in proc.stderr
    assert result["status"] == "DNC" and says in result["dnc_reason"]


@pytest.mark.parametrize("returned, says", [
    ("None", "it returned None"),
    ('{"loss": "0.25", "samples": 100}', "its \"loss\" is '0.25', a str"),
    ('{"samples": 100}', "it returned a dict without \"loss\": {'samples': 100}"),
    ("0.25", "it returned 0.25"),
    # issue 47: float() of it raised OverflowError in the harness's courier, shown as the reference's traceback
    ('{"loss": 0.25, "samples": 100, "big": 10**400}', "its 'big' is a whole number no float holds (over 1.8e308): "
                                                     "return floats"),
])
def test_train_epoch_without_a_numeric_loss_is_a_usage_error_not_a_divergence(refs, tmp_path, fashion_root,
                                                                              returned, says):
    (refs / "steady-test" / "steady.py").write_text(
        STEADY.replace('return {"loss": 1.0 / epoch, "samples": 100, "lr": 0.1}', f"return {returned}"))
    proc, result, run_dir = run_steady(tmp_path, fashion_root)
    message = f'train_epoch must return a dict with a numeric "loss" (and optionally "samples"); {says}'
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "diverged" not in proc.stderr, proc.stderr
    assert [line for line in proc.stderr.splitlines() if message in line and "DNC" not in line] == \
        [f"steady-test: train train: UsageError: {message}"], proc.stderr
    # the run folder is whole: a DNC with the reason, which verify reads back
    assert result["status"] == "DNC" and result["dnc_reason"] == f"error: train train: UsageError: {message}"
    assert harness_cli.main(["verify", str(run_dir), "--data", str(fashion_root)]) == 0


@pytest.mark.parametrize("name", ["tta_seconds", "top1", "clock_s"])
def test_a_stat_named_as_a_harness_figure_is_refused_not_written(refs, tmp_path, fashion_root, name):
    """Issue 33: train_epoch's dict went into result.json's history row after the harness's own
    figures, so {"tta_seconds": 0.001} stood as the epoch's time (and "top1" as its score, "clock_s"
    as epoch_stop's clock reading). On c855ded this run ends "budget" with the forged figure written."""
    (refs / "steady-test" / "steady.py").write_text(
        STEADY.replace('return {"loss": 1.0 / epoch, "samples": 100, "lr": 0.1}',
                       f'return {{"loss": 1.0 / epoch, "samples": 100, "{name}": 0.001}}'))
    proc, result, run_dir = run_steady(tmp_path, fashion_root)
    says = f"train_epoch returned '{name}', a name of a figure only the harness writes"
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert result["status"] == "DNC" and says in result["dnc_reason"], result["dnc_reason"]
    assert [line for line in proc.stderr.splitlines() if line.startswith("steady-test: ")] == \
        [f"steady-test: {result['dnc_reason'][len('error: '):]}"], proc.stderr
    assert all(row.get(name) != 0.001 for row in result["history"])
    assert harness_cli.main(["verify", str(run_dir), "--data", str(fashion_root)]) == 0


def test_a_nan_loss_still_means_diverged(refs, tmp_path, fashion_root):
    (refs / "steady-test" / "steady.py").write_text(
        STEADY.replace('return {"loss": 1.0 / epoch, "samples": 100, "lr": 0.1}',
                       'return {"loss": float("nan"), "samples": 100}'))
    proc, result, _ = run_steady(tmp_path, fashion_root)
    assert proc.returncode == 1 and result["dnc_reason"] == "diverged: training loss is nan at epoch 1", proc.stderr


# --- 3. command-line values ------------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (["--max-epochs", "0"], "--max-epochs 0: give a whole number from 1 to 100,000"),
    (["--max-epochs", "-3"], "--max-epochs -3"),
    (["--max-seconds", "0"], "--max-seconds 0: give a finite number above 0"),
    (["--max-seconds", "-1"], "--max-seconds -1:"),
    (["--max-seconds", "nan"], "--max-seconds nan"),
    (["--max-seconds", "inf"], "--max-seconds inf"),
    (["--threshold", "nan"], "--threshold nan"),
    (["--nodes", "0"], "--nodes 0"),
    (["--seed", "-1"], "--seed -1: give a whole number from 0 to 4,294,967,295"),
])
def test_a_budget_or_count_that_makes_no_sense_is_refused(refs, tmp_path, capsys, args, says):
    for extra in ([], ["--runs", "2"]):
        line = error_line(capsys, ["run", "steady-test", "--results", str(tmp_path / "r"), *args, *extra])
        assert says in line, line
        assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, says", [
    (["--warmup", "-1"], "--warmup -1: give a whole number from 0 to"),
    (["--limit", "0"], "--limit 0: give a whole number from 1 to"),
    (["--limit", "-5"], "--limit -5"),
    (["--threshold", "nan"], "--threshold nan"),
    (["--nodes", "0"], "--nodes 0"),
])
def test_infer_options_that_make_no_sense_are_refused(refs, tmp_path, capsys, args, says):
    line = error_line(capsys, ["infer", "steady-test", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "o"),
                               *args])
    assert says in line, line
    assert not (tmp_path / "o").exists()


# --- 4. every dataset file verified before the run folder exists ------------------------------------

@pytest.fixture
def corrupt_data(tmp_path, fashion_root):
    """A copy of the data root whose TRAINING images have one byte changed (the eval labels are intact)."""
    data = tmp_path / "data"
    shutil.copytree(datasets.dataset_dir("fashion-mnist", fashion_root), data / "fashion-mnist")
    victim = data / "fashion-mnist" / "train-images-idx3-ubyte"
    victim.chmod(0o644)
    with open(victim, "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    return data


def test_a_corrupt_training_file_is_one_line_before_any_folder(refs, tmp_path, capsys, corrupt_data):
    line = error_line(capsys, ["run", "steady-test", "--data", str(corrupt_data), "--results", str(tmp_path / "r"),
                               *QUICK])
    assert "checksum mismatch" in line and "train-images-idx3-ubyte" in line and "dawnbench data fetch" in line
    assert not (tmp_path / "r").exists()
    line = error_line(capsys, ["run", "steady-test", "--runs", "2", "--data", str(corrupt_data),
                               "--results", str(tmp_path / "r"), *QUICK])
    assert "train-images-idx3-ubyte" in line and not (tmp_path / "r").exists()


def test_verified_checksums_reads_each_file_once(fashion_root, monkeypatch):
    opened = []
    real_open = open

    def counting_open(path, *args, **kwargs):
        opened.append(Path(path).name)
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr("builtins.open", counting_open)
    started = time.perf_counter()
    verified = datasets.verified_checksums("fashion-mnist", fashion_root)
    seconds = time.perf_counter() - started
    manifest = datasets.manifest("fashion-mnist")["files"]
    assert sorted(opened) == sorted(manifest)
    assert verified == {f: {"file": f, "sha256": entry["sha256"]} for f, entry in manifest.items()}
    print(f"verified_checksums(fashion-mnist): {seconds:.2f} s")


def test_the_run_records_what_it_verified(refs, tmp_path):
    assert main(["run", "steady-test", "--results", str(tmp_path / "r"), *QUICK]) == 0
    (run_dir,) = (tmp_path / "r" / "steady-test").iterdir()
    from harness.events import read_events
    (event,) = [e for e in read_events(run_dir / "events.jsonl") if e["key"] == "dawnbench_dataset"]
    assert event["value"] == "fashion-mnist"
    assert [f["file"] for f in event["metadata"]["files"]] == list(datasets.manifest("fashion-mnist")["files"])


# --- 5. a read-only or full results folder -------------------------------------------------------

def _namespaces_work() -> bool:
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                          capture_output=True).returncode == 0


def run_on_tmpfs(tmp_path, refs, mount_options: str, prepare: str, *args) -> subprocess.CompletedProcess:
    """`dawnbench run` with its results on a fresh tmpfs mounted with `mount_options`, in a user and mount
    namespace of its own (no privilege needed); `prepare` runs first, in the mount (e.g. filling it)."""
    if shutil.which("unshare") is None or not _namespaces_work():
        pytest.fail("this test needs `unshare --user --map-root-user --mount` (util-linux, user namespaces)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    inner = " ".join([PYTHON, "-m", "dawnbench", "run", "steady-test", "--results", f"{mnt}/results", *QUICK, *args])
    script = f"mount -t tmpfs -o {mount_options} tmpfs {mnt} && cd {mnt} && {prepare} && {inner}; " \
             f"code=$?; cp -a {mnt}/. {tmp_path}/after/ 2>/dev/null; exit $code"
    (tmp_path / "after").mkdir()
    # isolation off: nested sandboxes in this namespace are not what is tested here
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                          env=cli_env(DAWNBENCH_REFERENCES=str(refs), DAWNBENCH_ISOLATION="none"),
                          capture_output=True, text=True, timeout=120)


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if "error:" in line]


def test_a_read_only_results_folder_is_refused_before_the_run(refs, tmp_path):
    proc = run_on_tmpfs(tmp_path, refs, "ro,size=1m", "true")
    (line,) = error_lines(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert line.startswith("dawnbench: error: cannot write ") and "Read-only file system (EROFS)" in line
    assert "give a writable --results DIR" in line
    assert "epoch" not in proc.stderr               # refused before the run started
    assert tree(tmp_path / "after") == []


def test_a_full_disk_stops_the_run_with_one_line_and_no_result(refs, tmp_path):
    # 16 KiB left for the run folder: enough for its first epochs, not for 400
    proc = run_on_tmpfs(tmp_path, refs, "size=1m", "dd if=/dev/zero of=filler bs=16k count=63 2>/dev/null",
                        "--threshold", "0.5", "--max-epochs", "400")
    (line,) = error_lines(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert line.startswith("dawnbench: error: cannot write ") and "No space left on device (ENOSPC)" in line
    assert "free space there" in line
    (run_dir,) = (tmp_path / "after" / "results" / "steady-test").iterdir()
    names = sorted(p.name for p in run_dir.iterdir())
    assert "result.json" not in names and not [n for n in names if n.endswith((".tmp", ".partial"))], names
    assert "epoch   1/400" in proc.stderr                                                  # stopped mid-run
    assert f"{run_dir.name}/events.jsonl" in line or f"{run_dir.name}/predictions" in line
    assert not list((run_dir / "predictions").glob("*.tmp")) if (run_dir / "predictions").is_dir() else True
    # what was written is whole lines only: the line that did not fit was cut back
    assert (run_dir / "events.jsonl").read_text().endswith("\n")
    assert (run_dir / "steady-test.tsv").read_text().endswith("\n")
    events = (run_dir / "events.jsonl").read_text().splitlines()
    assert all(json.loads(e.partition(" ")[2]) for e in events) and "run_stop" not in events[-1]


def test_a_disk_full_from_the_start_leaves_no_result(refs, tmp_path):
    proc = run_on_tmpfs(tmp_path, refs, "size=256k", "(dd if=/dev/zero of=filler bs=4k 2>/dev/null || true)")
    (line,) = error_lines(proc.stderr)
    assert proc.returncode == 2 and "No space left on device (ENOSPC)" in line, proc.stderr
    for run_dir in (tmp_path / "after" / "results" / "steady-test").iterdir():
        assert not (run_dir / "result.json").exists() and not (run_dir / "env.json").exists()


def test_a_failed_json_write_leaves_neither_the_file_nor_its_temp(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # a JSON file larger than the room left: the temp file fails half way
    code = (f"from harness import safe_write; safe_write.write_json(__import__('pathlib').Path('{mnt}/result.json'), "
            f"{{'x': 'y' * 100000}})")
    script = f"mount -t tmpfs -o size=64k tmpfs {mnt} && cd {mnt} && {PYTHON} -c \"{code}\"; ls -a {mnt}"
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script], env=cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert f"safe_write.WriteError: cannot write {mnt}/result.json: No space left on device (ENOSPC)" in proc.stderr
    assert proc.stdout.split() == [".", ".."], proc.stdout       # neither result.json nor result.json.tmp


def test_a_failed_line_is_cut_back_and_closed():
    # /dev/full: every write is ENOSPC (the check keeps a regular file of that name from being truncated)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode), "/dev/full is not the character device"
    f = safe_write.LineFile("/dev/full")
    with pytest.raises(safe_write.WriteError, match=r"cannot write /dev/full: No space left on device \(ENOSPC\)"):
        f.write("epoch\thours\n")
    assert f.closed


# --- 6. a series: killed parent, summary after each run ---------------------------------------------

def children(pid: int) -> list[int]:
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rpartition(")")[2].split()
        except OSError:       # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat_file.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def start_series(refs, results: Path, runs: int = 3) -> subprocess.Popen:
    return subprocess.Popen(
        [PYTHON, "-m", "dawnbench", "run", "steady-test", "--runs", str(runs), "--results", str(results),
         "--no-save", "--set", "slow_seed=1", "--threshold", "0.05", "--no-progress"],
        env=cli_env(DAWNBENCH_REFERENCES=str(refs)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as from a terminal: a suite started in the background inherits SIGINT ignored, and Python keeps it so
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for_second_run(proc: subprocess.Popen, results: Path) -> int:
    """The pid of the series' second run, once the first run is summarized and the second is going."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        if list(results.glob("steady-test/*/seed1/events.jsonl")) and children(proc.pid):
            return children(proc.pid)[0]
        time.sleep(0.05)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_killed_series_takes_its_run_along_and_keeps_its_summary(refs, tmp_path, how):
    results = tmp_path / "results"
    proc = start_series(refs, results, runs=3)
    try:
        run = wait_for_second_run(proc, results)
        (folder,) = (results / "steady-test").iterdir()
        # the first run is summarized as soon as it ends
        summary = json.loads((folder / "summary.json").read_text())
        assert [r["seed"] for r in summary["runs"]] == [0] and summary["in_progress"] is True
        assert summary["requested_runs"] == 3
        os.kill(proc.pid, how)
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 30
        while alive(run):
            assert time.monotonic() < deadline, f"the run {run} outlived its series (killed by {how.name})"
            time.sleep(0.05)
    finally:
        for pid in [proc.pid] + ([run] if "run" in locals() else []):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    summary = json.loads((folder / "summary.json").read_text())
    assert [(r["seed"], r["status"]) for r in summary["runs"]] == [(0, "converged")]
    # the second run was stopped, not cut off: it wrote its DNC result
    stopped = json.loads((folder / "seed1" / "result.json").read_text())
    assert stopped["status"] == "DNC" and stopped["dnc_reason"].startswith("error: ")
    if how == signal.SIGKILL:
        assert summary["in_progress"] is True and summary["interrupted"] is False     # nobody could say more
    else:
        assert summary["in_progress"] is False and summary["interrupted"] is True
        assert proc.returncode == 128 + how


# --- 7. signals: a hung-up terminal, a second Ctrl-C, a signal during the final writes --------------

# The harness with something done to it at a chosen step: `write` between env.json and result.json (the
# run's last step), `epoch` as an epoch starts, `kill` as the workers are killed at the run's end. What: a
# signal sent to itself, `rm` (the results folder removed) or `link` (the run folder moved away and a link to
# $OUTSIDE put in its place). Done from inside, it lands exactly there, on a loaded machine too.
SIGNAL_AT = '''
import os, shutil, signal, sys
from harness import environment, run_record
from harness.sandbox import handle

at = dict(part.split("=") for part in sys.argv[1].split(";"))
run_dirs = []

def fire(step):
    what = at.pop(step, None)
    if what == "rm":
        shutil.rmtree(run_dirs[0].parent.parent)
    elif what == "link":
        os.rename(run_dirs[0], str(run_dirs[0]) + ".moved")
        os.symlink(os.environ["OUTSIDE"], run_dirs[0])
    elif what:
        os.kill(os.getpid(), getattr(signal, what))

write_json = run_record.safe_write.write_json
def write_then_fire(path, obj, *args, **kwargs):
    write_json(path, obj, *args, **kwargs)
    if path.name == "env.json":
        fire("write")
run_record.safe_write.write_json = write_then_fire
epoch_started = run_record.RunRecord.epoch_started
def epoch_started_then_fire(self, epoch):
    run_dirs.append(self.run_dir)
    epoch_started(self, epoch)
    fire("epoch")
run_record.RunRecord.epoch_started = epoch_started_then_fire
kill = handle.Worker.kill
handle.Worker.kill = lambda self, *args, **kwargs: (fire("kill"), kill(self, *args, **kwargs))[1]
describe = environment.describe_system        # the run folder is made, its log not yet opened
environment.describe_system = lambda *args, **kwargs: (fire("folder"), describe(*args, **kwargs))[1]

from harness.cli import main
sys.exit(main(sys.argv[2:]))
'''


@pytest.mark.parametrize("at, status, code", [
    ("write=SIGTERM", "converged", 0),          # on 7514441: killed (143) between env.json and result.json
    ("write=SIGINT", "converged", 0),           # a KeyboardInterrupt's traceback, no result.json
    ("epoch=SIGHUP", "DNC", 1),                 # SIGHUP was handled in no phase: exit 129, no record
    ("epoch=SIGINT;kill=SIGINT", "DNC", 1),     # a second Ctrl-C raised out of the workers' kill
    ("folder=SIGTERM", "DNC", 1),               # the folder made, no clock yet: killed, a folder of empty logs
])
def test_a_signal_at_any_step_leaves_a_whole_record_and_no_traceback(refs, tmp_path, at, status, code):
    """Issue 47: each leaves a DNC or a complete record, never a half, never a traceback."""
    results = tmp_path / "results"
    proc = subprocess.run([PYTHON, "-c", SIGNAL_AT, at, "run", "steady-test", "--results", str(results), "--no-save",
                           *QUICK], env=cli_env(DAWNBENCH_REFERENCES=str(refs)), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == code and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    (run_dir,) = (results / "steady-test").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert json.loads((run_dir / "env.json").read_text())["python"]
    assert result["status"] == status, result["dnc_reason"]
    stop = [line for line in (run_dir / "events.jsonl").read_text().splitlines() if '"run_stop"' in line]
    assert len(stop) == 1 and f'"dawnbench_status": "{status}"' in stop[0]
    if status == "DNC":
        assert result["dnc_reason"] in ("error: Terminated: hung up (SIGHUP: the terminal closed)",
                                        "error: interrupted (Ctrl-C, SIGINT)",
                                        "error: Terminated: terminated by SIGTERM"), result["dnc_reason"]
    else:
        assert "while the run closed: its record was finished first" in proc.stderr, proc.stderr


@pytest.mark.parametrize("what, said", [("rm", "was removed"), ("link", "was replaced by a link")])
def test_a_run_folder_removed_or_replaced_mid_run_ends_dnc_and_writes_nowhere(refs, tmp_path, what, said):
    """Issue 47: `rm -rf RESULTS` during an epoch ended "converged", exit 0, the folder made again with a
    result.json but no events.jsonl nor TSV (written into deleted files); a run folder replaced by a link had
    the files written where it led, outside --results. Now the next write stops the run: DNC, one line."""
    results, outside = tmp_path / "results", tmp_path / "outside"
    outside.mkdir()
    proc = subprocess.run([PYTHON, "-c", SIGNAL_AT, f"epoch={what}", "run", "steady-test", "--results", str(results),
                           *QUICK], env=cli_env(DAWNBENCH_REFERENCES=str(refs), OUTSIDE=str(outside)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    (line,) = error_lines(proc.stderr)
    assert f"{said}" in line and "the run ends DNC" in line and "\n" not in line, line
    assert list(outside.iterdir()) == []            # nothing written where the link led
    if what == "rm":
        assert not results.exists()                 # nor the folder made again, whole-looking
    else:
        (moved,) = (results / "steady-test").glob("*.moved")
        assert not (moved / "result.json").exists()


def test_a_signal_that_lands_in_an_at_fork_hook_is_raised_again_after_it():
    """CI's numpy-1.23.5 tier (2026-11-28): the series' Ctrl-C reached its run while the run started a child
    with a preexec_fn, inside logging's at-fork hook, where Python drops what a handler raises ("Exception
    ignored in: <function _releaseLock>"): the signal was spent and the run went on to its budget. The handler
    now sends it again, so it raises after the hook, where the run's handler catches it."""
    import sys as _sys

    from harness import dropped_signals, runner
    hook = {"__name__": "logging", "sys": _sys}
    exec("def _releaseLock():\n    return sys._getframe()\n", hook)
    frame = hook["_releaseLock"]()
    assert dropped_signals.dropped_here(frame) and not dropped_signals.dropped_here(_sys._getframe())
    with runner._Stops() as stops:
        stops._on_signal(signal.SIGINT, frame)          # inside the hook: nothing raised there, nothing spent
        assert stops.closing is False
        with pytest.raises(KeyboardInterrupt):
            time.sleep(5)                                # the same signal again, 50 ms later, outside it
        assert stops.closing is True
