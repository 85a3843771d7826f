#!/bin/sh
# The entrypoint of every reference image: the harness's command. With no arguments it runs
# the image's own reference (DAWNBENCH_REFERENCE, set from the REFERENCE build argument) into
# /dawnbench-private/results; otherwise the arguments are a harness command: `run REF ...`, `infer REF ...`, `list`.
set -eu
if [ "$#" -eq 0 ]; then
    set -- run "$DAWNBENCH_REFERENCE" --results /dawnbench-private/results
fi
exec /opt/venv/bin/python -m harness "$@"
