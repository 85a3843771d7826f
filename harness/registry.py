"""Finding references by name and resolving their configuration.

A reference is a directory references/<name>/ with a reference.toml naming its task, framework,
model, entry class and default hyperparameters. Command-line overrides are checked against
those defaults: unknown keys and wrong types are refused with the list of what is valid.
Which references/ folder is searched: harness.paths.references_root.
"""
from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import paths
from harness.arguments import MAX_SECONDS, MAX_TEXT
from harness.errors import UsageError, command, one_line, shown
from harness.tasks import Task, UnknownTaskError, get_task


def references_root(explicit: str | os.PathLike | None = None) -> Path:
    return paths.references_root(explicit)


@dataclass
class ReferenceSpec:
    name: str
    directory: Path
    task: Task
    framework: str
    model: str
    entry: str                      # "module:Class", module is a file in the reference directory
    author: str = "dawnbench"
    author_email: str = ""
    code_url: str = ""
    description: str = ""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    max_epochs: int = 100
    max_seconds: float = 24 * 3600.0
    eval_from_epoch: int = 1                # [budget] eval_from_epoch: epochs it..max_epochs are evaluated
    gpus: bool = False                      # [container] gpus: the reference is meant for GPUs
    container: dict[str, Any] = field(default_factory=dict)   # the raw [container] table, for host tools
    # [inference]: an entry that only infers (no training run; its model comes from elsewhere), and
    # the runtime and precision `dawnbench infer` uses when none is given
    infers_only: bool = False
    inference_runtime: str = "reference"
    inference_precision: str = "fp32"
    # [techniques]: name -> {"off": the --set assignments that turn it off, "about": one line}
    # (`dawnbench analyze lesion`); data only, checked like --set by _check_techniques
    techniques: dict[str, dict] = field(default_factory=dict)
    # [choices]: a text hyperparameter -> SWITCH or the list of its values; what --set may give it
    choices: dict[str, Any] = field(default_factory=dict)
    # [reach]: what the reference's anchor reached on its task; a network that cannot reach the task's
    # threshold is refused a run at it (Reach.refusal), before any work
    reach: Reach | None = None

    def load_entry_class(self, shown: Path | None = None):
        """The entry class: `module:Class` with module.py a file of the reference directory. Only
        there: a reference is its directory, so `cp -r` of it is a complete fork. Messages name the
        folder `shown` (default: the directory itself; a worker, which runs a copy, names the user's)."""
        module_name, _, class_name = self.entry.partition(":")
        path = self.directory / f"{module_name}.py"
        folder = shown or self.directory
        where = folder / "reference.toml"
        if not class_name or not module_name or not module_name.isidentifier():
            raise UsageError(f"{where}: field 'entry' = {self.entry!r} must be 'module:Class' with module.py "
                             f"a file of {folder}, e.g. 'train:MyNet'")
        if not path.is_file():
            raise UsageError(f"{where}: field 'entry' = {self.entry!r}: no {path.name} in {folder}; the "
                             f"reference's code lives in its own directory")
        # The reference directory goes first on the path so a fork can split its code in files.
        sys.path.insert(0, str(self.directory))
        unique = "dawnbench_ref_" + self.name.replace("-", "_")
        spec = importlib.util.spec_from_file_location(unique, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        spec.loader.exec_module(module)
        try:
            cls = getattr(module, class_name)
        except AttributeError:
            raise UsageError(_no_class(folder / path.name, class_name, self.entry)) from None
        check_entry_class(cls, self, shown)
        return cls


@dataclass(frozen=True)
class Reach:
    """[reach] of reference.toml: the figure the reference's anchor reached on its task (a fraction, in
    the task's metric) and its source; for a network whose anchor stays under the task's threshold
    (reaches_threshold = false), the threshold it can reach and that figure's source. Data only: it
    never sets a bound or a ranked figure; it refuses runs that would end DNC, and keeps a reference
    that cannot reach the task's threshold out of its official table (docs/RULES.md, "Reach")."""
    task: Task
    anchor: float
    source: str
    reaches_threshold: bool = True
    reachable: float | None = None
    reachable_source: str = ""

    def shown(self, value: float) -> str:
        """A figure of the task's metric as its readers write it: "91.25% top-1 accuracy", "F1 0.758"."""
        figure = self.task.figure
        if figure.unit:         # a figure in its own unit (a language model's bits per byte): "1.8976 bits/byte"
            return f"{value:g} {figure.unit}"
        return f"{round(value * 100, 4):g}% {figure.label}" if figure.percent else f"{figure.label} {value:g}"

    def margin(self) -> str:
        """The anchor's figure less the task's threshold: "-2.75 points", "+0.0079"."""
        sign = -1 if self.task.lower_is_better else 1
        gap = sign * (self.anchor - self.task.threshold)
        if self.task.figure.unit:
            return f"{round(gap, 4):+g} {self.task.figure.unit}"
        return f"{round(gap * 100, 4):+g} points" if self.task.figure.percent else f"{round(gap, 4):+g}"

    def refusal(self, name: str, threshold: float | None) -> str | None:
        """Why a run of `name` to `threshold` (None: the task's) would end DNC on every run, in one line
        that names what to run instead; None where it can reach it."""
        if self.reaches_threshold or (threshold is not None and self.task.reaches(self.reachable, threshold)):
            return None
        asked = ("" if threshold is None or threshold == self.task.threshold
                 else f"--threshold {threshold:g} is over what it can reach: ")
        return (f"{asked}{name} cannot reach the task's {self.shown(self.task.threshold)}: its anchor reached "
                f"{self.shown(self.anchor)} ({self.source}), so every run would end DNC after its whole budget; "
                f"run it to {self.shown(self.reachable)}, what it can reach ({self.reachable_source}), with "
                f"--threshold {self.reachable:g} (unofficial), or fork it with a network that can and delete "
                f"[reach] from the fork's reference.toml")

    def unofficial_reason(self, name: str) -> str | None:
        """The run's reason not to be an entry of the task's official table, where it cannot reach it."""
        if self.reaches_threshold:
            return None
        return (f"{UNREACHABLE} {self.shown(self.task.threshold)} ({name}'s anchor reached {self.shown(self.anchor)}: "
                f"{self.source}); its runs are never entries of the task's official table")


# The start of the unofficial reason of a run of a reference that cannot reach its task's threshold
# (Reach.unofficial_reason): dawnbench submit says it in place of its "rerun without --threshold".
UNREACHABLE = "reference.toml [reach]: the network cannot reach the task's"


def check_reach(spec: ReferenceSpec, threshold: float | None) -> None:
    """Before any work: refused, in one line, a run of a reference whose network cannot reach `threshold`
    (None: the task's), as its reference.toml's [reach] says; a threshold out of its figure's range too
    (harness.tasks.Task.target: the one check of a --threshold)."""
    spec.task.target(threshold)
    why = spec.reach.refusal(spec.name, threshold) if spec.reach is not None else None
    if why:
        raise UsageError(why)


def _no_class(path: Path, class_name: str, entry: str, defined: list[str] | None = None) -> str:
    listed = f"; it defines {', '.join(defined)}" if defined else ""
    return (f"{path} has no class {class_name} (reference.toml entry = \"{entry}\"){listed}: set entry to "
            f"\"{path.stem}:<the reference's class>\"")


# What lets a module bind a global its source never spells out (a star import aside): these names
# used, these attributes (builtins.exec, module.__dict__), sys.modules, a module-level __getattr__.
_DYNAMIC_NAMES = frozenset({"exec", "eval", "globals", "vars", "setattr", "__import__"})
_DYNAMIC_ATTRIBUTES = frozenset({"exec", "setattr", "__setattr__", "__dict__"})


def _binds_dynamically(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return any(alias.name == "*" for alias in node.names)
    if isinstance(node, ast.Name):
        return node.id in _DYNAMIC_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in _DYNAMIC_ATTRIBUTES or (
            node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id == "sys")
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name == "__getattr__"
    return False


def _may_bind(source: str, name: str) -> bool:
    """Whether the module's source can bind `name` at all: it spells the name somewhere (a class, an
    import, an assignment, a string...) or binds globals in a way its text does not show. False
    only when the name is certainly absent; parsing the code, never running it."""
    if re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", source):
        return True
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True          # the worker's import says what is wrong with the file
    return any(_binds_dynamically(node) for node in ast.walk(tree))


def _top_level_classes(source: str) -> list[str]:
    try:
        return [node.name for node in ast.parse(source).body if isinstance(node, ast.ClassDef)]
    except (SyntaxError, ValueError):
        return []


def check_entry_defined(spec: ReferenceSpec) -> None:
    """Before a run or an inference starts, on the harness's side: the entry's module is a file of
    the reference's folder and can bind its class. Read, never imported (no entrant code runs
    outside the sandbox), so the message names the user's folder, which the sandboxed worker cannot
    (it sees only its copy). Only a certain absence is refused; the worker's import decides the rest."""
    module_name, _, class_name = spec.entry.partition(":")
    path = spec.directory / f"{module_name}.py"
    if not path.is_file():
        raise UsageError(f"{spec.directory / 'reference.toml'}: field 'entry' = {spec.entry!r}: no {path.name} in "
                         f"{spec.directory}; the reference's code lives in its own directory")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return               # the worker's import says what is wrong with the file
    if not _may_bind(source, class_name):
        raise UsageError(_no_class(path, class_name, spec.entry, _top_level_classes(source)))


def check_entry_class(cls, spec: ReferenceSpec, shown: Path | None = None) -> None:
    """The entry must be a class implementing the contract, not any callable the module holds (a
    function, a class imported from elsewhere): UsageError, one line, otherwise. Messages name the
    folder `shown` (default: the reference's directory)."""
    from harness.reference import InferenceReference, Reference
    toml = (shown or spec.directory) / "reference.toml"
    where = f"{toml}: field 'entry' = {spec.entry!r}"
    if isinstance(cls, type) and issubclass(cls, Reference):
        if spec.infers_only and not issubclass(cls, InferenceReference):
            raise UsageError(f"{where} names a class that trains, but [inference] only = true: subclass "
                             f"harness.reference.InferenceReference, or remove `only`")
        if not spec.infers_only and issubclass(cls, InferenceReference):
            raise UsageError(f"{where} names an InferenceReference, which cannot train: add [inference] only = true")
        return
    if isinstance(cls, type):
        what = f"the class {cls.__module__}.{cls.__qualname__}, which does not subclass harness.reference.Reference"
    else:
        what = f"a {type(cls).__name__}, not a class"
    raise UsageError(f"{where} names {what}; name the reference's class (class MyNet(Reference) in its own folder), "
                     f"e.g. 'train:MyNet'")


def listing(explicit: str | os.PathLike | None = None) -> list[str]:
    """`list`: a line per reference (name, task, framework, model). numpy-free, like this whole
    module: `bin/dawnbench list` answers from a bare Python (dawnbench.launcher)."""
    root = references_root(explicit)
    if not root.is_dir():
        raise UsageError(f"no references in {root}: give --references DIR or set {paths.REFERENCES_ENV}, or run from "
                         f"the folder that holds references/")
    names = available(root)
    if not names:       # an empty listing with exit 0 reads as "nothing to do" where the folder is the mistake
        raise UsageError(f"no references found in {root} (no <name>/reference.toml under it): give --references DIR, "
                         f"the folder that holds them, or set {paths.REFERENCES_ENV}")
    lines = []
    for name in names:
        spec = load_spec(name, root)
        reach = spec.reach
        note = "" if reach is None or reach.reaches_threshold else (
            f"  [cannot reach {reach.shown(spec.task.threshold)}: anchor {reach.shown(reach.anchor)}; "
            f"--threshold {reach.reachable:g} (unofficial)]")
        lines.append(f"{name:40s} {spec.task.name:14s} {spec.framework:11s} {spec.model}{note}")
    return lines


def available(root: str | os.PathLike | None = None) -> list[str]:
    """The names of the references under `root` (default: harness.paths.references_root())."""
    root = references_root(root)
    return sorted(p.parent.name for p in root.glob("*/reference.toml"))


TOP_LEVEL = ("task", "framework", "model", "entry", "author", "author_email", "code_url", "description",
             "hyperparameters", "budget", "container", "inference", "techniques", "choices", "reach")
TECHNIQUE_KEYS = ("off", "about")
BUDGET_KEYS = ("max_epochs", "max_seconds", "eval_from_epoch", "max_snapshot_mib", "eval_passes")
CONTAINER_KEYS = ("gpus", "flavour", "parts", "variants")   # flavour, parts, variants: docker/flavours.py's
INFERENCE_KEYS = ("only", "runtime", "precision")
REACH_KEYS = ("anchor", "source", "reaches_threshold", "reachable", "reachable_source")


def _check_table(toml_path: Path, raw: dict, key: str, valid: tuple[str, ...] | None) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise UsageError(f"{toml_path}: '{key}' must be a table: write it as a [{key}] section")
    unknown = sorted(set(value) - set(valid)) if valid is not None else []
    if unknown:
        raise UsageError(f"{toml_path}: unknown field '{key}.{unknown[0]}' in [{key}]; valid: {', '.join(valid)}")
    return value


def _check_budget(toml_path: Path, budget: dict) -> tuple[int, float, int]:
    epochs = budget.get("max_epochs", 100)
    if type(epochs) is not int or epochs < 1:
        raise UsageError(f"{toml_path}: field 'budget.max_epochs' = {epochs!r} must be a whole number of epochs, "
                         f"1 or more, e.g. max_epochs = 30")
    seconds = budget.get("max_seconds", 24 * 3600.0)
    if type(seconds) not in (int, float) or not math.isfinite(seconds) or not 0 < seconds <= MAX_SECONDS:
        raise UsageError(f"{toml_path}: field 'budget.max_seconds' = {seconds!r} must be a positive number of "
                         f"seconds, at most {MAX_SECONDS:,} (100 days), e.g. max_seconds = 3600")
    return epochs, float(seconds), _check_eval_from_epoch(toml_path, budget, epochs)


def _check_eval_from_epoch(toml_path: Path, budget: dict, max_epochs: int) -> int:
    """The first evaluated epoch (docs/RULES.md, "Evaluated epochs"): the recipe's choice, like its
    epochs. Every epoch from it to max_epochs is evaluated, so the last epoch of the budget always is;
    one that is not, or not a whole number, is refused."""
    first = budget.get("eval_from_epoch", 1)
    if type(first) is not int or first < 1:
        raise UsageError(f"{toml_path}: field 'budget.eval_from_epoch' = {shown(repr(first), 40)} must be a whole "
                         f"number of epochs, 1 or more (the first epoch evaluated), e.g. eval_from_epoch = 1")
    if first > max_epochs:
        raise UsageError(f"{toml_path}: field 'budget.eval_from_epoch' = {first} is after budget.max_epochs = "
                         f"{max_epochs}: the run would never evaluate its last epoch; write eval_from_epoch = "
                         f"{max_epochs} to evaluate only the last one")
    return first


def _check_snapshot_cap(toml_path: Path, budget: dict) -> None:
    """The snapshot's cap is the task's (tasks.toml), never the reference's: a bound that the entrant
    raised, in reference.toml, let a snapshot carry a third of the training set (issue 33). Named here,
    rather than left an unknown field, so that a reference that used to raise it is told why."""
    if "max_snapshot_mib" in budget:
        raise UsageError(f"{toml_path}: field 'budget.max_snapshot_mib' is not a reference's to set: a snapshot's "
                         f"cap is its task's (harness/data/tasks.toml; docs/RULES.md, \"Snapshots and the model "
                         f"that is scored\"); remove the field")


def _check_eval_passes(toml_path: Path, budget: dict) -> None:
    """What an eval example may cost in the eval bound is the task's (tasks.toml), never the reference's:
    a bound the entrant raises is time moved off the clock (issue 33)."""
    if "eval_passes" in budget:
        raise UsageError(f"{toml_path}: field 'budget.eval_passes' is not a reference's to set: the eval bound's "
                         f"passes are its task's (harness/data/tasks.toml; docs/RULES.md, \"The eval span\"); "
                         f"remove the field")


def _check_entry(toml_path: Path, entry: str) -> None:
    module_name, sep, class_name = entry.partition(":")
    if not (sep and module_name.isidentifier() and class_name.isidentifier()):
        raise UsageError(f"{toml_path}: field 'entry' = {entry!r} must be 'module:Class' with module.py a file of "
                         f"the reference's folder and Class a name in it, e.g. 'train:MyNet'")


def _check_inference(toml_path: Path, table: dict) -> tuple[bool, str, str]:
    from harness import inference_engines
    only = table.get("only", False)
    if not isinstance(only, bool):
        raise UsageError(f"{toml_path}: field 'inference.only' = {only!r} must be true or false")
    runtime, precision = table.get("runtime", "reference"), table.get("precision", "fp32")
    if runtime not in inference_engines.RUNTIMES:
        raise UsageError(f"{toml_path}: field 'inference.runtime' = {runtime!r} must be one of "
                         f"{', '.join(inference_engines.RUNTIMES)}")
    if precision not in inference_engines.PRECISIONS_OF[runtime]:
        raise UsageError(f"{toml_path}: field 'inference.precision' = {precision!r}: runtime {runtime} takes "
                         f"{', '.join(inference_engines.PRECISIONS_OF[runtime])}")
    return only, runtime, precision


def _check_reach(toml_path: Path, task: Task, table: dict) -> Reach | None:
    """[reach]: the anchor's figure on the task with its source, and whether it reaches the task's
    threshold; where it does not, the threshold it can reach with that figure's source. Each mistake is
    one line; a declaration its own figure contradicts is one too."""
    if not table:
        return None
    where = f"{toml_path}: [reach]"
    example = (f"e.g. anchor = 0.9125 (a fraction of the task's {task.metric}, as --threshold takes it), "
               f"source = \"He et al. 2015, Table 6\"")

    def fraction(key: str) -> float:
        value = table.get(key)
        if type(value) not in (int, float) or not math.isfinite(value) or not task.figure.holds(value):
            kind = "a fraction" if task.figure.upper == 1 else "a number"
            raise UsageError(f"{where}: field '{key}' = {shown(repr(value), 40)} must be {kind} "
                             f"{task.figure.range_text}; {example}")
        return float(value)

    def text(key: str) -> str:
        value = table.get(key)
        if not isinstance(value, str) or not value.strip() or one_line(value) != value or len(value) > MAX_TEXT:
            raise UsageError(f"{where}: field '{key}' must be one line of text (at most {MAX_TEXT} characters) "
                             f"naming where the figure comes from; {example}")
        return value

    reaches = table.get("reaches_threshold", True)
    if not isinstance(reaches, bool):
        raise UsageError(f"{where}: field 'reaches_threshold' = {shown(repr(reaches), 40)} must be true or false")
    reach = Reach(task, fraction("anchor"), text("source"), reaches)
    if reaches != task.reaches(reach.anchor):
        state = ("reaches_threshold = true, but anchor = {a:g} is under" if reaches else
                 "reaches_threshold = false, but anchor = {a:g} reaches").format(a=reach.anchor)
        fix = "false, with reachable and reachable_source" if reaches else "true"
        raise UsageError(f"{where}: {state} the task's threshold {task.threshold:g}; set reaches_threshold = {fix}")
    if reaches:
        extra = [k for k in ("reachable", "reachable_source") if k in table]
        if extra:
            raise UsageError(f"{where}: field '{extra[0]}' goes only with reaches_threshold = false; remove it")
        return reach
    reachable = fraction("reachable")
    if task.reaches(reachable):
        raise UsageError(f"{where}: field 'reachable' = {reachable:g} reaches the task's threshold "
                         f"{task.threshold:g}: give the lower threshold the network can reach")
    return Reach(task, reach.anchor, reach.source, False, reachable, text("reachable_source"))


def check_trains(spec: ReferenceSpec) -> None:
    """A run trains: refused, in one line, for an entry that only infers."""
    if spec.infers_only:
        raise UsageError(f"{spec.name} only infers ([inference] only = true in its reference.toml): it has no "
                         f"training run; time it with `{command(f'infer {spec.name} --model PATH')}` (a run's model "
                         f"folder or a published weights file; its README names the one to use)")


def load_spec(name: str, root: str | os.PathLike | None = None) -> ReferenceSpec:
    """The reference `name` under `root` (default: harness.paths.references_root()). reference.toml is
    checked field by field: each mistake is one line naming the file, the field and the fix."""
    paths.reference_name(name)
    root = references_root(root)
    directory = root / name
    toml_path = directory / "reference.toml"
    if not toml_path.is_file():
        known = ", ".join(available(root))
        if not known:
            raise UsageError(f"unknown reference {name!r}: no references in {root}; give --references DIR or set "
                             f"{paths.REFERENCES_ENV}, or run from the folder that holds references/")
        raise UsageError(f"unknown reference {name!r}; available: {known}")
    try:
        with open(toml_path, "rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{toml_path}: not valid TOML: {' '.join(str(e).split())}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {toml_path}: {getattr(e, 'strerror', None) or e}") from None
    unknown = sorted(set(raw) - set(TOP_LEVEL))
    if unknown:
        raise UsageError(f"{toml_path}: unknown field {unknown[0]!r}; valid: {', '.join(TOP_LEVEL)}")
    for key in ("task", "framework", "model", "entry"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise UsageError(f"{toml_path}: field {key!r} is missing or not a string; write {key} = \"...\"")
    for key in ("author", "author_email", "code_url", "description"):
        if key in raw and not isinstance(raw[key], str):
            raise UsageError(f"{toml_path}: field {key!r} = {raw[key]!r} must be a string; write {key} = \"...\"")
    for key in ("framework", "model", "author", "author_email", "code_url"):     # what its entries show
        value = raw.get(key, "")
        if one_line(value) != value or len(value) > MAX_TEXT:
            raise UsageError(f"{toml_path}: field {key!r} = {shown(repr(value), 60)} must be one line of at most "
                             f"{MAX_TEXT} characters, without control characters (its entries show it)")
    _check_entry(toml_path, raw["entry"])
    try:
        task = get_task(raw["task"])
    except UnknownTaskError as e:
        raise UsageError(f"{toml_path}: field 'task': {e}") from None
    hyperparameters = _check_table(toml_path, raw, "hyperparameters", None)
    budget = _check_table(toml_path, raw, "budget", BUDGET_KEYS)
    max_epochs, max_seconds, eval_from_epoch = _check_budget(toml_path, budget)
    _check_snapshot_cap(toml_path, budget)
    _check_eval_passes(toml_path, budget)
    container = _check_table(toml_path, raw, "container", CONTAINER_KEYS)
    if not isinstance(container.get("gpus", False), bool):
        raise UsageError(f"{toml_path}: field 'container.gpus' must be true or false")
    only, runtime, precision = _check_inference(toml_path, _check_table(toml_path, raw, "inference", INFERENCE_KEYS))
    spec = ReferenceSpec(
        name=name, directory=directory, task=task, framework=raw["framework"], model=raw["model"],
        entry=raw["entry"], author=raw.get("author", "dawnbench"),
        author_email=raw.get("author_email", ""), code_url=raw.get("code_url", f"references/{name}"),
        description=raw.get("description", ""),
        hyperparameters=dict(hyperparameters), max_epochs=max_epochs, max_seconds=max_seconds,
        eval_from_epoch=eval_from_epoch, gpus=container.get("gpus", False), container=dict(container),
        infers_only=only, inference_runtime=runtime, inference_precision=precision,
        choices=_check_choices(toml_path, _check_table(toml_path, raw, "choices", None), hyperparameters),
        reach=_check_reach(toml_path, task, _check_table(toml_path, raw, "reach", REACH_KEYS)),
    )
    spec.techniques = _check_techniques(toml_path, spec, _check_table(toml_path, raw, "techniques", None))
    return spec


TECHNIQUE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def _check_techniques(toml_path: Path, spec: ReferenceSpec, table: dict) -> dict[str, dict]:
    """[techniques]: each `name = { off = "key=value" or ["key=value", ...], about = "..." }`. `off` is
    only --set assignments of the reference's own hyperparameters, checked as --set checks them (never
    code), and must change at least one of them, or the lesion would turn nothing off."""
    fix = 'write name = { off = "key=value", about = "what it is" }'
    checked = {}
    for name, value in table.items():
        where = f"{toml_path}: technique {shown(repr(name), 40)}"
        if not TECHNIQUE_NAME.fullmatch(name):
            raise UsageError(f"{where}: a name is lower-case letters, digits and _ (at most 40), starting with a letter")
        if not isinstance(value, dict):
            raise UsageError(f"{where}: must be a table; {fix}")
        unknown = sorted(set(value) - set(TECHNIQUE_KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown field {unknown[0]!r}; valid: {', '.join(TECHNIQUE_KEYS)}")
        off = [value["off"]] if isinstance(value.get("off"), str) else value.get("off")
        if not isinstance(off, list) or not off or not all(isinstance(a, str) for a in off):
            raise UsageError(f"{where}: 'off' must be a --set assignment or a list of them; {fix}")
        about = value.get("about", "")
        if not isinstance(about, str) or one_line(about) != about or len(about) > MAX_TEXT:
            raise UsageError(f"{where}: 'about' must be one line of at most {MAX_TEXT} characters")
        try:
            resolved = resolve_hyperparameters(spec, off)
        except UsageError as e:
            raise UsageError(f"{where}: 'off': {e}") from None
        if resolved == spec.hyperparameters:
            raise UsageError(f"{where}: 'off' = {shown(repr(value['off']), 60)} sets every hyperparameter to its "
                             f"default: it turns nothing off; give the values that remove the technique")
        checked[name] = {"off": list(off), "about": about}
    return checked


def _check_choices(toml_path: Path, table: dict, hyperparameters: dict) -> dict[str, Any]:
    """[choices]: each `key = "switch"` or `key = ["one", "another"]`, `key` a hyperparameter whose
    default is text and among its choices, so that a --set outside them is refused before the run
    starts rather than by the reference's code once the clock runs."""
    fix = 'write key = "switch" (auto, native, true or false) or key = ["one", "another"]'
    for key, allowed in table.items():
        where = f"{toml_path}: field 'choices.{shown(key, 40)}'"
        if not isinstance(hyperparameters.get(key), str):
            raise UsageError(f"{where}: [choices] lists the values of a text hyperparameter, and {shown(key, 40)} is "
                             + ("no hyperparameter" if key not in hyperparameters else
                                f"{_describe(hyperparameters[key])}, typed by its default")
                             + "; remove it from [choices]")
        if allowed != SWITCH and not (isinstance(allowed, list) and allowed
                                      and all(isinstance(a, str) and a.strip() for a in allowed)):
            raise UsageError(f"{where} = {shown(repr(allowed), 60)}: {fix}")
        want = choice_problem(hyperparameters[key], allowed)
        if want:
            raise UsageError(f"{where}: its default {hyperparameters[key]!r} is not {want}; add it, or change the default")
    return dict(table)


# A switch (compile, bf16, channels_last...: common.torch_base.resolve_switch reads it, a [choices]
# entry "switch" declares it): "auto" (on with a CUDA device), "native" (on where the hardware computes
# it) or a word for true or false. The one place its words are listed.
SWITCH = "switch"
_SWITCH_MODES = ("auto", "native")


def switch_value(value: Any) -> str | bool:
    """A switch's setting: "auto", "native", True or False (any case, a bool as itself); ValueError otherwise."""
    text = str(value).strip().lower()
    if text in _SWITCH_MODES:
        return text
    if text in _BOOL_WORDS:
        return _BOOL_WORDS[text]
    raise ValueError(f"switch value {value!r}: expected \"auto\", \"native\", \"true\" or \"false\"")


def choice_problem(value: Any, allowed: Any) -> str | None:
    """What a value of a hyperparameter with the [choices] entry `allowed` must be, when it is not
    (e.g. "one of basic, bottleneck"); None when it is among them (any case, spaces around ignored:
    the references read their text so)."""
    if allowed == SWITCH:
        try:
            switch_value(value)
            return None
        except ValueError:
            return "a switch: auto, native, true or false"
    if str(value).strip().lower() in {a.strip().lower() for a in allowed}:
        return None
    return "one of " + ", ".join(allowed)


# A whole-number hyperparameter goes to the frameworks, whose shapes, counts and steps are C ints: beyond
# 2**31 - 1 it overflows there (or divides to zero steps) instead of being refused here.
MAX_WHOLE = 2**31 - 1
_BOOL_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}
_NOT_TOML = object()


def _toml_value(text: str) -> Any:
    """`text` read as a TOML value (what reference.toml holds: 0.2, 1e-4, [4, 4, 4], "auto", true), or
    _NOT_TOML when it is not one (a bare word, the comma list 0.1,0.01)."""
    try:
        return tomllib.loads(f"v = {text}\n")["v"]
    # ValueError: also a whole number of over 4,300 digits; RecursionError: brackets nested thousands deep
    except (KeyError, ValueError, RecursionError):
        return _NOT_TOML


def _typed(value: Any, default: Any) -> Any:
    """`value` as the type of `default` (a float takes a whole number too), else raise ValueError;
    a number whose default is not negative must not be either (a count, a size, a rate, a decay)."""
    if isinstance(default, bool):
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[value.strip().lower()]
        if isinstance(value, bool):
            return value
        raise ValueError("true or false")
    if isinstance(default, (int, float)):
        if isinstance(value, str):      # TOML's numbers, else Python's (.5, 1E3)
            read = _toml_value(value.strip())
            value = read if read is not _NOT_TOML else int(value) if isinstance(default, int) else float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError
        if isinstance(default, int) and not isinstance(value, int):
            raise ValueError
        if not math.isfinite(value) or (isinstance(value, int) and abs(value) > MAX_WHOLE):
            raise ValueError
        if default >= 0 > value:
            raise ValueError
        return float(value) if isinstance(default, float) else value
    if isinstance(default, list):
        if isinstance(value, str):
            value = [x.strip() for x in value.split(",") if x.strip()]
        if not isinstance(value, list) or (default and not value):     # widths=[] is no network
            raise ValueError
        return [_typed(x, default[0]) for x in value] if default else value
    return value if isinstance(value, str) else str(value)


def _describe(default: Any) -> str:
    """What --set takes for a hyperparameter with this default, with an article: 'a whole number ...'."""
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, list):
        return f"a list like {_toml(default)}" + (f" (each {_describe(default[0])})" if default else "")
    if isinstance(default, int):
        return f"a whole number from 0 to {MAX_WHOLE:,}" if default >= 0 else "a whole number"
    if isinstance(default, float):
        return "a finite number, 0 or more" if default >= 0 else "a finite number"
    return "text"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return repr(value) if not isinstance(value, str) else f'"{value}"'


def _convert(key: str, text: str, default: Any, train_examples: int = 0) -> Any:
    """The value of `--set key=text`, typed by reference.toml's default: read as a TOML value where it is
    one (so `widths=[4, 4, 4]` is the list it looks like), else as a bare word or a comma list."""
    value = _toml_value(text) if isinstance(default, (str, list)) else text     # _typed reads numbers as TOML
    if not isinstance(value, type(default)):
        value = text        # a bare word; a comma list (0.1,0.01) or a list of one (0.5)
    # The global training batch: 0 would divide by zero, and one larger than the training set would
    # leave every epoch with no step while the log counts its samples.
    batch = key == "batch_size" and isinstance(default, int) and not isinstance(default, bool)
    most = train_examples or MAX_WHOLE
    try:
        typed = _typed(value, default)
        if batch and not 1 <= typed <= most:
            raise ValueError
    except (ValueError, TypeError, IndexError, OverflowError):       # OverflowError: an int no float holds
        if batch:
            raise UsageError(f"--set {key}={shown(text, 60)}: give a whole number from 1 to {most:,} (the task's training "
                             f"examples), e.g. --set {key}={default}") from None
        raise UsageError(f"--set {key}={shown(text, 60)}: {key!r} takes {_describe(default)} "
                         f"(default {_toml(default)})") from None
    return typed


def resolve_hyperparameters(spec: ReferenceSpec, assignments: list[str],
                            base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Apply `key=value` overrides to the reference's defaults (or to `base`, e.g. the values a run
    recorded, over the defaults), typed by the defaults."""
    config = dict(spec.hyperparameters)
    config.update({k: v for k, v in (base or {}).items() if k in config})
    given: dict[str, str] = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected key=value, e.g. --set lr=0.2")
        if key in given:        # argparse would keep the last silently: which one was meant is the user's to say
            raise UsageError(f"--set {shown(given[key], 60)} and --set {shown(item, 60)}: {key!r} is given twice; "
                             f"give each hyperparameter once")
        given[key] = item
        if key not in config:
            valid = ", ".join(f"{k}={v!r}" for k, v in sorted(spec.hyperparameters.items()))
            raise UsageError(f"--set {key}: {spec.name} has no hyperparameter {key!r}; valid: {valid}")
        config[key] = _convert(key, text, spec.hyperparameters[key], spec.task.train_examples)
        want = choice_problem(config[key], spec.choices[key]) if key in spec.choices else None
        if want:
            raise UsageError(f"--set {shown(item, 60)}: {key!r} takes {want} (default "
                             f"{_toml(spec.hyperparameters[key])}; [choices] in its reference.toml)")
    return config
