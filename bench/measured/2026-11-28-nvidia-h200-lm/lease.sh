#!/bin/bash
# Issue 50 item 5's lease: the language-model references' steps on one GPU (bench/lm_step.py), each part
# under its own limit so that one slow part leaves the others their time. Run from the checkout's root on the
# GPU machine, with .gpu/ carried beside it holding Debian bookworm's bubblewrap_0.8.0-2+deb12u1_amd64.deb
# (apt-get download bubblewrap), which that machine lacks. Unpacked into /opt/bw: bwrap-root hides /tmp.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "import sys, torch, numpy; print(sys.version.split()[0], torch.__version__, numpy.__version__, torch.version.cuda, torch.backends.cudnn.version())"
if ! command -v bwrap >/dev/null; then
  dpkg -x .gpu/bubblewrap_*.deb /opt/bw && export PATH=/opt/bw/usr/bin:$PATH
fi
bwrap --version
part() {  # output name, limit, arguments of bench.gpu
  local name=$1 limit=$2; shift 2
  echo "=== python3 -m bench.gpu $* (limit $limit s, $(date -u +%T))"
  timeout --kill-after=10 "$limit" python3 -m bench.gpu "$@" --out "$OUT/$name.json"
  echo "=== $name: exit $? ($(date -u +%T))"
}
part lm_cost "${COST_LIMIT:-250}" --parts lm_cost
part lm_step_modded "${MODDED_LIMIT:-150}" --parts lm_step --lm-references fineweb-gpt2-modded-pytorch
part lm_step_llmc "${LLMC_LIMIT:-120}" --parts lm_step --lm-references fineweb-gpt2-llmc-pytorch
date -u
