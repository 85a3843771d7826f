"""One `dawnbench run` of fineweb-gpt2-modded-pytorch as a user starts it (compile and bf16 "auto": on), 6 steps
of the global batch, on synthetic shards whose validation stream has the task's full 10,485,760 scored tokens:
where a run's seconds go (init, the compiled first step, eval: the first pass over 10,240 windows and the
look-ahead audit of 2,304 positions), from its result.json. `python3 full_run.py` from the checkout's root."""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench import lm_step  # noqa: E402

with tempfile.TemporaryDirectory(prefix="lm-full-") as folder:
    root = Path(folder)
    data, manifest = lm_step.write_fineweb(root, val_tokens=10_485_760 + 1)
    env = {**os.environ, "DAWNBENCH_DATA": str(data), "DAWNBENCH_DATASETS_MANIFEST": str(manifest)}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dawnbench", "run", "fineweb-gpt2-modded-pytorch", "--seed", "0",
                           "--threshold", "1.0", "--no-progress", "--no-save", "--results", str(root / "results"),
                           "--run-id", "full", "--set", "steps_per_epoch=6"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    print(proc.stderr[-4000:])
    result = root / "results" / "fineweb-gpt2-modded-pytorch" / "full" / "result.json"
    r = json.loads(result.read_text()) if result.is_file() else {}
    events = root / "results" / "fineweb-gpt2-modded-pytorch" / "full"
    keep = {k: r.get(k) for k in ("status", "metric", "metric_value", "epochs", "spans_seconds", "unofficial_reasons",
                                  "dnc_reason", "isolation", "time_to_accuracy_seconds")}
    keep["wall_seconds"] = wall
    keep["history"] = r.get("history")
    print(json.dumps(keep, indent=1, default=str))
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "full_run_result.json").write_text(json.dumps(r, indent=1))
