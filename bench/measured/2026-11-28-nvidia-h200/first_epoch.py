"""Issue 51 §1, the last minute of the 2026-11-28 lease: cifar10-fast's first epoch with a fresh,
empty HOME (as the harness's worker has one), cuDNN's benchmark mode on (the recipe's) and off.
`python3 bench/measured/2026-11-28-nvidia-h200/first_epoch.py` from the checkout's root."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import overhead, synthetic_cifar  # noqa: E402

root = Path(tempfile.mkdtemp(prefix="first-"))
manifest = synthetic_cifar.write_cifar10(root / "data", n_train=50_000)
env = {**os.environ, "DAWNBENCH_DATA": str(root / "data"), "DAWNBENCH_DATASETS_MANIFEST": str(manifest),
       "DAWNBENCH_REFERENCES": str(Path(__file__).resolve().parents[3] / "references")}
# the bare loop with cuDNN's benchmark mode set after setup (setup turns it on), before epoch 1
script = overhead.BARE.replace("ref.synchronize()\nt_setup",
                               "import torch; torch.backends.cudnn.benchmark = BENCH\nref.synchronize()\nt_setup")
for bench in ("False", "True", "False"):
    proc = subprocess.run([sys.executable, "-c", script.replace("BENCH", bench), "cifar10-fast-pytorch", "10", "0"],
                          capture_output=True, text=True, env={**env, "HOME": tempfile.mkdtemp(prefix="home-")})
    if proc.returncode:
        print(f"benchmark={bench}: failed {proc.stderr[-300:]}", flush=True)
        continue
    f = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"fresh HOME, cudnn.benchmark={bench}: setup={f['setup']:.3f} train={sum(f['epochs']):.3f} "
          f"epochs={' '.join(f'{e:.3f}' for e in f['epochs'])}", flush=True)
