"""What every conformance test (tests/test_anchor_*.py) needs from the anchor tables."""
from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from conftest import REPO

from dawnbench import anchors


def anchor_rows(reference: str, kind: str) -> list[dict]:
    """The rows of the reference's anchor.toml that `kind` checks."""
    return anchors.load(REPO / "references" / reference).rows_checked_by(kind)


def defined_tests(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}


def every_row_is_checked(reference: str, kinds: set[str], test_file: str) -> None:
    """Every row is either stated (prose no code can show) or of a kind the conformance module checks;
    a row checked by a named test names a test function that exists (in any tests/ module)."""
    for row in anchors.load(REPO / "references" / reference).rows:
        assert row["check"] in kinds | {"stated"}, f"{reference}: {row['item']}: no check of kind {row['check']!r} here"
        if row["check"] == "test":
            path, name = row["test"].split("::")
            assert (REPO / path).is_file() and name in defined_tests(REPO / path), \
                f"{reference}: {row['item']}: {row['test']} is not a test"


def import_tensorflow_without_onednn() -> None:
    """TensorFlow imported with its oneDNN kernels off, where the calling module imports it first:
    they reorder sums. TensorFlow reads the variable once, so it is put back at once and the CLI runs
    of other modules in this process keep their default."""
    if "tensorflow" in sys.modules:
        return
    before = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    try:
        import tensorflow  # noqa: F401
    finally:
        if before is None:
            del os.environ["TF_ENABLE_ONEDNN_OPTS"]
        else:
            os.environ["TF_ENABLE_ONEDNN_OPTS"] = before
