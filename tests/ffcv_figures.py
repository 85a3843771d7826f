"""ffcv's published ResNet-50 figures (libffcv/ffcv-imagenet), as tests/data/ffcv/rn50.json stores them,
and what imagenet-resnet50-pytorch's README and anchor table derive from them: each configuration's
final top-5 by both of ffcv's sources, its margin over the 93% target, the epoch its log crosses 93%.

ffcv publishes two figures for each configuration, and they disagree: its README's table and its
assets/agg.csv, the per-epoch log of one run per configuration. The README's top-5 is the lower in
all six ResNet-50 configurations. The margin here is the lower figure's, as the issue asked (36,
section 3: a configuration whose published top-5 clears 93% by MARGIN at its final epoch).

    python tests/ffcv_figures.py                        # the table of figures, margins and crossings
    python tests/ffcv_figures.py extract REPO           # rewrite the JSON from a clone of ffcv-imagenet

REPO is a git directory of libffcv/ffcv-imagenet holding commit 4dd291a (a clone, or a bare mirror).
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "ffcv" / "rn50.json"
TARGET = 0.93          # ImageNet's top-5 threshold (harness/data/tasks.toml)
MARGIN = 0.003         # the margin issue 36 asks of the published final top-5: 0.3 point
COMMIT = "4dd291a"


def load() -> dict:
    """{"source": ..., "configs": {epochs (int): {"readme": {...}, "log": {...}}}}."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    data["configs"] = {int(k): v for k, v in data["configs"].items()}
    return data


def final_top5(config: dict) -> float:
    """The lower of the two published final top-5 figures (fractions)."""
    return min(config["readme"]["top_5"], config["log"]["top_5"][-1])


def margin(config: dict) -> float:
    """How far the lower published final top-5 sits above the 93% target, in points (percent)."""
    return round(100 * (final_top5(config) - TARGET), 4)


def gap(config: dict) -> float:
    """The distance between ffcv's two figures for the same configuration, in points."""
    return round(100 * abs(config["log"]["top_5"][-1] - config["readme"]["top_5"]), 4)


def crossing(top5: list[float], shift: float = 0.0) -> int | None:
    """The first epoch, counted from 1 as the harness counts, whose top-5 (lowered by `shift`, a
    fraction) reaches the target; None if none does."""
    return next((epoch for epoch, value in enumerate(top5, 1) if value - shift >= TARGET - 1e-12), None)


def normal_cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def p_reach(config: dict, sigma: float) -> float:
    """P(final top-5 >= 93%) for a normal spread of `sigma` points around the lower published figure:
    the README's estimate, whose only ground is ffcv's own figures (one run per configuration)."""
    return normal_cdf(margin(config) / sigma)


def table() -> str:
    configs = load()["configs"]
    sigma = max(gap(configs[40]), gap(configs[56]))
    lines = [f"sigma = {sigma} points (the larger README-vs-log gap of the 40- and 56-epoch configurations)",
             "epochs  readme top-5  log top-5  gap  margin (lower)  log crosses 93% at  "
             "(log lowered by the gap)  P(>=93%)"]
    for epochs, c in sorted(configs.items()):
        top5 = c["log"]["top_5"]
        lines.append(f"{epochs:>6}  {c['readme']['top_5']:>12}  {top5[-1]:>9.5f}  {gap(c):>4.2f}  {margin(c):>14.2f}  "
                     f"{crossing(top5)!s:>18}  {crossing(top5, gap(c) / 100)!s:>24}  {p_reach(c, sigma):.3f}")
    return "\n".join(lines)


# ---- extraction from ffcv's repository -----------------------------------------------------------

def git_show(repo: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{COMMIT}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def extract(repo: str) -> dict:
    """The ResNet-50 rows of ffcv's README table and the ResNet-50 runs of assets/agg.csv: each run's
    top-5 and top-1 after every epoch (from epoch 0; agg.csv repeats each run's last epoch in one more
    row, its final evaluation, which is the same figure and is dropped) and its relative_time, the
    seconds since its start by ffcv's own clock, evaluation included."""
    readme = git_show(repo, "README.md").splitlines()
    configs: dict[str, dict] = {}
    for number, line in enumerate(readme, 1):
        m = re.search(r"rn50_configs/rn50_(\d+)_epochs\.yaml'>Link</a>\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*(\d+)\s*\|"
                      r"\s*([\d.]+)", line)
        if m:
            configs[m[1]] = {"readme": {"line": number, "top_1": float(m[2]), "top_5": float(m[3]),
                                        "minutes": float(m[5])}}
            assert int(m[4]) == int(m[1])
    runs = defaultdict(dict)
    for row in csv.DictReader(io.StringIO(git_show(repo, "assets/agg.csv"))):
        if row["model.arch"] == "resnet50":
            runs[(row["training.epochs"], row["uid"])][int(row["epoch"])] = row
    for (epochs, uid), rows in runs.items():
        assert sorted(rows) == list(range(int(epochs))), (epochs, uid)
        ordered = [rows[e] for e in range(int(epochs))]
        configs[epochs]["log"] = {
            "uid": uid,
            "start_ramp": int(ordered[0]["resolution.start_ramp"]), "end_ramp": int(ordered[0]["resolution.end_ramp"]),
            # top-5 and top-1 over 50,000 images are multiples of 2e-5: five decimals keep them exactly
            "top_5": [round(float(r["top_5"]), 5) for r in ordered],
            "top_1": [round(float(r["top_1"]), 5) for r in ordered],
            "seconds": [round(float(r["relative_time"]), 1) for r in ordered]}
    assert all("log" in c for c in configs.values()) and len(configs) == 6
    return {"source": {"repository": "libffcv/ffcv-imagenet", "commit": COMMIT,
                       "url": f"https://github.com/libffcv/ffcv-imagenet/tree/{COMMIT}",
                       "readme": "README.md (the Configurations table, ResNet-50 rows)",
                       "log": "assets/agg.csv (rows whose model.arch is resnet50, one run per training.epochs)",
                       "written_by": "python tests/ffcv_figures.py extract REPO"},
            "configs": dict(sorted(configs.items(), key=lambda kv: int(kv[0])))}


if __name__ == "__main__":
    if sys.argv[1:2] == ["extract"]:
        data = extract(sys.argv[2])
        body = json.dumps(data, indent=1)
        # one line per list: the JSON stays a page per configuration
        body = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m[1]) + "]", body)
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(body + "\n", encoding="utf-8")
        print(f"{DATA}: {DATA.stat().st_size:,} bytes")
    else:
        print(table())
