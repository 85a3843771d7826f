"""`dawnbench fork REF NEW [--author NAME] [--model TEXT]`: references/REF copied to references/NEW,
named as the fork's own.

The copy gets, in its reference.toml, its own `author` and `model` (an entry is named
<author>_<model>_<hardware>_<framework>: a fork that kept its original's would take the original's
entry name, and look like it on the leaderboard). The two keys are edited line by line, so every comment
and every other line of the file stays as it was. What still describes the original is marked to do
(provenance.FORK_TODO), since a fork is made to change the recipe and the copied words would describe
the wrong network: the model, unless --model gives it, reads "TODO(fork): describe NEW's model ..." (a run
of it is unofficial until it is set: harness/provenance.py), and the README says under its title what it
was forked from, at which commit, and that its description and anchor table are the original's (a line
above the table, and a comment atop anchor.toml). Then the command prints the next steps: edit the code,
set `model` and the README, commit, run. A run is official only from committed code.

Every mistake (an unknown REF, a bad or taken NEW, bad text) is one line, exit 2, and nothing is
written: the copy is made in a temporary folder beside the references and renamed into place last.

Standard library only (and the harness's numpy-free modules): dawnbench.launcher runs it in whatever
Python `bin/dawnbench` starts under, with no environment set up.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from harness import paths, registry
from harness.arguments import Parser, nonempty_path, reports_errors, text, tool_main
from harness.errors import EXIT_OK, UsageError, command
from harness.provenance import FORK_TODO

PROG = command("fork")
KEYS = ("author", "model")
# dawnbench.anchors.BEGIN, the generated table's first line (that module needs jsonschema; this one runs on a bare
# python3): tests/test_fork_command.py keeps the two equal
ANCHORS_BEGIN = "<!-- anchor table: generated from anchor.toml by `python -m dawnbench.anchors render`; edit that file -->"
# a top-level `key = "basic string"` line, its comment kept: (key, spaces, value, the rest)
_LINE = r'^({key})(\s*=\s*)("(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\')(.*)$'


def build_parser(p: Parser | None = None) -> Parser:
    p = p if p is not None else Parser(prog=PROG)
    p.description = ("Copy references/REF to references/NEW with its own author and model (its entries' name), "
                     "then print the next steps: edit, commit, run.")
    p.add_argument("ref", metavar="REF", help="the reference to copy (`dawnbench list` names them)")
    p.add_argument("new", metavar="NEW", help="the fork's name: a folder name, e.g. fashion-mnist-mynet-pytorch")
    p.add_argument("--author", type=text("--author"), default=None,
                   help="the fork's author, as its entries show it (default: the original's)")
    p.add_argument("--model", type=text("--model"), default=None,
                   help=f"the fork's model text, as its entries show it (default: '{FORK_TODO}: describe NEW's "
                        f"model ...', which a run is unofficial with until reference.toml's `model` is set)")
    p.add_argument("--references", type=nonempty_path, default=None,
                   help="the references folder (default: $DAWNBENCH_REFERENCES or ./references)")
    return p


def _commit(directory: Path) -> str | None:
    """The commit of the git repository holding `directory` (None: no git, or no commit)."""
    try:
        done = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def set_keys(toml_text: str, values: dict[str, str], where: Path) -> str:
    """reference.toml's text with its top-level `values` set: each key's line edited in place (its
    comment kept), or added after `model` where the file has none. Checked by reading it back."""
    cut = re.search(r"^\s*\[", toml_text, re.M)
    top, tables = (toml_text[:cut.start()], toml_text[cut.start():]) if cut else (toml_text, "")
    for key, value in values.items():
        line = re.compile(_LINE.format(key=re.escape(key)), re.M)
        quoted = json.dumps(value, ensure_ascii=False)      # a TOML basic string: one line, escapes as JSON's
        if line.search(top):
            top = line.sub(lambda m, q=quoted: m.group(1) + m.group(2) + q + m.group(4), top, count=1)
        elif re.search(rf"^{re.escape(key)}\s*=", top, re.M):
            raise UsageError(f"{where}: its {key} is not a one-line string, so it cannot be set here; write "
                             f"{key} = \"...\" in it by hand")
        else:
            model = re.compile(_LINE.format(key="model"), re.M).search(top)
            at = model.end() if model else len(top.rstrip("\n"))
            top = top[:at] + f"\n{key} = {quoted}" + top[at:]
    edited = top + tables
    try:
        parsed = tomllib.loads(edited)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: setting {', '.join(values)} would not leave valid TOML ({e}); edit it by "
                         f"hand") from None
    if any(parsed.get(k) != v for k, v in values.items()):
        raise UsageError(f"{where}: {', '.join(values)} could not be set line by line; edit them by hand")
    return edited


def default_model(new: str, original: str) -> str:
    """The fork's model text until its author gives one: marked to do, naming what it was copied from."""
    return f"{FORK_TODO}: describe {new}'s model (forked from: {original})"


def _readme(text_: str, ref: str, new: str, commit: str | None) -> str:
    at = f"at commit {commit[:12]}" if commit else "outside any git commit"
    note = (f"Forked from `references/{ref}` {at} with `dawnbench fork`.\n\n"
            f"**{FORK_TODO}:** what follows describes {ref}, the original: rewrite it for this fork's recipe, "
            f"and set `model` in `reference.toml` (its entries' name).\n")
    lines = text_.splitlines(keepends=True)
    if lines and lines[0].startswith("# "):
        text_ = f"# {new}\n\n{note}" + "".join(lines[1:])
    else:
        text_ = f"# {new}\n\n{note}\n" + text_
    if ANCHORS_BEGIN in text_:      # the generated table's own text stays its rendering (dawnbench.anchors check)
        text_ = text_.replace(ANCHORS_BEGIN, f"**{FORK_TODO}:** the table below is {ref}'s recipe: edit the rows of "
                                             f"`anchor.toml` that this fork changes, then `python -m dawnbench.anchors "
                                             f"render {new}`.\n\n" + ANCHORS_BEGIN, 1)
    return text_


def _anchor_toml(text_: str, ref: str, new: str) -> str:
    return (f"# {FORK_TODO}: these rows are {ref}'s recipe, copied by `dawnbench fork`: edit the ones {new} changes\n"
            f"# (ours, deviation), then `python -m dawnbench.anchors render {new}` for the README's table.\n" + text_)


def fork(ref: str, new: str, author: str | None, model: str | None, references: Path | None) -> list[str]:
    """Make the fork; the lines to print."""
    root = registry.references_root(references)
    paths.check_name(new, "NEW")
    spec = registry.load_spec(ref, root)        # an unknown REF: its one line, naming the references there are
    target = root / new
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target} exists: give the fork another name (NEW), or remove that folder first")
    model = model if model is not None else default_model(new, spec.model)
    text("--model")(model)      # the default too must be one line an entry can show
    author = author if author is not None else spec.author
    if (author, model) == (spec.author, spec.model):
        raise UsageError(f"--author {author!r} --model {model!r} are the original's: its entries would share the "
                         f"fork's name; give another --model or --author")
    source, toml_path = spec.directory, spec.directory / "reference.toml"
    edited = set_keys(toml_path.read_text(encoding="utf-8"), {"author": author, "model": model}, toml_path)
    commit = _commit(source)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".fork-{new}-", dir=root))
    except OSError as e:
        raise UsageError(f"cannot write into {root}: {e.strerror or e}; fork into a references folder you can "
                         f"write (--references DIR)") from None
    try:
        copy = staging / new
        shutil.copytree(source, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        (copy / "reference.toml").write_text(edited, encoding="utf-8")
        readme = copy / "README.md"
        readme.write_text(_readme(readme.read_text(encoding="utf-8") if readme.is_file() else "", ref, new, commit),
                          encoding="utf-8")
        anchor = copy / "anchor.toml"
        if anchor.is_file():
            anchor.write_text(_anchor_toml(anchor.read_text(encoding="utf-8"), ref, new), encoding="utf-8")
        os.rename(copy, target)
    except OSError as e:
        raise UsageError(f"cannot write the fork at {target}: {e.strerror or e} (nothing was written)") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    code = spec.entry.partition(":")[0].replace(".", "/") + ".py"
    shown_dir = f"references/{new}" if root.resolve() == (Path.cwd() / "references").resolve() else str(target)
    todo = model.startswith(FORK_TODO)
    return [f"forked {ref} into {shown_dir}: author {author!r}, model {model!r} (its entries' name); from "
            + (f"commit {commit[:12]}" if commit else "no git commit"),
            "next:",
            f"  $EDITOR {shown_dir}/{code}",
            f"  $EDITOR {shown_dir}/reference.toml {shown_dir}/README.md {shown_dir}/anchor.toml   # "
            + ("set `model` (its entries' name: a run is unofficial while it reads " + FORK_TODO + "), "
               if todo else "check `model`, ")
            + f"describe the fork, update the anchor table (the lines marked {FORK_TODO})",
            f"  git add {shown_dir} && git commit -m '{new}: forked from {ref}'",
            f"  {command(f'run {new}')}",
            "a run is official only from committed code: commit every change before the run you submit "
            "(the run's last lines say official or why not)"]


@reports_errors(PROG)
def run(args) -> int:
    for line in fork(args.ref, args.new, args.author, args.model, args.references):
        print(line)
    return EXIT_OK


main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())

