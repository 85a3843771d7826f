"""Where a task's kind and a dataset's format come from: a name the harness registers, or a class of the
harness's own (`harness.<module>:<Class>`), never a path an entrant's files could name. A new task on a
new format adds its kind's and its format's module to harness/ (so the judge's hash covers them) and
names them in tasks.toml and datasets.toml (docs/TASKS.md, "Adding a task").

Standard library only.
"""
from __future__ import annotations

import importlib

HARNESS_PACKAGE = "harness"


def load_class(spec: str, base: type, *, what: str, where: str, known: dict):
    """The class `spec` names, a subclass of `base`: a name of `known`, or `harness.<module>:<Class>`.
    ValueError (one line, naming `where` and the fix) for any other."""
    if spec in known:
        return known[spec]
    module, _, attr = str(spec).partition(":")
    if not (module.startswith(HARNESS_PACKAGE + ".") and attr and module.replace(".", "").replace("_", "").isalnum()):
        raise ValueError(f"{where}: {what} {spec!r} is not one of {', '.join(sorted(known))} "
                         f"nor a harness.<module>:<Class> (a {what} lives in the harness)")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{where}: {what} {spec!r} cannot be loaded ({e})") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{where}: {what} {spec!r} is not a {base.__module__}.{base.__name__}")
    return cls
