#!/bin/bash
# Issue 51's lease: bench.gpu parts, each under its own limit. Run from the checkout's root on the GPU
# machine, with .gpu/ carried beside it holding what the machine lacks: Debian bookworm's
# bubblewrap_0.8.0-2+deb12u1_amd64.deb (apt-get download bubblewrap), airbench-0.1.8/ (PyPI's sdist,
# unpacked) and airbench94_muon.py (KellerJordan/cifar10-airbench at f1c599c).
# PARTS="harness_cost:220 peer:200" (the default) says which parts and their limits in seconds;
# GAP=80 also runs bench.cifar_fast_gap under that limit; MUON_COST=150 runs the harness_cost part for
# cifar10-airbench-muon-pytorch. Unpacked into /opt/bw, not /tmp: bwrap-root's outer sandbox hides /tmp.
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "import sys, torch, numpy; print(sys.version.split()[0], torch.__version__, numpy.__version__, torch.version.cuda, torch.backends.cudnn.version())"
if ! command -v bwrap >/dev/null; then
  dpkg -x .gpu/bubblewrap_*.deb /opt/bw && export PATH=/opt/bw/usr/bin:$PATH
fi
bwrap --version; bwrap --unshare-pid --dev-bind / / true && echo "bwrap: runs"
export PYTHONPATH=$PWD/.gpu/airbench-0.1.8${PYTHONPATH:+:$PYTHONPATH}
export AIRBENCH94_MUON=$PWD/.gpu/airbench94_muon.py
python3 -c "from harness.sandbox import modes; print('isolation:', modes.probe())" 2>&1 | tail -1  # harness/sandbox.py before the package (as run on 2026-11-28)
part() {  # name, limit, extra arguments
  local name=$1 limit=$2; shift 2
  echo "=== python3 -m bench.gpu --parts $name $* (limit $limit s, $(date -u +%T))"
  timeout --kill-after=10 "$limit" python3 -m bench.gpu --parts "$name" "$@" --out "$OUT/$name$SUFFIX.json"
  echo "=== $name: exit $? ($(date -u +%T))"
}
for spec in ${PARTS-harness_cost:220 peer:200}; do part "${spec%%:*}" "${spec##*:}"; done
if [ -n "$GAP" ]; then
  echo "=== python3 -m bench.cifar_fast_gap (limit $GAP s, $(date -u +%T))"
  timeout --kill-after=10 "$GAP" python3 -m bench.cifar_fast_gap --epochs 3 > "$OUT/gap.txt" 2>&1
  echo "=== gap: exit $? ($(date -u +%T))"; grep -E 'step_ms|profile' "$OUT/gap.txt"
fi
if [ -n "$MUON_COST" ]; then
  SUFFIX=-muon part harness_cost "$MUON_COST" --harness-cost-reference cifar10-airbench-muon-pytorch
fi
date -u
