"""The references' Dockerfiles, written from one template and a few flavours, and checked against them.

  python3 docker/flavours.py generate [--references DIR] [REF ...]   # write references/REF/Dockerfile
  python3 docker/flavours.py check [--references DIR] [REF ...]      # the ones that differ, one line each

docker/Dockerfile.template is the text every image shares (its stages, the harness layer, the user,
the build record); docker/flavours.toml fills its slots per flavour (CPU or CUDA PyTorch, CPU or
CUDA TensorFlow, CUDA MXNet: the base, the framework's pin and index, the harness's requirements)
and per part a reference adds (the ImageNet views, DALI). A reference declares its flavour and parts
in its reference.toml, `[container] flavour = "..."` and `parts = [...]`: that is the only input, so
a reference keeps its own Dockerfile, pinned to its framework and CUDA, and a `cp -r` fork's copy is
still what its flavour writes. A reference with a second image for other hardware names it in
`variants = { tpu = "tpu-tensorflow" }`: Dockerfile.tpu, written from that flavour with the same parts
and checked alike (imagenet-amoebanet-tpu's TPU VM image). A reference that names no flavour has a Dockerfile of its own (an
entrant may write one: docs/RULES.md), which neither command touches.

Without REF, every reference under the references folder that names a flavour. `check` exits 1 when
a Dockerfile differs, 2 on a bad declaration or argument; every problem is one line. Standard library
only, like docker/requirements.py: it runs in any Python 3.11.
"""
from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

DOCKER = Path(__file__).resolve().parent
TEMPLATE = DOCKER / "Dockerfile.template"
FLAVOURS = DOCKER / "flavours.toml"
SLOT = re.compile(r"@\{([a-z_]+)\}")
FILE_SLOT = "dockerfile"      # the file's own name, the generator's to fill: Dockerfile, Dockerfile.tpu
VARIANT = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
TEMPLATE_NOTE = "#@"          # the template's own comments, never written into a Dockerfile
COMMAND = "python3 docker/flavours.py"


class Problem(ValueError):
    """A bad declaration, flavour or argument: its one line says what is wrong and how to fix it."""


def load_flavours(path: Path = FLAVOURS) -> dict:
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise Problem(f"{path}: {e}") from None
    return {"flavours": table.get("flavours", {}), "parts": table.get("parts", {})}


def render(flavour: str, parts: list[str], table: dict | None = None, template: str | None = None,
           file: str = "Dockerfile") -> str:
    """The Dockerfile of `flavour` with `parts`, named `file`: the template's slots filled with the
    flavour's text, each part's text after it (in flavours.toml's order of parts, so a reference's order
    does not matter)."""
    table = table if table is not None else load_flavours()
    template = template if template is not None else TEMPLATE.read_text(encoding="utf-8")
    if flavour not in table["flavours"]:
        raise Problem(f"flavour {flavour!r} is not in {FLAVOURS.name}; flavours: {', '.join(table['flavours'])}")
    unknown = [p for p in parts if p not in table["parts"]]
    if unknown:
        raise Problem(f"part {unknown[0]!r} is not in {FLAVOURS.name}; parts: {', '.join(table['parts'])}")
    names = set(SLOT.findall(template))
    pieces: dict[str, list[str]] = {name: [] for name in names}
    pieces[FILE_SLOT] = [file]
    sources = [(f"flavour {flavour}", table["flavours"][flavour])]
    sources += [(f"part {p}", table["parts"][p]) for p in table["parts"] if p in parts]
    for where, values in sources:
        allowed = values.get("flavours")
        if allowed is not None and flavour not in allowed:
            raise Problem(f"{where} goes only with the flavours {', '.join(allowed)}, not {flavour}")
        for slot, text in values.items():
            if slot == "flavours":
                continue
            if slot not in names or slot == FILE_SLOT:
                raise Problem(f"{where} fills slot {slot!r}, which docker/{TEMPLATE.name} does not have")
            if not isinstance(text, str):
                raise Problem(f"{where}: slot {slot!r} must be text (a TOML string), not {text!r}")
            pieces[slot].append(text.removesuffix("\n"))
    out = []
    for line in template.splitlines():
        if line.startswith(TEMPLATE_NOTE):
            continue
        alone = SLOT.fullmatch(line)
        if alone:           # a block of lines, or none
            text = "\n".join(pieces[alone.group(1)])
            if text:
                out.append(text)
        else:
            out.append(SLOT.sub(lambda m: "".join(pieces[m.group(1)]), line))
    return "\n".join(out) + "\n"


def _container(directory: Path) -> tuple[Path, dict]:
    path = directory / "reference.toml"
    try:
        return path, tomllib.loads(path.read_text(encoding="utf-8")).get("container", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise Problem(f"cannot read {path}: {e}") from None


def variants(directory: Path) -> dict[str, str]:
    """`[container] variants`: {name: flavour}, each written to Dockerfile.<name> with the reference's parts."""
    path, container = _container(directory)
    table = container.get("variants", {})
    fix = 'e.g. variants = { tpu = "tpu-tensorflow" } (Dockerfile.tpu)'
    if not isinstance(table, dict) or not all(isinstance(v, str) and v for v in table.values()):
        raise Problem(f"{path}: [container] variants must be a table of name = flavour, {fix}")
    bad = [name for name in table if not VARIANT.fullmatch(name)]
    if bad:
        raise Problem(f"{path}: [container] variants: {bad[0]!r} is not a name of lower-case letters, digits and "
                      f"-; {fix}")
    return dict(table)


def declaration(directory: Path) -> tuple[str, list[str]] | None:
    """(flavour, parts) from the reference's reference.toml, or None where it names no flavour."""
    path, container = _container(directory)
    if "flavour" not in container:
        for key in ("parts", "variants"):
            if key in container:
                raise Problem(f"{path}: [container] {key} without a flavour; add flavour = \"...\" or delete {key}")
        return None
    flavour, parts = container["flavour"], container.get("parts", [])
    if not isinstance(flavour, str) or not flavour:
        raise Problem(f"{path}: [container] flavour must be a flavour's name, e.g. flavour = \"cuda-pytorch\"")
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise Problem(f"{path}: [container] parts must be a list of names, e.g. parts = [\"imagenet-views\"]")
    return flavour, parts


def expected(directory: Path, table: dict | None = None) -> dict[str, str]:
    """What each of the reference's Dockerfiles must be, by file name ({} where it names no flavour):
    Dockerfile from its flavour, Dockerfile.<name> from each variant's, all with its parts."""
    declared = declaration(directory)
    if declared is None:
        return {}
    flavour, parts = declared
    files = {"Dockerfile": flavour, **{f"Dockerfile.{name}": v for name, v in variants(directory).items()}}
    try:
        return {file: render(each, parts, table=table, file=file) for file, each in files.items()}
    except Problem as e:
        raise Problem(f"{directory / 'reference.toml'}: {e}") from None


def differences(directory: Path, table: dict | None = None) -> list[str]:
    """Why each of the reference's Dockerfiles is not what its flavour writes (one line each); [] when all are."""
    found = []
    declared = declaration(directory)
    for file, want in expected(directory, table).items():
        path = directory / file
        have = path.read_text(encoding="utf-8") if path.is_file() else ""
        if have == want:
            continue
        flavour = variants(directory)[file.split(".", 1)[1]] if "." in file else declared[0]
        have_lines, want_lines = have.splitlines(), want.splitlines()
        at = next((i for i, (a, b) in enumerate(zip(have_lines, want_lines)) if a != b),
                  min(len(have_lines), len(want_lines)))
        shown = have_lines[at] if at < len(have_lines) else "(the end of the file)"
        found.append(f"{shown_path(path)}: line {at + 1} is not what flavour {flavour} writes ({shown.strip()[:50]!r}); "
                     f"change docker/{TEMPLATE.name} or {FLAVOURS.name} and run `{COMMAND} generate`, or, for a "
                     f"Dockerfile of its own, delete flavour, parts and variants from its reference.toml")
    return found


def difference(directory: Path, table: dict | None = None) -> str | None:
    """The first of differences(), or None."""
    found = differences(directory, table)
    return found[0] if found else None


def shown_path(path: Path) -> str:
    """`path` relative to the working folder where it is below it: the form a user types."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def references(root: Path, names: list[str]) -> list[Path]:
    if not root.is_dir():
        raise Problem(f"{root} is not a folder; pass --references DIR, the references folder")
    if not names:
        return sorted(p.parent for p in root.glob("*/reference.toml"))
    missing = [n for n in names if not (root / n / "reference.toml").is_file()]
    if missing:
        raise Problem(f"{root / missing[0]} is not a reference (no reference.toml); "
                      f"name a folder of {root}")
    return [root / n for n in names]


class _Parser(argparse.ArgumentParser):
    def error(self, message):       # one line, as every other refusal of the project
        self.exit(2, f"{self.prog}: {message}; see {self.prog} --help\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("generate", "check"))
    parser.add_argument("names", nargs="*", metavar="REF", help="references (default: every one naming a flavour)")
    parser.add_argument("--references", type=Path, default=DOCKER.parent / "references",
                        help="the references folder (default: this checkout's)")
    args = parser.parse_intermixed_args(argv)
    try:
        table = load_flavours()
        found = []
        for directory in references(args.references, args.names):
            if args.command == "check":
                found += differences(directory, table)
                continue
            files = expected(directory, table)
            if not files and args.names:
                raise Problem(f"{directory / 'reference.toml'} names no flavour, so its Dockerfile is "
                              f"its own; add [container] flavour = \"...\" to write it from one")
            for file, want in files.items():
                path = directory / file
                if not path.is_file() or path.read_text(encoding="utf-8") != want:
                    path.write_text(want, encoding="utf-8")
                    print(f"wrote {shown_path(path)}")
    except Problem as e:
        print(f"{COMMAND}: {e}", file=sys.stderr)
        return 2
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
