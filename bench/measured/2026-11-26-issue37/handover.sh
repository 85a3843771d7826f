#!/bin/bash
# Issue 37 §1 on a GPU: one harnessed cifar10-fast run (synthetic CIFAR-10, official format) and the
# handover of each epoch (result.json's history handover_ms). SMOKE=1: tiny sizes on the CPU.
cd "$(dirname "$0")/../../.."   # run from bench/measured/2026-11-26-issue37/, .gpu/ carried beside the checkout
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null; nproc
if ! command -v bwrap >/dev/null; then dpkg -x .gpu/bubblewrap_*.deb /opt/bw && export PATH=/opt/bw/usr/bin:$PATH; fi
d=$PWD; while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
PY=${PY:-python3}
root=/var/tmp/hd; rm -rf $root; mkdir -p $root; chmod 755 $root
n=50000; sets=(); [ "${SMOKE:-}" = 1 ] && { n=640; sets=(--set batch_size=64 --set widths=8,16,16 --set tta_level=0 --set epochs=2 --set eval_batch_size=2500); export CUDA_VISIBLE_DEVICES=; }
manifest=$($PY -c "from pathlib import Path; from bench import synthetic_cifar; print(synthetic_cifar.write_cifar10(Path('$root/data'), n_train=$n))")
echo "manifest $manifest; $(date -u +%T)"
DAWNBENCH_DATA=$root/data DAWNBENCH_DATASETS_MANIFEST=$manifest DAWNBENCH_REFERENCES=$PWD/references \
  timeout --kill-after=5 ${LIMIT:-120} $PY -m harness run cifar10-fast-pytorch --max-epochs 10 --results $root/results --no-progress "${sets[@]}"
echo "run exit $? ($(date -u +%T))"
$PY - "$root/results" "$OUT" <<'PY'
import json, shutil, statistics, sys
from pathlib import Path
runs = sorted(Path(sys.argv[1]).glob("cifar10-fast-pytorch/*/result.json"))
for path in runs:
    r = json.loads(path.read_text())
    ms = [row["handover_ms"] for row in r["history"]]
    print("isolation", r["isolation"]["mode"], "status", r["status"], "epochs", r["epochs"], "tta_s", r["tta_seconds"],
          "train_s", r.get("train_seconds"), "spans", r["spans_seconds"])
    print("handover_ms per epoch", ms, "median", statistics.median(ms), "max", max(ms))
    shutil.copy(path, Path(sys.argv[2]) / "result.json")
PY
