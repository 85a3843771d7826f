"""The reference's side of the channel: what runs in the sandboxed worker process.

    python -m harness.worker IN_FD OUT_FD

The harness process starts it (harness.sandbox), and it imports the reference's code, constructs
its entry class and calls one contract method per request. Nothing here is trusted: it runs in the
reference's process, where the reference's code can replace any of it. It is only the courier;
every rule is enforced on the harness's side of the pipe.
"""
from __future__ import annotations

import importlib
import json
import numbers
import os
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from harness.sandbox import channel


def _device_sync(framework: str):
    """The device's own synchronize, captured before the reference's code is imported, so that a
    reference's `synchronize()` that returns early does not hide queued GPU work from the clock."""
    if framework != "pytorch":
        return lambda: None
    try:
        # imported by name: the harness depends on no framework; a PyTorch reference imports it anyway
        torch = importlib.import_module("torch")
        if torch.cuda.is_available():
            return torch._C._cuda_synchronize
    except Exception:  # noqa: BLE001 - no torch, no CUDA: nothing queued
        pass
    return lambda: None


class Worker:
    def __init__(self, fd_in: int, fd_out: int):
        self.fd_in, self.fd_out = fd_in, fd_out
        self.ref = None
        self.inputs = None
        self.received = None            # the array the request being served carried (a timed example's)
        self.sync = lambda: None
        self.framework = ""

    def init(self, msg: dict) -> dict:
        from harness import registry
        from harness.reference import Context
        from harness.tasks import get_task
        spec = registry.load_spec(msg["name"], Path(msg["references"]))
        self.sync = _device_sync(spec.framework)
        self.framework = spec.framework
        # This process sees a copy of the reference under the sandbox's path, which means nothing to
        # the entrant: messages name the folder the harness names, else the reference's own name.
        cls = spec.load_entry_class(shown=Path(msg.get("shown_directory") or spec.name))
        self.ref = cls()
        ctx = Context(config=msg["config"], data_root=Path(msg["data_root"]), seed=msg["seed"],
                      task=_sized(get_task(msg["task"]), msg.get("eval_examples")), rank=msg["rank"],
                      world_size=msg["world_size"],
                      local_rank=msg["local_rank"], work_dir=Path(msg["work_dir"]),
                      show_progress=msg["show_progress"], role=msg["role"])
        self.ref.setup(ctx)
        self.ref.check_setup(ctx)
        self._synchronize()
        if not ctx.trains:
            return {}
        # What the trainer's switches chose, as the reference reports it: a report of another form is the
        # reference's mistake, said here in one line; the harness checks what arrives again.
        from harness import precision
        recorded = precision.recorded(self.ref.train_precision())
        return {"precision": [recorded["train"], recorded["reason"]]}

    def _synchronize(self) -> None:
        self.ref.synchronize()
        self.sync()

    def train(self, msg: dict) -> dict:
        stats = _epoch_stats(self.ref.train_epoch(msg["epoch"]))
        self._synchronize()
        if msg.get("snapshot"):
            self.ref.save(Path(msg["snapshot"]))
            self._synchronize()
        return {"stats": stats}

    def load(self, msg: dict) -> dict:
        self.ref.load(Path(msg["path"]))
        return {}

    def predict(self, msg: dict):
        # a language model's predict(inputs) gets the harness's windows with the request (harness.lm_eval)
        predictions = self.ref.predict() if self.received is None else self.ref.predict(self.received)
        self._synchronize()
        if isinstance(predictions, dict):
            return {"answers": {str(k): str(v) for k, v in predictions.items()}}
        return {}, _as_array(predictions)

    def next_distribution(self, msg: dict):
        # the look-ahead audit of a language model of reply "next" (harness.lm_audit.audit_next): the rows come
        # as the request's array, their prefix lengths in the message
        lengths = np.asarray(msg["lengths"], dtype=np.int64)
        distributions = self.ref.next_distribution(self.received, lengths)
        self._synchronize()
        return {}, _as_array(distributions)

    def inputs_count(self, msg: dict) -> dict:
        self.inputs = self.ref.eval_inputs()
        return {"count": len(self.inputs)}

    def example(self, msg: dict):
        """The index-th eval input in its wire form, for the harness to send to the timed server."""
        return to_wire(self.inputs[int(msg["index"])])

    def infer(self, msg: dict):
        """One timed request: the example it carries, turned back into what the reference's infer() takes."""
        example = self.ref.example_from_wire(from_wire(msg, self.received))
        self.received = None
        prediction = self.ref.infer(example)
        self._synchronize()
        if isinstance(prediction, str):
            return {"answer": prediction}             # SQuAD: the answer text of the index-th question
        if isinstance(prediction, (tuple, list)) and all(isinstance(x, str) for x in prediction):
            return {"answer": list(prediction)}       # SQuAD: (question id, answer text)
        return {}, _as_array(prediction)

    def export(self, msg: dict):
        """The evaluated network as ONNX bytes (written in this worker's own scratch folder)."""
        import tempfile
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "model.onnx"
            self.ref.export_onnx(path)
            self._synchronize()
            data = path.read_bytes()
        return {}, np.frombuffer(data, dtype=np.uint8)

    def export_inputs(self, msg: dict):
        return {}, _as_array(self.ref.export_inputs(int(msg["start"]), int(msg["stop"])))

    def calibration(self, msg: dict):
        return {}, _as_array(self.ref.calibration_inputs(int(msg["count"])))

    def flops(self, msg: dict) -> dict:
        """The loaded model's FLOPs per training example (harness.flop_count), or why not counted."""
        from harness import flop_count
        try:
            return {"count": flop_count.count(self.framework, self.ref)}
        except flop_count.NotCounted as e:
            return {"not_counted": str(e)}

    def noop(self, msg: dict) -> dict:
        return {}

    def versions(self, msg: dict) -> dict:
        return {"versions": {str(k): str(v) for k, v in dict(self.ref.framework_versions()).items()}}

    def close(self, msg: dict) -> dict:
        if self.ref is not None:
            self.ref.close()
        return {}

    def serve(self) -> int:
        handlers = {"init": self.init, "train": self.train, "load": self.load, "predict": self.predict,
                    "next_distribution": self.next_distribution,
                    "inputs": self.inputs_count, "example": self.example, "infer": self.infer, "noop": self.noop,
                    "export": self.export, "export_inputs": self.export_inputs, "calibration": self.calibration,
                    "flops": self.flops,
                    "versions": self.versions, "close": self.close}
        while True:
            try:
                msg, self.received = channel.receive(self.fd_in)
            except channel.ChannelClosed:
                return 0
            op = msg.get("op")
            echo = {"seq": msg.get("seq"), "nonce": msg.get("nonce")}     # what binds the reply to its request
            try:
                reply = handlers[op](msg)
            except Exception as exc:  # noqa: BLE001 - every failure goes back to the harness as one message
                from harness.errors import DawnbenchError
                reply = {"error": f"{type(exc).__name__}: {exc}", "usage": isinstance(exc, DawnbenchError),
                         "traceback": traceback.format_exc(), **echo}, None
            else:
                message, array = reply if isinstance(reply, tuple) else (reply, None)
                reply = {"ok": op, **message, **echo}, array
            try:
                channel.send(self.fd_out, *reply)
            except channel.ChannelClosed:
                return 0          # the harness is gone: nobody to answer, nothing to print on its terminal
            if op == "close":
                return 0


def _is_number(value) -> bool:
    """A real number (Python's or numpy's), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _fits_float(value) -> bool:
    try:
        float(value)
        return True
    except OverflowError:
        return False


def _epoch_stats(returned) -> dict[str, float]:
    """train_epoch's numeric stats. Anything but a dict with a numeric loss is the entrant's mistake,
    said as such: left to the harness it reads as a missing loss, NaN, "diverged". A real NaN or
    infinite loss passes: that is a divergence, and the harness's stop rules say so."""
    problem = None
    if not isinstance(returned, Mapping):
        problem = f"it returned {_clipped(returned)}"
    elif "loss" not in returned:
        problem = f"it returned a dict without \"loss\": {_clipped(returned)}"
    else:
        bad = next((k for k in ("loss", "samples") if k in returned and not _is_number(returned[k])), None)
        huge = next((k for k, v in returned.items() if _is_number(v) and not _fits_float(v)), None)
        if bad is not None:
            problem = f"its \"{bad}\" is {_clipped(returned[bad])}, a {type(returned[bad]).__name__}"
        elif huge is not None:       # float() of it raised OverflowError, shown as if the reference's own (issue 47)
            problem = f"its {_clipped(str(huge), 40)} is a whole number no float holds (over 1.8e308): return floats"
    if problem is not None:
        from harness.errors import UsageError
        raise UsageError(f"train_epoch must return a dict with a numeric \"loss\" (and optionally \"samples\"); "
                         f"{problem}")
    return {str(k): float(v) for k, v in returned.items() if _is_number(v)}


def _clipped(value, limit: int = 80) -> str:
    """A value of the reference's as one short line (repr escapes newlines and control characters)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - the reference's __repr__ may raise
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _sized(task, examples):
    """The task as the reference sees it: its eval set's size is the one on disk (a fixture's is
    smaller; such a run is unofficial)."""
    import dataclasses
    return task if examples is None else dataclasses.replace(task, eval_examples=int(examples))


def to_wire(example) -> tuple[dict, np.ndarray | None]:
    """An eval input as it crosses the channel: an array (a framework tensor's values) through the
    array path, bytes as a uint8 array, anything JSON can say (a SQuAD question's dict, a string) as
    JSON. Anything else is the reference's to turn into one of these in eval_inputs()."""
    if isinstance(example, (bytes, bytearray, memoryview)):
        return {"wire": "bytes"}, np.frombuffer(bytes(example), dtype=np.uint8)
    if isinstance(example, (str, int, float, bool, list, tuple, dict)) or example is None:
        try:
            json.dumps(example, allow_nan=False)
        except (TypeError, ValueError):
            pass
        else:
            return {"wire": "json", "example": example}, None
    array = _as_array(example)
    if array.dtype == object:
        from harness.errors import UsageError
        raise UsageError(f"eval_inputs() gave a {type(example).__name__}, which cannot be sent with a timed request: "
                         f"give arrays (or tensors), bytes, or JSON values (dicts, lists, strings, numbers), and turn "
                         f"them back into what infer() takes in example_from_wire()")
    return {"wire": "array"}, array


def from_wire(message: dict, array: np.ndarray | None):
    """What to_wire sent, back: a numpy array, bytes, or the JSON value."""
    kind = message.get("wire")
    if kind == "json":
        return message.get("example")
    if array is None:
        raise ValueError(f"a timed request of kind {kind!r} came without its array")
    return array.tobytes() if kind == "bytes" else array


def _as_array(predictions) -> np.ndarray:
    if hasattr(predictions, "detach"):       # a framework tensor
        predictions = predictions.detach().cpu().numpy()
    elif hasattr(predictions, "numpy"):
        predictions = predictions.numpy()
    return np.asarray(predictions)


def main(argv: list[str]) -> int:
    fd_in, fd_out = int(argv[0]), int(argv[1])
    os.set_inheritable(fd_in, False)
    os.set_inheritable(fd_out, False)
    return Worker(fd_in, fd_out).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

