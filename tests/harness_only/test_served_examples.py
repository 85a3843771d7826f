"""What a timed inference request carries (issue 46): the example itself, in a wire form the harness only
forwards, to a server whose view holds the model and none of the task's files."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from harness import data_views, worker
from harness.errors import UsageError
from harness.reference import Reference
from harness.sandbox import channel, uid_mode

pytestmark = pytest.mark.harness


def through_the_channel(example):
    """`example` as eval_inputs() gave it -> the predictor's reply -> the server's request -> from_wire."""
    message, array = worker.to_wire(example)
    read, write = os.pipe()
    try:
        channel.send(write, json.loads(json.dumps(message)), array)
        got, got_array = channel.receive(read)
    finally:
        os.close(read)
        os.close(write)
    return worker.from_wire(got, got_array)


@pytest.mark.parametrize("example", [np.arange(12, dtype=np.float32).reshape(3, 2, 2),
                                     np.arange(6, dtype=np.uint8).reshape(2, 3)[:, ::2]])
def test_an_array_arrives_with_its_values_dtype_and_shape(example):
    got = through_the_channel(example)
    assert isinstance(got, np.ndarray) and got.dtype == example.dtype and np.array_equal(got, example)


def test_bytes_and_json_values_arrive_as_they_were_given():
    jpeg = b"\xff\xd8\xff\xe0 some jpeg \x00\x01"
    assert through_the_channel(jpeg) == jpeg                  # MXNet's records: bytes in, bytes out
    question = {"id": "q1", "question": "Who?", "tokens": ["Who", "?"], "spans": [[0, 3], [3, 4]]}
    assert through_the_channel(question) == question          # SQuAD's questions: JSON
    assert through_the_channel("text") == "text" and through_the_channel(7) == 7
    assert through_the_channel(("q1", "context", "Who?")) == ["q1", "context", "Who?"]


def test_an_example_that_cannot_travel_is_one_line_naming_the_fix():
    with pytest.raises(UsageError) as caught:
        worker.to_wire(Path("/data/val/1.JPEG"))
    message = str(caught.value)
    assert "\n" not in message and "PosixPath" in message and "example_from_wire" in message


def test_the_default_hook_gives_infer_the_example_as_it_came():
    example = np.zeros(3)
    assert Reference.example_from_wire(None, example) is example


def test_the_server_sees_none_of_the_tasks_files(tmp_path):
    """The serve role's view: the companions every role sees (SQuAD's GloVe) and nothing of the task,
    not even its eval inputs; in uid mode it runs as the trainer's uid, never the predictor's, which
    holds the eval inputs while it serves."""
    assert data_views.view_files("fashion-mnist", tmp_path, data_views.SERVE, tmp_path / "derived") == []
    assert data_views.SERVE not in data_views.ROLES          # no folder of its own in a container either
    groups = uid_mode.role_groups()
    assert groups["serve"] == groups["train"] != groups["predict"]
