"""Bad inputs get one clear line that says what is wrong and what to do; nothing is written."""
import pytest
from conftest import REPO

from dawnbench.cli import main

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too


@pytest.fixture(autouse=True)
def _refs(references_root, fashion_root):
    pass


def error_of(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    return err[0]


def test_unknown_reference_lists_the_valid_ones(capsys):
    line = error_of(capsys, ["run", "nope"])
    assert "unknown reference 'nope'" in line
    assert "fashion-mnist-cnn-pytorch" in line and "scripted-test" in line


def test_unknown_hyperparameter_lists_the_valid_ones(capsys, tmp_path):
    line = error_of(capsys, ["run", "scripted-test", "--set", "lrr=0.2", "--results", str(tmp_path / "r")])
    assert "no hyperparameter 'lrr'" in line and "train_sleep=" in line
    assert not (tmp_path / "r").exists()


def test_wrong_type_names_the_expected_type(capsys, tmp_path):
    line = error_of(capsys, ["run", "scripted-test", "--set", "nan_at=two", "--results", str(tmp_path)])
    assert "'nan_at' takes a whole number" in line


def test_malformed_assignment(capsys):
    assert "expected key=value" in error_of(capsys, ["run", "scripted-test", "--set", "nan_at"])


def test_bad_threshold(capsys):
    assert "fraction" in error_of(capsys, ["run", "scripted-test", "--threshold", "92"])


def test_missing_dataset_gives_the_fetch_command_and_writes_nothing(capsys, tmp_path):
    line = error_of(capsys, ["run", "scripted-test", "--data", str(tmp_path / "empty"),
                             "--results", str(tmp_path / "results")])
    assert "dawnbench data fetch fashion-mnist" in line
    assert not (tmp_path / "results").exists()


def test_malformed_reference_toml_names_file_and_field(capsys, references_root):
    bad = references_root / "broken-ref"
    bad.mkdir()
    (bad / "reference.toml").write_text('task = "fashion-mnist"\nframework = "x"\nmodel = "m"\n')
    line = error_of(capsys, ["run", "broken-ref"])
    assert str(bad / "reference.toml") in line and "'entry'" in line


def test_unknown_task_in_reference_toml(capsys, references_root):
    bad = references_root / "bad-task"
    bad.mkdir()
    (bad / "reference.toml").write_text('task = "mnist"\nframework = "x"\nmodel = "m"\nentry = "a:B"\n')
    line = error_of(capsys, ["run", "bad-task"])
    assert "field 'task'" in line and "fashion-mnist" in line


def test_list_shows_every_reference(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fashion-mnist-cnn-pytorch" in out and "scripted-test" in out


def test_missing_model_for_infer(capsys, tmp_path):
    line = error_of(capsys, ["infer", "scripted-test", "--model", str(tmp_path / "nothing")])
    assert "not found" in line


def test_infer_scripted_reports_latency_and_accuracy(capsys, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.txt").write_text("1")
    code = main(["infer", "scripted-test", "--model", str(model), "--no-progress", "--out", str(tmp_path / "inf"),
                 "--cost-per-hour", "3.6", "--warmup", "10"])
    out = capsys.readouterr().out
    assert code == 0
    import json
    result = json.loads((tmp_path / "inf" / "inference.json").read_text())
    assert result["items"] == 10000 and result["complete_eval_set"] is True
    assert result["top1"] == 1.0 and result["reached_threshold"] is True
    lat = result["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert result["latency"] == lat["mean"]
    assert result["cost_per_10k_items_usd"] == pytest.approx(3.6 * lat["mean"] / 3.6e6 * 1e4)
    assert "p99" in out and "cost per 10,000 items" in out


def test_one_parser_tree_holds_every_subcommand_without_the_tools_libraries():
    """Every subcommand, the entry tools' too, is a real subparser of one tree with its own options
    (not a pass-through of the words after it), and the tree is built where jsonschema, jinja2 and
    matplotlib are absent (a reference's environment): `<tool> --help` needs no tools environment."""
    import subprocess
    import sys

    from dawnbench import cli

    code = ("import sys\n"
            "for name in ('jsonschema', 'referencing', 'jinja2', 'matplotlib'):\n"
            "    sys.modules[name] = None      # importing them now fails, as where they are not installed\n"
            "from dawnbench import cli\n"
            "for name in cli.TOOLS:\n"
            "    try:\n"
            "        cli.main([name, '--help'])\n"
            "    except SystemExit as e:\n"
            "        assert e.code == 0, (name, e.code)\n"
            "    print('@@')\n")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           cwd=REPO)
    assert shown.returncode == 0, shown.stderr
    helps = shown.stdout.split("@@\n")[:-1]
    assert len(helps) == len(cli.TOOLS)
    for name, text in zip(cli.TOOLS, helps):
        assert text.startswith(f"usage: dawnbench {name}"), text
        assert "--" in text.split("\n\n", 1)[1], text      # its own options are listed
    subcommands = next(a for a in cli.build_parser()._actions if a.dest == "command").choices
    assert set(cli.TOOLS) <= set(subcommands)
    for name in cli.TOOLS:
        assert all(a.nargs != "..." for a in subcommands[name]._actions), name


@pytest.mark.parametrize("argv", [["--no-such-option"], []])
def test_each_entry_tool_on_its_own_says_a_bad_call_as_in_the_one_tree(argv, capsys):
    """`python -m dawnbench.<tool>` (the tool's own main, harness.arguments.tool_main) and `dawnbench
    <tool>` say a bad option or a missing argument in the same one line, the tool's name first,
    exit 2, no traceback."""
    import importlib

    from dawnbench import cli

    for name in cli.TOOLS:
        tool = importlib.import_module(f"dawnbench.{cli.TOOL_MODULES.get(name, name)}")
        own = tool.main(argv)
        alone = capsys.readouterr()
        assert own == 2 and alone.out == "", (name, alone)
        assert alone.err.count("\n") == 1 and alone.err.startswith(f"dawnbench {name}: error: "), (name, alone.err)
        assert main([name, *argv]) == 2
        assert capsys.readouterr().err == alone.err, name
