"""The entry tools' reader of untrusted files: harness.safe_read (it lives in the harness, which
`harness verify` needs standalone; see its docstring for what it refuses and why)."""
from harness.safe_read import *  # noqa: F403
from harness.safe_read import MAX_DEPTH, MAX_JSON_BYTES, MAX_TSV_BYTES, Refused  # noqa: F401
