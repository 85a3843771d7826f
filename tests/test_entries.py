"""The shared entry reader: naming, eval-set sizes, logs with line numbers; the safe reader under it, the
entry schemas' version, and the module graph of the tools (downward only)."""
from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from dawnbench import entries, schemas
from harness import safe_read
from harness.tasks import RULES_VERSION, TASKS

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text, part", [
    ("Jane Doe", "Jane-Doe"), ("a_b/c\\d", "a-b-c-d"), ("ResNet 164 (with bottleneck)", "ResNet-164-with-bottleneck"),
    ("../..", "unknown"), ("PyTorch 2.13.0", "PyTorch-2.13.0"), ("", "unknown"), ("Zoë", "Zo"),
    (".hidden", "hidden"), ("1 x NVIDIA H100 80GB HBM3", "1-x-NVIDIA-H100-80GB-HBM3")])
def test_name_part_keeps_letters_digits_dash_and_dot(text, part):
    assert entries.name_part(text) == part


def test_entry_stem_has_four_parts_split_by_underscores():
    stem = entries.entry_stem("Stanford DAWN", "ResNet_164", "1 K80 / 61 GB", "PyTorch v0.1.12")
    assert stem == "Stanford-DAWN_ResNet-164_1-K80-61-GB_PyTorch-v0.1.12"
    assert len(stem.split("_")) == 4


def test_eval_set_sizes_and_the_imagenet_blacklist():
    assert entries.BLACKLIST_EXAMPLES == {"imagenet": 1762}
    assert entries.eval_set_size(TASKS["imagenet"]) == 50000
    assert entries.eval_set_size(TASKS["imagenet"], used_blacklist=True) == 48238
    assert entries.eval_set_size(TASKS["cifar10"], used_blacklist=True) == 10000
    assert entries.eval_set_size(TASKS["squad"]) == 10570


def test_split_tsv_numbers_lines_and_skips_blank_ones():
    text = "epoch\thours\tf1Score\r\n1\t 0.5 \t0.61\r\n\r\n2\t1.0\t0.76\n"
    assert entries.split_tsv(text) == [(1, ["epoch", "hours", "f1Score"]), (2, ["1", "0.5", "0.61"]),
                                       (4, ["2", "1.0", "0.76"])]


def test_read_tsv_drops_a_bom(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_bytes("\ufeffepoch\thours\ttop1Accuracy\n1\t0.1\t94.5\n".encode("utf-8"))
    assert entries.read_tsv(path) == (["epoch", "hours", "top1Accuracy"], [["1", "0.1", "94.5"]])


def test_load_an_old_entry_without_log_filename(tmp_path):
    folder = tmp_path / "CIFAR10" / "train"
    folder.mkdir(parents=True)
    (folder / "dawn_x.json").write_text(json.dumps({"version": "v1.0", "author": "A", "costPerHour": 0.9}))
    (folder / "dawn_x.tsv").write_text("epoch\thours\ttop1Accuracy\n1\t0.5\t93.0\n2\t1.0\t94.1\n")
    entry = entries.load(folder / "dawn_x.json")
    assert (entry.task.name, entry.kind, entry.name) == ("cifar10", "train", "dawn_x")
    assert entry.first_at_threshold() == {"epoch": 2.0, "hours": 1.0, "top1Accuracy": 94.1}
    assert entries.find(tmp_path) == [folder / "dawn_x.json"]


# ---------------------------------------------------------------- the safe reader

def test_safe_read_reads_regular_files_in_the_tree_only(tmp_path):
    tree = tmp_path / "entries"
    (tree / "CIFAR10" / "train").mkdir(parents=True)
    good = tree / "CIFAR10" / "train" / "a.json"
    good.write_text('{"version": "v1.0"}')
    assert safe_read.read_json(good, tree) == {"version": "v1.0"}
    inner = tree / "CIFAR10" / "train" / "inner.json"
    inner.symlink_to(good)                       # a link inside the tree to a file inside it is followed
    assert safe_read.read_json(inner, tree) == {"version": "v1.0"}
    outside = tmp_path / "secret.json"
    outside.write_text("{}")
    refusals = {"out": (tree / "out.json", "is a link out of the entries tree"),
                "zero": (tree / "zero.json", "is a link out of the entries tree"),
                "fifo": (tree / "fifo.json", "is not a regular file"),
                "dir": (tree / "CIFAR10", "is a directory"),
                "missing": (tree / "missing.json", "cannot be read (No such file or directory)")}
    (tree / "out.json").symlink_to(outside)
    (tree / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(tree / "fifo.json")
    for name, (path, words) in refusals.items():
        with pytest.raises(safe_read.Refused) as refused:
            safe_read.read_bytes(path, tree, safe_read.MAX_JSON_BYTES)
        assert words in refused.value.reason, name


def test_safe_read_caps_size_and_depth(tmp_path):
    big = tmp_path / "big.tsv"
    big.write_bytes(b"x")
    os.truncate(big, safe_read.MAX_TSV_BYTES + 1)
    with pytest.raises(safe_read.Refused, match=f"is {safe_read.MAX_TSV_BYTES + 1} bytes, over the"):
        safe_read.read_text(big, tmp_path)
    assert safe_read.depth('{"a": [[{"b": "[[[[[[["}]]]}') == 4      # brackets in strings do not nest
    assert safe_read.parse_json("[" * safe_read.MAX_DEPTH + "]" * safe_read.MAX_DEPTH) is not None
    for text in ("[" * (safe_read.MAX_DEPTH + 1) + "]" * (safe_read.MAX_DEPTH + 1), "{" * 10**6):
        with pytest.raises(safe_read.Refused, match="nested too deeply"):
            safe_read.parse_json(text)
    with pytest.raises(safe_read.Refused) as refused:
        safe_read.parse_json('{\n "a": 1,\n "b": }')
    assert refused.value.line == 3 and "not valid JSON" in refused.value.reason



def test_a_number_no_float_holds_parses_as_infinite():
    """Issue 47: a 400-digit integer parsed as a Python int, and float() of it raised OverflowError in every
    reader (validate, verify, --price-record): such a number is infinite, which each reader's finiteness
    check refuses; one a float holds stays a whole number."""
    big = "9" * 400
    value = safe_read.parse_json(f'{{"a": {big}, "b": -{big}, "c": {"9" * 5000}, "d": {2**63}}}')
    assert value == {"a": math.inf, "b": -math.inf, "c": math.inf, "d": 2**63} and type(value["d"]) is int


# ---------------------------------------------------------------- the schemas are the rules' version

def test_the_entry_schemas_are_versioned_with_the_rules():
    for name in ("fields", *schemas.KINDS):
        path = schemas.schema_file(name)
        assert path.is_file(), f"rules {RULES_VERSION} need {path.name}: copy the last version's and review it"
        schema = json.loads(path.read_text())
        assert path.name == f"entry-{name}.{RULES_VERSION}.schema.json"
        assert f"/{RULES_VERSION}/" in schema["$id"] and RULES_VERSION in schema["title"]
        jsonschema.Draft202012Validator.check_schema(schema)
    for name, spec in schemas.FIELDS.items():          # validate's messages are made of these
        assert spec["description"] and spec["examples"], name
        assert schemas.conforms((name,), spec["examples"][0]) or spec["examples"][0] is None, name


def test_the_schemas_read_json_numbers_as_json_defines_them():
    assert schemas.conforms(("nodes",), 2) and not schemas.conforms(("nodes",), 2.0)
    assert not schemas.conforms(("latency",), float("nan")) and not schemas.conforms(("latency",), 10**400)
    assert not schemas.conforms(("timestamp",), "2018-02-30") and schemas.conforms(("timestamp",), "2018-02-28")
    paths = {tuple(e.path) for e in schemas.errors({"latency": 1.0, "logFilename": "x.tsv"}, "train")}
    assert {("latency",), ("logFilename",)} - paths == {("logFilename",)}


# ---------------------------------------------------------------- modules import downward only

PACKAGES = ("dawnbench", "harness", "common", "bench")


def _imports(path: Path, package: str) -> set[str]:
    """The project modules a module imports, anywhere in it (a lazy import in a function counts)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.add(package)
    return found


def test_no_import_cycle():
    modules = {f"{package}.{p.stem}" if p.stem != "__init__" else package: p
               for package in PACKAGES for p in (REPO / package).glob("*.py")}
    graph = {name: sorted({m for m in _imports(path, name.split(".")[0]) if m in modules} - {name})
             for name, path in modules.items()}
    state: dict[str, int] = {}       # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in graph[name]:
            if state.get(dep) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(dep):] + [name, dep]))
            if dep not in state:
                visit(dep, path + [name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert graph["dawnbench.site"] and "dawnbench.site" not in graph["dawnbench.analyze"]


@pytest.mark.parametrize("module", sorted(p.stem for p in (REPO / "dawnbench").glob("*.py") if p.stem != "__main__"))
def test_each_module_imports_alone(module):
    """In a fresh interpreter, so that an order that only works after another import shows."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", f"import dawnbench.{module}"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
