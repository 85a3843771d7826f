#!/bin/bash
# issue 34's lease: a kill -9 of the harness of a CUDA run (bench.gpu --parts kill9), then the
# harness's cost again (--parts harness_cost), since bwrap-root's outer bubblewrap now has a PID
# namespace of its own. Run from the checkout's root on the GPU machine as root, with .gpu/ carried
# beside it holding Debian bookworm's bubblewrap_0.8.0-2+deb12u1_amd64.deb (apt-get download bubblewrap).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "import sys, torch, numpy; print(sys.version.split()[0], torch.__version__, numpy.__version__, torch.version.cuda)"
if ! command -v bwrap >/dev/null; then
  dpkg -x .gpu/bubblewrap_*.deb /opt/bw && export PATH=/opt/bw/usr/bin:$PATH  # not /tmp: bwrap-root hides it
fi
bwrap --version
# uid mode's workers (uids 10002, 10003) pass through every folder down to the checkout
d=$PWD; while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
python3 -c "from harness import sandbox; print('isolation:', sandbox.probe())"
part() {  # name, limit
  echo "=== python3 -m bench.gpu --parts $1 (limit $2 s, $(date -u +%T))"
  timeout --kill-after=10 "$2" python3 -m bench.gpu --parts "$1" --out "$OUT/$1.json"
  echo "=== $1: exit $? ($(date -u +%T))"
}
for spec in ${PARTS:-kill9:200 harness_cost:240}; do part "${spec%%:*}" "${spec##*:}"; done
