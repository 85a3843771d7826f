"""`dawnbench reproduce RUN_OR_ENTRY [--runs N] [--runtime docker|native] [--tolerance T]`: run an
entry again and say whether it happened as claimed.

`dawnbench verify` proves that a run folder agrees with itself; an entrant who rewrites every file
of it consistently (the clock readings of the log, result.json, the TSV) passes it. Only running the
entry again shows that the figures are the entry's. This command:

1. verifies the run (a folder that does not agree with itself is not worth running again);
2. finds the run's code: the reference folder of this checkout when it hashes to the run's
   `provenance.reference_tree_sha256`, else the run's commit when this repository has it (the
   reference folder at that commit must hash the same); otherwise one line says what is missing;
3. runs that reference with the run's seed, threshold and hyperparameters, for as many epochs as the
   run had, `--runs N` times: in its image where a Docker engine answers, else natively (it says which);
4. compares: converged or not, the epoch of convergence, the metric at each epoch (within
   --metric-tolerance), and time-to-accuracy, two-sided, within a tolerance from the spread the judge
   measured here: 3 x the coefficient of variation of the reproduction's own runs (`--runs N`, N >= 2),
   at least 5%; with one run, a stated 10%; or --tolerance. Never from anything the entrant wrote (its
   entry's `runs`, its series). The claim is compared with the judge's median, either way: a claim
   faster than the code runs here is a forgery's signature, one slower a mistake, and the leaderboard
   ranks the judge's median, not the claim, so neither gains anything. On other hardware (the hardware
   and the nodes the harness saw: a node count is never more than
   the run's processes) time is not comparable: only the epochs and the metric curve are, and the
   verdict is "accuracy reproduced, time not compared (other hardware)", which the leaderboard does not
   count as reproduced. A run of N processes is run again with N local ranks (torchrun) where this
   machine has them; otherwise the record says "not tried: needs N processes";
5. prints both figures side by side and a verdict line, and writes reproduction.json into the run
   folder (dawnbench.entry_status), which the leaderboard shows.

A series (a series folder of `run --runs N`, or an entry with its <stem>.series/) is reproduced whole:
each of its seeds (`--runs K`: the first K) run once again and compared as a run is, then the series
judged by its task's rule on both sides with the same statistics (dawnbench.evidence): the verdicts
must agree and the rule's time (median or mean) is compared within --tolerance or a stated 10%. Its
record adds `series` (the rule, the seeds, both sides' acceptance), from which the verified tier ranks
the judge's figure (dawnbench.entry_status.Judged).

Exit status 0: reproduced, or accuracy reproduced with time not compared (no difference found); 1: not
reproduced; 2: a bad input, or not tried (needs more processes than here), one line.
"""
from __future__ import annotations

import dataclasses
import io
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dawnbench import challenge_record, entries, entry_status, evidence, series, series_record, stoppable
from dawnbench.entry_status import ACCURACY_ONLY, NOT_REPRODUCED, REPRODUCED
from harness import datasets, judge, local_ranks, paths, provenance, registry, safe_read, safe_write, verify_run, worker_env
from harness.arguments import (
    DATA_FOLDER,
    MAX_RUNS,
    REFERENCES_FOLDER,
    RESULTS_FOLDER,
    Parser,
    file_or_folder,
    number,
    regular_file,
    reports_errors,
    tool_main,
    whole,
)
from harness.errors import EXIT_FAILED, EXIT_OK, DawnbenchError, UsageError, command

PROG = command("reproduce")
COV_FACTOR = 3.0                # the judge's own runs: three of their standard deviations...
MIN_TIME_TOLERANCE = 0.05       # ...but never under the stability bound itself (dawnbench.series.STABLE_CV)
ONE_RUN_TOLERANCE = 0.10        # one run measures no spread: a stated figure, under a 0.85 forgery's 15%
DEFAULT_METRIC_TOLERANCE = 0.005  # the same seed and code: the metric of each epoch within half a point
RUNTIMES = ("docker", "native")
MAX_PROCESSES = 1024            # a world size beyond any machine's is not a run of this harness


class ReproduceError(UsageError):
    """A bad input, or code that is not at hand: one line."""



# ---------------------------------------------------------------- the run to reproduce

@dataclass
class Original:
    run_dir: Path               # the run; for a series, where the record goes (its folder, or its entry's <stem>.run/)
    result: dict
    env: dict
    entry: dict | None          # the entry JSON when RUN_OR_ENTRY named one
    series_dir: Path | None = None      # a series' folder (`run --runs N`, or an entry's <stem>.series/)
    series: list[dict] | None = None    # its runs' result.json, seed by seed, each with its run_dir


def locate(path: Path) -> tuple[Path, Path | None, Path | None]:
    """(the run folder, the entry JSON or None, the series folder or None) that RUN_OR_ENTRY names; for
    a series folder the run folder is the series folder itself (its record goes there)."""
    if path.is_dir():
        if (path / series.SUMMARY).is_file() and not (path / "result.json").is_file():
            return path, None, path
        if not (path / "result.json").is_file():
            raise ReproduceError(f"{path}: no result.json: give a run folder (results/<reference>/<run id>/), a series "
                                 f"folder (summary.json) or an entry JSON (entries/<Task>/train/<name>.json)")
        return path, None, None
    if path.is_file() and path.suffix == ".json":
        run_dir = entry_status.run_folder(path)
        if not run_dir.is_dir():
            raise ReproduceError(f"{path}: the code is not at hand: the entry has no run folder {run_dir.name}/ beside "
                                 f"it (a DAWNBench v1 entry, or one submitted without its run), so it names no "
                                 f"reference, seed or code to run again")
        folder = entries.series_folder(path)
        return run_dir, path, (folder if folder.is_dir() and not folder.is_symlink() else None)
    raise ReproduceError(f"{path}: neither a run folder nor an entry JSON file")


def _verified(run_dir: Path, data_root: Path | None) -> None:
    try:
        checked = verify_run.verify(run_dir, data_root)
    except verify_run.VerifyError as e:
        raise ReproduceError(str(e)) from None
    if not checked.verified:
        raise ReproduceError(f"{run_dir} does not verify ({checked.status}): `{command(f'verify {run_dir}')}` says "
                             f"why; a run that does not agree with itself is not run again")


def read_original(path: Path, data_root: Path | None) -> Original:
    run_dir, entry_path, series_dir = locate(path)
    root = run_dir if entry_path is None else entry_path.parent
    runs = None
    if series_dir is not None:
        # every run of the series, as its folder holds them (never summary.json's nor the entry's list)
        try:
            runs = series_record.read_runs(series_dir, root)
        except series_record.SeriesError as e:
            raise ReproduceError(str(e)) from None
        for r in runs:
            _verified(series_dir / r["run_dir"], data_root)
        split = [name for name, value in challenge_record.identity(runs).items() if isinstance(value, list)]
        if split or len({repr(r.get("world_size", 1)) for r in runs}) > 1:
            raise ReproduceError(f"{series_dir}: its runs differ in {', '.join(split) or 'world_size'}: not one series "
                                 f"of one code (run the series again)")
    if runs is None or run_dir != series_dir:
        _verified(run_dir, data_root)
    try:
        if runs is not None and run_dir == series_dir:
            result = {k: v for k, v in runs[0].items() if k != "run_dir"}
            first = series_dir / runs[0]["run_dir"]
            env = safe_read.read_json(first / "env.json", root) if (first / "env.json").is_file() else {}
        else:
            result = safe_read.read_json(run_dir / "result.json", root)
            env = safe_read.read_json(run_dir / "env.json", root) if (run_dir / "env.json").is_file() else {}
        entry = safe_read.read_json(entry_path, root) if entry_path else None
    except safe_read.Refused as e:
        raise ReproduceError(f"{run_dir}: {e.reason}") from None
    if runs is None and isinstance(entry, dict) and isinstance(entry.get("runs"), dict) and "rules_version" in entry:
        raise ReproduceError(f"{entry_path}: the entry gives a series' figures, but its runs "
                             f"({entries.series_folder(entry_path).name}/) are not beside it: nothing to run again "
                             f"(submit the series again)")
    world = result.get("world_size", 1)
    if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world <= MAX_PROCESSES:
        raise ReproduceError(f"{run_dir}/result.json: world_size is {world!r}, not a number of processes from 1 to "
                             f"{MAX_PROCESSES}: not a run of this harness")
    for name in ("reference", "seed", "threshold", "hyperparameters"):
        if name not in result:
            raise ReproduceError(f"{run_dir}/result.json has no {name}: not a run of this harness")
    paths.check_name(result["reference"], "the run's reference")
    return Original(run_dir, result, env if isinstance(env, dict) else {}, entry if isinstance(entry, dict) else None,
                    series_dir, runs)


# ---------------------------------------------------------------- the code

@dataclass
class Code:
    references: Path        # the folder holding <reference>/ to run
    root: Path              # what the run imports harness/ and common/ from: always this checkout's (the judge's)
    source: str             # where the code came from, in words
    outside: list[str] = field(default_factory=list)   # what the run's commit changes outside its reference folder


def find_code(result: dict, references: Path | None, workdir: Path) -> Code:
    """The run's code: this checkout's reference folder when it hashes to the run's, else the run's
    commit from this repository (its reference folder only, extracted into `workdir`); ReproduceError
    naming what is missing. The judge is never the run's: harness/ and common/ are always this
    checkout's, and whatever the run's commit changes outside its reference folder is listed (`outside`)."""
    name = result["reference"]
    recorded = _dict(result.get("provenance")).get("reference_tree_sha256")
    git = _dict(result.get("git"))
    commit = git.get("commit") or result.get("commitHash")
    commit = commit if isinstance(commit, str) and provenance.COMMIT_RE.fullmatch(commit) else None
    if not isinstance(recorded, str):
        raise ReproduceError("the code is not at hand: the run records no hash of its reference folder "
                             "(provenance.reference_tree_sha256), so no code can be shown to be the code that ran")
    root = registry.references_root(references).resolve()
    here = root / name
    found = _hash(here)
    top = provenance._git(["rev-parse", "--show-toplevel"], root) if root.is_dir() else None
    repo = Path(top.stdout.strip()) if top is not None and top.returncode == 0 else None
    probe = provenance._git(["cat-file", "-e", f"{commit}^{{commit}}"], repo) if commit and repo else None
    has_commit = probe is not None and probe.returncode == 0
    folder = None
    if repo is not None:
        relative = root.relative_to(repo.resolve())
        folder = str(relative / name) if str(relative) != "." else name
    outside = changed_outside(repo, commit, folder) if has_commit else []
    if found == recorded:
        return Code(root, paths.PACKAGE_PARENT, f"{here} (its tree sha256 is the run's)", outside)
    missing = [f"{here} is absent" if found is None else
               f"{here} hashes {found[:12]}..., the run's reference folder {recorded[:12]}..."]
    if commit is None:
        missing.append("and the run names no commit")
    elif repo is None:
        missing.append(f"and no git repository holds {root} to take commit {commit[:12]} from")
    else:
        if not has_commit:
            url = result.get("codeURL") if isinstance(result.get("codeURL"), str) else "the entry's repository"
            missing.append(f"and commit {commit[:12]} is not in the repository at {repo} (fetch it: "
                           f"git -C {repo} fetch {url} {commit}, then run this again)")
        else:
            tree = _extract(repo, commit, folder, workdir)
            at_commit = tree / root.relative_to(repo.resolve())
            hashed = _hash(at_commit / name)
            if hashed == recorded:
                return Code(at_commit, paths.PACKAGE_PARENT,
                            f"commit {commit[:12]} of {repo} (its {name} tree sha256 is the run's; harness/ and "
                            f"common/ of this checkout)", outside)
            missing.append(f"and at commit {commit[:12]} it " + ("is absent" if hashed is None else
                           f"hashes {hashed[:12]}... (the run had changes that were never committed)"))
    raise ReproduceError(f"the code of {name} is not at hand: " + " ".join(missing))


def _dict(value) -> dict:
    """A field of an untrusted file that should be an object, or {}."""
    return value if isinstance(value, dict) else {}


def _hash(directory: Path) -> str | None:
    try:
        return provenance.tree_hash(directory) if directory.is_dir() else None
    except OSError:
        return None


def _extract(repo: Path, commit: str, folder: str, workdir: Path) -> Path:
    """`folder` (the reference's, relative to the repository) as it was at `commit`, and nothing else
    of that commit: the judge (harness/, common/) is this checkout's. Under workdir/checkout (git
    archive: the repository and its work tree are not touched)."""
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit, "--", folder],
                             capture_output=True, timeout=300)
    if archive.returncode:
        detail = archive.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        raise ReproduceError(f"git archive of {folder} at commit {commit[:12]} failed in {repo}: {detail[0]}")
    target = workdir / "checkout"
    try:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(target, filter="data")       # no absolute path, no link out of the folder
    except tarfile.TarError as e:
        raise ReproduceError(f"{folder} at commit {commit[:12]} cannot be taken out of {repo}: {e}") from None
    return target


def changed_outside(repo: Path, commit: str, folder: str) -> list[str]:
    """What `commit` changes outside `folder` (its reference folder), one phrase per file ("harness/x.py
    (modified)"), against where it forked from this checkout (the merge base with HEAD; HEAD
    itself for a commit of unrelated history). None of it runs: the judge is this checkout's."""
    base = provenance._git(["merge-base", "HEAD", commit], repo)
    base_commit = base.stdout.strip() if base is not None and base.returncode == 0 and base.stdout.strip() else "HEAD"
    diff = provenance._git(["diff", "--no-renames", "--name-status", "-z", base_commit, commit, "--", ".",
                            f":(exclude){folder}"], repo)
    if diff is None or diff.returncode:
        detail = (diff.stderr.strip().splitlines() or ["no answer"])[0] if diff is not None else "git did not answer"
        return [f"files unknown (git diff of commit {commit[:12]} against {base_commit[:12]} failed: {detail})"]
    words = diff.stdout.split("\0")
    return [f"{path} ({CHANGES.get(status[:1], 'changed')})" for status, path in zip(words[0::2], words[1::2])
            if status and path]


CHANGES = {"A": "added", "M": "modified", "D": "deleted", "T": "type changed"}


# ---------------------------------------------------------------- running it again

def choose_runtime(asked: str | None) -> tuple[str, str]:
    """(runtime, the line that says which and why): native unless asked, because there the judge is this
    checkout's, in the tools environment. In docker the judge runs inside the reference's image, whose
    layers the entry's own Dockerfile builds and may rewrite (docs/RULES.md, "The judge in an image"): such
    a reproduction is recorded, and never ranks as the judge's measurement (dawnbench.entry_status)."""
    from dawnbench import containers
    if asked == "docker":
        containers.engine()         # no engine: its one line, before anything runs
        return "docker", ("runtime: docker, in the reference's pinned image (--runtime docker): the judge there is the "
                          "image's, so this reproduction is recorded but not ranked as the judge's measurement")
    return "native", ("runtime: native (--runtime native)" if asked == "native" else
                      "runtime: native: the judge is this checkout's (--runtime docker runs it in the reference's "
                      "image, unranked)")


def overrides(result: dict, code: Code) -> list[str]:
    """`--set` options that give the run's recorded hyperparameters where they differ from the defaults."""
    spec = registry.load_spec(result["reference"], code.references)
    recorded = result["hyperparameters"] if isinstance(result["hyperparameters"], dict) else {}
    sets = []
    for key, value in sorted(recorded.items()):
        if key not in spec.hyperparameters:
            raise ReproduceError(f"the run's hyperparameter {key!r} is not in {spec.name}'s reference.toml at this "
                                 f"code: not the code that ran")
        if value == spec.hyperparameters[key]:
            continue
        text = (",".join(str(v) for v in value) if isinstance(value, list) else
                str(value).lower() if isinstance(value, bool) else str(value))
        if registry._convert(key, text, spec.hyperparameters[key]) != value:
            raise ReproduceError(f"the run's hyperparameter {key}={value!r} cannot be given as --set {key}=...; "
                                 f"reproduce it by hand")
        sets += ["--set", f"{key}={text}"]
    return sets


def _python(name: str, asked: Path | None) -> str:
    """The workers' interpreter of a native run: --python, else the reference's environment (make
    setup), else this one. The harness itself runs this process's (the tools environment's), which no
    reference's requirements reach (issue 33)."""
    if asked is not None:
        return str(asked)
    checkout = paths.checkout_root()
    venv = checkout / ".venv" / name / "bin" / "python" if checkout else None
    return str(venv) if venv is not None and venv.is_file() else sys.executable


def processes(result: dict) -> int:
    """The number of processes (ranks) the run had: its world size."""
    world = result.get("world_size", 1)
    return world if isinstance(world, int) and not isinstance(world, bool) and world >= 1 else 1


def available_processes(env: dict) -> int:
    """How many ranks this machine can run as the run ran them: one per GPU where the run had GPUs
    (`nvidia-smi -L` counts them), else one per CPU this process may use."""
    if env.get("gpus"):
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return 0
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return 0
        return sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU ")) if listed.returncode == 0 else 0
    return len(os.sched_getaffinity(0))


def ranks_here(original: Original, runtime: str, said: str, asked: str | None) -> tuple[str, str]:
    """(runtime, its line) for the run's ranks: a run of N processes is reproduced natively with N
    local ranks when this machine has them; otherwise reproduction.json records "not tried: needs N
    processes" and the command stops with that line (exit 2)."""
    needed = processes(original.result)
    if needed == 1:
        return runtime, said
    if asked == "docker":
        raise ReproduceError(f"{original.run_dir}: a run of {needed} processes is reproduced natively ("
                             f"{needed} local ranks): leave out --runtime docker")
    have = available_processes(original.env)
    if have < needed:
        what = "GPUs" if original.env.get("gpus") else "CPUs this process may use"
        reason = f"needs {needed} processes (the run's world size), this machine has {have} {what}"
        written = write_record(original.run_dir, {
            "verdict": entry_status.NOT_TRIED, "reason": reason, "differences": [], "notes": [],
            "reproduced_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "log_sha256": entry_status.log_sha256(original.run_dir, original.result), "reproduced": []})
        raise ReproduceError(f"{entry_status.NOT_TRIED}: {original.run_dir}: {reason}; run it where it has them "
                             f"({written} says so)")
    return "native", f"runtime: native, {needed} local ranks (the run's world size)"


def run_command(original: Original, code: Code, runtime: str, data_root: Path, results: Path, run_args: list[str],
                python: Path | None) -> list[str]:
    """The command line of one reproduction: the harness as a judge process of this (the tools) Python
    (harness.judge: -I, no start-up hook), whose workers run the reference's environment
    ($DAWNBENCH_WORKER_PYTHON, run_once); for a run of N ranks, the harness's own launcher starting N
    local ranks of that harness (`harness.local_ranks`: one loopback-only network for them), as `make run
    NPROC=N` does."""
    name = original.result["reference"]
    if runtime == "docker":
        return judge.command("dawnbench.containers", "run", name, "--data", str(data_root),
                             "--results", str(results), "--", *run_args)
    harness_args = ["harness", "run", name, "--references", str(code.references), "--data", str(data_root),
                    "--results", str(results), *run_args]
    ranks = processes(original.result)
    if ranks == 1:
        return judge.command(*harness_args)
    # the rank launcher is the judge's too, never the reference's torchrun (issue 46)
    return local_ranks.launcher_command(ranks, *harness_args[1:])


def _whole(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def run_once(original: Original, code: Code, runtime: str, data_root: Path, results: Path, run_id: str,
             python: Path | None) -> Path:
    """One run of the reference as the original ran; its run folder."""
    r = original.result
    name = r["reference"]
    run_args = ["--seed", str(r["seed"]), "--threshold", repr(float(r["threshold"])),
                # as many epochs as the run had; never fewer than its first evaluated one (a run that
                # evaluates no epoch at its last is refused), for a run that ended before it
                "--max-epochs", str(max(int(r.get("epochs") or 0), _whole(r.get("eval_from_epoch")), 1)),
                "--run-id", run_id, "--no-progress",
                *overrides(r, code)]
    env = judge.environment(**{paths.REFERENCES_ENV: str(code.references)})
    if runtime != "docker":
        env[worker_env.WORKER_PYTHON_ENV] = _python(name, python)
    command = run_command(original, code, runtime, data_root, results, run_args, python)
    ranks = processes(r)
    how = "harness run" if ranks == 1 else f"harness run ({ranks} local ranks)"
    _say(f"run {run_id}: {how} {name} (seed {r['seed']}, threshold {r['threshold']}, "
         f"at most {run_args[5]} epochs)")
    # its own process group: a SIGTERM or Ctrl-C to reproduce reaches the run through stoppable.stop, once
    with stoppable.signals_stop(), stoppable.popen(command, cwd=code.root, env=env, stdout=subprocess.PIPE,
                                                   stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        try:
            for line in proc.stdout:          # the run's own lines, on stderr: stdout is the comparison's
                sys.stderr.write("  | " + line)
            code_ = proc.wait()
        except KeyboardInterrupt as e:            # SIGTERM or Ctrl-C: the run writes its DNC, then nothing is left
            stoppable.stop(proc, stoppable.signum_of(e), lambda line: sys.stderr.write("  | " + line))
            signum = stoppable.signum_of(e)
            raise stoppable.Interrupted(f"interrupted ({signal.Signals(signum).name}): the run {results / name / run_id} "
                                        f"was stopped (DNC); nothing is compared or recorded", signum) from None
    run_dir = results / name / run_id
    if not (run_dir / "result.json").is_file():
        raise ReproduceError(f"the run did not finish (exit {code_}, no {run_dir}/result.json): its output is above")
    return run_dir


# ---------------------------------------------------------------- comparing

def figures(result: dict) -> dict:
    metric = result.get("metric")
    history = result.get("history") if isinstance(result.get("history"), list) else []
    return {"status": result.get("status"), "epochs": result.get("epochs"), "metric": metric,
            "threshold": result.get("threshold"), "metric_value": result.get("metric_value"),
            "tta_seconds": result.get("tta_seconds"), "wall_seconds": result.get("wall_seconds"),
            "curve": [{"epoch": row.get("epoch"), metric: row.get(metric), "tta_seconds": row.get("tta_seconds")}
                      for row in history if isinstance(row, dict)]}


def environment(result: dict, env: dict) -> dict:
    git, isolation = _dict(result.get("git")), _dict(result.get("isolation"))
    return {"hardware": result.get("hardware"), "nodes": result.get("nodes"), "world_size": result.get("world_size"),
            "framework": result.get("framework"), "runtime": "docker" if result.get("image_digest") else "native",
            "image_digest": result.get("image_digest"), "commit": git.get("commit"), "dirty": git.get("dirty"),
            "reference_tree_sha256": _dict(result.get("provenance")).get("reference_tree_sha256"),
            "isolation": isolation.get("mode"), "hostname": env.get("hostname"), "platform": env.get("platform"),
            "python": env.get("python"), "cpu": env.get("cpu"), "gpus": env.get("gpus"),
            "packages": env.get("packages"),
            # what the workers' environment held (harness.worker_env), compared distribution by distribution
            "worker_environment": _dict(env.get("worker_environment")) or None}


def time_tolerance(times: list, asked: float | None) -> tuple[float, str]:
    """(relative tolerance, where it comes from) for comparing a claimed time-to-accuracy with the
    judge's: --tolerance (the maintainer's), else the spread the judge measured here, 3 x the
    coefficient of variation of the reproduction's own converged runs, at least 5%; with one run, which
    measures no spread, a stated 10%. Nothing the entrant wrote sets it: not its entry's `runs`, not
    its series (a folder it can rewrite consistently, spread and all)."""
    if asked is not None:
        return asked, "--tolerance"
    times = [float(t) for t in times if _finite(t) and t > 0]
    if len(times) < 2:
        return ONE_RUN_TOLERANCE, (f"the stated {ONE_RUN_TOLERANCE:.0%}: one run here measures no spread "
                                   f"(--runs 3 measures it)")
    cv = statistics.stdev(times) / statistics.mean(times)
    return max(COV_FACTOR * cv, MIN_TIME_TOLERANCE), (
        f"{COV_FACTOR:g} x the cv {cv:.3f} of the {len(times)} reproduction runs here, at least "
        f"{MIN_TIME_TOLERANCE:.0%}")


def time_check(claimed: float, times: list, tolerance: float, label: str = "time-to-accuracy") -> tuple[bool, str]:
    """The rule that decides whether a claimed time-to-accuracy is reproduced (docs/RULES.md,
    "Reproduction"): the claim within `tolerance` of the judge's median, relative to that median, on
    either side. (within, the comparison in words with both figures, `label` naming the figure)."""
    median = statistics.median(times)
    off = (claimed - median) / median if median > 0 else math.inf
    words = (f"{label}: {claimed:.3f} s claimed, {median:.3f} s reproduced"
             f"{' (median)' if len(times) > 1 else ''} (the claim {off:+.0%} of it, tolerance \u00b1{tolerance:.0%})")
    return abs(off) <= tolerance, words


def logged_hardware(run_dir: Path, recorded: object) -> object:
    """The hardware the harness saw, as its own log says it (`submission_platform`, written before the
    reference's code ran), rather than result.json's field, which is a copy of it; the field when the
    log has none (a run of an older harness)."""
    try:
        logged = [e["value"] for e in verify_run.read_events(run_dir) if e.get("key") == "submission_platform"]
    except (verify_run.VerifyError, OSError, ValueError):
        return recorded
    return logged[0] if len(logged) == 1 and isinstance(logged[0], str) else recorded


NODES_IN_LABEL = re.compile(r"(, \d+ nodes| \(\d+ nodes\))")


def seen_nodes(env: dict) -> int:
    """The machines a run had, as far as the harness saw: no more than its processes (a claim of
    `--nodes 2` on a run of one process is a claim, never checked on a native run)."""
    nodes, world = env.get("nodes"), env.get("world_size")
    nodes = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1 else 1
    world = world if isinstance(world, int) and not isinstance(world, bool) and world >= 1 else 1
    return min(nodes, world)


def machine(env: dict) -> tuple:
    """What a run's time depends on: its hardware (the label without the node count it was given)
    and the nodes the harness saw."""
    label = env.get("hardware") if isinstance(env.get("hardware"), str) else ""
    label = NODES_IN_LABEL.sub("", label)
    claimed, seen = env.get("nodes"), seen_nodes(env)
    counted = re.fullmatch(r"(\d+) x (.*)", label)       # "2 x NVIDIA H100": every node's accelerators
    if counted and isinstance(claimed, int) and not isinstance(claimed, bool) and claimed > seen:
        label = f"{int(counted[1]) // claimed * seen} x {counted[2]}"
    return label, seen, env.get("world_size") or 1


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def compare(claimed: dict, claimed_env: dict, runs: list[tuple[dict, dict]], tolerance: float,
            metric_tolerance: float) -> tuple[str, list[str], list[str]]:
    """(verdict, differences, notes): every difference between the claim and each reproduction,
    each with both figures; the notes say what was not compared and why."""
    differences, notes = [], []
    for k, (fig, _) in enumerate(runs, start=1):
        differences += run_differences(claimed, fig, f" (run {k})" if len(runs) > 1 else "", metric_tolerance)
    differences += _environment_differences(claimed_env, runs, notes)
    other = [env["hardware"] for _, env in runs if machine(env) != machine(claimed_env)]
    converged = claimed["status"] == "converged" and all(f["status"] == "converged" for f, _ in runs)
    if other:
        notes.append(f"hardware: {claimed_env['hardware']} claimed, {other[0]} here: time is not comparable; "
                     f"compared the epochs and the metric curve only")
    elif converged:
        within, words = time_check(claimed["tta_seconds"], [f["tta_seconds"] for f, _ in runs], tolerance)
        (notes if within else differences).append(words)
    if differences:
        return NOT_REPRODUCED, differences, notes
    return (ACCURACY_ONLY if other else REPRODUCED), differences, notes


def run_differences(claimed: dict, fig: dict, which: str, metric_tolerance: float) -> list[str]:
    """How one reproduction (`fig`) differs from the claimed run: converged or not, the epochs, the metric at
    each epoch (within `metric_tolerance`); each with both figures and `which` run it is."""
    metric, differences = claimed["metric"], []
    if fig["status"] != claimed["status"]:
        differences.append(f"status: {claimed['status']} claimed, {fig['status']} reproduced{which}")
    if fig["epochs"] != claimed["epochs"]:
        what = "epoch of convergence" if claimed["status"] == "converged" else "epochs"
        differences.append(f"{what}: {claimed['epochs']} claimed, {fig['epochs']} reproduced{which}")
    reproduced = {row["epoch"]: row[metric] for row in fig["curve"]}
    for row in claimed["curve"]:
        value, again = row[metric], reproduced.get(row["epoch"])
        if _finite(value) and _finite(again) and abs(again - value) > metric_tolerance:
            differences.append(f"{metric} at epoch {row['epoch']}: {value:.4f} claimed, {again:.4f} reproduced"
                               f"{which} (tolerance {metric_tolerance:g})")
    return differences


def _environment_differences(claimed_env: dict, runs: list[tuple[dict, dict]], notes: list[str],
                             labels: list[str] | None = None) -> list[str]:
    """The distributions (and start-up files) by which each reproduction's workers' environment differs
    from the claim's, one difference per run (`labels`: each run's words, default "(run k)"); a note where
    they cannot be compared."""
    claimed = claimed_env.get("worker_environment")
    if not claimed:
        notes.append("workers' environment: the claim records none (a run before issue 33); not compared")
        return []
    found = []
    for k, (_, env) in enumerate(runs, start=1):
        which = labels[k - 1] if labels else f" (run {k})" if len(runs) > 1 else ""
        again = env.get("worker_environment")
        if env.get("runtime") != claimed_env.get("runtime"):
            notes.append(f"workers' environment{which}: {claimed_env.get('runtime')} claimed, {env.get('runtime')} "
                         f"here: an image and a native environment hold different tools; not compared")
        elif not again:
            found.append(f"workers' environment{which}: the reproduction recorded none")
        elif again.get("sha256") != claimed.get("sha256"):
            differ = worker_env.differences(claimed, again)
            found.append(f"workers' environment{which}: claimed vs reproduced: "
                         f"{'; '.join(differ) if differ else 'the recorded hashes differ'}")
    return found


def series_figure(acceptance: dict) -> float | None:
    """The time a series ranks by under its rule (dawnbench.evidence): the converged runs' median under
    `single`, every run's mean under `mean`."""
    return acceptance.get("tta_mean_seconds" if acceptance.get("rule") == evidence.MEAN else "tta_median_seconds")


def compare_series(task, rule: str, claims: list[tuple[dict, dict, dict]], runs: list[tuple[dict, dict, dict]],
                   tolerance: float, metric_tolerance: float) -> tuple[str, list[str], list[str], dict]:
    """(verdict, differences, notes, {"claimed", "reproduced"}: each side's acceptance) of a series reproduced
    seed by seed: `claims` and `runs` are (result.json, figures, environment) per seed, in the same order.
    Each seed's run is compared as a run is (status, epochs, metric curve, workers' environment); then the
    series as its rule judges it, the same statistics (dawnbench.evidence) on each side: the verdict, and, on
    the same hardware, the rule's time (`series_figure`) claimed against the judge's within `tolerance`."""
    differences, notes = [], []
    labels = [f" (seed {result['seed']})" for result, _, _ in claims]
    for (_, claimed, _), (_, fig, _), which in zip(claims, runs, labels):
        differences += run_differences(claimed, fig, which, metric_tolerance)
    for (_, _, claimed_env), (_, fig, env), which in zip(claims, runs, labels):
        differences += _environment_differences(claimed_env, [(fig, env)], notes, [which])
    try:
        sides = {"claimed": evidence.acceptance([r for r, _, _ in claims], task, rule),
                 "reproduced": evidence.acceptance([r for r, _, _ in runs], task, rule)}
    except evidence.EvidenceError as e:
        raise ReproduceError(f"the series cannot be judged: {e}") from None
    claimed, judged = sides["claimed"], sides["reproduced"]
    if claimed["verdict"] != judged["verdict"]:
        differences.append(f"acceptance ({rule} rule): {claimed['verdict']} claimed, {judged['verdict']} reproduced "
                           f"({judged['reason']})")
    other = [env["hardware"] for (_, _, claimed_env), (_, _, env) in zip(claims, runs)
             if machine(env) != machine(claimed_env)]
    was, now = series_figure(claimed), series_figure(judged)
    statistic = "mean" if rule == evidence.MEAN else "median"
    if other:
        notes.append(f"hardware: {claims[0][2]['hardware']} claimed, {other[0]} here: time is not comparable; "
                     f"compared the epochs, the metric curves and the acceptance only")
    elif was is None or now is None:
        notes.append(f"time-to-accuracy: not compared ({rule} rule: no time {'claimed' if was is None else 'here'})")
    else:
        within, words = time_check(was, [now], tolerance, f"series time-to-accuracy ({rule} rule, the {statistic} of "
                                                          f"{len(runs)} seeds' runs)")
        (notes if within else differences).append(words)
    if differences:
        return NOT_REPRODUCED, differences, notes, sides
    return (ACCURACY_ONLY if other else REPRODUCED), differences, notes, sides


def series_table(claims: list[tuple[dict, dict, dict]], runs: list[tuple[dict, dict, dict]], sides: dict) -> list[str]:
    """A series reproduced, seed by seed (status, epochs, time claimed and here), and each side's verdict."""
    def cell(fig: dict) -> str:
        tta = fig["tta_seconds"]
        return f"{fig['status']} {fig['epochs']} {'-' if tta is None else f'{tta:.3f}'}"
    lines = [f"{'seed':>6}  {'claimed (status epochs tta s)':<34}  reproduced (status epochs tta s)"]
    for (result, claimed, _), (_, fig, _) in zip(claims, runs):
        lines.append(f"{result['seed']:>6}  {cell(claimed):<34}  {cell(fig)}")
    for side, a in sides.items():
        ci = a.get("tta_ci95_seconds")
        figure = series_figure(a)
        lines.append(f"{side}: {a['rule']} rule {a['verdict']}, {'mean' if a['rule'] == evidence.MEAN else 'median'} "
                     f"{'-' if figure is None else f'{figure:.3f}'} s, 95% interval "
                     f"{'-' if ci is None else f'{ci[0]:.3f}-{ci[1]:.3f}'} s ({a['ci_method']}), one-sided p "
                     f"{'-' if a.get('p_value') is None else format(a['p_value'], '.3g')}")
    return lines


def side_by_side(claimed: dict, claimed_env: dict, runs: list[tuple[dict, dict]]) -> list[str]:
    """The figures of the claim and of each reproduction, one row per figure."""
    metric = claimed["metric"]

    def cell(value, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    heads = ["claimed"] + [f"reproduced{f' {k}' if len(runs) > 1 else ''}" for k in range(1, len(runs) + 1)]
    every = [claimed, *(f for f, _ in runs)]
    rows = [("status", 0, [f["status"] for f in every]), ("epochs", 0, [f["epochs"] for f in every])]
    for n in sorted({row["epoch"] for f in every for row in f["curve"]}):
        rows.append((f"{metric} at epoch {n}", 4,
                     [next((row[metric] for row in f["curve"] if row["epoch"] == n), None) for f in every]))
    rows.append(("time-to-accuracy (s)", 3, [f["tta_seconds"] for f in every]))
    rows.append(("hardware", 0, [claimed_env["hardware"]] + [e["hardware"] for _, e in runs]))
    rows.append(("runtime", 0, [claimed_env["runtime"]] + [e["runtime"] for _, e in runs]))
    width = max(len(label) for label, _, _ in rows)
    table = [[cell(v, digits) for v in values] for _, digits, values in rows]
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(heads)]
    lines = [" " * width + "  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths))]
    for (label, _, _), cells in zip(rows, table):
        lines.append(label.ljust(width) + "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)))
    return [line.rstrip() for line in lines]


# ---------------------------------------------------------------- the command

def parse_tolerance(text: str) -> float:
    """A relative tolerance: 0.25 or 25%."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"--tolerance {text}: give a positive fraction or percentage of the claimed "
                         f"time-to-accuracy, e.g. 0.25 or 25%")
    return value


def build_parser(p: Parser | None = None) -> Parser:
    """The options, on `p` (dawnbench.cli's `reproduce`, in the one tree) or on a parser of its own
    (`python -m dawnbench.reproduce`)."""
    p = p if p is not None else Parser(prog=PROG)
    p.description = ("Run an entry again from its run's provenance and compare: converged or not, the epoch, "
                     "the metric at each epoch, time-to-accuracy.")
    p.add_argument("target", type=file_or_folder("", "give a run folder (results/<reference>/<run id>/), a series "
                                                       "folder or a training entry JSON"), metavar="RUN_SERIES_OR_ENTRY",
                   help="a run folder (results/<reference>/<run id>/), a series folder (run --runs N), or a training "
                        "entry JSON with its <stem>.run/ (and <stem>.series/)")
    p.add_argument("--runs", type=whole("--runs", 1, MAX_RUNS, 3), default=None, metavar="N",
                   help="a run: run it N times with the run's seed, time compared by the median (default 1); a "
                        "series: run its first N seeds once each (default all)")
    p.add_argument("--runtime", default=None, metavar="docker|native",
                   help="docker: the reference's pinned image; native: here (default docker when an engine answers)")
    p.add_argument("--tolerance", default=None, metavar="T",
                   # argparse %-formats help: every % is written %%, the computed ones too
                   help=f"the claimed time-to-accuracy within T of the reproduction's median, either side (0.1 or "
                        f"10%%; default {COV_FACTOR:g} x the cv of the reproduction's own runs, at least "
                        f"{MIN_TIME_TOLERANCE:.0%}%, or {ONE_RUN_TOLERANCE:.0%}% for one run; never from the entry)")
    p.add_argument("--metric-tolerance", type=number("--metric-tolerance", 0, example=0.01),
                   default=DEFAULT_METRIC_TOLERANCE, metavar="D",
                   help=f"the metric at each epoch within D, absolute (default {DEFAULT_METRIC_TOLERANCE:g})")
    p.add_argument("--data", type=DATA_FOLDER, default=None, help="data root (default $DAWNBENCH_DATA or ./data)")
    p.add_argument("--references", type=REFERENCES_FOLDER, default=None, metavar="DIR",
                   help="the folder of the references (default $DAWNBENCH_REFERENCES, else ./references)")
    p.add_argument("--results", type=RESULTS_FOLDER, default=None,
                   help="where the reproduction's runs go (default ./results)")
    p.add_argument("--python", type=regular_file("--python", "give the interpreter, e.g. --python "
                                                           ".venv/<reference>/bin/python"), default=None, metavar="PATH",
                   help="native: the interpreter (default .venv/<reference>/bin/python of make setup, else this one)")
    return p


def _check(args) -> tuple[float | None, str | None]:
    if args.runtime not in (None, *RUNTIMES):
        raise UsageError(f"--runtime {args.runtime}: expected docker or native")
    if args.python is not None and not os.access(args.python, os.X_OK):
        raise UsageError(f"--python {args.python}: not an executable")
    if not args.target.exists():
        raise UsageError(f"{args.target}: no such run folder or entry")
    return (None if args.tolerance is None else parse_tolerance(args.tolerance)), args.runtime


def _run(args) -> int:
    asked_tolerance, asked_runtime = _check(args)
    data_root = Path(args.data or datasets.default_data_root()).resolve()
    original = read_original(args.target, data_root)
    if not os.access(original.run_dir, os.W_OK):
        raise UsageError(f"{original.run_dir} is not writable: {entry_status.REPRODUCTION_RECORD} goes there (copy the run "
                         f"folder, or fix its permissions)")
    chosen = seeds_to_run(original, args.runs)
    results = Path(args.results or paths.results_root()).resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="dawnbench-reproduce-") as workdir:
        code = find_code(original.result, args.references, Path(workdir))
        overrides(original.result, code)             # a hyperparameter that cannot be given: before any run
        runtime, said = choose_runtime(asked_runtime)
        runtime, said = ranks_here(original, runtime, said, asked_runtime)
        _say(f"code: {code.source}")
        for line in code.outside:       # one line a file: the run's commit changes the judge, which does not run here
            _say(f"the run's commit changes {line} outside its reference folder: not run, this checkout's "
                 f"judge runs")
        _say(said)
        if chosen is not None:      # a series: the judge's own run of each of its seeds, once
            folders = [run_once(dataclasses.replace(original, result=r), code, runtime, data_root, results,
                                f"reproduce-{stamp}-seed{r['seed']}", args.python) for r in chosen]
            return _series_verdict(args, original, chosen, folders, code, runtime, asked_tolerance)
        folders = [run_once(original, code, runtime, data_root, results, f"reproduce-{stamp}-{k}", args.python)
                   for k in range(1, (args.runs or 1) + 1)]
    runs = []
    for folder in folders:
        result = safe_read.read_json(folder / "result.json", folder)
        env = safe_read.read_json(folder / "env.json", folder) if (folder / "env.json").is_file() else {}
        runs.append((figures(result), {**environment(result, env), "runtime": runtime}))
    claimed, claimed_env = figures(original.result), environment(original.result, original.env)
    claimed_env["hardware"] = logged_hardware(original.run_dir, claimed_env["hardware"])
    # the tolerance from the spread the judge measured here, never from what the entrant wrote
    tolerance, tolerance_source = time_tolerance([f["tta_seconds"] for f, _ in runs], asked_tolerance)
    verdict, differences, notes = compare(claimed, claimed_env, runs, tolerance, args.metric_tolerance)
    record = {
        "verdict": verdict, "differences": differences, "notes": notes,
        "reproduced_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "log_sha256": entry_status.log_sha256(original.run_dir, original.result),
        "code": code.source, "runtime": runtime,
        # what the run's commit changed outside its reference folder, which the reproduction did not run
        "changed_outside_reference": code.outside,
        "tolerance": {"time": tolerance, "time_source": tolerance_source, "metric": args.metric_tolerance},
        "claimed": {"run": str(original.run_dir), "figures": claimed, "environment": claimed_env},
        "reproduced": [{"run": str(folder), "figures": fig, "environment": env}
                       for folder, (fig, env) in zip(folders, runs)],
    }
    written = write_record(original.run_dir, record)
    for line in side_by_side(claimed, claimed_env, runs):
        print(line)
    for line in notes:
        print(f"note: {line}")
    detail = "; ".join(differences) if differences else (
        f"{claimed['status']}" + (f" at epoch {claimed['epochs']}" if claimed["status"] == "converged" else "")
        + f", {claimed['metric']} curve within {args.metric_tolerance:g}"
        + ("" if verdict == ACCURACY_ONLY or claimed["status"] != "converged" else
           f", time-to-accuracy within \u00b1{tolerance:.0%} of the reproduction ({tolerance_source})"))
    print(f"{verdict}: {original.run_dir}: {detail} [{runtime}; {written}]")
    return EXIT_FAILED if verdict == NOT_REPRODUCED else EXIT_OK


def seeds_to_run(original: Original, runs: int | None) -> list[dict] | None:
    """The runs of a series to run again (its first `runs` seeds, default all); None for a run."""
    if original.series is None:
        return None
    have = len(original.series)
    if runs is not None and runs > have:
        raise ReproduceError(f"--runs {runs}: the series {original.series_dir} has {have} runs (seeds "
                             f"{original.series[0]['seed']}-{original.series[-1]['seed']}): give --runs {have} or fewer")
    return original.series[:runs or have]


def series_tolerance(asked: float | None) -> tuple[float, str]:
    """(relative tolerance, where it comes from) for a series' time: --tolerance, else the stated one-run
    figure: each seed runs once here, and the spread across seeds is the recipe's, not this machine's."""
    if asked is not None:
        return asked, "--tolerance"
    return ONE_RUN_TOLERANCE, (f"the stated {ONE_RUN_TOLERANCE:.0%}: each seed runs once here, which measures no "
                               f"spread of this machine")


def _series_verdict(args, original: Original, chosen: list[dict], folders: list[Path], code: Code, runtime: str,
                    asked_tolerance: float | None) -> int:
    """Compare the judge's runs of a series' seeds with the series' own (compare_series), print it and write the
    record: `series` holds the rule and each side's acceptance, `reproduced` the judge's runs, whose figure under
    the rule the verified tier ranks (entry_status.Judged)."""
    claims, runs = [], []
    for r, folder in zip(chosen, folders):
        run_dir = original.series_dir / r["run_dir"]
        claimed = {k: v for k, v in r.items() if k != "run_dir"}
        env = _env(run_dir, original.run_dir if original.entry is None else original.run_dir.parent)
        claimed_env = environment(claimed, env)
        claimed_env["hardware"] = logged_hardware(run_dir, claimed_env["hardware"])
        claims.append((claimed, figures(claimed), claimed_env))
        result = safe_read.read_json(folder / "result.json", folder)
        runs.append((result, figures(result), {**environment(result, _env(folder, folder)), "runtime": runtime}))
    task = registry.load_spec(original.result["reference"], code.references).task
    rule = task.acceptance.rule
    tolerance, tolerance_source = series_tolerance(asked_tolerance)
    verdict, differences, notes, sides = compare_series(task, rule, claims, runs, tolerance, args.metric_tolerance)
    record = {
        "verdict": verdict, "differences": differences, "notes": notes,
        "reproduced_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "log_sha256": entry_status.log_sha256(original.run_dir, original.result),
        "code": code.source, "runtime": runtime, "changed_outside_reference": code.outside,
        "tolerance": {"time": tolerance, "time_source": tolerance_source, "metric": args.metric_tolerance},
        "series": {"folder": str(original.series_dir), "rule": rule, "seeds": [r["seed"] for r in chosen],
                   "of": len(original.series), "claimed": sides["claimed"], "reproduced": sides["reproduced"]},
        "claimed": {"run": str(original.series_dir),
                    "runs": [{"run": str(original.series_dir / r["run_dir"]), "seed": r["seed"], "figures": fig,
                              "environment": env} for r, (_, fig, env) in zip(chosen, claims)]},
        "reproduced": [{"run": str(folder), "seed": result["seed"], "figures": fig, "environment": env}
                       for folder, (result, fig, env) in zip(folders, runs)],
    }
    written = write_record(original.run_dir, record)
    for line in series_table(claims, runs, sides):
        print(line)
    for line in notes:
        print(f"note: {line}")
    of = f"{len(chosen)} of its {len(original.series)} seeds" if len(chosen) < len(original.series) else \
        f"its {len(chosen)} seeds"
    detail = "; ".join(differences) if differences else (
        f"{of} run again: each seed's status, epochs and {claims[0][1]['metric']} curve within "
        f"{args.metric_tolerance:g}, the {rule} rule {sides['reproduced']['verdict']} on both sides"
        + ("" if verdict == ACCURACY_ONLY or series_figure(sides["reproduced"]) is None else
           f", its time within \u00b1{tolerance:.0%} of the judge's ({tolerance_source})"))
    print(f"{verdict}: series {original.series_dir}: {detail} [{runtime}; {written}]")
    return EXIT_FAILED if verdict == NOT_REPRODUCED else EXIT_OK


def _env(run_dir: Path, root: Path) -> dict:
    """A run's env.json, or {} where it has none."""
    env = safe_read.read_json(run_dir / "env.json", root) if (run_dir / "env.json").is_file() else {}
    return env if isinstance(env, dict) else {}


def write_record(run_dir: Path, record: dict) -> Path:
    """run_dir/reproduction.json, atomically; an earlier record is kept as reproduction-<n>.json."""
    path = run_dir / entry_status.REPRODUCTION_RECORD
    if path.exists():
        n = 1
        while (run_dir / f"reproduction-{n}.json").exists():
            n += 1
        os.replace(path, run_dir / f"reproduction-{n}.json")
    try:
        safe_write.write_json(path, record)
    except (OSError, DawnbenchError) as e:
        raise UsageError(f"cannot write {path} ({e}); the reproduction's runs are kept: "
                         f"{', '.join(r['run'] for r in record['reproduced'])}") from None
    return path


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# The command on parsed options (dawnbench.cli runs it from the one tree).
run = reports_errors(PROG)(_run)
main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())
