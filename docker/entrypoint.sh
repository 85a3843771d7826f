#!/bin/sh
# The entrypoint of every reference image: the harness's command. With no arguments it runs
# the image's own reference (DAWNBENCH_REFERENCE, set from the REFERENCE build argument) into
# /dawnbench-private/results; otherwise the arguments are a harness command: `run REF ...`, `infer REF ...`, `list`.
# The harness runs from /opt/harness, which holds its own pins only; the reference's requirements
# are in /opt/venv, whose interpreter only the sandboxed workers run (a .pth file there runs in every
# interpreter of that environment; docs/RULES.md, "The harness's environment").
set -eu
if [ "$#" -eq 0 ]; then
    set -- run "$DAWNBENCH_REFERENCE" --results /dawnbench-private/results
fi
# The harness is a judge process (harness/judge.py): -I (no PYTHONPATH, no user site, no current folder on
# its path; -B keeps PYTHONDONTWRITEBYTECODE's promise under -I) and no inherited loader hook.
unset LD_PRELOAD LD_AUDIT
DAWNBENCH_WORKER_PYTHON=/opt/venv/bin/python exec /opt/harness/bin/python -I -B /opt/dawnbench/harness/judge.py harness "$@"
