"""The MLLOG event log: one `:::MLLOG {json}` line per event, flushed as written.

Keys follow the MLPerf logging vocabulary (init_start, run_start, epoch_start, eval_accuracy,
train_samples, run_stop, ...) and MLPerf's order, so mlperf-logging's compliance checker accepts the
file (`dawnbench compliance`, with dawnbench/data/mlperf/; docs/RULES.md "The MLPerf reading").
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from harness.safe_write import LineFile, RunFolder

PREFIX = ":::MLLOG "


def _jsonable(value: Any) -> Any:
    # NaN/inf are not JSON; a diverged loss must still leave a parseable line.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class EventLog:
    def __init__(self, path: Path | None, wall_ms, folder: RunFolder | None = None):
        """`wall_ms(seconds_since_start)` turns clock readings into Unix milliseconds; `folder`: the run
        folder each line checks first."""
        self.path = path
        self._wall_ms = wall_ms
        # One write per line; a full disk or a read-only folder is a WriteError naming the file.
        self._file = LineFile(path, append=True, folder=folder) if path else None

    def _write(self, event_type: str, key: str, value: Any, t: float, metadata: dict | None):
        if self._file is None:
            return
        record = {
            "namespace": "",
            "time_ms": self._wall_ms(t),
            "event_type": event_type,
            "key": key,
            "value": _jsonable(value),
            # clock_s: the harness clock reading, so every span can be recomputed from the log
            "metadata": _jsonable({"clock_s": round(t, 6), **(metadata or {})}),
        }
        self._file.write(PREFIX + json.dumps(record, allow_nan=False) + "\n")

    def point(self, key: str, value: Any = None, t: float = 0.0, **metadata):
        self._write("POINT_IN_TIME", key, value, t, metadata)

    def start(self, key: str, t: float, value: Any = None, **metadata):
        self._write("INTERVAL_START", key, value, t, metadata)

    def end(self, key: str, t: float, value: Any = None, **metadata):
        self._write("INTERVAL_END", key, value, t, metadata)

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: Path) -> list[dict]:
    """Parse an events.jsonl back into records (raises ValueError on a malformed line)."""
    records = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.startswith(PREFIX):
            raise ValueError(f"{path}:{lineno}: line does not start with {PREFIX!r}")
        records.append(json.loads(line[len(PREFIX):]))
    return records
