"""The `dawnbench` command: run, infer, list, eval, data; and the entry tools, each a module of
this package with its own `main(argv)` (also `python -m dawnbench.<tool>`): submit, validate,
leaderboard, analyze."""
from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path

from dawnbench import series
from harness import datasets, inference, registry, runner
from harness.metrics import MetricInputError

PROG = "dawnbench"
# Subcommands that are modules of their own; everything after the name is theirs to parse.
TOOLS = {"submit": "write a run as entry files (JSON + TSV)",
         "validate": "check entry files or trees; exit 0 only when all is valid",
         "leaderboard": "rank entries and build the static site",
         "analyze": "the analyses of the DAWNBench papers, as PNG + numbers"}


def _add_ref_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("reference", help="a reference name (see `dawnbench list`)")
    p.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hyperparameter from reference.toml (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", type=Path, default=None, help="data root (default $DAWNBENCH_DATA or ./data)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--instance", default=None, metavar="PROVIDER:INSTANCE",
                   help="the cloud instance it runs on, priced from common/prices.yaml (e.g. aws:p3.2xlarge)")
    p.add_argument("--cost-per-hour", type=float, default=None, metavar="USD",
                   help="instead of --instance: the on-demand price of one node, USD per hour")
    p.add_argument("--nodes", type=int, default=1, metavar="N",
                   help="machines used (default 1); the cost per hour is price x N")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    _add_ref_options(p)
    p.add_argument("--max-epochs", type=int, default=None, help="epoch budget (default: reference.toml)")
    p.add_argument("--max-seconds", type=float, default=None, help="on-clock time budget")
    p.add_argument("--threshold", type=float, default=None,
                   help="lower the target (a fraction) for smoke tests; the result is marked unofficial")
    p.add_argument("--results", type=Path, default=registry.REPO_ROOT / "results")
    p.add_argument("--run-id", default=None)
    p.add_argument("--no-save", action="store_true", help="skip saving the trained model")
    p.add_argument("--runs", type=int, default=None, metavar="N",
                   help="a series: N runs with seeds SEED..SEED+N-1, each a fresh process, into "
                        "results/REF/<series id>/ with summary.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Time-to-accuracy benchmark harness")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="train a reference to its task's threshold under the harness")
    _add_run_options(p)

    p = sub.add_parser("infer", help="batch-1 inference latency over every eval example")
    _add_ref_options(p)
    p.add_argument("--model", type=Path, required=True, help="the model folder a run saved")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--limit", type=int, default=None, help="time only the first N examples (unofficial)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--threshold", type=float, default=None, help="lowered target for smoke tests (unofficial)")

    sub.add_parser("list", help="list the references")

    p = sub.add_parser("eval", help="score a predictions file like the official scripts")
    p.add_argument("what", choices=["squad"])
    p.add_argument("args", nargs=argparse.REMAINDER)

    for name, text in TOOLS.items():
        p = sub.add_parser(name, help=text, add_help=False)
        p.add_argument("args", nargs=argparse.REMAINDER)

    p = sub.add_parser("data", help="fetch or verify a dataset")
    p.add_argument("action", choices=["fetch", "verify"])
    p.add_argument("dataset", nargs="?", help="a dataset name: fashion-mnist or cifar10")
    p.add_argument("--reference", help="instead of a dataset name: the dataset of this reference's task")
    p.add_argument("--data", type=Path, default=None)
    return parser


def _check_threshold(value: float | None) -> None:
    if value is not None and not 0.0 < value <= 1.0:
        raise registry.UsageError(f"--threshold {value}: give a fraction in (0, 1], e.g. 0.85")


def _machine_cost(args) -> dict:
    """instance, nodes, price (one node's record) and cost_per_hour (all nodes) from the options."""
    if args.instance is not None and args.cost_per_hour is not None:
        raise registry.UsageError("give --instance or --cost-per-hour, not both: --instance takes its price "
                                  "from common/prices.yaml")
    if args.nodes < 1:
        raise registry.UsageError(f"--nodes {args.nodes}: give the number of machines used, 1 or more")
    if args.cost_per_hour is not None and not (math.isfinite(args.cost_per_hour) and args.cost_per_hour >= 0):
        raise registry.UsageError(f"--cost-per-hour {args.cost_per_hour}: give the on-demand USD per hour of "
                                  f"one node, e.g. 3.06")
    price, per_node = None, args.cost_per_hour
    if args.instance is not None:
        try:
            from common import prices  # PyYAML is only needed when an instance is priced
        except ModuleNotFoundError as e:
            raise registry.UsageError(f"--instance needs the {e.name} module: pip install -r "
                                      f"requirements/harness.txt (or give --cost-per-hour USD)") from None
        found = prices.lookup(args.instance)
        price, per_node = found.record(), found.usd_per_hour
    return {"instance": price["instance"] if price else None, "nodes": args.nodes, "price": price,
            "cost_per_hour": per_node * args.nodes if per_node is not None else None}


def cmd_run(args) -> int:
    spec = registry.load_spec(args.reference)
    hp = registry.resolve_hyperparameters(spec, args.assignments)
    _check_threshold(args.threshold)
    cost = _machine_cost(args)
    if args.runs is not None:
        run_options = argparse.ArgumentParser(add_help=False)
        _add_run_options(run_options)
        return series.run_series(spec, args, series.forwarded_options(run_options, args))
    opts = runner.RunOptions(seed=args.seed, max_epochs=args.max_epochs, max_seconds=args.max_seconds,
                             threshold=args.threshold, results_root=args.results, data_root=args.data,
                             run_id=args.run_id, progress=not args.no_progress,
                             save_model=not args.no_save, **cost)
    result = runner.run(spec, hp, opts)
    return 0 if result["status"] == runner.CONVERGED else 1


def _recorded_hyperparameters(spec, model: Path) -> dict:
    """The hyperparameters of the run that saved `model` (its result.json), so a model trained with
    --set loads with the same network; {} when the model did not come from a run of `spec`."""
    result_file = Path(model).parent / "result.json"
    try:
        result = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(result, dict) or result.get("reference") != spec.name:
        return {}
    recorded = result.get("hyperparameters")
    return recorded if isinstance(recorded, dict) else {}


def cmd_infer(args) -> int:
    spec = registry.load_spec(args.reference)
    hp = registry.resolve_hyperparameters(spec, args.assignments, base=_recorded_hyperparameters(spec, args.model))
    _check_threshold(args.threshold)
    cost = _machine_cost(args)
    result = inference.infer(spec, args.model, hp, data_root=args.data, warmup=args.warmup, limit=args.limit,
                             threshold=args.threshold, out_dir=args.out,
                             progress=not args.no_progress, seed=args.seed, **cost)
    for line in inference.summary_lines(result):
        print(line)
    return 0 if result["reached_threshold"] else 1


def cmd_list(args) -> int:
    for name in registry.available():
        spec = registry.load_spec(name)
        print(f"{name:40s} {spec.task.name:14s} {spec.framework:11s} {spec.model}")
    return 0


def cmd_data(args) -> int:
    from common import datasets as fetchers  # the fetch code lives with the dataset tooling
    if args.reference:
        args.dataset = registry.load_spec(args.reference).task.dataset
    if not args.dataset:
        raise registry.UsageError(f"name a dataset ({', '.join(datasets.dataset_names())}) or --reference REF")
    if args.action == "fetch":
        fetchers.fetch(args.dataset, args.data)
    else:
        fetchers.verify(args.dataset, args.data)
    return 0


def cmd_eval(args) -> int:
    from harness import squad_eval
    return squad_eval.main(args.args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in TOOLS:
        return importlib.import_module(f"dawnbench.{argv[0]}").main(argv[1:])
    args = build_parser().parse_args(argv)
    handler = {"run": cmd_run, "infer": cmd_infer, "list": cmd_list, "data": cmd_data, "eval": cmd_eval}
    try:
        return handler[args.command](args)
    except (registry.UsageError, datasets.DatasetError, MetricInputError, FileExistsError,
            FileNotFoundError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
