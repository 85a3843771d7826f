"""Deliberate copies among the references, kept equal.

A reference is a directory an entrant forks with `cp -r`, so each keeps its own train.py even where
a family of references runs one recipe at several depths (the depth is in its reference.toml). Below
the module docstring, which names the member, a family's train.py files are the same word for word:
a fix made to one copy alone fails here, and says which member drifted.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REFERENCES = Path(__file__).resolve().parent.parent / "references"

FAMILIES = {
    "CIFAR-10 ResNets, PyTorch": [f"cifar10-resnet{d}-pytorch" for d in ("20", "56", "110", "164", "164b")],
    "CIFAR-10 ResNets, TensorFlow": [f"cifar10-resnet{d}-tensorflow" for d in ("20", "56", "110", "164", "164b")],
    "ImageNet ResNets, TensorFlow": ["imagenet-resnet50-tensorflow", "imagenet-resnet152-tensorflow"],
}


# Definitions two references of different recipes share word for word (name: the definitions).
SHARED_DEFINITIONS = {
    ("imagenet-amoebanet-tpu", "imagenet-resnet50-tensorflow"): ("count_parameters", "predict", "eval_inputs", "train_step"),
}


def definitions(train_py: Path) -> dict[str, str]:
    """Every function and class of train.py by name, as its source text (nested ones too)."""
    text = train_py.read_text(encoding="utf-8")
    return {node.name: ast.get_source_segment(text, node) for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def code_below_docstring(train_py: Path) -> str:
    """train.py's text after its module docstring (the docstring names the member: depth, parameters)."""
    text = train_py.read_text(encoding="utf-8")
    first = ast.parse(text).body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), f"{train_py}: no module docstring"
    return "\n".join(text.splitlines()[first.end_lineno:])


def drifted(members: list[Path]) -> list[str]:
    """The members whose code differs from the first member's."""
    first = code_below_docstring(members[0])
    return [m.parent.name for m in members[1:] if code_below_docstring(m) != first]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_shares_its_train_py_below_the_docstring(family):
    members = [REFERENCES / name / "train.py" for name in FAMILIES[family]]
    assert all(m.is_file() for m in members), [str(m) for m in members if not m.is_file()]
    assert drifted(members) == [], f"{family}: these copies differ from {FAMILIES[family][0]}'s train.py"


@pytest.mark.parametrize("pair", SHARED_DEFINITIONS)
def test_definitions_two_recipes_share_stay_equal(pair):
    first, second = (definitions(REFERENCES / name / "train.py") for name in pair)
    for name in SHARED_DEFINITIONS[pair]:
        assert name in first and name in second, f"{name}: no longer in both {pair}"
        assert first[name] == second[name], f"{name} differs between {pair[0]} and {pair[1]}"


def test_an_edit_to_one_copy_alone_is_caught(tmp_path):
    members = []
    for name in FAMILIES["CIFAR-10 ResNets, PyTorch"][:3]:
        (tmp_path / name).mkdir()
        members.append(tmp_path / name / "train.py")
        members[-1].write_text((REFERENCES / name / "train.py").read_text(encoding="utf-8"), encoding="utf-8")
    assert drifted(members) == []
    members[2].write_text(members[2].read_text(encoding="utf-8").replace("import ", "import  ", 1), encoding="utf-8")
    assert drifted(members) == [FAMILIES["CIFAR-10 ResNets, PyTorch"][2]]
