"""Shared fixtures: the real Fashion-MNIST data and a folder of scripted test references."""
from __future__ import annotations

import fcntl
import os
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness import datasets, eval_labels

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def fashion_root() -> Path:
    """The data root holding the real Fashion-MNIST files (`make test` fetches them first)."""
    root = datasets.default_data_root()
    try:
        datasets.verify_dataset("fashion-mnist", root)
    except datasets.DatasetError:
        from dawnbench.fetch import fetch
        fetch("fashion-mnist", root, progress=False)
    return root


@pytest.fixture(scope="session")
def fashion_subset(tmp_path_factory, fashion_root) -> tuple[Path, Path]:
    """(data root, $DAWNBENCH_DATASETS_MANIFEST file) of a fifth of the real Fashion-MNIST's training set: its
    first 12,000 training images and the whole test set (submit and validate want every eval example), in the
    official IDX files with a manifest of their checksums. For the tests of a run's plumbing (a challenge's four
    runs, a series' three): one epoch of the default reaches 72-76% on it (a threshold of 0.5 with room) in a
    fifth of the full set's training time. Runs on it are unofficial (the manifest is replaced), as the tests'
    lowered threshold makes them anyway."""
    from fashion_mnist_fixture import fixture_manifest, write_real_subset
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    root, manifest = shared / "fashion-subset", shared / "fashion-subset.toml"
    with open(shared / "fashion-subset.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not manifest.is_file():
            write_real_subset(fashion_root / "fashion-mnist", root / "fashion-mnist", n_train=12_000, n_test=10_000)
            fixture_manifest(manifest.with_suffix(".making"), root / "fashion-mnist").replace(manifest)
    return root, manifest


@pytest.fixture(scope="session")
def default_run(tmp_path_factory, fashion_root) -> Path:
    """One real run of the default reference, shared by the tests that read one (verify, MLPerf's
    checker): one epoch through `python -m harness run` to a lowered threshold, model saved. Read it,
    never change it: copy it first."""
    import subprocess

    # Under xdist each worker has its own session: the first to get here makes the run, in the
    # folder the workers of this pytest run share, and the others read it.
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    with open(shared / "default-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = shared / "default-run"
        if not (results / "fashion-mnist-cnn-pytorch").is_dir():
            proc = subprocess.run([PYTHON, "-m", "harness", "run", "fashion-mnist-cnn-pytorch", "--data",
                                   str(fashion_root), "--max-epochs", "1", "--threshold", "0.5", "--no-progress",
                                   "--results", str(results)],
                                  cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, proc.stderr
    (run_dir,) = (results / "fashion-mnist-cnn-pytorch").iterdir()
    return run_dir


@pytest.fixture(scope="session")
def default_series(tmp_path_factory, fashion_subset) -> Path:
    """One real series of the default, shared by the tests that read one (its evidence, verify, submit):
    `dawnbench run fashion-mnist-cnn-pytorch --runs 3`, one epoch each to a lowered threshold, on
    `fashion_subset` (its tests read it with that manifest set: `on_fashion_subset`). Read it, never
    change it: copy it first."""
    import subprocess

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    with open(shared / "default-series.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = shared / "default-series"
        if not results.is_dir():
            # made aside and moved into place whole: a series cut short is never read as the shared one
            making = shared / "default-series.making"
            shutil.rmtree(making, ignore_errors=True)
            root, manifest = fashion_subset
            proc = subprocess.run([PYTHON, "-m", "dawnbench.cli", "run", "fashion-mnist-cnn-pytorch", "--runs", "3",
                                   "--data", str(root), "--max-epochs", "1", "--threshold", "0.5",
                                   "--no-progress", "--results", str(making)],
                                  cwd=REPO, env=cli_env(**{datasets.MANIFEST_ENV: str(manifest)}), capture_output=True,
                                  text=True, timeout=2700)
            assert proc.returncode == 0, proc.stderr[-3000:]
            os.replace(making, results)
    (series_dir,) = (results / "fashion-mnist-cnn-pytorch").iterdir()
    return series_dir


@pytest.fixture
def on_fashion_subset(fashion_subset, monkeypatch) -> Path:
    """The data root of `fashion_subset`, with its manifest set for this test's in-process CLI calls."""
    root, manifest = fashion_subset
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    return root


# The tiers (pyproject.toml's markers; `make test-fast` leaves them out): a test that takes one of
# these fixtures needs what its marker names, whichever module it is in.
TIER_OF_FIXTURE = {"engine": "engine", "default_run": "trains_default", "default_series": "trains_default",
                   "browser": "browser"}

# `make test` spreads the suite over xdist workers a module at a time (`--dist loadfile`, in the
# order collected), so a module's fixtures are made once. The modules that wait longest (on a Docker
# engine's builds, on other environments' installs, on the real default's training) come first, so
# that they go on beside the rest instead of after it; then the modules that train a framework
# reference (a minute or more each), so that the suite ends on the many short modules, which even the
# workers out, and not on a long one that one worker starts last. Within a module the order stays (the
# engine's TensorFlow comparison stays last). (xdist's --dist loadgroup would group by marker, but
# it names groups by rewriting node ids, which pytest 9 ignores.)
FIRST_TIERS = ("engine", "second_env", "trains_default", "multiprocess", "recipe_run")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    rank: dict[str, int] = {}
    for item in items:
        for fixture, marker in TIER_OF_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
        module = item.nodeid.split("::")[0]
        tiers = [i for i, tier in enumerate(FIRST_TIERS) if item.get_closest_marker(tier)]
        rank[module] = min([rank.get(module, len(FIRST_TIERS)), *tiers])
    first_seen = {module: i for i, module in reversed(list(enumerate(item.nodeid.split("::")[0] for item in items)))}
    items.sort(key=lambda item: (rank[m := item.nodeid.split("::")[0]], first_seen[m]))


# A reference whose behaviour each test scripts through its hyperparameters: the accuracy
# reached per epoch, and where it diverges, raises, miscounts or dawdles. Its folder carries a copy
# of the eval labels (labels.npy, written by the fixture) only so that tests can dial the accuracy:
# the sandbox hides the official label files, but it cannot stop a reference from shipping labels
# in its own code, which is why entries are reviewed (docs/RULES.md).
SCRIPTED = '''
import math, time
from pathlib import Path
import numpy as np
from harness.reference import Reference


class Scripted(Reference):
    def setup(self, ctx):
        self.ctx, self.cfg = ctx, ctx.config
        time.sleep(self.cfg["setup_sleep"])
        self.labels = np.load(Path(__file__).parent / "labels.npy")
        self.epoch = 0

    def train_epoch(self, epoch):
        self.epoch = epoch
        time.sleep(self.cfg["train_sleep"])
        if epoch == self.cfg["raise_at"]:
            raise RuntimeError("scripted failure")
        loss = float("nan") if epoch == self.cfg["nan_at"] else 1.0 / epoch
        return {"loss": loss, "samples": 100, "lr": 0.1}

    def predict(self):
        time.sleep(self.cfg["eval_sleep"])
        acc = self.cfg["accuracies"][min(self.epoch, len(self.cfg["accuracies"])) - 1]
        n = len(self.labels)
        preds = self.labels.copy()
        wrong = n - int(round(acc * n))
        preds[:wrong] = (preds[:wrong] + 1) % 10
        if self.cfg["short"]:
            preds = preds[:-1]
        return np.eye(10, dtype=np.float32)[preds]

    def save(self, path):
        time.sleep(self.cfg["save_sleep"])
        path.mkdir(parents=True, exist_ok=True)
        (path / "model.txt").write_text(str(self.epoch))

    def load(self, path):
        self.epoch = int((Path(path) / "model.txt").read_text())

    def eval_inputs(self):
        return list(range(len(self.labels)))

    def infer(self, i):
        return np.eye(10, dtype=np.float32)[self.labels[i]]
'''

SCRIPTED_TOML = '''
task = "fashion-mnist"
framework = "numpy"
model = "scripted"
entry = "scripted:Scripted"
author = "tests"

[hyperparameters]
accuracies = [0.5, 0.8, 0.95]
setup_sleep = 0.0
train_sleep = 0.0
eval_sleep = 0.0
save_sleep = 0.0
raise_at = -1
nan_at = -1
short = false

[budget]
max_epochs = 5
'''


@pytest.fixture
def references_root(tmp_path, monkeypatch, fashion_root) -> Path:
    """A references/ folder with the scripted reference and a symlink to the real default."""
    import numpy as np
    root = tmp_path / "references"
    ref = root / "scripted-test"
    ref.mkdir(parents=True)
    np.save(ref / "labels.npy", eval_labels.load_eval_labels("fashion-mnist", fashion_root))
    (ref / "scripted.py").write_text(SCRIPTED)
    (ref / "reference.toml").write_text(SCRIPTED_TOML)
    (root / "fashion-mnist-cnn-pytorch").symlink_to(REPO / "references" / "fashion-mnist-cnn-pytorch")
    monkeypatch.setenv("DAWNBENCH_REFERENCES", str(root))
    return root


def cli_env(**extra) -> dict:
    """Environment for running the CLI in a subprocess from the test virtual environment."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


PYTHON = sys.executable


def missing(reason: str, require_env: str):
    """A prerequisite this machine lacks (a Docker engine, a browser, a Debian package): the test
    fails where `require_env`=1, as .ci/run sets it after installing them, and skips elsewhere."""
    if os.environ.get(require_env) == "1":
        pytest.fail(f"{reason} ({require_env}=1: .ci/run installs it)")
    pytest.skip(reason)


@pytest.fixture
def cifar10_root(tmp_path, monkeypatch) -> Path:
    """A data root holding a tiny CIFAR-10 in the exact official format (5 x 20 train, 50 test,
    every class in every batch), under <root>/cifar10/cifar-10-batches-py/, with
    $DAWNBENCH_DATASETS_MANIFEST pointing at a manifest that carries the fixture's checksums."""
    from cifar10_fixture import fixture_manifest, write_cifar10_batches

    root = tmp_path / "data"
    batches = root / "cifar10" / "cifar-10-batches-py"
    write_cifar10_batches(batches)
    override = fixture_manifest(tmp_path / "datasets-cifar10-fixture.toml", batches_dir=batches)
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(override))
    return root


def role_views(dataset: str, data_root: Path, tmp_path: Path) -> dict[str, Path]:
    """{role: a data root holding only the files a worker in that role sees}, as the harness gives
    them (harness.data_views.view_files): the trainer's holds the training files, the predictor's the
    eval inputs (CIFAR-10's as the harness's label-free copy), the timed server's none of the task's
    files. Symlinks to `data_root`'s files, so a reference that reads the other role's files, or any
    eval label, fails its test."""
    from harness import data_views

    roots = {}
    for role in (*data_views.ROLES, data_views.SERVE):
        roots[role] = root = tmp_path / f"view-{role}"
        root.mkdir(parents=True, exist_ok=True)
        for source, relative in data_views.view_files(dataset, data_root, role, tmp_path / "view-derived"):
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).symlink_to(Path(source).resolve())
    return roots


@pytest.fixture
def cifar10_views(cifar10_root, tmp_path) -> dict[str, Path]:
    """role_views of the tiny CIFAR-10 (cifar10_root)."""
    return role_views("cifar10", cifar10_root, tmp_path)


@pytest.fixture
def fashion_views(fashion_root, tmp_path) -> dict[str, Path]:
    """role_views of the real Fashion-MNIST (fashion_root)."""
    return role_views("fashion-mnist", fashion_root, tmp_path)


def check_roles_see_only_their_files(cls, context, views: dict[str, Path]) -> None:
    """A trainer set up on the predictor's view finds no training data, and a predictor on the
    trainer's view finds no eval images: each role's setup reads its own files and only those.
    `context(role, data_root)` makes the Context."""
    for role, other in (("train", "predict"), ("predict", "train")):
        with pytest.raises(datasets.DatasetError, match="not found in"):
            cls().setup(context(role, views[other]))


def check_served(predictor, server, items: int = 5) -> None:
    """`dawnbench infer`'s two workers in one process: the first `items` of the predictor's eval inputs,
    through the channel's wire form, get from the server (set up and loaded in the serve role, which sees
    none of the task's files) the predictor's own infer() answers."""
    import json

    import numpy as np

    from harness import worker

    inputs = predictor.eval_inputs()
    for i in range(items):
        message, array = worker.to_wire(inputs[i])
        example = server.example_from_wire(worker.from_wire(json.loads(json.dumps(message)), array))
        mine, served = predictor.infer(inputs[i]), server.infer(example)
        if isinstance(mine, str):
            assert served == mine
        else:
            np.testing.assert_allclose(np.asarray(served), np.asarray(mine), rtol=1e-4, atol=1e-5)


def check_inference_entry(spec, model: Path, config: dict, data_root: Path, out: Path, scores, items: int = 5) -> dict:
    """`dawnbench infer`'s code path on a saved model, over the first `items` eval examples: the
    report's latencies are timed and its accuracy is that of `scores` (the model's predict())."""
    from harness import inference

    report = inference.infer(spec, model, config, data_root=data_root, warmup=1, limit=items,
                             out_dir=out, progress=False, threshold=0.01)
    assert report["items"] == items and report["batch_size"] == 1 and not report["complete_eval_set"]
    lat = report["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]
    labels = eval_labels.load_eval_labels(spec.task.dataset, data_root)[:items]
    assert report["top1"] == float((scores[:items].argmax(1) == labels).mean())
    assert (out / "inference.json").is_file()
    return report


@pytest.fixture
def http_server():
    """http_server(files, **behaviour) serves {path: bytes} from 127.0.0.1 and returns (base URL,
    the paths requested); behaviour per path: "truncate" (half the body, then close) or
    "overclaim" (whole body, larger Content-Length). Stopped at the end of the test."""
    started = []

    def start(files: dict[str, bytes], **behaviour):
        requests: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                name = self.path.lstrip("/")
                requests.append(name)
                if name not in files:
                    self.send_error(404)
                    return
                body = files[name]
                mode = behaviour.get(name)
                claimed = len(body) + 65536 if mode == "overclaim" else len(body)
                if mode == "truncate":
                    body = body[: len(body) // 2]
                self.send_response(200)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", str(claimed))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/", requests

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def imagenet_prepared(tmp_path_factory) -> tuple[Path, Path]:
    """A prepared tiny ImageNet (tests/imagenet_fixture.py: 4 classes, 14 train and 12 val images, one
    CMYK JPEG and one PNG among them), made once by `dawnbench data prepare imagenet
    --allow-unverified` from files in the official formats; (data root, manifest override carrying
    the fixture's label-file checksums). Tests take copies of it: imagenet_root."""
    from imagenet_fixture import fixture_manifest, write_imagenet_fixture

    from dawnbench.prepare_imagenet import prepare

    base = tmp_path_factory.mktemp("imagenet")
    fixture = write_imagenet_fixture(base / "imagenet-files")
    root = base / "data"
    prepare(fixture.folder, root, allow_unverified=True, progress=False)
    return root, fixture_manifest(base / "datasets-imagenet-fixture.toml", fixture)


@pytest.fixture
def imagenet_root(imagenet_prepared, tmp_path, monkeypatch) -> Path:
    """A test's own copy of the prepared tiny ImageNet (imagenet_prepared), with
    $DAWNBENCH_DATASETS_MANIFEST pointing at the manifest that carries the fixture's checksums."""
    import shutil

    prepared, override = imagenet_prepared
    root = Path(shutil.copytree(prepared, tmp_path / "data", symlinks=True))
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(override))
    return root
