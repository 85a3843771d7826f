"""Whether a run or an inference can be an official result: every reason the harness finds that it
cannot (a lowered threshold, unofficial data, a partial eval set, no isolation, labels other users can
reach, a changed worker environment), recorded with its provenance (harness.provenance) before any of
the reference's code runs."""
from __future__ import annotations

import os
from pathlib import Path

from harness import data_views, datasets, judge_hash, provenance, worker_env
from harness.eval_set import EvalSet
from harness.registry import ReferenceSpec
from harness.sandbox import uid_mode

JUDGE_IMAGE_ENV = "DAWNBENCH_JUDGE_IMAGE"       # the judge image's ID, set by the launcher that runs the judge in it


def official_verdict(spec: ReferenceSpec, threshold: float, data_reasons: list[str], eval_set: EvalSet, isolation,
                     reasons: list[str] | tuple = (), data_root: Path | None = None,
                     worker: dict | None = None) -> dict:
    """git, provenance, official and unofficial_reasons (harness.provenance.collect) of a run or of
    an inference on this eval set: the harness's reasons first, then the caller's `reasons`.
    `worker`: the workers' environment (harness.worker_env.describe), whose hash provenance records."""
    task = spec.task
    # first, where the network cannot reach the task's threshold at all (reference.toml's [reach]): what
    # dawnbench submit says in place of its "rerun without --threshold"
    unreachable = spec.reach.unofficial_reason(spec.name) if spec.reach is not None else None
    found = [unreachable] if unreachable else []
    if threshold != task.threshold:
        found.append(f"--threshold {threshold:g} is not the task's {task.threshold:g} (a smoke test)")
    found += list(data_reasons) + eval_set.reasons() + list(reasons)
    blacklist = datasets.manifest(task.dataset).get("blacklist", {})
    if eval_set.dropped_indices is not None and "sha256" not in blacklist:
        found.append(f"the {task.dataset} blacklist cannot be proven official: datasets.toml records no sha256 "
                     f"of {blacklist['file']} to check it against (its sha256 is in provenance.datasets)")
    if not isolation.isolated:
        found.append(isolation.reason)
    if isolation.mode == "uid" and uid_mode.unconfined():
        found.append(uid_mode.unconfined())
    if isolation.mode == "uid":
        # uid mode has no mount namespace: the workers see the host's files as any other user does, so
        # the eval labels are out of their reach only where the folders holding them are private.
        for folder in data_views.label_folders(task.dataset, data_root):
            if uid_mode.reachable_by_others(folder):
                found.append(f"uid mode: other users can reach {folder}, which holds the {task.dataset} eval labels, "
                             f"so the sandboxed workers could read them; make it private (chmod o-rwx {folder}) "
                             f"or run where bubblewrap works")
    worker = worker if worker is not None else worker_env.describe()
    found += worker_env.reasons(worker, worker_env.harness_record(worker))
    prov = provenance.collect(spec, datasets.verified_files(), found)
    prov["provenance"]["worker_environment_sha256"] = worker["sha256"]
    # the code that judged it (harness.judge_hash): validate and the board accept only their own and the released ones
    prov["provenance"]["judge_sha256"] = judge_hash.sha256()
    # the judge's own image (docker/Dockerfile.judge), where it ran in one: its launcher names it
    prov["provenance"]["judge_image"] = os.environ.get(JUDGE_IMAGE_ENV) or None
    return prov
