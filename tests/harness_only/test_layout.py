"""The package layout: the harness runs alone (`python -m harness`, numpy and tqdm only), imports go
one way (dawnbench -> harness, common; common -> harness; harness -> nothing of ours), and the
references, data and results are found from the current directory, not from the installed package."""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, cli_env

from harness import cli as harness_cli
from harness import paths, registry
from harness.errors import UsageError

pytestmark = pytest.mark.harness

PRICE = {"instance": "aws:p3.2xlarge", "usd_per_hour": 3.06, "source": "https://aws.amazon.com/ec2/pricing/on-demand/",
         "date": "2017-10-25"}


# --- import direction ------------------------------------------------------------------------------

def imported_packages(package: str) -> dict[str, set[str]]:
    """{module file: the top-level names it imports} for every module of `package`."""
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
        found[str(path.relative_to(REPO))] = names
    return found


@pytest.mark.parametrize("package, forbidden", [
    ("harness", {"dawnbench", "common", "bench", "yaml", "docker", "matplotlib", "torch", "tensorflow", "mxnet"}),
    ("common", {"dawnbench", "bench", "yaml", "docker", "matplotlib"}),
])
def test_imports_go_one_way(package, forbidden):
    bad = {f: sorted(names & forbidden) for f, names in imported_packages(package).items() if names & forbidden}
    assert not bad, f"{package} must not import {sorted(forbidden)}: {bad}"


def harness_modules_imported(path: Path) -> set[str]:
    """The harness modules a file imports: `import harness.x`, `from harness import x`, `from harness.x import y`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("harness.")}
        elif isinstance(node, ast.ImportFrom) and node.module == "harness":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness."):
            found.add(node.module.split(".")[1])
    return found


def test_the_runner_is_the_loop_and_inference_does_not_borrow_it(tmp_path):
    """The plan, the eval set, the verdict and the worker start live where both users reach them
    (harness.plan, eval_set, official, roles): an inference has nothing of the runner's loop."""
    assert "runner" not in harness_modules_imported(REPO / "harness" / "inference.py")
    sample = tmp_path / "sample.py"
    sample.write_text("from harness import datasets, runner\nfrom harness.plan import Plan\n")
    assert harness_modules_imported(sample) == {"datasets", "runner", "plan"}
    runner = (REPO / "harness" / "runner.py").read_text(encoding="utf-8")
    assert not any(f"\n{d} " in runner for d in ("class EvalSet", "def official_verdict", "def make_plan",
                                                   "class Plan", "class RunOptions", "def start_worker"))


def test_the_harness_runs_without_the_host_package(references_root, fashion_root, tmp_path):
    """Run, list and data verify with dawnbench, common and PyYAML made unimportable: what an image has."""
    script = textwrap.dedent(f"""
        import sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in ("dawnbench", "common", "yaml"):
                    raise ModuleNotFoundError(f"no {{name}} in an image", name=name)
        sys.meta_path.insert(0, Refuse())
        from harness.cli import main
        assert main(["list"]) == 0
        assert main(["data", "verify", "fashion-mnist", "--data", {str(fashion_root)!r}]) == 0
        sys.exit(main(["run", "scripted-test", "--no-progress", "--no-save", "--results", {str(tmp_path / "r")!r},
                       "--data", {str(fashion_root)!r}, "--price-record", {json.dumps(PRICE)!r}, "--nodes", "2"]))
    """)
    proc = subprocess.run([PYTHON, "-c", script], env=cli_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "scripted-test" in proc.stdout and "ok t10k-labels-idx1-ubyte" in proc.stdout
    (run_dir,) = (tmp_path / "r" / "scripted-test").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["price"] == PRICE and result["instance"] == "aws:p3.2xlarge" and result["nodes"] == 2
    assert result["costPerHour"] == pytest.approx(3.06 * 2)


def test_python_m_harness(references_root, tmp_path):
    proc = subprocess.run([PYTHON, "-m", "harness", "list"], env=cli_env(), cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "scripted-test" in proc.stdout and "fashion-mnist-cnn-pytorch" in proc.stdout
    proc = subprocess.run([PYTHON, "-m", "harness", "eval", "squad", str(tmp_path / "no.json"), str(tmp_path / "p.json")],
                          env=cli_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("harness eval squad: error:"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# --- the price a run records ---------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (["--price-record", json.dumps(PRICE), "--cost-per-hour", "3"], "not both"),
    (["--price-record", "{aws"], "not valid JSON"),
    (["--price-record", json.dumps({**PRICE, "usd_per_hour": -1})], "usd_per_hour -1"),
    (["--price-record", json.dumps({k: v for k, v in PRICE.items() if k != "date"})], "exactly the fields"),
    (["--price-record", json.dumps(PRICE), "--nodes", "0"], "--nodes 0"),
])
def test_bad_price_options_are_one_line(references_root, tmp_path, capsys, args, says):
    code = harness_cli.main(["run", "scripted-test", "--results", str(tmp_path / "r"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("harness: error:") and says in err[0], err
    assert not (tmp_path / "r").exists()


# --- where things are ----------------------------------------------------------------------------

@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A current directory with nothing of dawnbench in it, and no DAWNBENCH_* variable."""
    for var in (paths.REFERENCES_ENV, paths.DATA_ENV):
        monkeypatch.delenv(var, raising=False)
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    return here


def a_reference(root: Path, name: str) -> Path:
    shutil.copytree(REPO / "references" / "fashion-mnist-cnn-pytorch", root / name)
    return root / name


def test_references_are_found_in_order(elsewhere, tmp_path, monkeypatch):
    checkout = paths.checkout_root()
    assert checkout == REPO       # the tests run from a source checkout
    assert paths.references_root() == REPO / "references"                      # 4. the checkout's
    a_reference(elsewhere / "references", "here-ref")
    assert registry.available() == ["here-ref"]                                # 3. ./references
    a_reference(tmp_path / "env", "env-ref")
    monkeypatch.setenv(paths.REFERENCES_ENV, str(tmp_path / "env"))
    assert registry.available() == ["env-ref"]                                 # 2. $DAWNBENCH_REFERENCES
    a_reference(tmp_path / "given", "given-ref")
    assert registry.available(tmp_path / "given") == ["given-ref"]             # 1. --references DIR
    assert registry.load_spec("given-ref", tmp_path / "given").directory == tmp_path / "given" / "given-ref"
    with pytest.raises(UsageError, match="--references .*no such folder"):
        registry.available(tmp_path / "nowhere")


def test_list_and_run_take_references(elsewhere, tmp_path, capsys):
    a_reference(tmp_path / "mine", "my-ref")
    assert harness_cli.main(["list", "--references", str(tmp_path / "mine")]) == 0
    assert capsys.readouterr().out.split()[0] == "my-ref"
    assert harness_cli.main(["run", "nope", "--references", str(tmp_path / "mine")]) == 2
    assert "unknown reference 'nope'; available: my-ref" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert harness_cli.main(["run", "nope", "--references", str(tmp_path / "empty")]) == 2
    assert "no references in" in capsys.readouterr().err


def test_results_default_to_the_current_directory(elsewhere):
    assert paths.results_root() == elsewhere / "results"
    assert harness_cli.build_parser().parse_args(["run", "x"]).results is None    # decided when the run starts


def test_data_root_is_found_in_order(elsewhere, tmp_path, monkeypatch):
    assert paths.data_root() == REPO / "data"            # no ./data: the checkout's
    (elsewhere / "data").mkdir()
    assert paths.data_root() == elsewhere / "data"
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path))
    assert paths.data_root() == tmp_path


def harness_import_graph() -> dict[str, set[str]]:
    """{harness module: the harness modules it imports when it is imported}: the imports of its body,
    not those inside functions (deferred on purpose) or under `if TYPE_CHECKING`."""
    def name(path: Path) -> str:
        parts = path.relative_to(REPO).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    modules = {name(p): p for p in (REPO / "harness").rglob("*.py")}
    graph = {}
    for module, path in modules.items():
        found = set()
        for statement in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
                    isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test)):
                continue
            for node in ast.walk(statement):
                if isinstance(node, ast.Import):
                    found |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                              for a in node.names}
        graph[module] = {m for m in found if m in modules and m != module}
    return graph


def test_harness_modules_import_in_no_circle():
    """Modules import downward: no harness module imports, through others, one that imports it."""
    graph, state, circles = harness_import_graph(), {}, []

    def visit(module, path):
        state[module] = "open"
        for other in sorted(graph[module]):
            if state.get(other) == "open":
                circles.append(" -> ".join([*path[path.index(other):], other]))
            elif other not in state:
                visit(other, [*path, other])
        state[module] = "done"
    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, f"harness modules import in a circle: {circles}"


def test_the_sandbox_package_stands_on_the_harness_below_it_only():
    """The boundary reads in one place: harness/sandbox/ imports only its own modules and the few
    harness modules it needs (errors, which interpreter the workers run, whether this is an image, and
    the bounded JSON reader the channel parses the worker's frames with)."""
    outside = {m: sorted(d for d in deps if not d.startswith("harness.sandbox"))
               for m, deps in harness_import_graph().items() if m.startswith("harness.sandbox")}
    allowed = {"harness.errors", "harness.worker_env", "harness.provenance", "harness.safe_read"}
    assert {m: d for m, d in outside.items() if set(d) - allowed} == {}


def test_the_harness_only_tier_is_its_folder():
    """`make test-harness-numpy1` runs tests/harness_only/ under numpy 1.23.5 (what MXNet's images
    have): a module marked `harness` elsewhere would never run there, and one there without the
    mark would be left out of `pytest -m harness`."""
    tests = REPO / "tests"
    marked = {p for p in tests.rglob("test_*.py")
              if re.search(r"^pytestmark = pytest\.mark\.harness\b", p.read_text(encoding="utf-8"), re.M)}
    assert marked == set((tests / "harness_only").glob("test_*.py")), sorted(str(p.relative_to(tests)) for p in marked)


# --- docs/LAYOUT.md, the map -----------------------------------------------------------------------

MAPPED = ("harness", "common", "dawnbench", "bench", "docker")     # every top-level file of these is listed


def _layout() -> str:
    return (REPO / "docs" / "LAYOUT.md").read_text()


def test_layout_md_lists_every_file_of_the_mapped_folders_and_only_files_that_exist():
    text = _layout()
    listed = {n for n in re.findall(r"^- `((?:" + "|".join(MAPPED) + r")/(?:[^`/]+/)?[^`/]+)`:", text, re.M)
              if n.count("/") == 1 or (REPO / n).parent.joinpath("__init__.py").is_file() or n.endswith(".py")}
    present = {f"{folder}/{p.name}" for folder in MAPPED for p in (REPO / folder).iterdir()
               if p.is_file() and (p.suffix == ".py" or folder == "docker") and not p.name.startswith(".")}
    # a package inside a mapped folder (harness/sandbox/) has a line for each of its modules
    present |= {str(p.relative_to(REPO)) for folder in MAPPED for p in (REPO / folder).glob("*/*.py")
                if (p.parent / "__init__.py").is_file()}
    assert not sorted(listed - present), f"docs/LAYOUT.md lists files that are gone: {sorted(listed - present)}"
    assert not sorted(present - listed), f"docs/LAYOUT.md lacks a line for: {sorted(present - listed)}"


def test_layout_md_names_only_paths_that_exist():
    """The call chain, the checklists and the picture name real files (a `<name>` placeholder aside)."""
    named = {n.split(":")[0] for n in re.findall(r"`((?:harness|common|dawnbench|bench|docker|tests|references)/[^` |]+)",
                                                 _layout())}
    named |= {m for m in re.findall(r"(?<![\w/])((?:harness|common|dawnbench|bench|docker)/[\w/.-]+\.(?:py|toml|yaml|sh))",
                                    _layout())}
    missing = sorted(n for n in named if "<" not in n and "*" not in n and not (REPO / n.rstrip(".,;")).exists()
                     and not n.startswith(("common/torch_runtime", "common/tf_runtime", "harness/runtimes",
                                           "harness/verify.py", "dawnbench/validate.py", "dawnbench/images.py",
                                           "harness/identity.py", "common/datasets.py",
                                           "harness/outputs.py", "harness/views.py", "dawnbench/verification.py",
                                           "dawnbench/reproduction.py")))
    assert not missing, f"docs/LAYOUT.md names paths that do not exist: {missing}"


def test_layout_md_call_chain_names_real_functions():
    """Each `file.py:function` of the path from `make run` to train_epoch is defined in that file."""
    chain = re.findall(r"`((?:harness|dawnbench)/[\w/]+\.py):(?:(\w+)\.)?(\w+)", _layout())
    assert len(chain) >= 8, chain
    for path, klass, name in chain:
        tree = ast.parse((REPO / path).read_text())
        scope = tree.body
        if klass:
            (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == klass] or [None]
            assert cls is not None, f"{path} has no class {klass}"
            scope = cls.body
        defined = {n.name for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert name in defined, f"docs/LAYOUT.md names {path}:{klass + '.' if klass else ''}{name}, which is not defined there"
