"""The anchor tables themselves (dawnbench/anchors.py, docs/ANCHORS.md): each is valid, says why it
deviates, is what its README shows, and has a conformance module that checks it row by row."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import PYTHON, REPO

from dawnbench import anchors
from harness import registry

TRAINING = [d.name for d in anchors.training_references()]
INFERENCE = [d.name for d in anchors.inference_references()]      # a table of export and runtime settings
WITH_TABLE = [name for name in TRAINING + INFERENCE if (REPO / "references" / name / "anchor.toml").is_file()]


def test_the_training_references_are_those_that_train():
    """The tables' split (train.py, or infer.py only) is the references' own: inference-only ones are
    what reference.toml's [inference] only says, every other reference trains, and every reference
    directory is one or the other (a directory dropped from both is caught here)."""
    specs = [registry.load_spec(name) for name in registry.available()]
    assert TRAINING == [s.name for s in specs if not s.infers_only] and len(TRAINING) > 1
    assert INFERENCE == [s.name for s in specs if s.infers_only] and INFERENCE
    assert set(INFERENCE) <= set(WITH_TABLE)
    directories = {d.name for d in (REPO / "references").iterdir() if (d / "reference.toml").is_file()}
    assert set(TRAINING) | set(INFERENCE) == directories and not set(TRAINING) & set(INFERENCE)


def test_every_reference_has_its_table():
    assert set(TRAINING + INFERENCE) - set(WITH_TABLE) == set()


@pytest.mark.parametrize("name", WITH_TABLE)
def test_each_table_is_valid_and_is_its_readme_s(name):
    anchors.check(REPO / "references" / name)


@pytest.mark.parametrize("name", WITH_TABLE)
def test_each_table_has_a_conformance_module(name):
    modules = [p for p in (REPO / "tests").glob("test_anchor_*.py") if p.name != "test_anchor_tables.py"
               and "every_row_is_checked" in p.read_text() and f'"{name}"' in p.read_text()]
    assert modules, f"{name}: no tests/test_anchor_*.py checks its rows (every_row_is_checked)"


def copy_reference(tmp_path, name="fashion-mnist-cnn-pytorch"):
    return shutil.copytree(REPO / "references" / name, tmp_path / name)


def test_a_deviation_without_its_reason_is_refused_in_one_line(tmp_path):
    ref = copy_reference(tmp_path)
    text = (ref / "anchor.toml").read_text()
    (ref / "anchor.toml").write_text(text.replace('ours = 0.1\nanchor = 0.1', 'ours = 0.2\nanchor = 0.1'))
    with pytest.raises(anchors.AnchorError, match=r"row \d+ \(label smoothing\): ours 0.2 differs from the "
                                                  r"anchor's 0.1: give the reason in `deviation`"):
        anchors.load(ref)


def test_a_row_without_a_source_or_an_unknown_check_is_refused(tmp_path):
    ref = copy_reference(tmp_path)
    text = (ref / "anchor.toml").read_text()
    (ref / "anchor.toml").write_text(text.replace('check = "config"', 'check = "vibes"', 1))
    with pytest.raises(anchors.AnchorError, match="check: 'vibes' is not one of"):
        anchors.load(ref)
    (ref / "anchor.toml").write_text(text.replace('source = "Szegedy', 'sauce = "Szegedy'))
    with pytest.raises(anchors.AnchorError, match="anchor.toml: row/"):
        anchors.load(ref)


def test_render_puts_the_table_in_and_check_finds_a_stale_one(tmp_path):
    ref = copy_reference(tmp_path)
    readme = ref / "README.md"
    text = readme.read_text()
    table = anchors.readme_table(readme)
    readme.write_text(text.replace(table, ""))                  # no table at all
    with pytest.raises(anchors.AnchorError, match="no anchor table: run python -m dawnbench.anchors render"):
        anchors.check(ref)
    assert anchors.write_readme(ref, anchors.load(ref)) is True
    anchors.check(ref)
    assert anchors.write_readme(ref, anchors.load(ref)) is False        # rendering twice changes nothing
    (ref / "anchor.toml").write_text((ref / "anchor.toml").read_text().replace("ours = 54778", "ours = 54779"))
    with pytest.raises(anchors.AnchorError, match="the anchor table is not anchor.toml's"):
        anchors.check(ref)


def test_the_command_checks_the_repository_and_names_an_unknown_reference_in_one_line():
    proc = subprocess.run([PYTHON, "-m", "dawnbench.anchors", "check", *WITH_TABLE], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{name}: ok" for name in WITH_TABLE]
    proc = subprocess.run([PYTHON, "-m", "dawnbench.anchors", "check", "no-such-reference"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "no-such-reference: no training reference of that name" in proc.stderr
