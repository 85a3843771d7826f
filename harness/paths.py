"""Where the references, the data and the results are when no option says so.

The harness may run from a source checkout (`make run`, the tests), from a wheel installed in
site-packages (`pip install .`), or from an image. Nothing is found relative to the installed
package except in a checkout, recognised by a `references/` folder next to the package:

    references   --references DIR > $DAWNBENCH_REFERENCES > ./references > <checkout>/references
    data         --data DIR > $DAWNBENCH_DATA > ./data > <checkout>/data (when ./data is absent)
    results      --results DIR > ./results

(`.` is the current directory.)
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from harness.errors import UsageError, shown

REFERENCES_ENV = "DAWNBENCH_REFERENCES"
DATA_ENV = "DAWNBENCH_DATA"

# The package's parent folder; in a source checkout, the repository root (tools that build images
# from the repository read it). Installed, it is site-packages: see CHECKOUT_ROOT.
PACKAGE_PARENT = Path(__file__).resolve().parent.parent


def checkout_root() -> Path | None:
    """The source checkout the package is imported from, or None when it is installed."""
    return PACKAGE_PARENT if (PACKAGE_PARENT / "references").is_dir() else None


def references_root(explicit: str | os.PathLike | None = None) -> Path:
    """The folder of the references (see the module's docstring for the order)."""
    if explicit:
        root = Path(explicit).expanduser()
        if not root.is_dir():
            raise UsageError(f"--references {shown(explicit, 300)}: no such folder; give the folder that holds "
                             f"<reference>/reference.toml")
        return root
    env = os.environ.get(REFERENCES_ENV)
    if env:
        return Path(env).expanduser()
    here = Path.cwd() / "references"
    if here.is_dir():
        return here
    checkout = checkout_root()
    return checkout / "references" if checkout else here


def data_root() -> Path:
    """The default data root (see the module's docstring for the order)."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    here = Path.cwd() / "data"
    checkout = checkout_root()
    if here.is_dir() or checkout is None:
        return here
    return checkout / "data"


def results_root() -> Path:
    """The default results folder: ./results of the current directory."""
    return Path.cwd() / "results"


# A name that becomes one folder (a reference, a run id, a series id): letters, digits and . _ + -,
# not starting with '.' or '-' (hidden files, options), never '..'. Anything else could leave its
# parent folder (a '/', '..'), be cut short by the OS (a NUL) or be misread by a shell or a tool.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9_.+-]*")
NAME_MAX = 128


def check_name(value: str, what: str) -> str:
    """`value` if it is a safe single folder name, else UsageError naming `what` (e.g. "--run-id")."""
    if (not isinstance(value, str) or not _SAFE_NAME.fullmatch(value) or ".." in value
            or len(value) > NAME_MAX):
        raise UsageError(f"{what} {value!r}: not a plain folder name; use letters, digits, '.', '_', '+' and '-' "
                         f"(at most {NAME_MAX}, not starting with '.' or '-', no '..'), e.g. 'baseline-1'")
    return value


def reference_name(value: str) -> str:
    """`value` if it is a reference's name (one folder under references/), else one UsageError line. A path
    (`../references/REF`, tab-completed from bin/) is refused before anything is set up for it: `make setup`
    would build an environment of a gigabyte inside the reference's folder (issue 47)."""
    if isinstance(value, str) and "/" in value:
        name = Path(value.rstrip("/")).name
        hint = f", {name!r}" if _SAFE_NAME.fullmatch(name) and ".." not in name else ""
        raise UsageError(f"reference name {shown(repr(value), 120)} is a path, not a plain folder name: give the "
                         f"reference's name{hint} (its folder under references/; `dawnbench list` lists them)")
    return check_name(value, "reference name")


def inside(folder: Path, root: Path) -> bool:
    """Whether `folder` resolves to a place under `root` (resolved too): no link or '..' leads it out."""
    folder, root = Path(folder).resolve(), Path(root).resolve()
    return folder == root or root in folder.parents


OUTSIDE = "<outside the checkout>"


def public(value: str) -> str:
    """`value` as a file may publish it: an absolute path of this machine (a run's or an inference's record
    goes into a public entry) becomes `<checkout>/REL` inside the source checkout, else `<outside the
    checkout>/NAME`; anything else stays as it is. Who ran where is nobody's business; what ran is the
    record's, and the name keeps that readable."""
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    path = os.path.normpath(value)
    root = checkout_root()
    if root is not None:
        for base in {str(root), os.path.realpath(root)}:
            if path == base or path.startswith(base + os.sep):
                return "<checkout>" + path[len(base):]
    return f"{OUTSIDE}/{os.path.basename(path)}" if os.path.basename(path) else OUTSIDE
