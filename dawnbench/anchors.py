"""Each reference against its anchor: the table in `anchor.toml`, and the README's copy of it.

Every training reference names an anchor: the paper, repository or entry whose recipe it claims; the
entry that only infers compares its export and runtime settings with the inference entry it succeeds.
`references/<name>/anchor.toml` holds the comparison as data, one row per hyperparameter, count,
schedule, augmentation, precision or layout: our value, the anchor's with the file and line it comes
from, and the reason for every deviation. The README's table between the two markers below is
generated from it, and the conformance tests (tests/test_anchor_*.py) check `ours` against the code:
a row's `check` names how (docs/ANCHORS.md lists the kinds).

    python -m dawnbench.anchors render [REF ...]    write each README's table from its anchor.toml
    python -m dawnbench.anchors check [REF ...]     exit 1 if a table is missing, invalid or stale
"""
from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from harness import registry
from harness.arguments import Parser, reports_errors
from harness.errors import DawnbenchError, UsageError, command

REFERENCES = Path(__file__).resolve().parent.parent / "references"
SCHEMA = json.loads((Path(__file__).parent / "data" / "schemas" / "anchor.schema.json").read_text(encoding="utf-8"))
BEGIN = "<!-- anchor table: generated from anchor.toml by `python -m dawnbench.anchors render`; edit that file -->"
END = "<!-- end of anchor table -->"


class AnchorError(Exception):
    """An anchor.toml that is missing or wrong, or a README whose table is not its rendering."""


@dataclass(frozen=True)
class Anchor:
    reference: str
    anchor: dict          # title, url, ...
    rows: list[dict]
    reach: registry.Reach | None = None     # reference.toml's [reach]: the table's last row, rendered from it

    def rows_checked_by(self, kind: str) -> list[dict]:
        return [row for row in self.rows if row["check"] == kind]


def _same(ours, theirs) -> bool:
    if isinstance(ours, float) or isinstance(theirs, float):
        try:
            return abs(float(ours) - float(theirs)) <= 1e-12 * max(1.0, abs(float(theirs)))
        except (TypeError, ValueError):
            return False
    return ours == theirs


def load(directory: Path) -> Anchor:
    """The reference's anchor.toml, validated: every row whose value differs from the anchor's says why."""
    path = directory / "anchor.toml"
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise AnchorError(f"{path}: missing: every training reference names its anchor and compares its "
                          f"recipe with it (docs/ANCHORS.md)") from None
    except tomllib.TOMLDecodeError as exc:
        raise AnchorError(f"{path}: not TOML: {exc}") from None
    problems = sorted(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data), key=lambda e: list(e.absolute_path))
    if problems:
        where = "/".join(str(p) for p in problems[0].absolute_path) or "top level"
        raise AnchorError(f"{path}: {where}: {problems[0].message}")
    for i, row in enumerate(data["row"], 1):
        if "anchor" in row and not _same(row["ours"], row["anchor"]) and not row.get("deviation"):
            raise AnchorError(f"{path}: row {i} ({row['item']}): ours {row['ours']!r} differs from the anchor's "
                              f"{row['anchor']!r}: give the reason in `deviation`")
    try:
        reach = registry.load_spec(directory.name, directory.parent).reach
    except DawnbenchError as exc:
        raise AnchorError(f"{directory / 'reference.toml'}: {exc}") from None
    return Anchor(directory.name, data["anchor"], data["row"], reach)


def reach_row(name: str, reach: registry.Reach) -> str:
    """The table's row of what the anchor reached on the task and the margin to its threshold, from
    reference.toml's [reach] (one source: the README cannot say another figure than the data)."""
    task = reach.task
    if reach.reaches_threshold:
        ours = f"the task's threshold, {reach.shown(task.threshold)}"
        deviation = f"margin {reach.margin()}: the anchor reaches the threshold"
    else:
        ours = (f"refused at the task's {reach.shown(task.threshold)} before any work (reaches_threshold = false); "
                f"--threshold {reach.reachable:g} runs it to {reach.shown(reach.reachable)}, unofficial "
                f"({reach.reachable_source})")
        deviation = f"margin {reach.margin()}: beyond this network, so {name} is never an entry of the task's table"
    return (f"| accuracy on this task | {_cell(ours)} | {_cell(reach.shown(reach.anchor))} | {_cell(reach.source)} | "
            f"{_cell(deviation)} | reach |")


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(anchor: Anchor) -> str:
    """The markdown table, between its markers."""
    head = anchor.anchor
    lines = [BEGIN, "", f"**Anchor:** {head['title']}" + (f" ({head['url']})" if head.get("url") else "") + ".",
             *([f"{head['note']}"] if head.get("note") else []), "",
             "| | ours | anchor | where (anchor) | deviation, and why | checked by |",
             "|---|---|---|---|---|---|"]
    for row in anchor.rows:
        deviation = row.get("deviation") or ("-" if "anchor" not in row or _same(row["ours"], row["anchor"])
                                             else "")
        lines.append(f"| {_cell(row['item'])} | {_cell(row['ours'])} | {_cell(row.get('anchor'))} | "
                     f"{_cell(row.get('source'))} | {_cell(deviation)} | {row['check']} |")
    if anchor.reach is not None:
        lines.append(reach_row(anchor.reference, anchor.reach))
    return "\n".join([*lines, "", END])


def readme_table(readme: Path) -> str | None:
    text = readme.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        return None
    return text[text.index(BEGIN):text.index(END) + len(END)]


def write_readme(directory: Path, anchor: Anchor) -> bool:
    """Put the rendered table into the README: in place of the old one, else before its first `## `
    section after the title. Returns whether the file changed."""
    readme = directory / "README.md"
    text = readme.read_text(encoding="utf-8")
    table = render(anchor)
    old = readme_table(readme)
    if old is not None:
        new = text.replace(old, table)
    else:
        heading = "## Recipe against its anchor\n\n"
        at = text.find("\n## ")
        new = text + "\n" + heading + table + "\n" if at < 0 else text[:at + 1] + heading + table + "\n\n" + text[at + 1:]
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return new != text


def training_references(root: Path = REFERENCES) -> list[Path]:
    """Every reference that trains: each has a train.py (the CPU inference entry has infer.py only)."""
    return sorted(d for d in root.iterdir() if (d / "train.py").is_file() and (d / "reference.toml").is_file())


def inference_references(root: Path = REFERENCES) -> list[Path]:
    """The references that only infer (infer.py, no train.py): their table holds the export and runtime
    settings against the inference entry they succeed, in the same file format."""
    return sorted(d for d in root.iterdir() if (d / "infer.py").is_file() and not (d / "train.py").is_file()
                  and (d / "reference.toml").is_file())


def check(directory: Path) -> None:
    """Raises AnchorError unless the anchor.toml is valid and the README holds exactly its rendering."""
    anchor = load(directory)
    found = readme_table(directory / "README.md")
    if found is None:
        raise AnchorError(f"{directory / 'README.md'}: no anchor table: run python -m dawnbench.anchors render "
                          f"{directory.name}")
    if found != render(anchor):
        raise AnchorError(f"{directory / 'README.md'}: the anchor table is not anchor.toml's: run "
                          f"python -m dawnbench.anchors render {directory.name}")


@reports_errors("dawnbench")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m dawnbench.anchors", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["render", "check"])
    parser.add_argument("references", nargs="*",
                        help="reference names (default: every training reference and every inference-only one)")
    args = parser.parse_args(argv)
    known = {d.name: d for d in [*training_references(), *inference_references()]}
    unknown = [name for name in args.references if name not in known]
    if unknown:
        raise UsageError(f"{unknown[0]}: no training reference of that name under {REFERENCES}: "
                         f"see `{command('list')}`")
    failed = 0
    for name in args.references or sorted(known):
        try:
            if args.action == "render":
                changed = write_readme(known[name], load(known[name]))
                print(f"{name}: README.md {'written' if changed else 'unchanged'}")
            else:
                check(known[name])
                print(f"{name}: ok")
        except AnchorError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
