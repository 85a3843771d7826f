"""The base-image policy of reference images: a base pinned by tag (or digest), never `latest`.

A host tool: the harness reads a reference's `[container]` table only for `gpus`; the base image
a reference's Dockerfile starts from is `container.base_image` in its reference.toml (default
DEFAULT_BASE_IMAGE), read and checked here.
"""
from __future__ import annotations

from harness.errors import UsageError
from harness.registry import ReferenceSpec

DEFAULT_BASE_IMAGE = "python:3.11.14-slim-bookworm"


def pinned_image(ref: str) -> bool:
    """`name:tag` with a tag other than latest, or `name@sha256:...`: a base that cannot move."""
    if "@sha256:" in ref:
        return True
    name, _, tag = ref.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest")


def base_image(spec: ReferenceSpec) -> str:
    """The reference's base image (`container.base_image`, default DEFAULT_BASE_IMAGE), checked pinned."""
    image = spec.container.get("base_image", DEFAULT_BASE_IMAGE)
    if not isinstance(image, str) or not pinned_image(image):
        raise UsageError(f"{spec.directory / 'reference.toml'}: field 'container.base_image' = {image!r}: pin the base "
                         f"by a tag other than 'latest' (or a digest), e.g. {DEFAULT_BASE_IMAGE!r}")
    return image
