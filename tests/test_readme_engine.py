"""The README says, where it tells how to start a Docker engine, that a running engine switches
`RUNTIME=auto` (make run's default) to Docker for every checkout on the machine (issue 47)."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_starting_an_engine_says_it_changes_every_checkout_s_make_run():
    text = README.read_text(encoding="utf-8")
    start = text.index("sudo dockerd")                      # where the README starts an engine
    after = text[start:start + 2500]
    said = re.search(r"A running engine changes `make run` for every checkout on this machine\.(.*?)\n\n", after, re.S)
    assert said, "the README no longer says, beside `sudo dockerd`, that an engine changes every checkout's make run"
    words = " ".join(said.group(1).split())
    assert "`RUNTIME=auto`" in words and "any other clone" in words and "`RUNTIME=native`" in words
