"""Base-image policy of the reference images: a base must be pinned."""
from __future__ import annotations

DEFAULT_BASE_IMAGE = "python:3.11.14-slim-bookworm"


def pinned_image(ref: str) -> bool:
    """`name:tag` with a tag other than latest, or `name@sha256:...`: a base that cannot move."""
    if "@sha256:" in ref:
        return True
    name, _, tag = ref.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest")
