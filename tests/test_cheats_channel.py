"""The channel binds every reply to its request (issue 46, section 3). A reference controls its whole
worker process, the harness's courier (harness/worker.py) included, so it can write to the reply pipe
whatever it likes, whenever it likes: a reply before its request (a timed call then finds its answer
waiting: the latency is neither the model's nor the channel's), or a reply to another request. Each
request carries its number and a nonce its reply must echo, and the harness finds the reply pipe
empty before it asks."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cheats import harness_run, needs_isolation, write_reference

from harness.sandbox import channel, handle, modes

# The trainer's courier sends, after its real answer to epoch 1, the answer to epoch 2's request (its
# number guessed right) and writes epoch 2's snapshot, before that request is even sent: epoch 2
# would take no time on the clock (on 427ce43 it did: 0.000 s, the run went on).
PREWRITES = '''
import sys

class Cheat(Base):
    def save(self, path):
        super().save(path)
        if path.name == "epoch-001":
            super().save(path.with_name("epoch-002"))

    def train_epoch(self, epoch):
        if epoch == 1:
            courier = sys.modules["__main__"]             # python -m harness.worker
            real = courier.channel.send

            def send(fd, message, array=None):
                real(fd, message, array)
                if message.get("ok") == "train" and not getattr(send, "done", False):
                    send.done = True
                    ahead = {"ok": "train", "stats": {"loss": 0.01, "samples": 60000}}
                    if "seq" in message:
                        ahead["seq"] = message["seq"] + 1
                    real(fd, ahead)
            courier.channel.send = send
        return super().train_epoch(epoch)
'''


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_isolation())])
def test_a_reply_written_before_its_request_ends_the_run_dnc(tmp_path, fashion_root, _):
    references, results = tmp_path / "references", tmp_path / "results"
    write_reference(references, "cheat", PREWRITES)
    proc, result, _ = harness_run(references, "cheat", Path(fashion_root).resolve(), results, "--max-epochs", "2")
    assert result is not None, proc.stderr[-2000:]
    assert result["status"] == "DNC" and result.get("official") is not True
    # Two checks catch it, whichever sees it first: the reply waiting in the pipe before the request is
    # sent, or, where the harness sent the request before the early write landed (CI of d7381f5), the
    # reply's nonce, which it wrote before it could read the request's.
    reason = result["dnc_reason"]
    assert ("before it was asked train" in reason and "a reply before its request" in reason) or \
        ("request 3 (train) with a reply written before it read the request" in reason), reason
    assert [row["epoch"] for row in result["history"]] == [1]       # epoch 2 never counted
    said = [line for line in proc.stderr.splitlines() if reason in line]
    assert said and "Traceback" not in proc.stderr, proc.stderr[-2000:]


# A stand-in worker that answers each request with a flaw of its choice (argv[3]).
FAKE = '''
import json, os, sys
from harness.sandbox import channel
fd_in, fd_out, flaw = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
while True:
    try:
        msg, _ = channel.receive(fd_in)
    except channel.ChannelClosed:
        break
    reply = {"ok": msg["op"], "seq": msg["seq"], "nonce": msg["nonce"]}
    if flaw == "old-number":
        reply["seq"] -= 1
    elif flaw == "no-number":
        del reply["seq"], reply["nonce"]
    elif flaw == "guessed-nonce":
        reply["nonce"] = "0" * 16
    elif flaw == "huge-number":
        reply["stats"] = {"loss": 0.5, "huge": 10**400}
    elif flaw == "deep":
        body = json.dumps({**reply, "stats": "DEEP"}).replace('"DEEP"', "[" * 100 + "]" * 100).encode()
        os.write(fd_out, channel.HEADER.pack(len(body), 0) + body)
        continue
    channel.send(fd_out, reply)
    if flaw == "twice":
        channel.send(fd_out, reply)
'''


def fake_worker(tmp_path, flaw: str) -> handle.Worker:
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(Path(channel.__file__).parents[2])}
    popen = subprocess.Popen([sys.executable, "-c", FAKE, str(to_r), str(from_w), flaw], pass_fds=(to_r, from_w),
                             env=env)
    os.close(to_r)
    os.close(from_w)
    return handle.Worker("predict", modes.Isolation("none", "a test"), popen, to_w, from_r, tmp_path, None)


@pytest.mark.parametrize("flaw, says", [
    ("old-number", r"answered request 1 \(noop\) with the reply to request 0"),
    ("no-number", r"answered request 1 \(noop\) with a reply that names no request"),
    ("guessed-nonce", r"answered request 1 \(noop\) with a reply written before it read the request"),
    ("twice", r"wrote \d+ bytes to the channel before it was asked noop \(request 2\): a reply before its request"),
])
def test_a_reply_not_bound_to_its_request_is_refused(tmp_path, flaw, says):
    worker = fake_worker(tmp_path, flaw)
    try:
        if flaw == "twice":
            worker.call("noop")                     # its answer is right; the second copy waits in the pipe
            deadline = time.monotonic() + 10
            while not channel.pending(worker.from_worker) and time.monotonic() < deadline:
                time.sleep(0.01)
        with pytest.raises(channel.ProtocolError, match=says):
            worker.call("noop")
    finally:
        worker.kill()


def test_a_worker_message_is_parsed_bounded(tmp_path):
    """Issue 47: a train stat of 10**400 raised OverflowError in the harness (runner._check_stats), and
    nesting deep enough raised RecursionError: the harness's reader of the worker's frames is the house's
    bounded one (harness.safe_read.parse_json): a number no float holds is infinite, nesting past
    MAX_DEPTH a protocol error in one line."""
    worker = fake_worker(tmp_path, "huge-number")
    try:
        reply, _ = worker.call("noop")
        assert reply["stats"]["huge"] == math.inf and reply["stats"]["loss"] == 0.5
    finally:
        worker.kill()
    worker = fake_worker(tmp_path, "deep")
    try:
        with pytest.raises(channel.ProtocolError, match="not a JSON message: nested too deeply"):
            worker.call("noop")
    finally:
        worker.kill()


def test_an_honest_worker_answers_in_turn(tmp_path):
    worker = fake_worker(tmp_path, "none")
    try:
        for _ in range(3):
            reply, _ = worker.call("noop")
            assert reply["ok"] == "noop"
        assert worker._requests == 3
    finally:
        worker.kill()
