"""How long the harness's eval span takes beside the train span, per reference family: the figures
a bound on the eval span is calibrated on (issue 22, "The eval span is bounded"), and the eval
times of honest references before and after such a bound.

`python -m bench.eval_spans [REF ...] [--max-epochs 2] [--out FILE.json]`. Each reference
is run by the real harness in a fresh process (`python -m harness run REF --data DIR --results
TMP --no-progress --max-epochs N --seed 0 --threshold 1.0`: a threshold no fixture run reaches,
so N epochs are trained and scored), with this checkout's harness first on PYTHONPATH. Its
events.jsonl gives, per epoch:

- init:  init_start .. init_stop (the trainer's start and `setup()`; first epoch only);
- train: epoch_start .. epoch_stop (`train_epoch()`, `save()` and the freeze);
- eval:  eval_start .. eval_stop (each starts a fresh predictor: framework imports and its
  `setup()`; then `load()`, `predict()`, the harness's scoring and storing, the thaw; a harness
  before issue 33 started it in the first eval only);
- eval/train: the ratio of the two spans;
- k: the smallest k under which the epoch's eval fits the issue's example bound,
  eval <= k x (eval examples / train examples) x train, i.e. eval seconds per eval example
  over train seconds per train example (`samples` of epoch_stop, the eval_samples point);
- extra: every numeric field of the eval events (eval_start, eval_stop, eval_accuracy, and any
  other event logged inside the eval span) besides clock_s and epoch_num, nested dicts flattened
  with dots, so what a newer harness logs there (a bound, the predictor's wall or CPU seconds)
  shows without a change here. The metric is printed as `score`; other scores (top5, exact
  match) land in extra.

Data: Fashion-MNIST references use the real data at harness.datasets.default_data_root()
($DAWNBENCH_DATA, else ./data, else the checkout's data/) or --fashion-data (from a git worktree,
which has no data/, point either at the main checkout's). CIFAR-10, ImageNet and
SQuAD references use the tests' tiny fixtures in the official on-disk formats, prepared as the
recipe-run tests prepare them, with $DAWNBENCH_DATASETS_MANIFEST pointing the run at the fixture's
checksums, and the tests' --set overrides that keep a CPU epoch short (--no-small drops them):
- CIFAR-10 as tests/test_cifar10_end_to_end.py: 5 x 8 training images, the full 10,000 test images;
- ImageNet as tests/test_imagenet_end_to_end.py: the official files of 4 classes (14 training,
  12 val images) through `dawnbench data prepare imagenet --allow-unverified` (JPEG folders);
- SQuAD as tests/test_squad_harness.py: tests/squad_fixture.install_fixture (SQuAD v1.1 + GloVe).
On the fixtures the training sets are tiny and the eval sets are not (CIFAR-10's is the real
size), so eval/train is far from a real run's; k, per example, is the comparable figure, and the
real Fashion-MNIST rows are the real thing.

A reference that cannot run here (its framework missing, or a run that scores no epoch) is skipped
with a one-line reason. Rows go to --out as JSON, with each run's status, isolation and
spans_seconds from result.json.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The tests' fixture writers (tests/cifar10_fixture.py, tests/imagenet_fixture.py,
# tests/squad_fixture.py) are used as they are, not copied: imagenet_fixture imports
# `cifar10_fixture` as a top-level module (pytest puts tests/ on sys.path; we must do it here), and
# squad_fixture imports `tests.cifar10_fixture` (the checkout's root, on sys.path under -m).
for _path in (str(REPO), str(REPO / "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from harness import datasets  # noqa: E402  (after sys.path: this checkout's harness)
from harness.arguments import MAX_EPOCHS, Parser, folder, number, regular_file, reports_errors, whole  # noqa: E402
from harness.errors import command  # noqa: E402
from harness.events import read_events  # noqa: E402

DEFAULT_REFERENCES = ["fashion-mnist-cnn-pytorch", "fashion-mnist-cnn-tensorflow", "cifar10-resnet20-pytorch",
                      "cifar10-resnet20-tensorflow", "cifar10-fast-pytorch", "imagenet-resnet50-pytorch",
                      "imagenet-resnet50-tensorflow", "squad-bidaf-pytorch", "squad-bidaf-tensorflow"]

# The --set overrides the recipe-run tests use to keep an epoch short on a CPU.
SMALL = {
    # tests/test_cifar10_end_to_end.py CASES
    "cifar10-resnet20-pytorch": ["batch_size=16"],
    "cifar10-resnet20-tensorflow": ["batch_size=16"],
    "cifar10-fast-pytorch": ["batch_size=16", "widths=16,32,32", "tta_level=1"],
    # tests/test_imagenet_end_to_end.py SMALL; tests/test_imagenet_resnet_tensorflow.py SMALL
    "imagenet-resnet50-pytorch": ["image_size_start=32", "image_size_end=32", "eval_resize=40", "eval_crop=32",
                                  "batch_size=4", "eval_batch_size=6", "num_workers=0"],
    "imagenet-resnet50-tensorflow": ["image_size_start=32", "image_size_end=32", "eval_resize=40", "eval_crop=32",
                                     "batch_size=4", "eval_batch_size=5", "xla_inference=false"],
    # tests/test_squad_harness.py SMALL
    "squad-bidaf-pytorch": ["hidden=16", "char_filters=8", "batch_size=8", "char_min_count=1", "ema_decay=0.9",
                            "lr=0.01", "eval_batch_size=16"],
    "squad-bidaf-tensorflow": ["hidden=16", "char_filters=8", "batch_size=8", "char_min_count=1", "ema_decay=0.9",
                               "lr=0.01", "eval_batch_size=16"],
}

FRAMEWORK_MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
CIFAR10_TRAIN_PER_BATCH, CIFAR10_TEST = 8, 10_000      # tests/test_cifar10_end_to_end.py
NOT_EXTRA = {"clock_s", "epoch_num"}


class Skip(Exception):
    """The reference cannot run here; the message is the one-line reason."""


# --- data ------------------------------------------------------------------------------------------

def prepare(dataset: str, work: Path, fashion_data: Path | None, cache: dict) -> tuple[Path, dict]:
    """(data root, extra environment) for a run on `dataset`, made once per dataset."""
    if dataset in cache:
        return cache[dataset]
    env: dict[str, str] = {}
    if dataset == "fashion-mnist":
        root = Path(fashion_data) if fashion_data else datasets.default_data_root()
        try:
            datasets.verify_dataset("fashion-mnist", root)
        except datasets.DatasetError as exc:
            raise Skip(f"no Fashion-MNIST at {root} ({str(exc).splitlines()[0]}): "
                       f"`{command('data fetch fashion-mnist')}`, or --fashion-data / $DAWNBENCH_DATA") from None
    elif dataset == "cifar10":
        from cifar10_fixture import fixture_manifest, write_cifar10_batches
        tmp = work / "cifar10"
        batches = tmp / "data" / "cifar10" / "cifar-10-batches-py"
        write_cifar10_batches(batches, per_batch=CIFAR10_TRAIN_PER_BATCH, n_test=CIFAR10_TEST)
        env[datasets.MANIFEST_ENV] = str(fixture_manifest(tmp / "datasets.toml", batches_dir=batches))
        root = tmp / "data"
    elif dataset == "imagenet":
        from imagenet_fixture import fixture_manifest, write_imagenet_fixture

        from dawnbench.prepare_imagenet import prepare as prepare_imagenet
        tmp = work / "imagenet"
        fixture = write_imagenet_fixture(tmp / "official-files")
        root = tmp / "data"
        # its report (unofficial: the fixture's files are not the official ones) is expected here
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            prepare_imagenet(fixture.folder, root, allow_unverified=True, progress=False)
        env[datasets.MANIFEST_ENV] = str(fixture_manifest(tmp / "datasets.toml", fixture))
    elif dataset == "squad":
        from squad_fixture import install_fixture
        installed = install_fixture(work / "squad")
        env[datasets.MANIFEST_ENV] = str(installed["manifest"])
        root = installed["root"]
    else:
        raise Skip(f"no data preparation for the {dataset} task here")
    cache[dataset] = root, env
    return root, env


# --- a run -----------------------------------------------------------------------------------------

def run_reference(name: str, epochs: int, data: Path, env_extra: dict, results: Path, sets: list[str],
                  timeout: float) -> tuple[dict, list[dict], float]:
    """One `python -m harness run` in a fresh process: (result.json, events, the process's wall seconds)."""
    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    run_id = f"eval-spans-{name}"
    cmd = [sys.executable, "-m", "harness", "run", name, "--references", str(REPO / "references"),
           "--data", str(data), "--results", str(results), "--no-progress", "--max-epochs", str(epochs),
           "--seed", "0", "--threshold", "1.0", "--run-id", run_id, *[a for s in sets for a in ("--set", s)]]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Skip(f"the run took over {timeout:g} s (--timeout)") from None
    wall = time.perf_counter() - t0
    run_dir = results / name / run_id
    if not (run_dir / "events.jsonl").is_file():
        raise Skip(f"the run left no events.jsonl (exit {proc.returncode}): {last_line(proc.stderr)}")
    result = json.loads((run_dir / "result.json").read_text()) if (run_dir / "result.json").is_file() else {}
    events = read_events(run_dir / "events.jsonl")
    if not any(e["key"] == "eval_stop" for e in events):
        reason = result.get("dnc_reason") or last_line(proc.stderr)
        raise Skip(f"no epoch was scored (exit {proc.returncode}): {one_line(reason)}")
    return result, events, wall


def last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return one_line(lines[-1]) if lines else "(no output)"


def one_line(text: str, width: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


# --- the events ------------------------------------------------------------------------------------

def numeric_fields(mapping: dict, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of `mapping` (nested dicts flattened with dots), booleans left out."""
    out = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(numeric_fields(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = value
    return out


def epoch_rows(name: str, events: list[dict]) -> list[dict]:
    """One row per scored epoch: the spans (seconds), their ratio, k, the score and the extra fields."""
    clock = {}          # (key, epoch) -> clock_s
    meta = {}           # (key, epoch) -> the event
    for e in events:
        key, epoch = e["key"], e["metadata"].get("epoch_num")
        clock.setdefault((key, epoch), e["metadata"]["clock_s"])
        meta.setdefault((key, epoch), e)
    init = clock.get(("init_stop", None), float("nan")) - clock.get(("init_start", None), 0.0)
    eval_examples = next((e["value"] for e in events if e["key"] == "eval_samples"), None)
    rows = []
    scored = sorted(k[1] for k in clock if k[0] == "eval_stop")
    for epoch in scored:
        train = clock[("epoch_stop", epoch)] - clock[("epoch_start", epoch)]
        evaluation = clock[("eval_stop", epoch)] - clock[("eval_start", epoch)]
        samples = meta[("epoch_stop", epoch)]["metadata"].get("samples")
        extra: dict[str, float] = {}
        first = next(i for i, e in enumerate(events) if e["key"] == "eval_start" and e["metadata"].get("epoch_num") == epoch)
        last = next(i for i, e in enumerate(events) if e["key"] == "eval_stop" and e["metadata"].get("epoch_num") == epoch)
        # eval_start, eval_stop and every event logged between them (eval_accuracy, and whatever a
        # newer harness adds there, say a bound): by position in the log, as clock_s is lap-aligned
        for e in events[first:last + 1]:
            prefix = "" if e["key"] in ("eval_start", "eval_stop", "eval_accuracy") else f"{e['key']}."
            fields = {k: v for k, v in e["metadata"].items() if k not in NOT_EXTRA}
            if e["key"] != "eval_accuracy" and isinstance(e.get("value"), (int, float)) \
                    and not isinstance(e.get("value"), bool):
                fields["value"] = e["value"]
            extra.update({prefix + k: v for k, v in numeric_fields(fields).items()})
        score = meta.get(("eval_accuracy", epoch), {}).get("value")
        k = (evaluation * samples / (eval_examples * train)) if samples and eval_examples and train > 0 else None
        rows.append({"reference": name, "epoch": epoch, "init_s": init if epoch == scored[0] else None,
                     "train_s": train, "eval_s": evaluation, "eval_over_train": evaluation / train if train > 0 else None,
                     "train_examples": samples, "eval_examples": eval_examples, "k": k, "score": score, "extra": extra})
    return rows


# --- output ----------------------------------------------------------------------------------------

HEADER = f"{'reference':<30} {'ep':>2} {'init_s':>8} {'train_s':>8} {'eval_s':>8} {'eval/train':>10} " \
         f"{'train_n':>7} {'eval_n':>6} {'k':>8} {'score':>6}  extra"


def fmt(value, spec: str) -> str:
    """`value` formatted to `spec` ("8.2f"), or "-" right-aligned to its width."""
    return format("-", f">{spec.split('.')[0]}") if value is None else format(value, spec)


def print_row(r: dict) -> None:
    extra = " ".join(f"{k}={v:.6g}" for k, v in sorted(r["extra"].items()))
    print(f"{r['reference']:<30} {r['epoch']:>2} {fmt(r['init_s'], '8.2f')} {r['train_s']:8.2f} {r['eval_s']:8.2f} "
          f"{fmt(r['eval_over_train'], '10.2f')} {fmt(r['train_examples'], '7.0f')} {fmt(r['eval_examples'], '6.0f')} "
          f"{fmt(r['k'], '8.3f')} {fmt(r['score'], '6.3f')}  {extra}", flush=True)


@reports_errors("python -m bench.eval_spans")
def main(argv=None) -> int:
    p = Parser(prog="python -m bench.eval_spans", description=__doc__.split("\n\n")[0])
    p.add_argument("references", nargs="*", default=DEFAULT_REFERENCES, metavar="REF",
                   help=f"reference names (default {' '.join(DEFAULT_REFERENCES)})")
    p.add_argument("--max-epochs", type=whole("--max-epochs", 1, MAX_EPOCHS, 2), default=2, metavar="N",
                   help="epochs scored per reference, from its first evaluated one (its threshold is never met)")
    p.add_argument("--out", type=regular_file("--out", "give the JSON file to write (a new name or a file to "
                                                           "replace)"),
                   default=None, help="write every row (and each run's summary) here as JSON")
    p.add_argument("--fashion-data", type=folder("--fashion-data", "give the data root holding fashion-mnist"), default=None,
                   help="data root holding fashion-mnist (default: harness.datasets.default_data_root())")
    p.add_argument("--no-small", action="store_true", help="run the fixtures with reference.toml's hyperparameters, "
                                                           "not the tests' CPU-sized --set overrides")
    p.add_argument("--timeout", type=number("--timeout", 0, above=True, example=3600), default=3600,
                   help="seconds one run may take before it is skipped")
    p.add_argument("--keep", type=folder("--keep", "give the folder to keep the fixtures and run folders in"),
                   default=None, help="keep the fixtures and run folders here")
    a = p.parse_args(argv)

    import harness
    print(f"harness={Path(harness.__file__).parent} python={sys.executable} epochs={a.max_epochs}", flush=True)
    if Path(harness.__file__).resolve().parent != REPO / "harness":
        print(f"warning: the harness imported here is not {REPO / 'harness'}; runs use PYTHONPATH={REPO}",
              flush=True)
    from harness import registry

    t_start = time.perf_counter()
    work = a.keep or Path(tempfile.mkdtemp(prefix="bench-eval-spans-"))
    work.mkdir(parents=True, exist_ok=True)
    cache: dict = {}
    rows, runs, skipped = [], [], []
    print(HEADER, flush=True)
    try:
        for name in a.references:
            try:
                try:
                    spec = registry.load_spec(name)
                except Exception as exc:   # an unknown name, a broken reference.toml
                    raise Skip(one_line(exc)) from None
                module = FRAMEWORK_MODULES.get(spec.framework.split("-")[0].lower())
                if module and find_spec(module) is None:
                    raise Skip(f"{module} is not installed in {sys.executable}")
                data, env = prepare(spec.task.dataset, work / "data", a.fashion_data, cache)
                sets = [] if a.no_small else SMALL.get(name, [])
                # --max-epochs N scores N epochs: a reference that evaluates from a later epoch trains up to it first
                epochs = spec.eval_from_epoch + a.max_epochs - 1
                result, events, wall = run_reference(name, epochs, data, env, work / "results", sets, a.timeout)
            except Skip as why:
                print(f"SKIP {name}: {why}", flush=True)
                skipped.append({"reference": name, "reason": str(why)})
                continue
            these = epoch_rows(name, events)
            for r in these:
                print_row(r)
            rows.extend(these)
            isolation = result.get("isolation") or {}
            summary = {"reference": name, "sets": sets, "data": str(data), "process_wall_s": round(wall, 3),
                       "status": result.get("status"), "epochs": result.get("epochs"),
                       "official": result.get("official"), "isolation": isolation.get("mode"),
                       "spans_seconds": result.get("spans_seconds"), "dnc_reason": result.get("dnc_reason")}
            runs.append(summary)
            spans = " ".join(f"{k}={v:.2f}" for k, v in (summary["spans_seconds"] or {}).items())
            print(f"  {name}: status={summary['status']} epochs={summary['epochs']} isolation={summary['isolation']} "
                  f"process_wall_s={wall:.1f} spans: {spans}", flush=True)
            if len(these) < a.max_epochs:
                print(f"  {name}: only {len(these)} of {a.max_epochs} epochs scored ({one_line(summary['dnc_reason'])})",
                      flush=True)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    total = time.perf_counter() - t_start
    for s in skipped:
        print(f"skipped {s['reference']}: {s['reason']}")
    print(f"total_wall_seconds={total:.1f}")
    if a.out:
        a.out.write_text(json.dumps({"harness": str(Path(harness.__file__).parent), "epochs": a.max_epochs,
                                     "total_wall_seconds": round(total, 3), "rows": rows, "runs": runs,
                                     "skipped": skipped}, indent=1) + "\n")
        print(f"out={a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
