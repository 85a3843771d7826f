"""Every reference directory is self-contained: its entry module is a file of its own, nothing
imports the retired shared recipes, and a `cp -r` of a directory is a reference that runs."""
from __future__ import annotations

import ast
import importlib.util
import inspect
import shutil
from pathlib import Path

import pytest
from cifar10_fixture import fixture_manifest, write_cifar10_batches
from conftest import REPO

from harness import datasets, registry, runner

NAMES = registry.available()
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", "data", "results", "bench-results"}


def test_every_folder_of_references_is_a_reference():
    """The registry finds each folder of references/ (none is skipped, none stray), the default among them."""
    folders = sorted(p.name for p in (REPO / "references").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert NAMES == folders and "fashion-mnist-cnn-pytorch" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_entry_module_is_a_file_of_the_directory(name):
    spec = registry.load_spec(name)
    module, _, cls = spec.entry.partition(":")
    assert cls and "." not in module, spec.entry
    assert (REPO / "references" / name / f"{module}.py").is_file(), spec.entry
    assert spec.code_url == f"references/{name}"


def test_entry_classes_come_from_their_directories():
    for name in NAMES:
        spec = registry.load_spec(name)
        module = spec.entry.partition(":")[0]
        if spec.framework == "mxnet" and importlib.util.find_spec("mxnet") is None:
            continue            # MXNet lives in its reference's venv only: make test-mxnet imports it
        path = Path(inspect.getfile(spec.load_entry_class()))
        assert path == REPO / "references" / name / f"{module}.py", name


def python_files():
    for path in REPO.rglob("*.py"):
        if not SKIP_DIRS.intersection(path.relative_to(REPO).parts):
            yield path


def test_nothing_imports_common_recipes():
    assert not (REPO / "common" / "recipes").exists()
    importers = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "common.recipes" or n.startswith("common.recipes.") for n in names):
                importers.append(str(path.relative_to(REPO)))
    assert not importers


# ------------------------------------------------------------------------------- a fork runs

TRAIN_PER_BATCH = 8                   # 40 training images: two steps of 16 an epoch
FORKS = {
    # reference copied: hyperparameters that keep the epoch and the 10,000-image eval short on a CPU
    "cifar10-resnet20-pytorch": {"batch_size": 16, "depth": 8},
    "cifar10-fast-pytorch": {"batch_size": 16, "widths": [16, 32, 32], "tta_level": 1},
}


@pytest.fixture(scope="module")
def full_eval_root(tmp_path_factory) -> tuple[Path, Path]:
    """(data root, manifest): the CIFAR-10 fixture with the 10,000 test images the runner insists on."""
    tmp = tmp_path_factory.mktemp("cifar10-full-eval")
    batches = tmp / "data" / "cifar10" / "cifar-10-batches-py"
    write_cifar10_batches(batches, per_batch=TRAIN_PER_BATCH, n_test=10_000)
    return tmp / "data", fixture_manifest(tmp / "datasets.toml", batches_dir=batches)


@pytest.mark.recipe_run
@pytest.mark.parametrize("original", sorted(FORKS))
def test_a_copied_directory_runs_through_the_runner(original, full_eval_root, tmp_path, monkeypatch):
    data_root, manifest = full_eval_root
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    references = tmp_path / "references"
    fork = original.replace("resnet20", "mynet").replace("fast", "myfast")
    shutil.copytree(REPO / "references" / original, references / fork)
    monkeypatch.setenv("DAWNBENCH_REFERENCES", str(references))

    spec = registry.load_spec(fork)
    assert registry.available() == [fork]
    assert Path(inspect.getfile(spec.load_entry_class())) == references / fork / "train.py"
    result = runner.run(spec, dict(spec.hyperparameters, **FORKS[original]),
                        runner.RunOptions(seed=1, max_epochs=spec.eval_from_epoch, threshold=0.01,
                                          results_root=tmp_path / "results", data_root=data_root, progress=False))
    # the first evaluated epoch converges (cifar10-fast evaluates from its schedule's last, reference.toml)
    assert result["status"] == "converged" and result["epochs"] == spec.eval_from_epoch, result.get("dnc_reason")
    assert result["reference"] == fork and result["eval_examples"] == 10_000
    assert (Path(result["run_dir"]) / "model" / "model.pt").is_file()


@pytest.mark.parametrize("entry,problem", [
    ("common.torch_base:TorchReference", "must be 'module:Class' with module.py a file of"),
    ("model:Net", "no model.py in"),
    ("train", "must be 'module:Class'"),
])
def test_entry_outside_the_reference_directory_is_refused(tmp_path, monkeypatch, entry, problem):
    """A reference's code is a file of its own directory: an entry elsewhere (a shared module
    on the path) would make `cp -r` copy no code."""
    ref = tmp_path / "references" / "x-cnn-pytorch"
    ref.mkdir(parents=True)
    (ref / "reference.toml").write_text(f'task = "fashion-mnist"\nframework = "pytorch"\nmodel = "m"\nentry = "{entry}"\n')
    monkeypatch.setenv("DAWNBENCH_REFERENCES", str(ref.parent))
    with pytest.raises(registry.UsageError, match=problem) as caught:
        registry.load_spec("x-cnn-pytorch").load_entry_class()
    assert "\n" not in str(caught.value)
