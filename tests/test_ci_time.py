""".ci/slowest.py: where CI's time went, from the suite's junit file (setup+call+teardown per test)."""
from __future__ import annotations

import importlib.util

from conftest import REPO

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_a" name="test_quick" time="1.5" />
<testcase classname="tests.test_a" name="test_slow[x]" time="60.0" />
<testcase classname="tests.test_b.TestGroup" name="test_one" time="40.0" />
<testcase classname="tests.harness_only.test_c" name="test_two" time="30.0" />
</testsuite></testsuites>"""


def slowest():
    spec = importlib.util.spec_from_file_location("ci_slowest", REPO / ".ci" / "slowest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_modules_are_ranked_by_summed_time_and_tests_by_their_own(tmp_path, capsys):
    (tmp_path / "junit.xml").write_text(JUNIT)
    assert slowest().main([str(tmp_path / "junit.xml"), "--modules", "2", "--tests", "3"]) == 0
    lines = [line.removeprefix("ci: time: ").split() for line in capsys.readouterr().out.splitlines()]
    assert lines[0][:2] == ["4", "tests,"] and lines[0][2] == "132"
    # the modules: test_a's two tests (61.5 s) before test_b's one (40 s); the third module is cut off
    assert lines[2] == ["61.5", "2", "tests/test_a.py"] and lines[3] == ["40.0", "1", "tests/test_b.py"]
    assert lines[5:] == [["60.0", "tests/test_a.py::test_slow[x]"], ["40.0", "tests/test_b.py::TestGroup::test_one"],
                         ["30.0", "tests/harness_only/test_c.py::test_two"]]


def test_a_missing_or_broken_file_is_one_line(tmp_path, capsys):
    (tmp_path / "cut.xml").write_text(JUNIT[:200])
    for name in ("none.xml", "cut.xml"):
        assert slowest().main([str(tmp_path / name)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"ci: time: cannot read {tmp_path / name}: ") and err.count("\n") == 1
