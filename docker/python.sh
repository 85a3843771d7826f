#!/bin/sh
# Make sure the base image has a Python 3 with venv: the CUDA bases (nvidia/cuda:*) ship none,
# the python:* and framework bases do. Runs in both stages of every reference image, so the
# interpreter /opt/venv points at exists where the venv is used.
set -eu
if python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "the base image has no python3 (with venv) and no apt-get to install it: use a base with Python 3.11+" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
rm -rf /var/lib/apt/lists/*
