"""What a run keeps of each evaluation, so that anyone can re-score it offline (`harness verify`).

    predictions/epoch-001.npz      classification: the top-min(5, C) class ids per example, best first,
                                   one array `ids` (N, k), int16 (int32 when an id needs it), compressed
    predictions/epoch-001.json.gz  SQuAD: {question id: answer text}, gzip'd JSON
    predictions/epoch-001.npz      a language model: the log-probability of each scored next token,
                                   one array `logp` (E,), float32, compressed

Each task's kind owns its codec (harness.task_kinds.TaskKind.codec): IDS, ANSWERS and LOGPROBS here for the
kinds of the harness, or one a new kind builds from `encode_array` and `decode_array` (a regression's values).

Never the full score matrices: top-5 ids re-score top-1 and top-5 exactly (the ids are ranked by
harness.metrics.topk_ids, the rule topk_accuracy scores by), at a few hundred kB per ImageNet epoch.
The runner records each file's path and sha256 in the epoch's `eval_accuracy` event, so the log
vouches for the predictions and the predictions for the metric.

`load` reads a file that may come from anyone: a regular file inside the run folder only (no link
out, no FIFO or device), size-capped before and while decompressing, numpy arrays without pickles,
JSON depth-checked before parsing. Every refusal is a Refused with a one-line reason.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import metrics, safe_read
from harness.safe_read import Refused

# harness.tasks.Task, not imported: a task's kind names its codec here (harness.task_kinds imports this module), so
# this module imports neither, not even for its annotations (tests/test_entries.py finds every import a cycle)
Task = Any

FOLDER = "predictions"
TOP_K = 5
ARRAY = "ids"                       # the one member of a classification file: ids.npy
MAX_FILE_BYTES = 64 * 2**20         # compressed, on disk: ImageNet top-5 is well under 1 MiB
MAX_ARRAY_BYTES = 8 * 2**20         # decompressed ids: 50,000 x 5 x int32 is 1 MB
MAX_JSON_BYTES = 64 * 2**20         # decompressed SQuAD answers: 10,570 short texts are ~0.5 MB
_TREE, _OWNER = "run folder", "a run"

__all__ = ["save", "load", "file_name", "sha256_bytes", "Refused", "Codec", "IDS", "ANSWERS", "LOGPROBS",
           "encode_array", "decode_array"]


def file_name(epoch: int, task: Task) -> str:
    """The stored file of `epoch`, relative to the run folder."""
    return f"{FOLDER}/epoch-{epoch:03d}.{task.kind.codec().suffix}"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- writing (the runner, rank 0)

def ranked_ids(predictions: Any) -> np.ndarray:
    """The top-min(5, C) ranked class ids of class scores (N, C), ranked ids (N, K) or ids (N,), as
    the smallest of int16/int32 that holds them. An id outside int32 can match no label: it is kept
    as -1, which matches none either, so the scores are unchanged."""
    preds = np.asarray(predictions)
    if preds.ndim == 1:
        preds = preds[:, None]
    if preds.ndim != 2:
        raise ValueError(f"class predictions must be 1-D or 2-D, not of shape {preds.shape}")
    if np.issubdtype(preds.dtype, np.floating):
        ids = metrics.topk_ids(preds, min(TOP_K, preds.shape[1]))
    elif np.issubdtype(preds.dtype, np.integer):
        ids = preds[:, :TOP_K].astype(np.int64)
    else:
        raise ValueError(f"class predictions must be float scores or integer ids, not {preds.dtype}")
    i32 = np.iinfo(np.int32)
    ids = np.where((ids < i32.min) | (ids > i32.max), -1, ids)
    i16 = np.iinfo(np.int16)
    small = ids.size == 0 or (ids.min() >= i16.min and ids.max() <= i16.max)
    return ids.astype(np.int16 if small else np.int32)


def encode(task: Task, predictions: Any) -> bytes:
    """The stored file's bytes for `predictions` of `task` (its kind names the codec)."""
    return task.kind.codec().encode(predictions)


def encode_array(array: np.ndarray, member: str = ARRAY) -> bytes:
    """One array as a compressed npz file of one member (`ids.npy`, whatever it holds, by default)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{member: array})
    return buffer.getvalue()


def encode_ids(predictions: Any) -> bytes:
    """Class predictions as their ranked ids, one compressed npz array."""
    return encode_array(ranked_ids(predictions))


def encode_answers(predictions: Any) -> bytes:
    """{question id: answer text} as gzip'd JSON."""
    if not isinstance(predictions, dict):
        raise ValueError(f"SQuAD predictions must be {{question id: answer text}}, not {type(predictions).__name__}")
    text = json.dumps({str(k): str(v) for k, v in predictions.items()}, ensure_ascii=False, sort_keys=True)
    # mtime=0: the same answers give the same bytes, so the same sha256
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def save(run_dir: Path, epoch: int, task: Task, predictions: Any) -> dict:
    """Store `predictions` of `epoch` under run_dir/predictions/, atomically (a temporary file, then
    os.replace); returns {"file": the path relative to run_dir, "sha256": of its bytes}."""
    data = encode(task, predictions)
    relative = file_name(epoch, task)
    target = Path(run_dir) / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")     # next to it: os.replace stays atomic
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"file": relative, "sha256": sha256_bytes(data)}


# ---------------------------------------------------------------- reading (verify: untrusted)

def read_file(run_dir: Path, relative: object) -> bytes:
    """The bytes of a stored predictions file named by an event: a plain relative path under
    run_dir/predictions/, a regular file inside the run folder, at most MAX_FILE_BYTES."""
    if (not isinstance(relative, str) or not relative.startswith(FOLDER + "/") or "\\" in relative
            or "\0" in relative or any(part in ("", ".", "..") for part in relative.split("/"))):
        raise Refused(f"{relative!r} is not a file under {FOLDER}/ of the run folder")
    path = Path(run_dir) / relative
    if not (path.exists() or path.is_symlink()):
        raise Refused(f"{relative} is missing (a run keeps every evaluated epoch's predictions)")
    try:
        return safe_read.read_bytes(path, Path(run_dir), MAX_FILE_BYTES, _TREE, _OWNER)
    except Refused as e:
        raise Refused(f"{relative} {e.reason}") from None


def decode(task: Task, data: bytes, name: str = "predictions") -> Any:
    """The predictions a stored file holds: ranked ids (N, k) int16/int32, or {question id: text}."""
    return task.kind.codec().decode(task, data, name)


def load(run_dir: Path, relative: str, task: Task, sha256: str | None = None) -> Any:
    """The stored predictions of one epoch (`relative` as save returned it); Refused when the file is
    missing, unreadable, not what `task` stores, or (given `sha256`) not the bytes the log names."""
    data = read_file(run_dir, relative)
    if sha256 is not None and sha256_bytes(data) != sha256:
        raise Refused(f"{relative}: sha256 {sha256_bytes(data)[:16]}... is not the {str(sha256)[:16]}... "
                      f"the log records (the file was changed after the run)")
    return decode(task, data, relative)


def decode_array(data: bytes, name: str, dtypes: tuple, shape_ok: Callable[[tuple], bool], want: str, *,
                 member: str = ARRAY, max_bytes: int = MAX_ARRAY_BYTES) -> np.ndarray:
    """The one array `member` of an npz file from anyone: its member and inflated size (at most
    `max_bytes`) checked, its header read before numpy allocates what it declares, its dtype one of
    `dtypes` and its shape what `shape_ok` accepts (`want` says which, for the refusal); Refused (one
    line) otherwise."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            if [m.filename for m in members] != [member + ".npy"]:
                raise Refused(f"{name}: holds {[m.filename for m in members][:5]}, not the one array {member}.npy")
            # file_size bounds what ZipExtFile will inflate, so a zip bomb stops here
            if members[0].file_size > max_bytes:
                raise Refused(f"{name}: {member}.npy inflates to {members[0].file_size} bytes, over {max_bytes}")
            raw = archive.read(members[0])
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
        raise Refused(f"{name}: not an npz file ({type(e).__name__}: {e})") from None
    # The header first: np.load allocates what the header declares before reading the data.
    fmt = np.lib.format
    try:
        stream = io.BytesIO(raw)
        version = fmt.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"npy format version {version}")
        reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _fortran, dtype = reader(stream)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as e:
        raise Refused(f"{name}: {member}.npy is not a numpy array ({type(e).__name__}: {e})") from None
    if dtype not in tuple(np.dtype(d) for d in dtypes):
        raise Refused(f"{name}: {member}.npy holds {dtype}, not {' or '.join(str(np.dtype(d)) for d in dtypes)}")
    if not shape_ok(shape):
        raise Refused(f"{name}: {member} of shape {shape}, not {want}")
    try:
        array = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise Refused(f"{name}: {member}.npy is not a numpy array ({type(e).__name__}: {e})") from None
    return np.ascontiguousarray(array)


def decode_ids(task: Task, data: bytes, name: str) -> np.ndarray:
    return decode_array(data, name, ("<i2", "<i4"),
                        lambda shape: len(shape) == 2 and shape[0] == task.eval_examples and 1 <= shape[1] <= TOP_K,
                        f"({task.eval_examples}, 1..{TOP_K}) ids for {task.name}")


# A language model's (harness.task_kinds.LanguageModel): the log-probability the predictor gave each scored
# next token, float32 in stream order, one array `logp` (E,): the figure is their negative mean, recomputed
# exactly.
LOGP = "logp"
MAX_LOGP_BYTES = 64 * 2**20         # 10,485,760 tokens (the speedrun's eval) x float32 is 40 MB


def encode_logprobs(predictions: Any) -> bytes:
    logp = np.asarray(predictions)
    if logp.ndim != 1 or logp.dtype != np.float32:
        raise ValueError(f"language-model predictions are float32 log-probabilities (E,), not {logp.dtype} {logp.shape}")
    return encode_array(logp, member=LOGP)


def decode_logprobs(task: Task, data: bytes, name: str) -> np.ndarray:
    logp = decode_array(data, name, ("<f4",), lambda shape: shape == (task.eval_examples,),
                        f"float32 ({task.eval_examples},) for {task.name}", member=LOGP, max_bytes=MAX_LOGP_BYTES)
    if not np.isfinite(logp).all():
        raise Refused(f"{name}: {LOGP} holds a log-probability that is not finite (the harness stores none)")
    return logp


def decode_answers(task: Task, data: bytes, name: str) -> dict:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            raw = f.read(MAX_JSON_BYTES + 1)
    except (OSError, EOFError, ValueError, zlib.error) as e:
        raise Refused(f"{name}: not gzip data ({type(e).__name__})") from None
    if len(raw) > MAX_JSON_BYTES:
        raise Refused(f"{name}: inflates to over {MAX_JSON_BYTES} bytes")
    answers = safe_read.parse_json(safe_read.decode(raw))
    if not isinstance(answers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in answers.items()):
        raise Refused(f"{name}: not a JSON object of question id -> answer text")
    if len(answers) != task.eval_examples:
        raise Refused(f"{name}: {len(answers)} answers, not the {task.eval_examples} questions of {task.name}")
    return answers


@dataclass(frozen=True)
class Codec:
    """One way a run keeps predictions: the file's suffix, and its writer and (untrusted) reader."""
    suffix: str
    encode: Callable[[Any], bytes]
    decode: Callable[[Task, bytes, str], Any]


# The codecs of the harness's kinds (harness.task_kinds: ImageClassification, SpanAnswer, LanguageModel)
IDS = Codec("npz", encode_ids, decode_ids)
ANSWERS = Codec("json.gz", encode_answers, decode_answers)
LOGPROBS = Codec("npz", encode_logprobs, decode_logprobs)
