#!/bin/bash
# issue 40's lease: bench.gpu parts harness_cost, precision, peer, each under its own limit.
# Run from the checkout's root on the GPU machine, with .gpu/ carried beside it holding what the
# machine lacks: Debian bookworm's bubblewrap_0.8.0-2+deb12u1_amd64.deb (apt-get download
# bubblewrap), airbench-0.1.8/ (PyPI's sdist, unpacked) and airbench94_muon.py
# (KellerJordan/cifar10-airbench at f1c599c). PARTS="harness_cost:270" runs one part.
# The first two tries unpacked bubblewrap into /tmp, which bwrap-root's outer sandbox hides
# (so the harness chose uid mode); the third into /opt/bw, as here.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "import sys, torch, numpy; print(sys.version.split()[0], torch.__version__, numpy.__version__, torch.version.cuda, torch.backends.cudnn.version())"
if ! command -v bwrap >/dev/null; then
  dpkg -x .gpu/bubblewrap_*.deb /opt/bw && export PATH=/opt/bw/usr/bin:$PATH  # not /tmp: bwrap-root hides it
fi
bwrap --version; bwrap --unshare-pid --dev-bind / / true && echo "bwrap: runs"
export PYTHONPATH=$PWD/.gpu/airbench-0.1.8${PYTHONPATH:+:$PYTHONPATH}
export AIRBENCH94_MUON=$PWD/.gpu/airbench94_muon.py
git rev-parse --short HEAD 2>/dev/null || true
part() {  # name, limit
  echo "=== python3 -m bench.gpu --parts $1 (limit $2 s, $(date -u +%T))"
  timeout --kill-after=10 "$2" python3 -m bench.gpu --parts "$1" --out "$OUT/$1.json"
  echo "=== $1: exit $? ($(date -u +%T))"
}
python3 - <<'PY'
import subprocess
from harness import sandbox
print("isolation:", sandbox.probe())
argv = sandbox._argv("bwrap-root", sandbox.View(ro=[(p, p) for p in sandbox.SYSTEM_DIRS]), ["/bin/true"])
done = subprocess.run(argv, capture_output=True, text=True)
print("bwrap-root probe: exit", done.returncode, done.stderr.strip()[-300:])
PY
for spec in ${PARTS:-harness_cost:230 precision:110 peer:200}; do part "${spec%%:*}" "${spec##*:}"; done
