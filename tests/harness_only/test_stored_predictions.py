"""harness.stored_predictions: what a run keeps of each evaluation re-scores it exactly, and a hostile
file is refused in one line, never loaded as code or inflated without bound."""
from __future__ import annotations

import gzip
import io
import json
import os
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import metrics, stored_predictions
from harness.safe_read import Refused
from harness.tasks import Task, get_task

pytestmark = pytest.mark.harness


def small_task(metric: str = "top5", n: int = 64) -> Task:
    """A task of `n` examples with every column, so top-1 and top-5 are both scored."""
    base = get_task("imagenet")
    return Task(name="tiny", display_name="Tiny", dataset=base.dataset, metric=metric, threshold=0.5,
                eval_examples=n, tsv_columns=base.tsv_columns)


@st.composite
def scores_with_ties(draw):
    """Class scores drawn from a handful of values (so rows tie), some NaN, and labels."""
    n = draw(st.integers(1, 40))
    c = draw(st.integers(1, 12))
    values = st.sampled_from([0.0, -0.0, 1.0, 1.0, 2.5, -3.0, np.inf, -np.inf, np.nan, 1e-30])
    scores = np.array(draw(st.lists(values, min_size=n * c, max_size=n * c)), dtype=draw(
        st.sampled_from([np.float16, np.float32, np.float64]))).reshape(n, c)
    labels = np.array(draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)), dtype=np.int64)
    return scores, labels


def naive_ranking(scores: np.ndarray, k: int) -> np.ndarray:
    """The rule in words: higher first, equal scores by lower class id, NaN below everything."""
    s = np.where(np.isnan(scores), -np.inf, scores.astype(np.float64))
    return np.array([sorted(range(s.shape[1]), key=lambda j: (-s[i, j], j))[:k] for i in range(s.shape[0])])


@settings(max_examples=120, deadline=None)
@given(scores_with_ties())
def test_topk_ids_follow_the_metric_ranking_rule(case):
    scores, labels = case
    c = scores.shape[1]
    for k in range(1, c + 1):
        ids = metrics.topk_ids(scores, k)
        assert ids.shape == (len(scores), k)
        np.testing.assert_array_equal(ids, naive_ranking(scores, k))
        for j in range(1, k + 1):
            assert metrics.topk_accuracy(ids, labels, j) == metrics.topk_accuracy(scores, labels, j)


@settings(max_examples=60, deadline=None)
@given(scores_with_ties())
def test_stored_ids_reproduce_top1_and_top5_exactly(tmp_path_factory, case):
    scores, labels = case
    n, c = scores.shape
    task = small_task(n=n)
    run = tmp_path_factory.mktemp("run")
    stored = stored_predictions.save(run, 3, task, scores)
    assert stored["file"] == "predictions/epoch-003.npz"
    ids = stored_predictions.load(run, stored["file"], task, stored["sha256"])
    assert ids.dtype == np.int16 and ids.shape == (n, min(5, c))
    k = min(5, c)
    for j in range(1, k + 1):
        assert metrics.topk_accuracy(ids, labels, j) == metrics.topk_accuracy(scores, labels, j)
    if c >= 5:
        assert task.score(ids, labels) == task.score(scores, labels)


def test_large_random_scores_with_ties_score_the_same(tmp_path):
    rng = np.random.default_rng(7)
    scores = rng.integers(0, 4, size=(20_000, 1000)).astype(np.float32)     # ties everywhere
    labels = rng.integers(0, 1000, size=20_000)
    task = small_task(n=20_000)
    stored = stored_predictions.save(tmp_path, 1, task, scores)
    ids = stored_predictions.load(tmp_path, stored["file"], task, stored["sha256"])
    assert task.score(ids, labels) == task.score(scores, labels)
    assert os.path.getsize(tmp_path / stored["file"]) < 300_000     # top-5, never the score matrix (80 MB)


def test_ranked_ids_and_class_ids_are_kept_as_given(tmp_path):
    task = small_task(metric="top1", n=4)
    ranked = np.array([[3, 1, 2, 0, 5, 6], [0, 1, 2, 3, 4, 5], [70000, 1, 2, 3, 4, 5], [-2**40, 1, 2, 3, 4, 5]])
    ids = stored_predictions.load(tmp_path, stored_predictions.save(tmp_path, 1, task, ranked)["file"], task)
    assert ids.dtype == np.int32 and ids.tolist()[0] == [3, 1, 2, 0, 5]
    assert ids[3, 0] == -1      # out of int32: matches no label, as the original did not
    labels = np.array([3, 4, 1, 0])
    assert task.score(ids, labels) == task.score(ranked, labels)
    flat = np.array([1, 2, 3, 4])
    ids = stored_predictions.load(tmp_path, stored_predictions.save(tmp_path, 2, task, flat)["file"], task)
    assert ids.shape == (4, 1) and metrics.topk_accuracy(ids, labels, 1) == metrics.topk_accuracy(flat, labels, 1)


def test_squad_answers_round_trip_and_score_the_same(tmp_path):
    task = get_task("squad")
    answers = {f"q{i}": f"answer ünïcode {i}" for i in range(task.eval_examples)}
    stored = stored_predictions.save(tmp_path, 1, task, answers)
    assert stored["file"] == "predictions/epoch-001.json.gz"
    assert stored_predictions.load(tmp_path, stored["file"], task, stored["sha256"]) == answers
    again = stored_predictions.save(tmp_path / "other", 1, task, dict(reversed(answers.items())))
    assert again["sha256"] == stored["sha256"]        # the same answers, the same bytes


def test_writes_are_atomic_and_leave_no_temporary_file(tmp_path):
    task = small_task(n=3)
    stored_predictions.save(tmp_path, 1, task, np.eye(3, 6))
    assert sorted(p.name for p in (tmp_path / "predictions").iterdir()) == ["epoch-001.npz"]
    assert not (tmp_path / "predictions" / "epoch-001.npz").stat().st_mode & 0o7000


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


@pytest.mark.parametrize("content, says", [
    (b"not a zip", "not an npz file"),
    (npz_bytes(ids=np.zeros((8, 5), np.int16), more=np.zeros(1)), "not the one array ids.npy"),
    (npz_bytes(ids=np.zeros((8, 5), np.float32)), "not int16 or int32"),
    (npz_bytes(ids=np.zeros((7, 5), np.int16)), "not (8, 1..5)"),
    (npz_bytes(ids=np.zeros((8, 6), np.int16)), "not (8, 1..5)"),
    (npz_bytes(ids=np.array([None] * 8, dtype=object)), "not int16 or int32"),
])
def test_hostile_classification_files_are_refused(tmp_path, content, says):
    (tmp_path / "predictions").mkdir()
    (tmp_path / "predictions" / "epoch-001.npz").write_bytes(content)
    with pytest.raises(Refused, match=says.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        stored_predictions.load(tmp_path, "predictions/epoch-001.npz", small_task(n=8))


def test_a_header_declaring_a_huge_array_is_refused_before_allocation(tmp_path):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<i2", "fortran_order": False, "shape": (10**12, 5)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("ids.npy", header.getvalue())
    (tmp_path / "predictions").mkdir()
    (tmp_path / "predictions" / "epoch-001.npz").write_bytes(buffer.getvalue())
    with pytest.raises(Refused, match="ids of shape"):
        stored_predictions.load(tmp_path, "predictions/epoch-001.npz", small_task(n=8))


def test_a_zip_bomb_is_refused_unopened(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ids.npy", b"\0" * (stored_predictions.MAX_ARRAY_BYTES + 1))
    (tmp_path / "predictions").mkdir()
    (tmp_path / "predictions" / "epoch-001.npz").write_bytes(buffer.getvalue())
    with pytest.raises(Refused, match="inflates to"):
        stored_predictions.load(tmp_path, "predictions/epoch-001.npz", small_task(n=8))


def test_hostile_squad_files_and_paths_are_refused(tmp_path):
    task = get_task("squad")
    folder = tmp_path / "predictions"
    folder.mkdir()
    cases = {
        "bomb.json.gz": (gzip.compress(b" " * (stored_predictions.MAX_JSON_BYTES + 10)), "inflates to over"),
        "list.json.gz": (gzip.compress(b"[1, 2]"), "not a JSON object"),
        "deep.json.gz": (gzip.compress(b"[" * 100 + b"]" * 100), "nested too deeply"),
        "short.json.gz": (gzip.compress(json.dumps({"q": "a"}).encode()), "1 answers, not the 10570"),
        "plain.json.gz": (b"{}", "not gzip data"),
    }
    for name, (content, _) in cases.items():
        (folder / name).write_bytes(content)
    for name, (_, says) in cases.items():
        with pytest.raises(Refused, match=says):
            stored_predictions.load(tmp_path, f"predictions/{name}", task)
    os.mkfifo(folder / "fifo.json.gz")
    (tmp_path / "outside.json.gz").write_bytes(cases["list.json.gz"][0])
    (folder / "link.json.gz").symlink_to(tmp_path.parent)
    for name, says in [("predictions/fifo.json.gz", "not a regular file"), ("predictions/../outside.json.gz", "not a file under"),
                       ("/etc/passwd", "not a file under"), ("predictions/link.json.gz", "link out of the run folder"),
                       ("predictions/none.json.gz", "missing"), (None, "not a file under")]:
        with pytest.raises(Refused, match=says):
            stored_predictions.load(tmp_path, name, task)
