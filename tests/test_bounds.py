"""Every bad value a probe found accepted (issue 25, section 3), through the real command: one line
`<prog>: error: ...`, exit status 2, nothing written, and nothing started (each case ends in
milliseconds: the ranges are checked while parsing, before a process, a folder or a file exists).
And the entries a reader would take two ways: a key given twice, a control character in logFilename,
refused with their line at both validation levels and kept off the leaderboard."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_env
from leaderboard_fixture import archived, train

from dawnbench import ranking, validate_entries
from dawnbench.cli import main
from harness import registry
from harness.arguments import MAX_TEXT, SEED_MAX

REPO = Path(__file__).resolve().parent.parent
REF = "fashion-mnist-cnn-pytorch"
TOO_BIG = "99999999999999999999"


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def place(tmp_path, references_root, monkeypatch):
    """tmp_path as the working folder (where `--results ''` would write), the references set up."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAWNBENCH_RESULTS", raising=False)
    return tmp_path


def refused(capsys, place: Path, argv: list[str], prog: str = "dawnbench", run=main) -> str:
    """The one error line of `argv`; asserts exit 2, nothing on stdout, nothing written under `place`."""
    before = files_under(place)
    code = run(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and out == "", (argv, code, out, err)
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err
    assert files_under(place) == before, argv
    return lines[0]


RUN = ["run", REF, "--results", "results"]
INFER = ["infer", REF, "--model", "model", "--out", "out"]

CASES = [   # (argv, words the line says)
    ([*RUN, "--seed", str(SEED_MAX + 1)], "--seed 4294967296: give a whole number from 0 to 4,294,967,295"),
    ([*RUN, "--seed", "-1"], "--seed -1: give a whole number from 0"),
    ([*RUN, "--seed", "1.5"], "--seed 1.5: give a whole number"),
    ([*RUN, "--seed", str(SEED_MAX - 2), "--runs", "5"], "the series' last seed, 4294967297, is beyond"),
    ([*RUN, "--runs", TOO_BIG], f"--runs {TOO_BIG}: give a whole number from 1 to 1,000"),
    ([*RUN, "--runs", "0"], "--runs 0: give a whole number from 1"),
    ([*RUN, "--max-epochs", "1e23"], "--max-epochs 1e23: give a whole number from 1 to 100,000"),
    ([*RUN, "--max-epochs", "100001"], "--max-epochs 100001: give a whole number from 1 to 100,000"),
    ([*RUN, "--max-epochs", "2.5"], "--max-epochs 2.5: give a whole number"),
    ([*RUN, "--nodes", "1e27"], "--nodes 1e27: give a whole number from 1 to 10,000"),
    ([*RUN, "--nodes", "10001"], "--nodes 10001: give a whole number from 1 to 10,000"),
    ([*RUN, "--max-seconds", "inf"], "--max-seconds inf: give a finite number above 0"),
    ([*RUN, "--max-seconds", "nan"], "--max-seconds nan: give a finite number above 0"),
    ([*RUN, "--max-seconds", "-5"], "--max-seconds -5: give a finite number above 0"),
    # issue 34: accepted, then the sandbox's select() overflowed and the run ended DNC with a traceback's reason
    ([*RUN, "--max-seconds", "1e308"], "--max-seconds 1e308: give a finite number above 0 and at most 8.64e+06"),
    ([*RUN, "--threshold", "0"], "--threshold 0: give a finite number above 0"),
    ([*RUN, "--threshold", "1.01"], "--threshold 1.01: give a finite number above 0 and at most 1"),
    ([*RUN, "--threshold", "nan"], "--threshold nan:"),
    ([*RUN, "--cost-per-hour", "-1"], "--cost-per-hour -1: give a finite number above 0 and at most 1000"),
    ([*RUN, "--cost-per-hour", "inf"], "--cost-per-hour inf: give a finite number above 0 and at most 1000"),
    ([*RUN, "--cost-per-hour", "nan"], "--cost-per-hour nan:"),
    ([*RUN, "--set", "batch_size=-1"], "--set batch_size=-1: give a whole number from 1 to 60,000"),
    ([*RUN, "--set", "batch_size=0"], "--set batch_size=0: give a whole number from 1 to 60,000"),
    ([*RUN, "--set", f"batch_size={TOO_BIG}"], f"--set batch_size={TOO_BIG}: give a whole number from 1 to 60,000"),
    ([*RUN, "--set", "batch_size=60001"], "--set batch_size=60001: give a whole number from 1 to 60,000"),
    ([*RUN, "--set", "batch_size=2.5"], "--set batch_size=2.5: give a whole number from 1 to 60,000"),
    ([*RUN, "--set", "epochs=-1"], "--set epochs=-1: 'epochs' takes a whole number from 0 to 2,147,483,647"),
    ([*RUN, "--set", "lr=nan"], "--set lr=nan: 'lr' takes a finite number, 0 or more"),
    ([*RUN, "--set", "lr=-0.1"], "--set lr=-0.1: 'lr' takes a finite number, 0 or more"),
    ([*RUN, "--set", "widths=[4, -4, 4]"], "'widths' takes a list like [16, 32, 64]"),
    ([*RUN, "--set", "widths=[4, 4.5]"], "'widths' takes a list like [16, 32, 64]"),
    ([*RUN, "--set", "widths=[]"], "'widths' takes a list like [16, 32, 64]"),
    ([*RUN, "--results", ""], "argument --results: '' is an empty path"),
    ([*RUN, "--data", ""], "argument --data: '' is an empty path"),
    ([*RUN, "--bogus"], "unrecognized arguments: --bogus (see `dawnbench run --help`)"),
    ([*INFER, "--threads", "1000000000"], "--threads 1000000000: give a whole number from 1 to 4,096"),
    ([*INFER, "--threads", "0"], "--threads 0: give a whole number from 1"),
    ([*INFER, "--warmup", "-1"], "--warmup -1: give a whole number from 0"),
    ([*INFER, "--warmup", TOO_BIG], f"--warmup {TOO_BIG}: give a whole number from 0 to 100,000"),
    ([*INFER, "--limit", "0"], "--limit 0: give a whole number from 1"),
    ([*INFER, "--limit", "1e9"], "--limit 1e9: give a whole number"),
    ([*INFER, "--seed", TOO_BIG], f"--seed {TOO_BIG}: give a whole number from 0 to 4,294,967,295"),
    ([*INFER, "--nodes", "0"], "--nodes 0: give a whole number from 1"),
    ([*INFER, "--out", ""], "argument --out: '' is an empty path"),
    (["validate", "/nonexistent/entries"], "/nonexistent/entries: no such file or folder"),
    (["validate", "--level", "v1", "/nonexistent/entries"], "/nonexistent/entries: no such file or folder"),
    (["validate", "empty"], "no entries found under empty"),
    (["validate", ""], "argument PATH: '' is an empty path"),
    (["leaderboard", "empty", "--out", ""], "argument --out: '' is an empty path"),
    (["reproduce", "empty", "--runs", TOO_BIG], f"--runs {TOO_BIG}: give a whole number from 1 to 1,000"),
    (["reproduce", "empty", "--metric-tolerance", "inf"], "--metric-tolerance inf: give a finite number 0 or more"),
    # issue 34, section 3: a price of 1e30 (or of nothing) was taken, and its costs ranked
    ([*RUN, "--cost-per-hour", "1e30"], "--cost-per-hour 1e30: give a finite number above 0 and at most 1000 "
                                        "(USD per hour of one node; 0 is no price)"),
    ([*RUN, "--cost-per-hour", "-0"], "--cost-per-hour -0: give a finite number above 0 and at most 1000"),
    ([*RUN, "--cost-per-hour", "0"], "--cost-per-hour 0: give a finite number above 0 and at most 1000"),
    ([*INFER, "--cost-per-hour", "1000.5"], "--cost-per-hour 1000.5: give a finite number above 0 and at most 1000"),
    ([*RUN, "--price-record", '{"instance": "x:y", "usd_per_hour": 1e30, "source": "me", "date": "2025-01-01"}'],
     "--price-record: usd_per_hour 1e+30 must be a number above 0 and at most 1,000 (USD per hour of one node)"),
    (["submit", "empty", "--cost-per-hour", "1e300"], "--cost-per-hour 1e300: give a finite number above 0 and at "
                                                      "most 1000"),
    (["submit", "empty", "--cost-per-hour", "-0"], "--cost-per-hour -0: give a finite number above 0"),
    # free text an entry shows: one line, at most MAX_TEXT characters, the value escaped and clipped
    (["submit", "empty", "--author", "a\nb"], "--author a\\nb: holds a control character (a newline, a tab, an "
                                              "escape): give it as one line of plain text"),
    (["submit", "empty", "--author", "x" * 100_000], f"--author {'x' * 60}... (100,000 characters): too long: "
                                                     f"give at most {MAX_TEXT} characters"),
    (["submit", "empty", "--author", " "], "--author ' ': blank: give some text, or leave the option out"),
    (["submit", "empty", "--hardware", "\x1b[2J8 x V100"], "--hardware \\x1b[2J8 x V100: holds a control character"),
    (["submit", "empty", "--author-email", "me@x.org\tx"], "--author-email me@x.org\\tx: holds a control character"),
    (["submit", "empty", "--code-url", "https://x.org/\x85"], "--code-url https://x.org/\\x85: holds a control "
                                                                "character"),
    # a user's value in an error is one line: its control characters escaped
    ([*RUN, "--references", "a\nb"], "--references a\\nb: no such folder; give the folder that holds"),
    (["verify", "a\nb"], "a\\nb: not a folder; give a run folder"),
    (["submit", "a\nb"], "a\\nb: not a folder; give a run folder"),
    # a hyperparameter given twice was the second, silently
    ([*RUN, "--set", "lr=0.1", "--set", "lr=0.2"], "--set lr=0.1 and --set lr=0.2: 'lr' is given twice; give each "
                                                   "hyperparameter once"),
    ([*INFER, "--set", "batch_size=64", "--set", " batch_size=64"], "'batch_size' is given twice"),
    # issue 47: accepted, then the reference failed 38 s later (bf16), or a traceback (OverflowError, RecursionError)
    ([*RUN, "--set", "bf16=sometimes"], "--set bf16=sometimes: 'bf16' takes a switch: auto, native, true or false "
                                        "(default \"native\"; [choices] in its reference.toml)"),
    ([*INFER, "--set", "bf16=often"], "'bf16' takes a switch: auto, native, true or false"),
    ([*RUN, "--set", "lr=" + "9" * 400], "'lr' takes a finite number, 0 or more"),
    ([*RUN, "--set", "widths=" + "[" * 40_000], "'widths' takes a list like [16, 32, 64]"),
    ([*RUN, "--set", "epochs=" + "9" * 5000], "'epochs' takes a whole number from 0 to 2,147,483,647"),
    ([*RUN, "--price-record", '{"instance": "x:y", "usd_per_hour": %s, "source": "me", "date": "2025-01-01"}' % ("9" * 400)],
     "--price-record: usd_per_hour inf must be a number above 0 and at most 1,000"),
    ([*RUN, "--price-record", "[" * 40_000 + "]" * 40_000], "nested too deeply"),
    ([*RUN, "--price-record", ""], "--price-record '': empty; give {"),
    ([*RUN, "--cost-per-hour", "-inf"], "--cost-per-hour -inf: give a finite number above 0 and at most 1000"),
    ([*RUN, "--max-epochs", "-1e5"], "--max-epochs -1e5: give a whole number from 1"),
    (["data", "fetch", "cifar10", "--reference", REF, "--data", "d"],
     f"cifar10 and --reference {REF} name different datasets (its task reads fashion-mnist): give the dataset or the "
     f"reference, not both"),
    (["compliance", "/dev/zero"], "/dev/zero: is a device, not a file or folder; give a run folder"),
    (["list", "--references", "empty"], "no references found in empty (no <name>/reference.toml under it)"),
]


@pytest.mark.parametrize("argv, says", CASES, ids=[" ".join(a[1:] if a[0] in ("run", "infer") else a)[:60]
                                                   for a, _ in CASES])
def test_each_bad_value_is_one_line_exit_2_nothing_written(place, capsys, argv, says):
    (place / "empty").mkdir()
    line = refused(capsys, place, argv, "dawnbench" if argv[0] in ("run", "infer", "verify", "data", "list")
                   else f"dawnbench {argv[0]}")
    assert says in line and line.isprintable() and len(line) < 1000, line


@pytest.mark.parametrize("argv", [["list", "--references", ""], ["list", "--references="]])
def test_list_refuses_an_empty_references_as_run_does(place, capsys, monkeypatch, argv):
    """`dawnbench list` is answered by the launcher itself (no environment to set up): it listed the
    default references for `--references ''`, where run refuses it (issue 34)."""
    from dawnbench import launcher
    monkeypatch.setenv("DAWNBENCH_PROG", "dawnbench")
    assert launcher.route(argv) is None         # the launcher's own answer, not dawnbench.cli's
    line = refused(capsys, place, argv, run=launcher.main)
    assert line == ("dawnbench: error: argument --references: '' is an empty path (the current folder): give a file "
                    "or folder name (see `dawnbench list --help`)"), line


def test_an_error_printed_anywhere_is_one_line(capsys):
    """harness.errors.report, where every command prints its error: whatever a message echoes is escaped
    (a message a source did not escape included) and a runaway one is cut."""
    from harness.errors import UsageError, report
    assert report("dawnbench", UsageError("x\ny\r\x1b[2J\x85\u2028z " + "w" * 10_000)) == 2
    err = capsys.readouterr().err
    assert err.startswith("dawnbench: error: x\\ny\\r\\x1b[2J\\x85\\u2028z w") and err.count("\n") == 1, err[:80]
    assert len(err) < 2100 and err.rstrip("\n").endswith("... (10,012 characters)"), err[-80:]


BENCH = [   # (module, argv, words)
    ("bench.tta", ["--runs", TOO_BIG], f"--runs {TOO_BIG}: give a whole number from 1 to 1,000"),
    ("bench.tta", ["--results", ""], "'' is an empty path"),
    ("bench.overhead", ["--max-epochs", "1e23"], "--max-epochs 1e23: give a whole number from 1 to 100,000"),
    ("bench.overhead", ["--epochs", "2"], "unrecognized arguments: --epochs"),
    ("bench.overhead", ["--seed", str(SEED_MAX + 1)], "--seed 4294967296: give a whole number"),
    ("bench.eval_spans", ["--timeout", "nan"], "--timeout nan: give a finite number above 0"),
    ("bench.cifar_fast_gap", ["--epochs", "0"], "--epochs 0: give a whole number from 1"),
]


@pytest.mark.parametrize("module, argv, says", BENCH, ids=[f"{m} {' '.join(a)}" for m, a, _ in BENCH])
def test_bench_commands_share_the_parser(place, capsys, module, argv, says):
    import importlib
    line = refused(capsys, place, argv, f"python -m {module}", importlib.import_module(module).main)
    assert says in line, line


def test_the_real_exit_status_from_the_shell(tmp_path):
    """The process's own status and stderr: the usage block argparse prints is gone."""
    for argv in (["run", "--bogus"], ["run", REF, "--seed", str(SEED_MAX + 1), "--results", str(tmp_path / "r")]):
        proc = subprocess.run([sys.executable, "-m", "dawnbench", *argv], cwd=REPO, env=cli_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stdout == "", proc
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("dawnbench: error: "), proc.stderr
    assert not (tmp_path / "r").exists()


def test_make_run_refuses_a_bad_nproc_before_any_set_up(tmp_path):
    """Issue 47: `make run NPROC=abc` ended in torchrun's traceback after the set-up; the Makefile checks
    NPROC first (check-nproc, a prerequisite of run, run-native and run-docker). VENVS points nowhere: a
    step past the check would fail otherwise."""
    for nproc in ("abc", "0", "-1", "2x", ""):
        proc = subprocess.run(["make", "--no-print-directory", "run", f"NPROC={nproc}", "RUNTIME=native",
                               f"VENVS={tmp_path / 'none'}"], cwd=REPO, capture_output=True, text=True, timeout=60)
        said = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
        assert proc.returncode == 2 and said == [f"dawnbench: error: NPROC={nproc}: give the number of processes, a "
                                                 f"whole number 1 or more, e.g. make run NPROC=2"], proc.stderr
        assert not (tmp_path / "none").exists()


def test_a_ctrl_c_no_command_handled_is_one_line(tmp_path):
    """Issue 47's probe: SIGINT into `validate`, `analyze`, `data verify` ended in a KeyboardInterrupt
    traceback; a command's Ctrl-C is one line and status 130 (a run handles its own: DNC)."""
    tree = tmp_path / "entries" / "CIFAR10" / "train"
    tree.mkdir(parents=True)
    script = ("import signal, sys; from dawnbench import validate_entries as v; real = v.check\n"
              "def check(*a, **k):\n    signal.raise_signal(signal.SIGINT)\n    return real(*a, **k)\n"
              "v.check = check\nfrom dawnbench.launcher import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", script, "validate", str(tmp_path / "entries")], capture_output=True,
                          text=True, env=cli_env(), timeout=120)
    assert proc.returncode == 130 and proc.stderr.splitlines() == [
        "dawnbench: interrupted (Ctrl-C): stopped before it finished"], proc.stderr


def test_every_switch_a_reference_resolves_is_declared_one():
    """Each hyperparameter a reference's code reads through resolve_switch is declared "switch" in its
    [choices], so a --set outside the switch words is refused before the run, not by the reference once
    the clock runs (issue 47). The class, not the instance: every reference, every switch."""
    import re
    for toml in sorted((REPO / "references").glob("*/reference.toml")):
        code = "\n".join(p.read_text() for p in toml.parent.glob("*.py"))
        read = set(re.findall(r"resolve_switch\((?:cfg|self\.ctx\.config)\[\"(\w+)\"\]", code))
        spec = registry.load_spec(toml.parent.name, REPO / "references")
        assert {k for k in read if spec.choices.get(k) != registry.SWITCH} == set(), toml.parent.name


@pytest.mark.parametrize("choices, says", [
    ('bf16 = "sometimes"', "field 'choices.bf16' = 'sometimes': write key = \"switch\""),
    ('lr = "switch"', "and lr is a finite number, 0 or more, typed by its default"),
    ('nosuch = ["a"]', "and nosuch is no hyperparameter"),
    ('bf16 = ["true", "false"]', "its default 'native' is not one of true, false"),
    ("bf16 = []", "field 'choices.bf16' = []: write key"),
])
def test_a_wrong_choices_table_is_refused_when_the_reference_loads(tmp_path, choices, says):
    fork = tmp_path / REF
    shutil.copytree(REPO / "references" / REF, fork, ignore=shutil.ignore_patterns(".venv", "__pycache__"))
    text = (fork / "reference.toml").read_text()
    (fork / "reference.toml").write_text(text.replace('bf16 = "switch"\n', choices + "\n"))
    with pytest.raises(registry.UsageError) as refused:
        registry.load_spec(REF, tmp_path)
    assert says in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def test_a_switch_takes_the_words_resolve_switch_reads():
    spec = registry.load_spec(REF, REPO / "references")
    for word in ("auto", "native", "TRUE", " off", "1", "no"):
        assert registry.resolve_hyperparameters(spec, [f"bf16={word}"])["bf16"] == word
    assert registry.switch_value("On") is True and registry.switch_value(False) is False
    assert registry.switch_value("auto") == "auto"


def test_a_toml_list_is_the_list_it_looks_like(place, capsys):
    """`--set 'widths=[4, 4, 4]'` is read as TOML, like the default it replaces; the comma list still works."""
    spec = registry.load_spec(REF)
    for text in ("[4, 4, 4]", "4,4,4", "[4,4,4]"):
        assert registry.resolve_hyperparameters(spec, [f"widths={text}"])["widths"] == [4, 4, 4]
    hp = registry.resolve_hyperparameters(spec, ["lr=.5", "batch_size=60000", "weight_decay=0"])
    assert (hp["lr"], hp["batch_size"], hp["weight_decay"]) == (0.5, 60000, 0.0)
    # Through the command: the --set passes, so what stops the run is the missing data, before any folder.
    line = refused(capsys, place, [*RUN, "--set", "widths=[4, 4, 4]", "--data", "empty"])
    assert "dataset 'fashion-mnist' not found" in line


@pytest.mark.parametrize("kind", ["fifo", "device-link", "folder"])
def test_a_data_file_that_is_no_regular_file_says_so(place, capsys, fashion_root, kind):
    """A FIFO would block the checksum's read and /dev/zero never end it: both are refused, unread."""
    source = fashion_root / "fashion-mnist"
    data = place / "data" / "fashion-mnist"
    data.mkdir(parents=True)
    for f in source.iterdir():
        (data / f.name).symlink_to(f)
    victim = data / "train-labels-idx1-ubyte"
    victim.unlink()
    {"fifo": lambda: os.mkfifo(victim), "device-link": lambda: victim.symlink_to("/dev/zero"),
     "folder": victim.mkdir}[kind]()
    what = {"fifo": "a FIFO", "device-link": "a device", "folder": "a folder"}[kind]
    for argv in ([*RUN, "--data", "data"], ["data", "verify", "fashion-mnist", "--data", "data"]):
        line = refused(capsys, place, argv) if argv[0] == "run" else _verify_line(capsys, argv)
        assert f"{victim.relative_to(place)} is {what}, not a regular file: replace it with the file itself" in line, line
        assert "dawnbench data fetch fashion-mnist" in line


def _verify_line(capsys, argv) -> str:
    code = main(argv)
    out, err = capsys.readouterr()       # the files before the bad one are "ok" on stdout
    assert code == 2 and err.count("\n") == 1 and err.startswith("dawnbench: error: "), err
    return err


def test_every_subcommand_has_its_help(capsys):
    for sub in ("run", "infer", "list", "eval", "data", "verify", "submit", "validate", "leaderboard", "analyze",
                "compliance", "reproduce", "compare", "entries"):
        with pytest.raises(SystemExit) as stop:
            main([sub, "--help"])
        assert stop.value.code == 0
        assert capsys.readouterr().out.startswith("usage: dawnbench"), sub
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    seed = capsys.readouterr().out.split("\n  --seed N", 1)[1].split("\n  --", 1)[0]      # its help text
    assert seed.split()[:2] == ["the", "seed"], seed


# --- entries a reader would take two ways -------------------------------------------------------

def _honest_and(root: Path, stem: str, **fields) -> Path:
    train(root, "ImageNet", "honest_resnet50_v100_pytorch", [(1, 2.0, 76.0, 93.1)], costPerHour=3.06)
    path = train(root, "ImageNet", stem, [(1, 1.0, 76.0, 93.1)], costPerHour=2.0, **fields)
    path.write_text(json.dumps(json.loads(path.read_text()), indent=4) + "\n")      # a key a line, as published
    return path


def _problems_at_both_levels(capsys, root: Path, path: Path, field: str, line: int, words: str) -> None:
    for level in ("strict", "v1"):
        code = validate_entries.main(["--level", level, str(root)])
        out = capsys.readouterr().out.splitlines()
        assert code == 1, (level, out)
        assert any(o.startswith(f"{path}:{line}: {field}: ") and words in o and ": warning: " not in o
                   for o in out), (level, out)
    result = ranking.rank(*ranking.load_all(root), archived=archived(root))        # the leaderboard's default level, v1
    assert [u["entry"] for u in result["invalid"]] == [path.stem]
    assert [r["entry"] for r in result["tasks"]["ImageNet"]["train_time_archive"]] == ["honest_resnet50_v100_pytorch"]


def test_a_key_given_twice_is_refused_with_its_line(tmp_path, capsys):
    path = _honest_and(tmp_path, "twice_resnet50_v100_pytorch")
    # Python's json keeps the later value: the entry would rank #1 as someone else, at a price of nothing
    text = path.read_text()
    assert text.endswith("\n}\n")
    path.write_text(text[:-3] + ',\n    "author": "impostor",\n    "costPerHour": 0.0001\n}\n')
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "impostor" in text)
    _problems_at_both_levels(capsys, tmp_path, path, "json", line, 'the key "author" is given twice in one object')


def test_a_key_given_twice_deeper_down_is_refused_too(tmp_path, capsys):
    path = _honest_and(tmp_path, "twice_resnet50_v100_pytorch", misc={"gpus": 8})
    text = path.read_text().replace('"gpus": 8', '"gpus": 8,\n        "gpus": 1')
    path.write_text(text)
    line = text.splitlines().index('        "gpus": 1') + 1
    _problems_at_both_levels(capsys, tmp_path, path, "json", line, 'the key "gpus" is given twice')


@pytest.mark.parametrize("name", ["forged.tsv\nImageNet/train/honest.json:1: all valid", "a\tb.tsv", "a\x1b[2Jb.tsv",
                                  "a\x85b.tsv"], ids=["newline", "tab", "escape", "c1"])
def test_a_control_character_in_log_filename_is_refused_with_its_line(tmp_path, capsys, name):
    path = _honest_and(tmp_path, "control_resnet50_v100_pytorch", logFilename=name)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if '"logFilename"' in text)
    _problems_at_both_levels(capsys, tmp_path, path, "logFilename", line, "holds a control character")


# --- an entry's figures and texts keep the options' bounds (issue 34, section 3) ------------------
# Entrants write entry JSON: a price or cost the options refuse must not come in through it. Each row
# one field's value, the field the problem names and its words; refused at both levels, never ranked.
PRICE = {"instance": "me:box", "usd_per_hour": 2.0, "source": "me", "date": "2025-01-01"}
BAD_ENTRIES = [
    ({"costPerHour": 1e30}, "costPerHour", "must be a number above 0 and at most 10,000,000 (USD per hour, all "
                                           "hardware: at most 1,000 a node) or null, not 1e+30"),
    ({"costPerHour": 0}, "costPerHour", "must be a number above 0 and at most 10,000,000"),
    ({"costPerHour": 3000, "nodes": 2}, "costPerHour", "3000 USD per hour for 2 nodes is over 1,000 USD per hour a "
                                                       "node"),
    ({"cost_usd": 1.08e299}, "cost_usd", "must be a number >= 0 and at most 24,000,000,000 (USD) or null, not 1.08e+299"),
    ({"tta_seconds": 1e300}, "tta_seconds", "must be a number >= 0 and at most 8,640,000 (seconds, 100 days)"),
    ({"price": {**PRICE, "usd_per_hour": 1e30}}, "price.usd_per_hour", "must be a number above 0 and at most 1,000 "
                                                                       "(USD per hour of one node)"),
    ({"author": "a\nb"}, "author", 'must be one line of text, not empty, at most 300 characters (no control '
                                   'character), not "a\\nb"'),
    ({"author": "x" * 100_000}, "author", f'(no control character), not "{"x" * 56}... (write e.g. "Jane Doe")'),
    ({"hardware": "8 x V100\u001b[2J"}, "hardware", "must be one line of text, not empty"),
    ({"model": "ResNet-50\u0085"}, "model", "must be one line of text, not empty"),
    ({"authorEmail": "me@x.org\n"}, "authorEmail", "must be one line of text (may be empty), at most 300"),
    ({"codeURL": "https://x.org/\t"}, "codeURL", "must be one line of text (may be empty), at most 300"),
]


@pytest.mark.parametrize("fields, field, words", BAD_ENTRIES, ids=[f"{f}={str(next(iter(v.values())))[:20]!r}"
                                                                   for v, f, _ in BAD_ENTRIES])
def test_an_entry_figure_or_text_out_of_bounds_is_refused(tmp_path, capsys, fields, field, words):
    path = _honest_and(tmp_path, "bounds_resnet50_v100_pytorch")
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}, indent=4) + "\n")
    key = f'"{field.split(".")[-1]}"'
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if key in text)
    _problems_at_both_levels(capsys, tmp_path, path, field, line, words)
    out = "\n".join(str(p) for p in validate_entries.check([tmp_path])[0])
    assert all(len(o) < 1000 for o in out.splitlines()), max(map(len, out.splitlines()))
