"""A reference's sandboxed worker in its role, trainer or predictor, started with that role's view of
the data (harness.data_views) and nothing else: what the runner and an inference both start."""
from __future__ import annotations

import os
from pathlib import Path

from harness import data_views, datasets
from harness.registry import ReferenceSpec
from harness.sandbox import launch


def start_worker(role: str, spec: ReferenceSpec, isolation, *, data_root: Path, derived: Path,
                 snapshots: Path | None, env: dict[str, str] | None = None, network: bool = False,
                 data_files: list | None = None):
    """A sandboxed worker of `role`, with the role's data (`data_files`: the view's files as an earlier
    start of the role found them); returns it and the paths it sees."""
    env, copies = dict(env or {}), []
    override = os.environ.get(datasets.MANIFEST_ENV)
    if override:   # the fixture checksums an unofficial run was started with, for the worker's own checks
        copies.append(Path(override))
        env[datasets.MANIFEST_ENV] = "{scratch}/" + Path(override).name
    return launch.start(role, isolation, reference_dir=spec.directory,
                         data_files=data_files or data_views.view_files(spec.task.dataset, data_root, role, derived),
                         snapshots=snapshots, copies=copies, env=env, hidden=data_views.system_copies(),
                         network=network)
