"""Issue 51 §1: where the harnessed cifar10-fast run's extra train seconds go (2026-11-28 lease).

The first lease gave a harness train span of 7.30 s against the bare loop's 4.12 s (median of 4).
The bare loop's first epoch was 5.7 s in its first, cold run and 1.5-1.8 s after, in the same
HOME; the harness's worker gets a fresh, private HOME every run (harness/sandbox.py). This prints
each epoch's seconds of the bare loop with the machine's HOME (run twice), with a fresh empty HOME
each run, and with CUDA_CACHE_DISABLE=1; then one harnessed run's epoch spans from its events.jsonl.
`python3 bench/measured/2026-11-28-nvidia-h200/spans.py OUT_DIR` from the checkout's root.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import overhead, synthetic_cifar  # noqa: E402

REF, EPOCHS = "cifar10-fast-pytorch", 10
out = Path(sys.argv[1])
root = Path(tempfile.mkdtemp(prefix="spans-"))
manifest = synthetic_cifar.write_cifar10(root / "data", n_train=50_000)
repo = Path(__file__).resolve().parents[3]
env = {**os.environ, "DAWNBENCH_DATA": str(root / "data"), "DAWNBENCH_DATASETS_MANIFEST": str(manifest),
       "DAWNBENCH_REFERENCES": str(repo / "references")}


def bare(label, **extra):
    proc = subprocess.run([sys.executable, "-c", overhead.BARE, REF, str(EPOCHS), "0"], capture_output=True,
                          text=True, env={**env, **extra})
    if proc.returncode:
        print(f"bare[{label}]: failed: {proc.stderr.strip()[-400:]}", flush=True)
        return
    f = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"bare[{label}] total={f['total']:.3f} setup={f['setup']:.3f} train={sum(f['epochs']):.3f} "
          f"epochs={' '.join(f'{e:.3f}' for e in f['epochs'])}", flush=True)


bare("machine HOME, 1")
bare("machine HOME, 2")
for i in (1, 2):
    bare(f"fresh HOME, {i}", HOME=tempfile.mkdtemp(prefix="home-"))
bare("CUDA_CACHE_DISABLE=1", CUDA_CACHE_DISABLE="1")
proc = subprocess.run([sys.executable, "-m", "dawnbench", "run", REF, "--seed", "0", "--max-epochs", str(EPOCHS),
                       "--threshold", "1.0", "--no-progress", "--no-save", "--results", str(out / "runs"),
                       "--run-id", "spans"], capture_output=True, text=True, env=env)
run = out / "runs" / REF / "spans"
print(f"harnessed: exit {proc.returncode}; {proc.stderr.strip()[-300:]}", flush=True)
for name in ("events.jsonl", "result.json"):          # $OUT/a/b/file is as deep as comes back
    if (run / name).is_file():
        shutil.copy(run / name, out / f"harnessed-{name}")
try:
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line.split(":::MLLOG ", 1)[-1])
        if e.get("key") in ("epoch_start", "epoch_stop", "init_start", "init_stop", "run_start", "eval_start", "eval_stop"):
            print(f"harnessed event {e.get('key')} t_ms={e.get('time_ms')} epoch={(e.get('metadata') or {}).get('epoch_num')}",
                  flush=True)
    r = json.loads((run / "result.json").read_text())
    print("harnessed spans_seconds", r["spans_seconds"], "history", r["history"], flush=True)
except Exception as exc:
    print(f"harnessed: no events read: {exc!r}", flush=True)
shutil.rmtree(out / "runs", ignore_errors=True)
