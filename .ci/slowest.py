"""Where the suite's time went, from pytest's --junitxml file: the slowest test modules by summed time and the
slowest tests, each time being setup + call + teardown (junit's `time`, pytest's default junit_duration_report).
Worker time, not wall time: under xdist the workers' times add up to more than the suite's wall clock. A session
fixture's cost lands on the first test that asked for it.

    python .ci/slowest.py JUNIT_XML [--modules 25] [--tests 40]
"""
from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def test_times(junit_xml: str) -> list[tuple[str, float]]:
    """[(test id, seconds)] of every testcase in the file, as pytest names it (module path::name)."""
    cases = []
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        # xunit2's classname is the module's dotted path, then any class (pytest's classes are Test*)
        parts = case.get("classname", "").split(".")
        cut = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
        test_id = "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], case.get("name", "")])
        cases.append((test_id, float(case.get("time") or 0.0)))
    return cases


def report(cases: list[tuple[str, float]], modules: int, tests: int) -> list[str]:
    by_module: dict[str, list[float]] = defaultdict(list)
    for test_id, seconds in cases:
        by_module[test_id.split("::")[0]].append(seconds)
    total = sum(seconds for _, seconds in cases)
    lines = [f"ci: time: {len(cases)} tests, {total:,.0f} s of worker time (setup+call+teardown)",
             f"ci: time: the {modules} slowest modules (seconds, tests):"]
    ranked = sorted(by_module.items(), key=lambda item: -sum(item[1]))[:modules]
    lines += [f"ci: time: {sum(times):8.1f} {len(times):4d}  {module}" for module, times in ranked]
    lines.append(f"ci: time: the {tests} slowest tests (seconds):")
    lines += [f"ci: time: {seconds:8.1f}  {test_id}" for test_id, seconds in sorted(cases, key=lambda c: -c[1])[:tests]]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("junit_xml")
    p.add_argument("--modules", type=int, default=25)
    p.add_argument("--tests", type=int, default=40)
    a = p.parse_args(argv)
    try:
        cases = test_times(a.junit_xml)
    except (OSError, ET.ParseError) as exc:
        print(f"ci: time: cannot read {a.junit_xml}: {exc} (did pytest get --junitxml={a.junit_xml}?)", file=sys.stderr)
        return 1
    print("\n".join(report(cases, a.modules, a.tests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
