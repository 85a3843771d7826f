"""The judges a validator accepts: its own (harness.judge_hash, the checkout it runs from) and the released
ones listed in dawnbench/data/judges.toml, each beside the rules version it judges by."""
from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

from harness import judge_hash

RELEASED = Path(__file__).resolve().parent / "data" / "judges.toml"
SHA256 = re.compile(r"[0-9a-f]{64}")


@cache
def accepted() -> dict[str, str]:
    """{judge sha256: what it is, in words}: this checkout's judge first, then every released one."""
    found = {judge_hash.sha256(): "this checkout's"}
    listed = tomllib.loads(RELEASED.read_text(encoding="utf-8")).get("judge", [])
    for number, item in enumerate(listed, start=1):
        digest = item.get("sha256") if isinstance(item, dict) else None
        if not isinstance(digest, str) or not SHA256.fullmatch(digest):
            raise ValueError(f"{RELEASED}: judge {number} has no sha256 of 64 hex digits (python -m harness.judge_hash)")
        found.setdefault(digest, f"release {item.get('release', '?')} ({item.get('rules_version', '?')})")
    return found


def problem(record: dict) -> str | None:
    """None when the run or inference `record` (result.json, inference.json) was judged by an accepted
    judge; else the one line saying it was judged by modified code."""
    prov = record.get("provenance") if isinstance(record.get("provenance"), dict) else {}
    return judge_hash.verdict(prov.get("judge_sha256"), accepted())
