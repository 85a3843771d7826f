"""Repeated runs: `dawnbench run REF --runs N` trains seeds SEED..SEED+N-1, each in a process of its
own with the same typed options but the seed (so no framework state or cache of one run reaches the
next, and a crash costs one run), and summarizes their
time-to-accuracy: the stability study of the DAWNBench v1 paper.

    results/<REF>/<series id>/seed<k>/       each a normal run folder
    results/<REF>/<series id>/summary.json   summarize() of those runs

`summarize` is the one place the statistics are computed; the analyses reuse it. Its `acceptance`
(the task's rule, the one-sided test of the final metric, the times' interval) is dawnbench.evidence's.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import multiprocessing
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from dawnbench import evidence
from harness import datasets, dropped_signals, plan, runner, safe_write
from harness.cli import run_command
from harness.registry import ReferenceSpec, UsageError
from harness.tasks import TASKS

SUMMARY = "summary.json"
STABLE_CV = 0.05             # docs/RULES.md: stable = every run converged and cv at most this
STOP_GRACE_SECONDS = 60.0    # how long an interrupted run gets to write its DNC result before it is killed
PR_SET_PDEATHSIG = 1
PROG = "dawnbench"
# fork, not spawn: the series process holds nothing of a reference (no framework is imported in it),
# so each run starts as clean as a new process, without re-importing and re-parsing; and spawn would
# start a resource tracker beside the run.
_FORK = multiprocessing.get_context("fork")


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
    converged runs, and the series' acceptance under its task's rule (dawnbench.evidence; None for a
    task this checkout does not know). Raises ValueError for runs of different references or thresholds."""
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
    task = TASKS.get(first.get("task"))
    return {"reference": first.get("reference"), "task": first.get("task"), "metric": first.get("metric"),
            "threshold": first.get("threshold"), "official_threshold": first.get("official_threshold"),
            "n": n, "converged": converged, "fraction_converged": converged / n if n else None,
            "runs": runs,
            "tta_seconds": tta_statistics([r["tta_seconds"] for r in runs if r["tta_seconds"] is not None]),
            "acceptance": evidence.acceptance(results, task) if task is not None and results else None}


def _f(x, fmt=".2f") -> str:
    return "-" if x is None else format(x, fmt)


def table(summary: dict) -> list[str]:
    metric = summary.get("metric") or "metric"
    task = TASKS.get(summary.get("task"))
    # as the pages show the figure: an accuracy in percent, F1 or an error rate as a fraction
    shown = (lambda v: task.figure.shown(task.figure.entry_value(v))) if task else (lambda v: f"{v:.4g}")
    lines = [f"{'seed':>6}  {'status':9}  {'epochs':>6}  {metric:>7}  {'tta (s)':>9}  run"]
    for r in summary["runs"]:
        value = "-" if r["metric_value"] is None else shown(r["metric_value"])
        lines.append(f"{_f(r['seed'], 'd'):>6}  {r['status']:9}  {_f(r['epochs'], 'd'):>6}  {value:>7}  "
                     f"{_f(r['tta_seconds']):>9}  {r['run_dir'] or '-'}")
    t, fraction = summary["tta_seconds"], summary["fraction_converged"]
    lines.append(f"converged {summary['converged']}/{summary['n']}"
                 f"{'' if fraction is None else f' ({100 * fraction:.0f}%)'}; time-to-accuracy (s) over the "
                 f"converged runs: median {_f(t['median'])}, olympic mean {_f(t['olympic_mean'])}, "
                 f"min {_f(t['min'])}, max {_f(t['max'])}, cv {_f(t['cv'], '.3f')}")
    lines += acceptance_lines(summary.get("acceptance"), shown)
    if summary["n"]:
        stable = summary["converged"] == summary["n"] and t["cv"] is not None and t["cv"] <= STABLE_CV
        lines.append(f"{'stable' if stable else 'not stable'}: stable means every run converged and cv <= "
                     f"{STABLE_CV:g} (2 or more runs; docs/RULES.md)")
    return lines


def acceptance_lines(a: dict | None, shown) -> list[str]:
    """The acceptance in two lines: the verdict under the task's rule, then the figures it rests on."""
    if not a:
        return []
    ci = a["tta_ci95_seconds"]
    over = "every run" if a["rule"] == evidence.MEAN else "the converged runs"
    metric, sd = ("-" if a[k] is None else shown(a[k]) for k in ("metric_mean", "metric_stdev"))
    return [f"{a['rule']} rule: {a['verdict']}: {a['reason']}",
            f"  final metric: mean {metric}, sd {sd}, one-sided p {_f(a['p_value'], '.3g')} "
            f"against {shown(a['threshold'])}; time (s) over {over}: mean {_f(a['tta_mean_seconds'])}, median "
            f"{_f(a['tta_median_seconds'])}, 95% interval ({a['ci_method']}) "
            f"{'-' if ci is None else f'{ci[0]:.2f} to {ci[1]:.2f}'}"]


def run_series(spec: ReferenceSpec, hyperparameters: dict, opts: plan.RunOptions, runs: int,
               series_dir: Path | None = None) -> int:
    """Run the series: `opts` for seeds opts.seed .. opts.seed + runs - 1; 0 only when every run converged.
    Into `series_dir` (from new_series_dir) when given, else a new folder named by the time."""
    if runs < 1:
        raise UsageError(f"--runs {runs}: give the number of runs, 1 or more")
    if opts.run_id is not None:
        raise UsageError("--runs and --run-id do not go together: a series names its runs seed<k> inside "
                         "its own folder results/<REF>/<series id>/")
    world_size = plan.dist_env()[1]
    if world_size > 1:
        raise UsageError(f"--runs under torchrun (WORLD_SIZE={world_size}): start a series from a plain shell, "
                         f"where each run is a fresh process; for multi-process runs launch torchrun once per --seed")
    # A missing dataset fails here, once, before any folder is made (as it does for one run).
    datasets.check_present(spec.task.dataset, opts.data_root or datasets.default_data_root())
    datasets.verified_checksums(spec.task.dataset, opts.data_root or datasets.default_data_root())

    results_root = Path(opts.results_root).resolve()
    series_dir = series_dir or new_series_dir(results_root, spec.name)
    finished: list[dict] = []
    stopped_by: int | None = None
    failed_to_start = False
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        for i, seed in enumerate(range(opts.seed, opts.seed + runs), 1):
            _say(f"series {series_dir}: run {i}/{runs}, seed {seed}")
            # The runner makes <results>/<REF>/<series id>/<run id>: the run is at <series>/seed<k>.
            run_opts = dataclasses.replace(opts, seed=seed, results_root=results_root, series_id=series_dir.name,
                                           run_id=f"seed{seed}")
            folder = series_dir / run_opts.run_id
            try:
                code, result = _run_in_own_process(spec, hyperparameters, run_opts)
            except _Interrupted as e:
                stopped_by = e.signum       # the run was stopped: its folder and logs stay; it is not counted
                break
            if result is None:
                if code == 2 and not folder.exists():   # a usage error, its line printed above: the next would repeat it
                    failed_to_start = True
                    break
                _say(f"seed {seed}: the run's process exited {code} without a result; counted as DNC")
                result = {"seed": seed, "status": runner.DNC}
            result["run_dir"] = folder.name if folder.exists() else None
            finished.append(result)
            # After every run, so a series that is killed still leaves the runs it finished summarized.
            _write_summary(series_dir, finished, runs, interrupted=False, in_progress=i < runs)
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
    summary = _write_summary(series_dir, finished, runs, interrupted=stopped_by is not None, in_progress=False)
    for line in table(summary):
        print(line)
    if stopped_by is not None:
        _say(f"series interrupted: summary.json covers the {len(finished)} run(s) that finished")
    print(f"summary: {series_dir / SUMMARY}")
    if stopped_by is not None:
        return 128 + stopped_by
    if failed_to_start:
        return 2
    return 0 if summary["converged"] == runs else 1


class _Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _run_in_own_process(spec: ReferenceSpec, hyperparameters: dict, opts: plan.RunOptions) -> tuple[int, dict | None]:
    """One run of the series, `runner.run` with these typed options in a child process (a fork of
    this one, which never imports the reference's framework: the reference runs in the run's own
    sandboxed workers). Its crash or kill costs only its own result. Returns (exit code, result or
    None). A Ctrl-C or SIGTERM to the series stops the run, which writes its DNC result first, and
    raises _Interrupted."""
    reader, writer = _FORK.Pipe(duplex=False)
    proc = _FORK.Process(target=_one_run, args=(spec, hyperparameters, opts, writer, os.getpid()),
                         name=f"dawnbench-run-{opts.run_id}")
    proc.start()
    with contextlib.suppress(OSError):     # its own process group from the start (the child sets it too)
        os.setpgid(proc.pid, proc.pid)
    writer.close()
    try:
        try:
            result = reader.recv()          # before join: a large result would fill the pipe and block the child
        except EOFError:                    # it died before it could answer
            result = None
        proc.join()
    except (KeyboardInterrupt, Stopped) as e:
        _stop(proc, _signal_of(e), opts.seed)
        raise _Interrupted(_signal_of(e)) from None
    finally:
        reader.close()
    return proc.exitcode, result


def _one_run(spec: ReferenceSpec, hyperparameters: dict, opts: plan.RunOptions, writer, parent: int) -> None:
    """The child: its own process group, so a Ctrl-C reaches the series alone, which passes it on
    exactly once (a second signal could cut the DNC result short); SIGTERM when the series dies,
    even by SIGKILL, so no run goes on alone. Exits as `dawnbench run` would."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:     # the series died before the line above took effect
            os._exit(128 + signal.SIGTERM)
    outcome: list[dict] = []

    def one(_args) -> int:
        result = runner.run(spec, hyperparameters, opts)
        outcome.append(result)
        return 0 if result["status"] == runner.CONVERGED else 1

    code = run_command(one, None, PROG)
    with contextlib.suppress(OSError):    # the series may be gone (killed): the result is on disk anyway
        writer.send(outcome[0] if outcome else None)
    sys.exit(code)


def _write_summary(series_dir: Path, finished: list[dict], requested: int, *, interrupted: bool,
                   in_progress: bool) -> dict:
    """summary.json of the runs finished so far, written atomically (temp file + rename)."""
    summary = summarize(finished)
    summary.update(requested_runs=requested, interrupted=interrupted, in_progress=in_progress)
    safe_write.write_json(series_dir / SUMMARY, summary)
    return summary


def new_series_dir(results_root: Path, reference: str, stem: str | None = None) -> Path:
    """results/<REF>/<stem> (default <time>-series), a new folder (-2, -3... if taken); a read-only or
    full results folder is one line."""
    stem = stem or time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-series"
    for n in range(1, 1000):
        try:
            return safe_write.new_run_dir(results_root, reference, 0, run_id=stem if n == 1 else f"{stem}-{n}")
        except safe_write.RunDirExists:      # never reuse a folder: the next name
            continue
    raise UsageError(f"could not create a series folder under {results_root / reference}")


def _raise_stopped(signum, frame):
    if dropped_signals.dropped_here(frame):     # Python would drop the Stopped raised there: the signal again, after
        dropped_signals.send_again(signum)
        return
    raise Stopped()


def _signal_of(exc: BaseException) -> int:
    return int(signal.SIGTERM if isinstance(exc, Stopped) else signal.SIGINT)


def _stop(proc, signum: int, seed: int) -> None:
    _say(f"stopping the run of seed {seed}: it writes its result as DNC (Ctrl-C again to kill it)")
    try:
        os.kill(proc.pid, signum)
        proc.join(timeout=STOP_GRACE_SECONDS)
    except (KeyboardInterrupt, Stopped):
        pass
    if proc.exitcode is None:
        proc.kill()
        proc.join()


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
