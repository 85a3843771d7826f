"""The `harness` command, what every reference image runs: run, infer, list, eval, data verify.

    python -m harness run REF [--set KEY=VALUE]... [--seed N] [--max-epochs N] [--max-seconds S]
                          [--threshold F] [--cost-per-hour USD | --price-record JSON] [--nodes N]
                          [--results DIR] [--data DIR] [--references DIR]
    python -m harness infer REF --model DIR [...]
    python -m harness list [--references DIR]
    python -m harness eval squad DATASET.json PREDICTIONS.json
    python -m harness data verify DATASET | --reference REF
    python -m harness verify RUN_DIR [--data DIR]

numpy and tqdm only (plus the reference's framework). The host command `dawnbench` (dawnbench.cli)
offers the same subcommands with host-only options on top (--instance, --runs, data fetch): it
builds its parsers with the add_*_options functions below and runs the cmd_* functions.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
from pathlib import Path

from harness import datasets, eval_labels, inference, inference_engines, paths, plan, registry, runner, safe_read, task_kinds
from harness.arguments import (
    DATA_FOLDER,
    MAX_EPOCHS,
    MAX_EXAMPLES,
    MAX_NODES,
    MAX_SECONDS,
    MAX_THREADS,
    MAX_USD_PER_HOUR,
    MAX_WARMUP,
    REFERENCES_FOLDER,
    RESULTS_FOLDER,
    SEED_MAX,
    THRESHOLD,
    Parser,
    file_or_folder,
    folder,
    number,
    price,
    whole,
)
from harness.errors import DawnbenchError, UsageError, command, quiet_on_closed_pipe, report, shown
from harness.tasks import TASKS

PROG = "harness"
PRICE_FIELDS = ("instance", "usd_per_hour", "source", "date")


# --- options ------------------------------------------------------------------------------------

MODEL = file_or_folder("--model", "give the model folder a run saved (results/<reference>/<run id>/model) "
                                  "or a weights file")
# An existing folder is written into (its inference.json and env.json replaced), as it always was.
INFER_OUT = folder("--out", "give the folder the inference's files go into (made if missing), e.g. --out infer/")
RUN_DIR = folder("", "give a run folder of `harness run` (results/<reference>/<run id>/)")


def add_references_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--references", type=REFERENCES_FOLDER, default=None, metavar="DIR",
                   help="the folder of the references (default $DAWNBENCH_REFERENCES, else ./references)")


def add_reference_options(p: argparse.ArgumentParser) -> None:
    """What run and infer share: the reference, its configuration, the data, the price."""
    p.add_argument("reference", help="a reference name (see the list command)")
    p.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hyperparameter from reference.toml (repeatable)")
    p.add_argument("--seed", type=whole("--seed", 0, SEED_MAX, 0, "numpy's seed range"), default=0, metavar="N",
                   help="the seed the reference's code is given (default 0); a series (--runs) uses N, N+1, ...")
    p.add_argument("--data", type=DATA_FOLDER, default=None, help="data root (default $DAWNBENCH_DATA or ./data)")
    add_references_option(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--cost-per-hour", type=price(), default=None, metavar="USD",
                   help=f"the on-demand price of one node, USD per hour (above 0, at most {MAX_USD_PER_HOUR:,})")
    p.add_argument("--price-record", default=None, metavar="JSON",
                   help='instead of --cost-per-hour: the priced instance of one node, {"instance", "usd_per_hour", '
                        '"source", "date"} (what `dawnbench ... --instance PROVIDER:INSTANCE` passes)')
    p.add_argument("--nodes", type=whole("--nodes", 1, MAX_NODES, 4), default=1, metavar="N",
                   help="machines used (default 1); the cost per hour is price x N")


def add_run_options(p: argparse.ArgumentParser) -> None:
    add_reference_options(p)
    p.add_argument("--max-epochs", type=whole("--max-epochs", 1, MAX_EPOCHS, 30), default=None, metavar="N",
                   help="epoch budget (default: reference.toml)")
    p.add_argument("--max-seconds", type=number("--max-seconds", 0, MAX_SECONDS, above=True, example=3600), default=None,
                   metavar="S",
                   help="on-clock time budget, seconds (default: reference.toml)")
    p.add_argument("--threshold", type=THRESHOLD, default=None,
                   help="lower the target (a fraction) for smoke tests; the result is marked unofficial")
    p.add_argument("--results", type=RESULTS_FOLDER, default=None, help="results folder (default ./results)")
    p.add_argument("--run-id", default=None, help="the run folder's name (default <time>-seed<N>): letters, digits, . _ + -")
    # Set by `dawnbench run --runs N` for its runs: the run folder is results/REF/<series id>/<run id>.
    p.add_argument("--series-id", default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-save", action="store_true", help="skip saving the trained model")


def add_infer_options(p: argparse.ArgumentParser) -> None:
    add_reference_options(p)
    p.add_argument("--model", type=MODEL, required=True, help="the model folder a run saved")
    p.add_argument("--warmup", type=whole("--warmup", 0, MAX_WARMUP, 50), default=50, metavar="N",
                   help="untimed batch-1 calls before the timed pass (default 50)")
    p.add_argument("--limit", type=whole("--limit", 1, MAX_EXAMPLES, 1000), default=None, metavar="N",
                   help="time only the first N examples (unofficial)")
    p.add_argument("--out", type=INFER_OUT, default=None,
                   help="the folder the inference's files go into (made if missing; default ./results/REF/infer-<time>)")
    p.add_argument("--threshold", type=THRESHOLD, default=None, help="lowered target for smoke tests (unofficial)")
    p.add_argument("--runtime", default=None, metavar="|".join(inference_engines.RUNTIMES),
                   help="default: the reference.toml's [inference] runtime, else reference. reference: the "
                        "reference's own infer() in its sandbox; torch: the same, for a "
                        "PyTorch reference; onnxruntime, openvino: the network the reference exports to ONNX, run "
                        "and timed in a harness process the reference's code never enters")
    p.add_argument("--precision", default=None, metavar="|".join(inference_engines.PRECISIONS),
                   help="default: the reference.toml's [inference] precision with its runtime, else fp32; "
                        "bf16: openvino only; int8: static quantization calibrated on "
                        f"{inference_engines.CALIBRATION_EXAMPLES} training images (onnxruntime, openvino)")
    p.add_argument("--threads", type=whole("--threads", 1, MAX_THREADS, 4), default=None, metavar="N",
                   help="inference threads (default: the physical cores this process may use)")


def add_eval_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=sorted(task_kinds.EVALUATORS))
    p.add_argument("args", nargs=argparse.REMAINDER)


def add_data_options(p: argparse.ArgumentParser, actions: tuple[str, ...] = ("verify",)) -> None:
    p.add_argument("action", choices=list(actions))
    task_datasets = ", ".join(sorted({t.dataset for t in TASKS.values()}))
    p.add_argument("dataset", nargs="?", help=f"a dataset name: a task's ({task_datasets}) or a companion's (glove)")
    p.add_argument("--reference", help="instead of a dataset name: the dataset of this reference's task")
    p.add_argument("--data", type=DATA_FOLDER, default=None)
    add_references_option(p)


def add_verify_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=RUN_DIR, metavar="RUN_DIR", help="a run folder (results/<reference>/<run id>/)")
    p.add_argument("--data", type=DATA_FOLDER, default=None,
                   help="the data root with the official eval labels (default $DAWNBENCH_DATA or ./data)")


def build_parser(prog: str = PROG) -> Parser:
    parser = Parser(prog=prog, description="The time-to-accuracy harness (what runs in every image)")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_options(sub.add_parser("run", help="train a reference to its task's threshold under the harness"))
    add_infer_options(sub.add_parser("infer", help="batch-1 inference latency over every eval example"))
    add_references_option(sub.add_parser("list", help="list the references"))
    add_eval_options(sub.add_parser("eval", help="score a predictions file like the official scripts"))
    add_data_options(sub.add_parser("data", help="verify a dataset against its checksums"))
    add_verify_options(sub.add_parser("verify", help="re-check a run offline: its log, stored predictions, "
                                                     "result.json and TSV agree"))
    parser.set_defaults(prog=prog)
    return parser


# --- checks -------------------------------------------------------------------------------------

def check_run_options(args: argparse.Namespace) -> None:
    """A run's names, before anything is written: a run id is one folder under results/<REF>/.
    (Its numbers were checked by the parser: each option's type carries its range.)"""
    if args.run_id is not None:
        paths.check_name(args.run_id, "--run-id")
    if getattr(args, "series_id", None) is not None:
        paths.check_name(args.series_id, "--series-id")


def parse_price_record(text: str) -> dict:
    """The --price-record JSON: one node's {"instance", "usd_per_hour", "source", "date"}."""
    fix = 'give {"instance": "provider:instance", "usd_per_hour": USD, "source": URL, "date": "yyyy-mm-dd"}'
    if not text.strip():
        raise UsageError(f"--price-record {shown(repr(text))}: empty; {fix}")
    try:
        record = safe_read.parse_json(text, "a price record")
    except safe_read.Refused as e:
        raise UsageError(f"--price-record {shown(repr(text))}: {e.reason}; {fix}") from None
    if not isinstance(record, dict) or sorted(record) != sorted(PRICE_FIELDS):
        raise UsageError(f"--price-record: expected exactly the fields {', '.join(PRICE_FIELDS)}; {fix}")
    usd = record["usd_per_hour"]
    if type(usd) not in (int, float) or not math.isfinite(usd) or not 0 < usd <= MAX_USD_PER_HOUR:
        raise UsageError(f"--price-record: usd_per_hour {shown(repr(usd))} must be a number above 0 and at most "
                         f"{MAX_USD_PER_HOUR:,} (USD per hour of one node); {fix}")
    for key in ("instance", "source", "date"):
        if not isinstance(record[key], str) or not record[key]:
            raise UsageError(f"--price-record: {key} {shown(repr(record[key]))} must be text; {fix}")
    return record


def machine_cost(args: argparse.Namespace) -> dict:
    """instance, nodes, price (one node's record) and cost_per_hour (all nodes) from the options."""
    if args.price_record is not None and args.cost_per_hour is not None:
        raise UsageError("give --price-record or --cost-per-hour, not both: the record carries its price")
    price, per_node = None, args.cost_per_hour
    if args.price_record is not None:
        price = parse_price_record(args.price_record)
        per_node = price["usd_per_hour"]
    return {"instance": price["instance"] if price else None, "nodes": args.nodes, "price": price,
            "cost_per_hour": per_node * args.nodes if per_node is not None else None}


def prepare_run(args: argparse.Namespace):
    """(spec, hyperparameters, cost) of a run, every option checked before anything is written."""
    check_run_options(args)
    spec = registry.load_spec(args.reference, args.references)
    registry.check_trains(spec)
    registry.check_reach(spec, args.threshold)
    registry.check_entry_defined(spec)
    hp = registry.resolve_hyperparameters(spec, args.assignments)
    return spec, hp, machine_cost(args)


# --- commands -----------------------------------------------------------------------------------

def run_options(args: argparse.Namespace, cost: dict) -> plan.RunOptions:
    """The typed options of a run (what `dawnbench run --runs` hands each run of its series)."""
    opts = plan.RunOptions(seed=args.seed, max_epochs=args.max_epochs, max_seconds=args.max_seconds,
                             threshold=args.threshold, data_root=args.data, run_id=args.run_id, series_id=args.series_id,
                             progress=not args.no_progress, save_model=not args.no_save, **cost)
    if args.results is not None:
        opts.results_root = args.results
    return opts


def cmd_run(args: argparse.Namespace) -> int:
    spec, hp, cost = prepare_run(args)
    result = runner.run(spec, hp, run_options(args, cost))
    return 0 if result["status"] == runner.CONVERGED else 1


def _recorded_hyperparameters(spec, model: Path) -> dict:
    """The hyperparameters of the run that saved `model` (its result.json), so a model trained with
    --set loads with the same network; {} when the model did not come from a run of `spec`."""
    result_file = Path(model).parent / "result.json"
    try:
        result = safe_read.read_json(result_file, result_file.parent)
    except safe_read.Refused:
        return {}
    if not isinstance(result, dict) or result.get("reference") != spec.name:
        return {}
    recorded = result.get("hyperparameters")
    return recorded if isinstance(recorded, dict) else {}


def cmd_infer(args: argparse.Namespace) -> int:
    spec = registry.load_spec(args.reference, args.references)
    spec.task.target(args.threshold)        # before any work: a --threshold in its task's figure's range
    registry.check_entry_defined(spec)
    hp = registry.resolve_hyperparameters(spec, args.assignments, base=_recorded_hyperparameters(spec, args.model))
    cost = machine_cost(args)
    # The entry's own runtime and precision unless the command names a runtime (then fp32 unless it names one)
    runtime = args.runtime or spec.inference_runtime
    precision = args.precision or (spec.inference_precision if runtime == spec.inference_runtime else "fp32")
    result = inference.infer(spec, args.model, hp, data_root=args.data, warmup=args.warmup, limit=args.limit,
                             threshold=args.threshold, out_dir=args.out,
                             progress=not args.no_progress, seed=args.seed, runtime=runtime,
                             precision=precision, threads=args.threads, **cost)
    for line in inference.summary_lines(result):
        print(line)
    return 0 if result["reached_threshold"] else 1


def cmd_list(args: argparse.Namespace) -> int:
    for line in registry.listing(args.references):
        print(line)
    return 0


def dataset_of(args: argparse.Namespace) -> str:
    """The dataset a `data` command names: given, or that of --reference's task."""
    if args.reference:
        dataset = registry.load_spec(args.reference, args.references).task.dataset
        if args.dataset and args.dataset != dataset:
            raise UsageError(f"{args.dataset} and --reference {args.reference} name different datasets (its task "
                             f"reads {dataset}): give the dataset or the reference, not both")
        return dataset
    if not args.dataset:
        raise UsageError(f"name a dataset ({', '.join(datasets.dataset_names())}) or --reference REF")
    return args.dataset


def cmd_data(args: argparse.Namespace) -> int:
    """data verify: print `ok <file>` per file whose checksum matches; stop at the first that does not."""
    name = dataset_of(args)
    for filename in datasets.manifest(name)["files"]:
        datasets.verify_file(name, args.data, filename)
        print(f"ok {filename}", flush=True)
    if "record" in datasets.manifest(name):      # a prepared dataset: every file against its manifest
        checked, reasons = datasets.check_prepared(name, args.data)
        print(f"ok {checked['count']:,} files ({checked['bytes']:,} bytes) match {datasets.PREPARED_MANIFEST} "
              f"(sha256 {checked['manifest_sha256'][:16]}...)", flush=True)
        if eval_labels.load_blacklist(name, args.data) is not None:
            print(f"ok {datasets.manifest(name)['blacklist']['file']}", flush=True)
        for reason in reasons:
            print(f"unofficial: {reason}", flush=True)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import importlib
    evaluator = importlib.import_module(task_kinds.EVALUATORS[args.what])
    return evaluator.main(args.args, prog=f"{getattr(args, 'prog', PROG)} eval {args.what}")


def cmd_verify(args: argparse.Namespace) -> int:
    """One line per check and a verdict; 0 verified, 1 a disagreement, 2 (raised) a bad RUN_DIR."""
    from harness import verify_run
    if args.data is not None and not Path(args.data).is_dir():
        raise UsageError(f"--data {args.data}: not a folder; give the data root that holds the task's dataset "
                         f"(default $DAWNBENCH_DATA or ./data), or leave --data out")
    return verify_run.main(args.run_dir, args.data, emit=lambda line: print(line, flush=True),
                       emit_error=lambda line: print(f"{command()}: {line}", file=sys.stderr, flush=True))


COMMANDS = {"run": cmd_run, "infer": cmd_infer, "list": cmd_list, "data": cmd_data, "eval": cmd_eval,
            "verify": cmd_verify}


def run_command(handler, args: argparse.Namespace, prog: str = PROG) -> int:
    """Run one command; a user's mistake is one line on stderr and exit code 2, never a traceback."""
    try:
        return handler(args)
    except DawnbenchError as e:
        return report(prog, e)
    except (FileExistsError, FileNotFoundError) as e:
        return report(prog, UsageError(str(e)))
    except KeyboardInterrupt:   # before a run's record opened, or a command with none: one line, no traceback
        with contextlib.suppress(OSError):
            print(f"{prog}: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    except DawnbenchError as e:
        return report(PROG, e)
    return quiet_on_closed_pipe(lambda: run_command(COMMANDS[args.command], args))


if __name__ == "__main__":
    sys.exit(main())
