"""Finding references by name and resolving their configuration.

A reference is a directory references/<name>/ with a reference.toml naming its task, framework,
model, entry class and default hyperparameters. Command-line overrides are checked against
those defaults: unknown keys and wrong types are refused with the list of what is valid.
Which references/ folder is searched: harness.paths.references_root.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import paths
from harness.errors import UsageError
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
    gpus: bool = False                      # [container] gpus: the reference is meant for GPUs
    container: dict[str, Any] = field(default_factory=dict)   # the raw [container] table, for host tools

    def load_entry_class(self):
        """The entry class: `module:Class` with module.py a file of the reference directory. Only
        there: a reference is its directory, so `cp -r` of it is a complete fork."""
        module_name, _, class_name = self.entry.partition(":")
        path = self.directory / f"{module_name}.py"
        where = self.directory / "reference.toml"
        if not class_name or not module_name or not module_name.isidentifier():
            raise UsageError(f"{where}: field 'entry' = {self.entry!r} must be 'module:Class' with module.py "
                             f"a file of {self.directory}, e.g. 'train:MyNet'")
        if not path.is_file():
            raise UsageError(f"{where}: field 'entry' = {self.entry!r}: no {path.name} in {self.directory}; the "
                             f"reference's code lives in its own directory")
        # The reference directory goes first on the path so a fork can split its code in files.
        sys.path.insert(0, str(self.directory))
        unique = "dawnbench_ref_" + self.name.replace("-", "_")
        spec = importlib.util.spec_from_file_location(unique, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        spec.loader.exec_module(module)
        try:
            return getattr(module, class_name)
        except AttributeError:
            raise UsageError(f"{where}: field 'entry': module {module_name!r} has no class {class_name!r}") from None


def check_entry_class(cls, spec: ReferenceSpec) -> None:
    """The entry must be a class implementing the contract, not any callable the module holds."""
    from harness.reference import Reference
    if not (isinstance(cls, type) and issubclass(cls, Reference)):
        raise UsageError(f"{spec.directory / 'reference.toml'}: field 'entry' = {spec.entry!r} is not a subclass of "
                         f"harness.reference.Reference; name the reference's class, e.g. 'train:MyNet'")


def available(root: str | os.PathLike | None = None) -> list[str]:
    """The names of the references under `root` (default: harness.paths.references_root())."""
    root = references_root(root)
    return sorted(p.parent.name for p in root.glob("*/reference.toml"))


def load_spec(name: str, root: str | os.PathLike | None = None) -> ReferenceSpec:
    """The reference `name` under `root` (default: harness.paths.references_root())."""
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
        raise UsageError(f"{toml_path}: not valid TOML: {e}") from None
    for key in ("task", "framework", "model", "entry"):
        if not isinstance(raw.get(key), str):
            raise UsageError(f"{toml_path}: field {key!r} is missing or not a string")
    try:
        task = get_task(raw["task"])
    except UnknownTaskError as e:
        raise UsageError(f"{toml_path}: field 'task': {e}") from None
    budget = raw.get("budget", {})
    container = raw.get("container", {})
    if not isinstance(container, dict):
        raise UsageError(f"{toml_path}: 'container' must be a table ([container])")
    if not isinstance(container.get("gpus", False), bool):
        raise UsageError(f"{toml_path}: field 'container.gpus' must be true or false")
    return ReferenceSpec(
        name=name, directory=directory, task=task, framework=raw["framework"], model=raw["model"],
        entry=raw["entry"], author=raw.get("author", "dawnbench"),
        author_email=raw.get("author_email", ""), code_url=raw.get("code_url", f"references/{name}"),
        description=raw.get("description", ""),
        hyperparameters=dict(raw.get("hyperparameters", {})),
        max_epochs=int(budget.get("max_epochs", 100)),
        max_seconds=float(budget.get("max_seconds", 24 * 3600.0)),
        gpus=container.get("gpus", False), container=dict(container),
    )


def _convert(key: str, text: str, default: Any) -> Any:
    kind = type(default)
    try:
        if kind is bool:
            low = text.strip().lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is list:
            return [type(default[0])(x) if default else x for x in text.split(",") if x]
        return text
    except (ValueError, TypeError):
        raise UsageError(f"--set {key}={text}: {key!r} takes a {kind.__name__} "
                         f"(default {default!r})") from None


def resolve_hyperparameters(spec: ReferenceSpec, assignments: list[str],
                            base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Apply `key=value` overrides to the reference's defaults (or to `base`, e.g. the values a run
    recorded, over the defaults), typed by the defaults."""
    config = dict(spec.hyperparameters)
    config.update({k: v for k, v in (base or {}).items() if k in config})
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected key=value, e.g. --set lr=0.2")
        if key not in config:
            valid = ", ".join(f"{k}={v!r}" for k, v in sorted(spec.hyperparameters.items()))
            raise UsageError(f"--set {key}: {spec.name} has no hyperparameter {key!r}; valid: {valid}")
        config[key] = _convert(key, text, spec.hyperparameters[key])
    return config
