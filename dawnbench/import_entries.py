"""`dawnbench entries import-v1 [SOURCE] [--out entries/]`: the published DAWNBench v1 entries onto a board.

SOURCE is a DAWNBench v1 entry tree, `<Task>/<train|inference>/<name>.json` with each training entry's TSV
beside it: by default the copy bundled with the checkout (tests/data/dawn-bench-entries, the 187 files of
stanford-futuredata/dawn-bench-entries), or a clone of that repository. Its files are merged into the
entries tree --out (default `entries`), so that `dawnbench leaderboard entries/` ranks them beside the
project's own entries (at its default level, v1, where their quirks are warnings: docs/ENTRIES.md).

Merging two trees never replaces a file: a file already at the destination with the same bytes is left as
it is (importing twice changes nothing), and one with other content is a collision. Any collision refuses
the whole import, in one line naming it, and nothing is written; otherwise the files are staged beside the
tree and moved into place, so an interrupted import leaves no half-copied file.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from dawnbench import entries
from harness import paths, safe_write
from harness.arguments import Parser, folder, tool_main
from harness.errors import EXIT_OK, DawnbenchError, UsageError, command, report

PROG = command("entries")
BUNDLED = Path("tests") / "data" / "dawn-bench-entries"
KINDS = ("train", "inference")
SUFFIXES = (".json", ".tsv")


def bundled() -> Path:
    """The checkout's copy of the published entries; a one-line refusal where there is none (an install)."""
    root = paths.checkout_root()
    if root is None or not (root / BUNDLED).is_dir():
        raise UsageError(f"no bundled DAWNbench v1 entries here ({BUNDLED} of a source checkout): give the folder of "
                         f"a clone of stanford-futuredata/dawn-bench-entries, {PROG} import-v1 DIR")
    return root / BUNDLED


def files(source: Path) -> list[Path]:
    """The tree's entry files, relative to it: <Task>/<train|inference>/<name>.json|.tsv (nothing else of a
    clone: its README, tests and scripts stay out of a board)."""
    found = []
    for task in sorted(entries.TASK_BY_DIR):
        for kind in KINDS:
            here = source / task / kind
            if here.is_dir():
                found += [p.relative_to(source) for p in sorted(here.iterdir())
                          if p.suffix in SUFFIXES and p.is_file() and not p.is_symlink()]
    return found


def plan(source: Path, out: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """(the files to copy, those already there with the same bytes, the collisions) of merging source into out."""
    new, same, collisions = [], [], []
    for name in files(source):
        target = out / name
        if not (target.exists() or target.is_symlink()):
            new.append(name)
        elif target.is_file() and not target.is_symlink() and target.read_bytes() == (source / name).read_bytes():
            same.append(name)
        else:
            collisions.append(name)
    return new, same, collisions


def import_v1(source: Path | None, out: Path) -> str:
    """Merge the v1 entries into out; the summary line."""
    source = Path(source) if source is not None else bundled()
    listed = files(source)
    if not listed:
        raise UsageError(f"{source}: no DAWNBench v1 entries there: expected <{'|'.join(entries.TASK_BY_DIR)}>/"
                         f"<train|inference>/*.json (a clone of stanford-futuredata/dawn-bench-entries)")
    if out.resolve() == source.resolve() or source.resolve() in out.resolve().parents:
        raise UsageError(f"--out {out} is inside the entries imported ({source}): give another entries tree")
    new, same, collisions = plan(source, out)
    if collisions:
        more = f" and {len(collisions) - 1} more" if len(collisions) > 1 else ""
        raise UsageError(f"{out / collisions[0]} exists with other content than {source / collisions[0]}{more}: "
                         f"an import never replaces a file; move those files away or import into another --out "
                         f"(nothing was written)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".import-v1-", dir=out))
    except OSError as e:
        raise UsageError(safe_write.write_problem(out, e, "--out")) from None
    try:
        for name in new:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, staging / name)
        for name in new:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            if (out / name).exists():       # made meanwhile by another process: never replaced
                raise UsageError(f"{out / name} appeared during the import: nothing more was written; run it again")
            os.replace(staging / name, out / name)
    except OSError as e:
        raise UsageError(f"{safe_write.write_problem(out, e, '--out')} (run it again: the files in place are whole, "
                         f"the rest are added)") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return (f"imported {len(new)} files of DAWNBench v1 entries from {source} into {out}"
            + (f" ({len(same)} already there, the same)" if same else "")
            + f"; rank them: {command('leaderboard')} {out} --out site/")


def build_parser(p: Parser | None = None) -> Parser:
    """The options, on `p` (dawnbench.cli's `entries`) or on a parser of its own (`python -m dawnbench.import_entries`)."""
    p = p if p is not None else Parser(prog=PROG)
    p.description = "Entry trees: import-v1 merges the published DAWNBench v1 entries into a board's tree."
    sub = p.add_subparsers(dest="action", required=True, metavar="import-v1")
    v1 = sub.add_parser("import-v1", help="merge the published DAWNBench v1 entries into an entries tree; a "
                                          "same-named file of other content stops it, nothing written")
    v1.add_argument("source", nargs="?", default=None, metavar="SOURCE",
                    type=folder("", "give a DAWNBench v1 entry tree (a clone of stanford-futuredata/dawn-bench-entries)"),
                    help="a DAWNBench v1 entry tree (default: the copy bundled with the checkout, "
                         f"{BUNDLED})")
    v1.add_argument("--out", type=folder("--out", "give the entries tree to import into, e.g. --out entries/"),
                    default=Path("entries"), help="the entries tree (default: entries)")
    return p


def run(args) -> int:
    try:
        print(import_v1(args.source, args.out))
    except DawnbenchError as e:
        return report(PROG, e)
    return EXIT_OK


main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())
