"""Repeated runs: `dawnbench run REF --runs N` trains seeds SEED..SEED+N-1, each in a fresh process
(so no framework state or cache of one run reaches the next), and summarizes their
time-to-accuracy: the stability study of the DAWNBench v1 paper.

    results/<REF>/<series id>/seed<k>/       each a normal run folder
    results/<REF>/<series id>/summary.json   summarize() of those runs

`summarize` is the one place the statistics are computed; the analyses reuse it.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import datasets, outputs, paths, runner
from harness.registry import ReferenceSpec, UsageError

SUMMARY = "summary.json"
STABLE_CV = 0.05             # docs/RULES.md: stable = every run converged and cv at most this
STOP_GRACE_SECONDS = 60.0    # how long an interrupted run gets to write its DNC result before it is killed
OWN_OPTIONS = {"runs", "seed", "results", "run_id", "series_id"}     # set by the series for each run
PR_SET_PDEATHSIG = 1


class Stopped(BaseException):
    """SIGTERM to the series (e.g. `docker stop`): handled like Ctrl-C."""


def olympic_mean(values: list[float]) -> float | None:
    """The mean without one best and one worst value (MLPerf's olympic scoring); None under 3 values."""
    if len(values) < 3:
        return None
    return statistics.fmean(sorted(values)[1:-1])


def tta_statistics(values: list[float]) -> dict:
    n = len(values)
    mean = statistics.fmean(values) if n else None
    stdev = statistics.stdev(values) if n >= 2 else None     # sample standard deviation
    return {"n": n, "min": min(values) if n else None, "median": statistics.median(values) if n else None,
            "max": max(values) if n else None, "mean": mean, "stdev": stdev,
            "cv": stdev / mean if stdev is not None and mean else None,
            "olympic_mean": olympic_mean(values)}


def summarize(results: list[dict]) -> dict:
    """The stability figures of runs of one reference at one threshold, from their result.json
    contents (each run named by its `run_dir` if given, else its `run_id`): every run's status and
    time-to-accuracy, the fraction converged, and the time-to-accuracy statistics over the
    converged runs. Raises ValueError for runs of different references or thresholds."""
    for field in ("reference", "threshold"):
        seen = {r[field] for r in results if r.get(field) is not None}
        if len(seen) > 1:
            raise ValueError(f"the runs differ in {field!r} ({', '.join(sorted(map(str, seen)))}); "
                             f"summarize runs of one reference at one threshold")
    first = next((r for r in results if r.get("reference") is not None), {})
    runs = []
    for r in results:
        converged = r.get("status") == runner.CONVERGED
        runs.append({"seed": r.get("seed"), "run_dir": r.get("run_dir", r.get("run_id")),
                     "status": runner.CONVERGED if converged else runner.DNC,
                     "tta_seconds": r.get("tta_seconds") if converged else None,
                     "epochs": r.get("epochs"), "metric_value": r.get("metric_value")})
    n = len(runs)
    converged = sum(r["status"] == runner.CONVERGED for r in runs)
    return {"reference": first.get("reference"), "task": first.get("task"), "metric": first.get("metric"),
            "threshold": first.get("threshold"), "official_threshold": first.get("official_threshold"),
            "n": n, "converged": converged, "fraction_converged": converged / n if n else None,
            "runs": runs,
            "tta_seconds": tta_statistics([r["tta_seconds"] for r in runs if r["tta_seconds"] is not None])}


def table(summary: dict) -> list[str]:
    def f(x, fmt=".2f"):
        return "-" if x is None else format(x, fmt)
    metric = summary.get("metric") or "metric"
    lines = [f"{'seed':>6}  {'status':9}  {'epochs':>6}  {metric:>7}  {'tta (s)':>9}  run"]
    for r in summary["runs"]:
        value = "-" if r["metric_value"] is None else f"{100 * r['metric_value']:.2f}%"
        lines.append(f"{f(r['seed'], 'd'):>6}  {r['status']:9}  {f(r['epochs'], 'd'):>6}  {value:>7}  "
                     f"{f(r['tta_seconds']):>9}  {r['run_dir'] or '-'}")
    t, fraction = summary["tta_seconds"], summary["fraction_converged"]
    lines.append(f"converged {summary['converged']}/{summary['n']}"
                 f"{'' if fraction is None else f' ({100 * fraction:.0f}%)'}; time-to-accuracy (s) over the "
                 f"converged runs: median {f(t['median'])}, olympic mean {f(t['olympic_mean'])}, "
                 f"min {f(t['min'])}, max {f(t['max'])}, cv {f(t['cv'], '.3f')}")
    if summary["n"]:
        stable = summary["converged"] == summary["n"] and t["cv"] is not None and t["cv"] <= STABLE_CV
        lines.append(f"{'stable' if stable else 'not stable'}: stable means every run converged and cv <= "
                     f"{STABLE_CV:g} (2 or more runs; docs/RULES.md)")
    return lines


def forwarded_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The command-line options of `args` (parsed by `parser`) that every run of the series repeats:
    all but those the series sets per run. Rebuilt from the parser, so a new option travels too."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in OWN_OPTIONS or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:                    # a switch such as --no-save
            if value != action.default:
                argv.append(flag)
        elif isinstance(value, list):            # a repeatable option such as --set
            for item in value:
                argv += [flag, str(item)]
        elif value is not None and value != action.default:
            argv += [flag, str(value)]
    return argv


def run_series(spec: ReferenceSpec, args: argparse.Namespace, forwarded: list[str]) -> int:
    """Run the series; 0 only when every run converged."""
    if args.runs < 1:
        raise UsageError(f"--runs {args.runs}: give the number of runs, 1 or more")
    if args.run_id is not None:
        raise UsageError("--runs and --run-id do not go together: a series names its runs seed<k> inside "
                         "its own folder results/<REF>/<series id>/")
    world_size = runner.dist_env()[1]
    if world_size > 1:
        raise UsageError(f"--runs under torchrun (WORLD_SIZE={world_size}): start a series from a plain shell, "
                         f"where each run is a fresh process; for multi-process runs launch torchrun once per --seed")
    # A missing dataset fails here, once, before any folder is made (as it does for one run).
    datasets.verified_checksums(spec.task.dataset, args.data or datasets.default_data_root())

    results_root = Path(args.results or paths.results_root()).resolve()
    series_dir = _new_series_dir(results_root, spec.name)
    env = dict(os.environ)
    # The runs import the very tree this series runs from, whatever is installed.
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")

    finished: list[dict] = []
    stopped_by: int | None = None
    failed_to_start = False
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        for i, seed in enumerate(range(args.seed, args.seed + args.runs), 1):
            _say(f"series {series_dir}: run {i}/{args.runs}, seed {seed}")
            # The runner makes <results>/<REF>/<series id>/<run id>: the run is at <series>/seed<k>.
            cmd = [sys.executable, "-m", "dawnbench", "run", spec.name, *forwarded, "--seed", str(seed),
                   "--results", str(results_root), "--series-id", series_dir.name, "--run-id", f"seed{seed}"]
            # Its own process group: a Ctrl-C reaches the series alone, which passes it on exactly once, so
            # the run ends as DNC with its files written (a second signal could cut that short). And SIGTERM
            # when the series dies, even by SIGKILL: no run goes on alone.
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, process_group=0,
                                    preexec_fn=_terminate_with(os.getpid()))
            try:
                code = proc.wait()
            except (KeyboardInterrupt, Stopped) as e:
                stopped_by = _signal_of(e)
                _stop(proc, stopped_by, seed)       # its folder and logs stay; it is not counted
                break
            folder = series_dir / f"seed{seed}"
            result = _read_result(folder)
            if result is None:
                if code == 2 and not folder.exists():   # a usage error, its line printed above: the next would repeat it
                    failed_to_start = True
                    break
                _say(f"seed {seed}: the run's process exited {code} without a result.json; counted as DNC")
                result = {"seed": seed, "status": runner.DNC, "run_dir": folder.name if folder.exists() else None}
            finished.append(result)
            # After every run, so a series that is killed still leaves the runs it finished summarized.
            _write_summary(series_dir, finished, args.runs, interrupted=False, in_progress=i < args.runs)
    except (KeyboardInterrupt, Stopped) as e:
        stopped_by = _signal_of(e)
    finally:
        signal.signal(signal.SIGTERM, previous)

    if failed_to_start and not finished:
        try:
            series_dir.rmdir()     # nothing ran: leave nothing behind
        except OSError:
            pass
        return 2
    summary = _write_summary(series_dir, finished, args.runs, interrupted=stopped_by is not None, in_progress=False)
    for line in table(summary):
        print(line)
    if stopped_by is not None:
        _say(f"series interrupted: summary.json covers the {len(finished)} run(s) that finished")
    print(f"summary: {series_dir / SUMMARY}")
    if stopped_by is not None:
        return 128 + stopped_by
    if failed_to_start:
        return 2
    return 0 if summary["converged"] == args.runs else 1


def _write_summary(series_dir: Path, finished: list[dict], requested: int, *, interrupted: bool,
                   in_progress: bool) -> dict:
    """summary.json of the runs finished so far, written atomically (temp file + rename)."""
    summary = summarize(finished)
    summary.update(requested_runs=requested, interrupted=interrupted, in_progress=in_progress)
    outputs.write_json(series_dir / SUMMARY, summary)
    return summary


def _new_series_dir(results_root: Path, reference: str) -> Path:
    """results/<REF>/<time>-series, a new folder; a read-only or full results folder is one line."""
    stem = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-series"
    for n in range(1, 1000):
        try:
            return outputs.new_run_dir(results_root, reference, 0, run_id=stem if n == 1 else f"{stem}-{n}")
        except outputs.RunDirExists:      # never reuse a folder: the next name
            continue
    raise UsageError(f"could not create a series folder under {results_root / reference}")


def _terminate_with(parent: int):
    """A preexec function: the child gets SIGTERM when `parent` dies, however it dies (Linux prctl)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)     # loaded here: the child only calls it

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:     # the series died before the line above took effect
            os._exit(128 + signal.SIGTERM)
    return preexec


def _raise_stopped(signum, frame):
    raise Stopped()


def _signal_of(exc: BaseException) -> int:
    return int(signal.SIGTERM if isinstance(exc, Stopped) else signal.SIGINT)


def _stop(proc: subprocess.Popen, signum: int, seed: int) -> None:
    _say(f"stopping the run of seed {seed}: it writes its result as DNC (Ctrl-C again to kill it)")
    try:
        proc.send_signal(signum)
        proc.wait(timeout=STOP_GRACE_SECONDS)
    except (KeyboardInterrupt, Stopped, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


def _read_result(folder: Path) -> dict | None:
    try:
        result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict):
        return None
    result["run_dir"] = folder.name
    return result


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
