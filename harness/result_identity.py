"""Who and what a result is of: the fields a run's result.json and an inference's inference.json
share, built here and only here (DAWNBench v1's entry fields, the price, the machine, the isolation,
and the code's provenance with the official verdict)."""
from __future__ import annotations

import time

from harness import datasets, environment
from harness.registry import ReferenceSpec
from harness.tasks import RULES_VERSION


def fields(spec: ReferenceSpec, *, system: dict, isolation, prov: dict, hardware: str, cost_per_hour: float | None,
           instance: str | None, nodes: int, price: dict | None, started: float | None,
           used_blacklist: bool) -> dict:
    """The identity of a result. `prov` is harness.provenance.collect's (git, provenance, official,
    unofficial_reasons); `started` the wall time the work began (its date is the entry's timestamp);
    `used_blacklist` is recorded only on tasks whose dataset has a blacklist (ImageNet's)."""
    task = spec.task
    return {
        # DAWNBench v1's entry fields
        "version": "v1.0",
        "author": spec.author,
        "authorEmail": spec.author_email,
        "framework": environment.framework_label(spec.framework, system.get("packages")),
        "codeURL": spec.code_url,
        "model": spec.model,
        "hardware": hardware,
        "costPerHour": cost_per_hour,
        "timestamp": time.strftime("%Y-%m-%d", time.gmtime(started or time.time())),
        "commitHash": prov["git"]["commit"],
        # explicit fields
        "reference": spec.name,
        "task": task.name,
        "rules_version": RULES_VERSION,
        "instance": instance,
        "nodes": nodes,
        "price": price,
        **({"usedBlacklist": used_blacklist} if "blacklist" in datasets.manifest(task.dataset) else {}),
        "image_digest": system["image_digest"],
        "isolation": {"mode": isolation.mode, "reason": isolation.reason},
        **prov,     # git, provenance, official, unofficial_reasons
    }
