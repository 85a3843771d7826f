"""The judge's boundary: the reference's processes started in a sandbox, spoken to over a narrow
channel, frozen while the harness evaluates, and killed at the end (docs/RULES.md, "Isolation").
Everything that keeps the entrant's code on its side is in this package, one module a job:

- `modes`: which mode this machine allows (bubblewrap, uid mode, none; container mode where asked), tried once.
- `bubblewrap`: bubblewrap mode, as a user or as root: the worker's view, and bubblewrap's command.
- `uid_mode`: uid mode: a worker uid per role and harness (its slot), the drop to it, its data copies.
- `container_mode`: container mode: each worker a container of the entrant's image, started, paused,
  killed and accounted through the engine's CLI; the reaper that removes them when the judge dies.
- `launch`: a worker started under the mode: scratch, code, data, environment, the channel's pipes.
- `handle`: the harness's handle on a worker: calls, and the freeze, thaw and kill of its processes.
- `channel`: the narrow channel: framed messages on pipes.
- `signaller`: the process that sends the freeze's signals from inside the worker's reach.
- `guardian`: uid mode's guardian: kills the worker uids' processes when the harness dies (kill -9).
- `scratch`: the private folders of a harness process and its workers, swept when it is gone.
- `kernel`, `procfs`: the kernel's process controls, and what /proc says of the worker's processes.

The reference's side of the channel, `harness/worker.py`, runs inside the sandbox and is trusted with
nothing. Nothing here imports the rest of the harness but its errors, `worker_env` (which interpreter
runs the workers) and `provenance` (whether this is an image); the package's own `__init__` imports
nothing, so the worker can import the channel alone.
"""
