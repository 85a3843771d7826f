"""The base-image policy of reference images: a base pinned by tag (or digest), never `latest`.

A host tool: a reference's base is the `ARG FROM_IMAGE_NAME=` default of its own Dockerfile
(dawnbench.containers reads it); `make build BASE_IMAGE=...` overrides it, checked here too.
"""
from __future__ import annotations

DEFAULT_BASE_IMAGE = "python:3.11.14-slim-bookworm"
# What `make base-image` makes where no registry answers: Debian bookworm's Python 3.11, from
# Debian's packages (dawnbench.containers.make_base_image). No CUDA: for the CPU references.
LOCAL_BASE_IMAGE = "dawnbench/debian-python:bookworm"


def pinned_image(ref: str) -> bool:
    """`name:tag` with a tag other than latest, or `name@sha256:...`: a base that cannot move."""
    if "@sha256:" in ref:
        return True
    name, _, tag = ref.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest")
