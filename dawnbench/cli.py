"""The `dawnbench` command, on the host: run, infer, list, eval and data verify are the harness's
(harness.cli: its options and its code), with the host's options on top: --instance (priced here,
dawnbench.prices), --runs (a series, dawnbench.series), data fetch (dawnbench.fetch) and data prepare
(dawnbench.prepare_imagenet); verify is the harness's, and of a series folder (summary.json) every run's
and the summary recomputed from them (dawnbench.series_record). And the entry tools, each a module of
this package (also `python -m dawnbench.<tool>`): submit, validate, leaderboard, analyze, compliance,
reproduce, entries. One parser tree holds them all: each tool adds its options to its subcommand here
(`build_parser(p)`) and runs on the parsed options (`run(args)`)."""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from dawnbench import challenge_record, fetch, fetch_imagenetv2, prepare_imagenet, prices, series, series_record
from harness import cli as harness_cli
from harness import datasets
from harness.arguments import MAX_RUNS, SEED_MAX, Parser, folder, parse_forwarding, regular_file, whole
from harness.errors import DawnbenchError, UsageError, command, report

PROG = command()        # as the user called it (dawnbench.launcher)
# Subcommands that are modules of their own: their options and their code.
TOOLS = {"submit": "write a run as entry files (JSON + TSV)",
         "validate": "check entry files or trees; exit 0 only when all is valid",
         "leaderboard": "rank entries and build the static site",
         "analyze": "the analyses of the DAWNBench papers, as PNG + numbers",
         "compliance": "check a run's events.jsonl with MLPerf's official compliance checker",
         "reproduce": "run an entry again from its provenance and compare its figures with the claim",
         "fork": "copy a reference to a new one with its own author and model, then edit, commit, run",
         "entries": "entry trees: import-v1 puts the published DAWNBench v1 entries into one",
         "compare": "one reference under two framework pins, interleaved runs: intervals, speedup, verdict",
         "challenge": "two entries timed against each other on this machine, interleaved pairs: ratio, p, verdicts"}
# A tool's module where its name would not say its job ("validate" alone could be any of the four checks, docs/LAYOUT.md).
TOOL_MODULES = {"validate": "validate_entries", "entries": "import_entries"}


def add_run_options(p: argparse.ArgumentParser) -> None:
    """`dawnbench run`: the harness's run options, plus --instance and --runs (host only)."""
    harness_cli.add_run_options(p)
    prices.add_instance_option(p)
    p.add_argument("--runs", type=whole("--runs", 1, MAX_RUNS, 5), default=None, metavar="N",
                   help="a series: N runs with seeds SEED..SEED+N-1, each in a process of its own, into "
                        "results/REF/<series id>/ with summary.json")


def add_infer_options(p: argparse.ArgumentParser) -> None:
    """`dawnbench infer`: the harness's infer options, plus --instance."""
    harness_cli.add_infer_options(p)
    prices.add_instance_option(p)


FETCH_VECTORS_USAGE = f"{PROG} data fetch glove [--vectors glove.6B.100d|glove.840B.300d] [--data ROOT]"
FETCH_PACK_USAGE = f"{PROG} data fetch imagenetv2 [--format recordio|tfrecord] [--python PATH] [--data ROOT]"
FETCH_SHARDS_USAGE = f"{PROG} data fetch fineweb10B [--shards N] [--allow-unverified] [--data ROOT]"
PREPARE_USAGE = (f"{PROG} data prepare imagenet --from DIR [--data ROOT] [--format folders|recordio|tfrecord] "
                 "[--python PATH] [--blacklist FILE] [--allow-unverified]")


def add_data_options(p: argparse.ArgumentParser) -> None:
    """`dawnbench data`: the harness's verify, plus fetch and prepare (host only)."""
    harness_cli.add_data_options(p, ("fetch", "verify", "prepare"))
    p.add_argument("--vectors", default=None, metavar="NAME",
                   help="fetch glove: which vectors (default glove.6B.100d; or glove.840B.300d)")
    p.add_argument("--from", dest="from_dir", type=folder("--from", "give the folder holding the official ImageNet "
                                                                              "files (train and val tars, devkit)"),
                   default=None, metavar="DIR",
                   help="prepare: the folder holding the official ImageNet files (train and val tars, devkit)")
    p.add_argument("--blacklist", type=regular_file("--blacklist", "give the file "
                                                                    "ILSVRC2014_clsloc_validation_blacklist.txt"),
                   default=None, metavar="FILE",
                   help="prepare: ILSVRC2014_clsloc_validation_blacklist.txt, the 1,762 val images entries may drop")
    # No `choices`: argparse's error is a usage block; cmd_data says it in one line, with the fix.
    p.add_argument("--format", default=None, metavar="|".join(prepare_imagenet.FORMATS),
                   help="prepare: the folders only (the default), or the folders packed for a framework's reader "
                        "too: recordio (MXNet), tfrecord (TensorFlow); fetch imagenetv2: its val/ packed so")
    p.add_argument("--python", default=None, metavar="PATH",
                   help="prepare --format recordio|tfrecord: the Python that packs, one with the framework "
                        "(default: this one if it has it, else .venv/<reference>/bin/python from make setup)")
    p.add_argument("--allow-unverified", action="store_true",
                   help="prepare: accept files that are not the official ones (fixtures, subsets); fetch fineweb10B: "
                        "accept shards datasets.toml does not pin, recording their sha256; the dataset and every "
                        "run on it are then unofficial")
    p.add_argument("--shards", type=whole("--shards", 1, None, 8), default=None, metavar="N",
                   help="fetch fineweb10B: the val shard and the first N train shards (default: all 103)")


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description="Time-to-accuracy benchmark harness")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_options(sub.add_parser("run", help="train a reference to its task's threshold under the harness"))
    add_infer_options(sub.add_parser("infer", help="batch-1 inference latency over every eval example"))
    harness_cli.add_references_option(sub.add_parser("list", help="list the references"))
    harness_cli.add_eval_options(sub.add_parser("eval", help="score a predictions file like the official scripts"))
    for name, text in TOOLS.items():
        tool = importlib.import_module(f"dawnbench.{TOOL_MODULES.get(name, name)}")
        tool.build_parser(sub.add_parser(name, help=text)).set_defaults(tool=tool)
    add_data_options(sub.add_parser("data", help="fetch, prepare (ImageNet) or verify a dataset"))
    harness_cli.add_verify_options(sub.add_parser("verify", help="re-check a run offline: its log, stored "
                                                                 "predictions, result.json and TSV agree; of a "
                                                                 "series folder, every run and its summary.json; "
                                                                 "of a challenge folder, every run and its figures"))
    parser.set_defaults(prog=PROG)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    prices.apply_instance(args)
    if args.runs is None:
        return harness_cli.cmd_run(args)
    if args.seed + args.runs - 1 > SEED_MAX:
        raise UsageError(f"--seed {args.seed} --runs {args.runs}: the series' last seed, {args.seed + args.runs - 1}, "
                         f"is beyond {SEED_MAX} (numpy's seed range): start from a lower --seed")
    spec, hyperparameters, cost = harness_cli.prepare_run(args)      # every option checked before the first run
    return series.run_series(spec, hyperparameters, harness_cli.run_options(args, cost), args.runs)


def cmd_infer(args: argparse.Namespace) -> int:
    prices.apply_instance(args)
    return harness_cli.cmd_infer(args)


def _packs_fresh_set(args: argparse.Namespace) -> bool:
    """`data fetch imagenetv2 --format F`: a fresh set laid out as ImageNet's val, packed like it."""
    if args.action != "fetch" or not (args.format or args.python):
        return False
    name = harness_cli.dataset_of(args)
    entry = datasets.manifest(name)
    if entry.get("format") != "imagenet-folders" or "archive" not in entry:
        return False            # cmd_data says they go with data prepare
    if args.format is None:
        raise UsageError(f"--python is the interpreter that packs: it goes with --format "
                         f"{'|'.join(prepare_imagenet.PACKERS)}: {FETCH_PACK_USAGE}")
    if args.format not in prepare_imagenet.PACKERS:
        raise UsageError(f"--format {args.format!r} is not one of {', '.join(prepare_imagenet.PACKERS)}: "
                         f"{FETCH_PACK_USAGE}")
    return True


def _fetches_shards(args: argparse.Namespace) -> bool:
    """`data fetch fineweb10B [--shards N] [--allow-unverified]`: True when the dataset is of token shards
    (then --allow-unverified goes with fetch); --shards only goes with such a fetch (its range: the fetch's)."""
    shards_ok = (args.action == "fetch" and bool(args.dataset or args.reference)
                 and datasets.manifest(harness_cli.dataset_of(args)).get("format") == "token-shards")
    if args.shards is not None and not shards_ok:
        raise UsageError(f"--shards goes with data fetch of token shards: {FETCH_SHARDS_USAGE}")
    return shards_ok


def cmd_data(args: argparse.Namespace) -> int:
    packs = _packs_fresh_set(args)
    shards = _fetches_shards(args)
    prepare_options = [option for option, value in (("--from", args.from_dir), ("--format", args.format),
                                                    ("--python", args.python), ("--blacklist", args.blacklist),
                                                    ("--allow-unverified", args.allow_unverified))
                       if value and not (packs and option in ("--format", "--python"))
                       and not (shards and option == "--allow-unverified")]
    if args.action != "prepare" and prepare_options:
        raise UsageError(f"{', '.join(prepare_options)} only go with data prepare: {PREPARE_USAGE}")
    if args.vectors is not None and args.action != "fetch":
        raise UsageError(f"--vectors only goes with data fetch: {FETCH_VECTORS_USAGE}")
    if args.action == "verify":
        return harness_cli.cmd_data(args)
    name = harness_cli.dataset_of(args)
    if args.action == "fetch":
        if args.vectors is not None and datasets.manifest(name).get("format") != "word-vectors":
            raise UsageError(f"--vectors picks word vectors; {name} has none to pick: {FETCH_VECTORS_USAGE}")
        # the packing interpreter checked before the download, as prepare checks it before the tars
        interpreter = prepare_imagenet.packer_python(args.format, args.python) if packs else None
        fetch.fetch(name, args.data, vectors=args.vectors, shards=args.shards,
                    allow_unverified=bool(shards and args.allow_unverified))
        if packs:
            fetch_imagenetv2.pack(name, args.data, args.format, interpreter)
        if args.reference:      # what the reference's run needs: the task's data and its companions (GloVe)
            for companion in datasets.manifest(name).get("with", []):
                fetch.fetch(companion, args.data)
        return 0
    if name != prepare_imagenet.NAME:
        raise UsageError(f"only imagenet is prepared from files you bring; {name} is fetched: {PROG} data fetch {name}")
    fmt = args.format or prepare_imagenet.FOLDERS
    if fmt not in prepare_imagenet.FORMATS:
        raise UsageError(f"--format {fmt!r} is not one of {', '.join(prepare_imagenet.FORMATS)}: {PREPARE_USAGE}")
    if args.python is not None and fmt == prepare_imagenet.FOLDERS:
        raise UsageError(f"--python is the interpreter that packs: it goes with --format "
                         f"{'|'.join(prepare_imagenet.PACKERS)}: {PREPARE_USAGE}")
    if args.from_dir is None:
        raise UsageError(f"data prepare needs --from DIR, the folder with the official files: {PREPARE_USAGE}")
    prepare_imagenet.prepare(args.from_dir, args.data, blacklist=args.blacklist,
                             allow_unverified=args.allow_unverified, format=fmt, python=args.python)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """A challenge folder (challenge.json): every run's and the challenge's figures recomputed from them
    (dawnbench.challenge_record); a series folder (summary.json, no result.json): its runs and its summary
    (dawnbench.series_record); else the harness's verify of a run folder."""
    emit = lambda line: print(line, flush=True)      # noqa: E731
    emit_error = lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True)      # noqa: E731
    if challenge_record.is_challenge(args.run_dir):
        return challenge_record.main(args.run_dir, args.data, emit=emit, emit_error=emit_error)
    folder = Path(args.run_dir)
    if (folder / series.SUMMARY).is_file() and not (folder / "result.json").exists():
        return series_record.verify(folder, args.data, emit=emit, emit_error=emit_error)
    return harness_cli.cmd_verify(args)


COMMANDS = {**harness_cli.COMMANDS, "run": cmd_run, "infer": cmd_infer, "data": cmd_data, "verify": cmd_verify}


def main(argv: list[str] | None = None) -> int:
    """The command, in this process (dawnbench.launcher, the `dawnbench` a user types, decides which
    process that is)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["compare"]:
            args = parse_forwarding(build_parser(), argv)     # the runs' options follow `--`
        else:
            args = build_parser().parse_args(argv)
    except DawnbenchError as e:
        # an entry tool's every error line starts with its own name, a bad option's too
        return report(command(argv[0]) if argv and argv[0] in TOOLS else PROG, e)
    if args.command in TOOLS:
        return args.tool.run(args)          # each tool reports its own errors, prefixed with its name
    return harness_cli.run_command(COMMANDS[args.command], args, PROG)


if __name__ == "__main__":
    sys.exit(main())
