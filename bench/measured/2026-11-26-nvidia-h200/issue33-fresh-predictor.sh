#!/bin/bash
# issue 33's fresh predictor per eval on a GPU: cifar10-fast's 10 epochs under the harness, synthetic CIFAR-10.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/fresh-log.txt") 2>&1
command -v bwrap >/dev/null || { dpkg -x .gpu/bubblewrap_*.deb /opt/bw && export PATH=/opt/bw/usr/bin:$PATH; }
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "from pathlib import Path; from bench import synthetic_cifar; print(synthetic_cifar.write_cifar10(Path('/tmp/syn/data'), n_train=50000))"
export DAWNBENCH_DATA=/tmp/syn/data DAWNBENCH_DATASETS_MANIFEST=/tmp/syn/data/datasets-synthetic-cifar10.toml
timeout ${LIMIT:-140} python3 -m harness run cifar10-fast-pytorch --threshold 1.0 --max-epochs 10 --no-progress --no-save --results "$OUT/r"
python3 - "$OUT" <<'PY'
import glob, json, sys
r = json.load(open(glob.glob(f"{sys.argv[1]}/r/*/*/result.json")[0]))
print("status", r["status"], r.get("dnc_reason"), "isolation", r["isolation"]["mode"], "spans", r["spans_seconds"])
for line in open(glob.glob(f"{sys.argv[1]}/r/*/*/events.jsonl")[0]):
    e = json.loads(line.split(":::MLLOG ", 1)[1])
    if e["key"] == "eval_stop":
        m = e["metadata"]
        print("epoch", m.get("epoch_num"), "predictor_s", m.get("predictor_s"), "bound_s", m.get("eval_bound_s"),
              "train_s", m.get("train_s"), "fresh", m.get("fresh_predictor"))
for h in r["history"]:
    print("row", {k: h.get(k) for k in ("epoch", "top1", "handover_ms")})
PY
