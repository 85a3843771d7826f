"""`dawnbench challenge CANDIDATE --against INCUMBENT [--pairs N]`: two entries timed against each other on this
one machine, the way a speedrun's maintainers re-time a record's candidate beside its incumbent before a merge.

Each side is a reference name, a reference folder (a fork: the folder holding its reference.toml) or a run
folder or training entry JSON naming one (its code found as `dawnbench reproduce` finds it: this checkout's
reference folder when it hashes to the run's, else the run's commit; its hyperparameters given again with
--set). Both run N pairs interleaved (dawnbench.interleave: candidate then incumbent, then incumbent then
candidate, ...), pair k with seed SEED+k on both sides, each run the judge's own: `dawnbench run` as a judge
process with the side's workers in its sandbox (natively, dawnbench.compare_native.run, or in its image with
--runtime docker), at one threshold and budget for both. Nothing a side reports is read: its times are
what the harness measured here. It prints the pairs, the ratio of the times with its 95% interval, the
one-sided p that the candidate is faster, each side's acceptance verdict (dawnbench.evidence) and the machine's
load over the runs, and writes the challenge folder, which `dawnbench verify` recomputes
(dawnbench.challenge_record, docs/RULES.md "Challenges"):

    <out>/challenge.json, <out>/runs/<side>/<reference>/<side>-pair<k>-seed<s>/, <out>/runs/<side>/*.log

A SIGTERM or SIGINT stops the run under way (dawnbench.stoppable: its process group, nothing of it left), keeps
every folder, writes challenge.json of the pairs that finished marked `interrupted` (no verdict), says so in one
line and exits 128 + the signal.
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dawnbench import challenge_record, compare_native, containers, interleave, launcher, reproduce, stoppable
from dawnbench.challenge_record import CHALLENGE, SIDES
from harness import datasets, paths, registry, safe_write
from harness.arguments import (
    DATA_FOLDER,
    MAX_EPOCHS,
    MAX_RUNS,
    REFERENCES_FOLDER,
    SEED_MAX,
    Parser,
    folder,
    reports_errors,
    tool_main,
    whole,
)
from harness.cli import THRESHOLD
from harness.errors import EXIT_OK, UsageError, command

PROG = command("challenge")
RUNTIMES = ("native", "docker")
DEFAULT_PAIRS = 5


@dataclass
class Side:
    """One side of the challenge: what was given, the reference it names and where its folder is, the
    --set options that give an entry's hyperparameters, and where its code came from, in words."""
    label: str
    given: str
    name: str
    references: Path
    sets: list[str]
    source: str
    spec: registry.ReferenceSpec | None = None


def resolve(label: str, given: str, references: Path | None, data_root: Path, workdir: Path) -> Side:
    """The side `given` names: a reference folder (a fork), a run folder or entry JSON (its code by its tree
    hash, reproduce.find_code), else a reference name under --references."""
    path = Path(given)
    if path.is_dir() and (path / "reference.toml").is_file():
        side = Side(label, given, path.resolve().name, path.resolve().parent, [],
                    f"the folder {paths.public(str(path.resolve()))}")
    elif path.is_file() or (path.is_dir() and (path / "result.json").is_file()):
        # an entry, or a run: the code and hyperparameters it names, never what it reports (its times are not read)
        original = reproduce.read_original(path, data_root)
        code = reproduce.find_code(original.result, references, workdir)
        side = Side(label, given, original.result["reference"], code.references,
                    reproduce.overrides(original.result, code),
                    f"the code of {paths.public(str(original.run_dir.resolve()))}: {paths.public(code.source)}")
    elif path.is_dir():
        raise UsageError(f"{given}: neither a reference folder (with reference.toml), a run folder (with result.json) "
                         f"nor an entry JSON: give one of those, or a reference's name")
    else:
        root = registry.references_root(references).resolve()
        side = Side(label, given, given, root, [], f"the reference {given} of {paths.public(str(root))}")
    side.spec = registry.load_spec(side.name, side.references)
    return side


def worker_python(side: Side) -> Path:
    """The interpreter of a native side's sandboxed workers, as `dawnbench run` would choose it: this one when
    it has the reference's framework (the tests' environment), else the reference's own environment, set up
    on first use with one line (the launcher's)."""
    route = launcher.route(["run", side.name, "--references", str(side.references)])
    if route is not None and launcher.runs_here(route.needs):
        return Path(sys.executable)
    return launcher.prepare(dataclasses.replace(route, runtime=None))


def build_parser(p: Parser | None = None) -> Parser:
    """The options, on `p` (dawnbench.cli's `challenge`) or on a parser of its own (`python -m dawnbench.challenge`)."""
    p = p if p is not None else Parser(prog=PROG)
    p.description = ("Two entries timed against each other on this machine, interleaved pairs: the ratio of their "
                     "times with its 95% interval, the one-sided p that the candidate is faster, each side's "
                     "acceptance verdict; a challenge folder `dawnbench verify` recomputes.")
    p.add_argument("candidate", metavar="CANDIDATE",
                   help="a reference name, a reference folder (a fork), or a run folder or training entry JSON naming one")
    p.add_argument("--against", required=True, metavar="INCUMBENT", help="the incumbent, given as CANDIDATE is")
    p.add_argument("--pairs", type=whole("--pairs", 1, MAX_RUNS, DEFAULT_PAIRS), default=DEFAULT_PAIRS, metavar="N",
                   help=f"pairs of runs, one a side each (default {DEFAULT_PAIRS}; a p needs 2 timed pairs at least)")
    p.add_argument("--seed", type=whole("--seed", 0, SEED_MAX, 0, "numpy's seed range"), default=0, metavar="N",
                   help="pair k runs both sides with seed N+k (default 0)")
    p.add_argument("--threshold", type=THRESHOLD, default=None,
                   help="lower both sides' target for a smoke test (unofficial)")
    p.add_argument("--max-epochs", type=whole("--max-epochs", 1, MAX_EPOCHS, 30), default=None, metavar="N",
                   help="both sides' epoch budget (default: each reference.toml's)")
    p.add_argument("--runtime", default="native", metavar="|".join(RUNTIMES),
                   help="native (default): each run a judge process here; docker: in each reference's image")
    p.add_argument("--base-image", default=None, help="--runtime docker: the images' base")
    p.add_argument("--data", type=DATA_FOLDER, default=None, help="data root (default $DAWNBENCH_DATA or ./data)")
    p.add_argument("--references", type=REFERENCES_FOLDER, default=None, metavar="DIR",
                   help="the folder of the references a name is looked up in (default $DAWNBENCH_REFERENCES, else "
                        "./references)")
    p.add_argument("--out", type=folder("--out", "give a new folder for the challenge (made if missing)"), default=None,
                   help="the challenge folder (default results/challenges/<time>-<candidate>-vs-<incumbent>/)")
    return p


def _check(a) -> None:
    if a.runtime not in RUNTIMES:
        raise UsageError(f"--runtime {a.runtime!r}: expected native (judge processes here) or docker (each "
                         f"reference's image)")
    if a.base_image and a.runtime != "docker":
        raise UsageError("--base-image goes with --runtime docker (natively there is no image)")
    if a.candidate == a.against:
        raise UsageError(f"{a.candidate} --against {a.against}: give two entries, the candidate and the incumbent")
    if a.out is not None and ((a.out / CHALLENGE).exists() or (a.out / "runs").exists()):
        raise UsageError(f"--out {a.out} already holds a challenge: give a new folder (nothing is written over)")


def _sides_agree(sides: dict[str, Side], a) -> None:
    tasks = {side.spec.task.name for side in sides.values()}
    if len(tasks) > 1:
        raise UsageError(f"the candidate is a {sides['candidate'].spec.task.name} entry, the incumbent a "
                         f"{sides['incumbent'].spec.task.name} one: a challenge times two entries of one task")
    if a.runtime == "docker":
        default = registry.references_root(None).resolve()
        for side in sides.values():
            if side.references != default:
                raise UsageError(f"--runtime docker builds images from {default}: the {side.label} "
                                 f"({side.given}) is elsewhere; leave --runtime docker out to run it natively")


def _runs(a, sides: dict[str, Side], data_root: Path, out: Path) -> list[interleave.Run]:
    """Every run of the challenge, interleaved; each the judge's, with the same budget and threshold."""
    common = [*(["--threshold", repr(a.threshold)] if a.threshold is not None else []),
              *(["--max-epochs", str(a.max_epochs)] if a.max_epochs is not None else []),
              "--no-progress", "--no-save"]
    runners = {}
    for label, side in sides.items():
        if a.runtime == "docker":
            runners[label] = containers.build(side.name, a.base_image, progress="steps")
        else:
            runners[label] = worker_python(side)

    def start(label: str, seed: int, run_id: str) -> tuple[int, Path, Path | None]:
        side, results = sides[label], out / "runs" / label
        options = [*side.sets, *common, "--seed", str(seed), "--run-id", run_id]
        _say(f"{label} ({side.name}), seed {seed}: {run_id}")
        if a.runtime == "docker":
            status = containers.run(side.name, options, image=runners[label], results=results, data_root=data_root)
            stoppable.raise_if_stopped()        # it stopped its container on the signal, and returned
            return status, results / side.name / run_id, None
        log = results / f"{run_id}.log"
        status = compare_native.run(side.name, [*options, "--references", str(side.references), "--data",
                                                str(data_root), "--results", str(results)], runners[label], log)
        return status, results / side.name / run_id, log

    return interleave.run_rounds(list(SIDES), a.pairs, [a.seed + k for k in range(a.pairs)],
                                 lambda label, k, seed: challenge_record.run_id(label, k, seed), start)


def table(record: dict, load: dict) -> list[str]:
    """The pairs' times, the ratio and p, each side's verdict, the load and the verdict line."""
    def f(x, fmt=".2f"):
        return "-" if x is None else format(x, fmt)
    lines = [f"{'pair':>4}  {'candidate (s)':>13}  {'incumbent (s)':>13}  {'inc/cand':>8}"]
    for p in record["pair_times"]:
        lines.append(f"{p['pair']:>4}  {f(p['candidate']):>13}  {f(p['incumbent']):>13}  {f(p['ratio'], '.3f'):>8}")
    ci = record["ratio_ci95"]
    lines.append(f"ratio (incumbent / candidate time, geometric mean of {record['pairs_timed']} timed pairs): "
                 f"{f(record['ratio'], '.3f')}x, 95% interval "
                 f"{'-' if ci is None else f'{ci[0]:.3f}-{ci[1]:.3f}x'}; one-sided p that the candidate is faster: "
                 f"{f(record['p_value'], '.3g')} (paired t-test on log times)")
    for label in SIDES:
        v = record["verdicts"][label] or {}
        lines.append(f"{label} {record['sides'][label]['reference']}: {v.get('verdict', 'no verdict')} "
                     f"({v.get('rule', '-')} rule): {v.get('reason', '-')}")
    lines.append(load["line"])
    lines.append(f"verdict: {record['line']}")
    return lines


def _run(a) -> int:
    _check(a)
    data_root = Path(a.data or datasets.default_data_root()).resolve()
    with tempfile.TemporaryDirectory(prefix="dawnbench-challenge-") as workdir:
        sides = {label: resolve(label, given, a.references, data_root, Path(workdir) / label)
                 for label, given in zip(SIDES, (a.candidate, a.against))}
        _sides_agree(sides, a)
        containers.check_data(sides["candidate"].spec, data_root)      # missing data: before any set-up or run
        out = Path(a.out or paths.results_root() / "challenges" /
                   f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{sides['candidate'].name}-vs-{sides['incumbent'].name}")
        for side in sides.values():
            _say(f"{side.label}: {side.source}")
        try:
            runs = _runs(a, sides, data_root, out)
        except interleave.Interrupted as e:     # the run under way was stopped and wrote its DNC: every folder stays
            raise stoppable.Interrupted(_interrupted(a, sides, out, e), e.signum) from None
    record = _write(a, sides, out, runs, a.pairs)
    load = record["load"]
    for line in table(record, load):
        print(line)
    print(f"written: {out / CHALLENGE} and the {len(runs)} run folders under {out / 'runs'} "
          f"(`{command(f'verify {out}')}` recomputes it)")
    return EXIT_OK


def _write(a, sides: dict[str, Side], out: Path, runs: list[interleave.Run], pairs: int,
           interrupted: dict | None = None) -> dict:
    """challenge.json of these runs (the first `pairs` pairs), written into `out`; the record."""
    record = challenge_record.figures({(r.round, r.side): r.result for r in runs}, pairs, interrupted)
    record["load"] = interleave.machine_load([r.load for r in runs])     # verify recomputes it too
    record.update(runtime=a.runtime, seed=a.seed,
                  given={label: paths.public(str(Path(side.given).resolve())) if Path(side.given).exists()
                         else side.given for label, side in sides.items()})
    safe_write.write_json(out / CHALLENGE, record, option="--out")
    return record


def _interrupted(a, sides: dict[str, Side], out: Path, stopped: interleave.Interrupted) -> str:
    """What a challenge stopped by a signal keeps, in one line: every run folder stays, and challenge.json covers
    the pairs that finished, marked `interrupted` (the pair cut short named, never counted; not a verdict, so
    never shown on the board); with no pair finished, no challenge.json."""
    finished = len(stopped.done) // 2           # the pairs run one after the other, both sides each
    runs = [r for r in stopped.done if r.round < finished]
    signal_name = stoppable.Stopped(stopped.signum).name
    if finished == 0:
        return (f"interrupted ({signal_name}): the run under way was stopped (its DNC kept); no pair finished, so no "
                f"{CHALLENGE}: the runs so far are kept in {out / 'runs'}")
    seed = a.seed + finished
    cut = [path for label, side in sides.items()
           if (out / (path := challenge_record.run_path(label, side.name, finished, seed))).is_dir()]
    _write(a, sides, out, runs, finished, {"signal": signal_name, "pairs_requested": a.pairs, "cut_short": sorted(cut)})
    return (f"interrupted ({signal_name}): the run under way was stopped (its DNC kept); {out / CHALLENGE} covers "
            f"the {finished} finished pair{'s' * (finished != 1)} of {a.pairs}, marked interrupted (no verdict; "
            f"`{command(f'verify {out}')}` checks it), and every run folder is kept in {out / 'runs'}")


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# The command on parsed options (dawnbench.cli runs it from the one tree).
run = reports_errors(PROG)(_run)
main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())
