"""`dawnbench leaderboard ENTRIES_DIR --out SITE_DIR [--format html|json]`: the command.

Ranks the entries (`dawnbench.ranking`) and builds the static site (`dawnbench.site`) or prints the
rankings as JSON. Each training entry's run is verified again (`dawnbench.entry_status`, with the
eval labels of --data) and its status shown, with its reproduction (`dawnbench reproduce`'s
reproduction.json in the entry's run folder; "not tried" without one): a verified, reproduced entry
ranks by the judge's measurement, any other with a run apart as submitted, and an entry without a
run only when it is one of the archive's (--archive, default the published DAWNBench v1 entries).
Entries are validated at --level (default v1: every published DAWNBench v1 entry ranks, its quirks
reported as warnings on stderr, one line each, and shown on its page). An entry that `dawnbench
validate` rejects is never ranked: it is listed as invalid, with the reason, in the JSON and on the
site, and reported on stderr, one line each.
"""
from __future__ import annotations

import json
import sys

from dawnbench import archive, challenge_board, entries, entry_status, prices, ranking, site, validate_entries
from harness import safe_read
from harness.arguments import DATA_FOLDER, Parser, folder, regular_file, reports_errors, tool_main
from harness.errors import EXIT_OK, UsageError, command

PROG = command("leaderboard")
# The input is an entry tree, a folder: a file (even an entry JSON) has no tree to rank it in.
ENTRIES = folder("", f"give the entry tree <{'|'.join(entries.TASK_BY_DIR)}>/<train|inference>/*.json, e.g. "
                     f"{PROG} entries/ --out site/")
SITE = folder("--out", "give a new or empty folder, or a site this command built before, e.g. --out site/")


def build_parser(p: Parser | None = None) -> Parser:
    """The options, on `p` (dawnbench.cli's `leaderboard`, in the one tree) or on a parser of its own
    (`python -m dawnbench.leaderboard`)."""
    p = p if p is not None else Parser(prog=PROG)
    p.description = "Rank entries per task; build the static site (or print the rankings as JSON)."
    p.add_argument("entries", type=ENTRIES, help="an entry tree: <Task>/<train|inference>/<name>.json")
    p.add_argument("--out", type=SITE, default=None, help="the site's folder (for --format html)")
    p.add_argument("--format", choices=["html", "json"], default="html")
    p.add_argument("--level", choices=validate_entries.LEVELS, default="v1",
                   help=f"the rules entries are validated by (default v1): {validate_entries.LEVEL_HELP}")
    p.add_argument("--data", type=DATA_FOLDER, default=None,
                   help="the data root with the official eval labels, to verify each training entry's run "
                        "(default $DAWNBENCH_DATA or ./data)")
    p.add_argument("--archive", type=regular_file("--archive", "give a list of `sha256  <Task>/<kind>/<file>` "
                                                               "lines, as sha256sum writes them"),
                   default=None, metavar="FILE",
                   help="the entries without a run that rank, in archive tables, by their files' sha256 (default "
                        "dawnbench/data/v1-archive.sha256: the published DAWNBench v1 entries)")
    p.add_argument("--roofline", type=regular_file("--roofline", "give the roofline.json that `dawnbench analyze "
                                                                 "roofline RUN_FOLDER... --out DIR` wrote"),
                   default=None, help="utilization of the entries' runs, from `dawnbench analyze roofline` over their "
                                      "run folders (informative: shown, never ranked)")
    p.add_argument("--generalization", type=regular_file("--generalization", "give the generalization.json that "
                                                                             "`dawnbench analyze generalization "
                                                                             "RUN_FOLDER... --out DIR` wrote"),
                   default=None, help="the generalization gap of the entries' runs, from `dawnbench analyze "
                                      "generalization` over their run folders (informative: shown, never ranked)")
    return p


def _analysis_rows(path, analysis: str, lines) -> dict[str, str]:
    """The entry-page rows of an analysis' JSON (--roofline, --generalization), by run folder."""
    if path is None:
        return {}
    try:
        numbers = safe_read.read_json(path, path.parent)
    except safe_read.Refused as e:
        raise UsageError(f"--{analysis} {path}: not readable JSON: {e.reason}") from None
    if not isinstance(numbers, dict) or numbers.get("analysis") != analysis:
        raise UsageError(f"--{analysis} {path}: not a {analysis} analysis (give the {analysis}.json that "
                         f"`dawnbench analyze {analysis}` wrote)")
    return lines(numbers)


def _run(args) -> int:
    if not args.entries.exists():
        raise UsageError(f"{args.entries} does not exist; give an entry tree "
                         f"(entries/<Task>/<train|inference>/*.json)")
    if args.format == "html" and args.out is None:
        raise UsageError("--out SITE_DIR is needed to build the site (or --format json to print the rankings)")
    if not entries.find(args.entries):
        raise UsageError(f"no entries under {args.entries}: expected {args.entries}/<"
                         f"{'|'.join(entries.TASK_BY_DIR)}>/<train|inference>/*.json")
    # a bad file is said before any work
    archived = archive.load(args.archive)
    if (note := prices.override_note()) is not None:
        print(f"{PROG}: {note}", file=sys.stderr)
    utilization = _analysis_rows(args.roofline, "roofline", site.utilization_lines)
    generalization = _analysis_rows(args.generalization, "generalization", site.generalization_lines)
    loaded, invalid = ranking.load_all(args.entries,
                                       report=lambda line: print(f"{PROG}: invalid: {line}", file=sys.stderr),
                                       level=args.level,
                                       warn=lambda line: print(f"{PROG}: {line}", file=sys.stderr))
    tree = args.entries if args.entries.is_dir() else None
    statuses = entry_status.verification_statuses(loaded, args.data, tree)
    loaded, invalid = ranking.drop_failed(loaded, invalid, statuses,
                                          report=lambda line: print(f"{PROG}: invalid: {line}", file=sys.stderr))
    models = entry_status.model_provenances(loaded, statuses, tree)
    reproduced = entry_status.reproduction_statuses(loaded, tree)
    judged = entry_status.judged_times(loaded, tree)
    rankings = ranking.rank(loaded, invalid, statuses, reproduced, models, judged, archived)
    if args.format == "json":
        json.dump(rankings, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    won = challenge_board.lines(loaded, statuses, tree, args.data)       # verified challenges, beside their winner
    index = site.build(loaded, rankings, args.out, statuses, reproduced, models, utilization, generalization, judged,
                       challenges=won)
    ranked = sum(len(rows) for tables in rankings["tasks"].values() for rows in tables.values())
    warnings = len(rankings["warnings"])
    print(f"site: {index} ({len(loaded)} entries, {ranked} table rows, {len(invalid)} invalid, "
          f"{warnings} warning{'s' * (warnings != 1)})")
    return EXIT_OK


# The command on parsed options (dawnbench.cli runs it from the one tree).
run = reports_errors(PROG)(_run)
main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())
