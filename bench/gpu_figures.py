"""The GPU figures in the READMEs, rendered from what bench.gpu measured:
`python -m bench.gpu_figures render|check`.

Each lease's figures are versioned data under bench/measured/<date>-<device>/figures.json: the
machine and software, then each command run with the figures it printed. A README holds a block
between BEGIN and END that this module writes; `check` (a test runs it) fails when a block is not
the data's rendering, so no GPU figure in a README is typed by hand. Where a figure was measured
more than once, every sample is shown, in the order measured.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.arguments import Parser, reports_errors

REPO = Path(__file__).resolve().parent.parent
MEASURED = REPO / "bench" / "measured"
BEGIN = "<!-- gpu figures: generated from bench/measured/*/figures.json by `python -m bench.gpu_figures render`; do not edit -->"
END = "<!-- end of gpu figures -->"
CIFAR_RESNETS = ("resnet20", "resnet56", "resnet110", "resnet164", "resnet164b")


class FiguresError(Exception):
    """A README block that is missing or stale, or a figure the data does not hold: one line."""


def load(folder: Path) -> dict:
    return json.loads((folder / "figures.json").read_text(encoding="utf-8"))


def latest() -> Path:
    folders = sorted(p.parent for p in MEASURED.glob("*/figures.json"))
    if not folders:
        raise FiguresError(f"no measured figures under {MEASURED}")
    return folders[-1]


def measured(root: Path = MEASURED) -> dict:
    """Every lease on the latest lease's device and PyTorch, as one: their runs in date order (a
    figure measured in two leases shows both samples), the latest lease's environment with every
    date. A lease on another device or version stays out: its figures do not mix with these."""
    folders = sorted(p.parent for p in root.glob("*/figures.json"))
    if not folders:
        raise FiguresError(f"no measured figures under {root}")
    leases = [load(f) for f in folders]
    env = leases[-1]["environment"]
    same = [d for d in leases if (d["environment"]["device"], d["environment"]["torch"]) == (env["device"], env["torch"])]
    not_run: dict = {}
    for d in same:
        not_run.update(d.get("not_run", {}))
    return {"environment": {**env, "date": ", ".join(dict.fromkeys(d["environment"]["date"] for d in same))},
            "runs": [run for d in same for run in d["runs"]], "not_run": not_run}


def samples(data: dict, name: str) -> list[tuple[object, str]]:
    """Every (value, command) the data holds for the figure `name`, in the order measured."""
    found = [(run["figures"][name], run["command"]) for run in data["runs"] if name in run["figures"]]
    if not found:
        raise FiguresError(f"the figure {name} is not in the measured data")
    return found


def number(value) -> str:
    if isinstance(value, str):
        return value
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) >= 0.01 else f"{value:.2g}"


def cell(data: dict, name: str, scale: float = 1.0) -> str:
    if name.endswith("_top1"):          # an accuracy: a percentage to two places, as the entries give it
        return "; ".join(f"{100 * v:.2f}%" for v, _ in samples(data, name))
    if "_ratio" in name:                # a paired ratio: its third decimal is the figure (1.016, not 1.02)
        return "; ".join(f"{v:.3f}" for v, _ in samples(data, name))
    return "; ".join(number(v * scale if not isinstance(v, str) else v) for v, _ in samples(data, name))


def commands(data: dict, names: list[str]) -> str:
    seen = []
    for name in names:
        for _, command in samples(data, name):
            if command not in seen:
                seen.append(command)
    return "<br>".join(f"`{c}`" for c in seen)


def table(data: dict, header: tuple[str, ...], rows: list[tuple[str, list[str]]]) -> list[str]:
    """Rows of (label, figure names): one column per name, and the commands that measured them."""
    lines = ["| " + " | ".join((*header, "command")) + " |", "|" + "---|" * (len(header) + 1)]
    for label, names in rows:
        lines.append("| " + " | ".join([label, *(cell(data, n) for n in names), commands(data, names)]) + " |")
    return lines


def steps_rows(keys: list[str]) -> list[tuple[str, list[str]]]:
    return [(f"`{key.replace('_', '-')}-pytorch`",
             [f"steps_{key}_step_ms", f"steps_{key}_samples_per_s", f"steps_{key}_peak_mib",
              f"steps_{key}_loss_first5", f"steps_{key}_loss_last5"]) for key in keys]


def steps_table(data: dict, keys: list[str]) -> list[str]:
    return table(data, ("reference (its own train_epoch, synthetic data)", "ms a step", "samples/s", "peak MiB",
                        "loss, first 5 steps", "loss, last 5 of 100"), steps_rows(keys))


def latency_table(data: dict, nets: list[tuple[str, str, str]]) -> list[str]:
    rows = []
    for label, net, precision in nets:
        rows.append((label, [f"{net}_latency_ms_{mode}_{precision}_{stat}"
                             for mode in ("eager", "compiled") for stat in ("p50", "p99")]))
    return table(data, ("network, batch 1", "eager p50 ms", "eager p99 ms", "compiled p50 ms", "compiled p99 ms"),
                 rows)


def frontier_table(data: dict) -> list[str]:
    return table(data, ("the public frontier, each whole schedule after a warm-up, same synthetic images, same GPU",
                        "airbench94_muon s", "airbench94 s", "cifar10-fast s", "cifar10-fast / airbench94",
                        "cifar10-fast / airbench94_muon", "airbench94 / airbench94_muon"),
                 [("median of 3 rounds (airbench94 also from an earlier lease, on other images)",
                   ["peer_airbench94_muon_schedule_s", "peer_airbench94_schedule_s", "peer_cifar10_fast_schedule_s",
                    "peer_ratio_cifar10_fast_over_airbench94", "peer_ratio_cifar10_fast_over_airbench94_muon",
                    "peer_ratio_airbench94_over_airbench94_muon"]),
                  ("held-out top-1 on the synthetic task (its own TTA), mean of 3",
                   ["peer_airbench94_muon_top1", "peer_airbench94_top1", "peer_cifar10_fast_top1"])])


HARNESS_COST_MODES = (("bubblewrap as root", "bwrap_root"),
                      ("uid mode, as in a container (bubblewrap carried into /tmp, which its root mode hides)", "uid"))


def harness_cost_table(data: dict) -> list[str]:
    lines = table(data, ("cifar10-fast's 10 epochs: `dawnbench run` against a bare loop, 4 paired repeats",
                         "bare s", "harness s", "harness / bare", "95% CI low", "95% CI high",
                         "handover median ms", "handover p99 ms"),
                  [(label, [f"harness_cost_{key}_{name}" for name in
                            ("bare_s", "harness_s", "ratio", "ratio_ci95_low", "ratio_ci95_high",
                             "handover_ms_median", "handover_ms_p99")]) for label, key in HARNESS_COST_MODES])
    # the spans that make up each side: measured from the lease that split them (bubblewrap as root)
    return lines + ["", *table(data, ("the same runs, span by span (medians)", "bare setup s", "harness init s",
                                      "bare train s", "harness train s", "train: harness / bare", "95% CI low",
                                      "95% CI high", "handovers s"),
                               [("bubblewrap as root", [f"harness_cost_bwrap_root_{name}" for name in
                                 ("bare_setup_s", "harness_init_s", "bare_train_s", "harness_train_s", "train_ratio",
                                  "train_ratio_ci95_low", "train_ratio_ci95_high", "harness_handovers_s")])])]


FIRST_EPOCH_ROWS = (("bare loop, the machine's HOME, its first run", "home_cold"),
                    ("bare loop, the machine's HOME, run again (its CUDA cache warm)", "home_warm"),
                    ("bare loop, a fresh empty HOME (as the harness's worker has)", "fresh_home_1"),
                    ("bare loop, a fresh empty HOME, again", "fresh_home_2"),
                    ("bare loop, CUDA_CACHE_DISABLE=1", "cuda_cache_disabled"),
                    ("bare loop, a fresh HOME, cudnn.benchmark on (the recipe until 2026-11-28)", "benchmark_true_1"),
                    ("bare loop, a fresh HOME, cudnn.benchmark off", "benchmark_false_1"),
                    ("bare loop, a fresh HOME, cudnn.benchmark off, again", "benchmark_false_2"),
                    ("`dawnbench run` (bubblewrap as root), cudnn.benchmark on", "harnessed"))


def first_epoch_table(data: dict) -> list[str]:
    """Where the harnessed run's train seconds went: cuDNN's benchmark search in epoch 1, whose
    kernels the CUDA cache in HOME keeps from one run to the next (a fresh HOME keeps none)."""
    rows = [(label, [f"first_epoch_{key}_{'init' if key == 'harnessed' else 'setup'}_s",
                     f"first_epoch_{key}_first_epoch_s", f"first_epoch_{key}_train_s"])
            for label, key in FIRST_EPOCH_ROWS]
    return table(data, ("cifar10-fast's 10 epochs, one run each, in the order run", "setup / init s",
                        "epoch 1 s", "10 epochs s"), rows)


def variants_table(data: dict) -> list[str]:
    return table(data, ("this project's variants in the same rounds", "s the schedule", "held-out top-1",
                        "over cifar10-fast", "over airbench94_muon"),
                 [("cifar10-fast, `fused_sgd = \"true\"`", ["peer_cifar10_fast_fused_schedule_s", "peer_cifar10_fast_fused_top1",
                                                         "peer_ratio_cifar10_fast_fused_over_cifar10_fast",
                                                         "peer_ratio_cifar10_fast_fused_over_airbench94_muon"]),
                  ("`cifar10-airbench-muon-pytorch` (200 steps of 2000)",
                   ["peer_cifar10_airbench_muon_schedule_s", "peer_cifar10_airbench_muon_top1",
                    "peer_ratio_cifar10_airbench_muon_over_cifar10_fast",
                    "peer_ratio_cifar10_airbench_muon_over_airbench94_muon"])])


def precision_table(data: dict) -> list[str]:
    rows = [(f"{name}", [f"precision_{name}_epoch_s", f"precision_{name}_schedule_s", f"precision_{name}_top1"])
            for name in ("bf16", "fp16", "fp32")]
    return table(data, ("precision (`bf16`, `fp16 = \"true\"` with a loss scale, both off)", "s an epoch",
                        "s the schedule", "held-out top-1, mean of 2 seeds"), rows) + [
        "", *table(data, ("an epoch against bf16's", "fp16", "fp32"),
                   [("ratio of medians", ["precision_epoch_ratio_fp16_over_bf16", "precision_epoch_ratio_fp32_over_bf16"])])]


LM_REFERENCES = (("`fineweb-gpt2-modded-pytorch` (record #11: Muon, U-net)", "modded"),
                 ("`fineweb-gpt2-llmc-pytorch` (llm.c's GPT-2 124M, AdamW)", "llmc"))


def lm_step_table(data: dict, keys: tuple[str, ...]) -> list[str]:
    return table(data, ("its own train_step: 524,288 tokens a step, rows of 1,024, synthetic shards", "eager ms a step",
                        "compiled ms a step", "compiled tokens/s", "MFU eager", "MFU compiled",
                        "compiled first step s", "compiled peak MiB"),
                 [(label, [f"lm_{key}_{name}" for name in
                           ("eager_step_ms", "compiled_step_ms", "compiled_tokens_per_s", "eager_mfu", "compiled_mfu",
                            "compiled_first_step_s", "compiled_peak_mib")])
                  for label, key in LM_REFERENCES if key in keys])


def lm_cost_table(data: dict) -> list[str]:
    return table(data, ("6 eager steps: `dawnbench run` against a bare loop, 3 paired repeats", "bare ms a step",
                        "harness ms a step", "train: harness / bare", "95% CI low", "95% CI high",
                        "bare setup s", "harness init s"),
                 [("bubblewrap as root", [f"lm_cost_bwrap_root_{name}" for name in
                                          ("bare_step_ms", "harness_step_ms", "train_ratio", "train_ratio_ci95_low",
                                           "train_ratio_ci95_high", "bare_setup_s", "harness_init_s")])])


def lm_full_run_table(data: dict) -> list[str]:
    return table(data, ("one `dawnbench run` as a user starts it (compile on), 6 steps, the task's full validation "
                        "stream", "init s", "train s (compilation included)", "eval s (then off the clock; on it since)"),
                 [("uid mode", ["lm_full_run_init_s", "lm_full_run_train_s", "lm_full_run_eval_s"])])


def lm_eval_table(data: dict) -> list[str]:
    return table(data, ("the predictor at full size (random weights), the task's eval extrapolated from 1,280 windows "
                        "and 768 audited positions", "first pass s (10,240 windows)", "audit s (2,304 positions)",
                        "audit: max nats prefix vs window (tolerance 0.001)"),
                 [(label, [f"lm_modded_eval_{key}_task_first_pass_s", f"lm_modded_eval_{key}_task_audit_s",
                           f"lm_modded_eval_{key}_audit_max_diff_nats"])
                  for label, key in (("float32, TF32 off (the reference as it is)", "fp32"),
                                     ("float32, TF32 matmuls on (llm.c's eval)", "tf32"))])


def heading(data: dict) -> list[str]:
    env = data["environment"]
    return [f"Measured {env['date']} on one {env['device']}; PyTorch {env['torch']} (the machine's own: "
            f"the project pins 2.13.0, whose CUDA wheels could not be brought over), CUDA {env['cuda']}, "
            f"cuDNN {env['cudnn']}, Python {env['python']}. Synthetic data unless a row says otherwise. "
            f"The figures and logs: `bench/measured/`.", ""]


# ----------------------------------------------------------------------------------------------
# The blocks, one per README

def block_root(data: dict) -> list[str]:
    lines = heading(data)
    lines += table(data, ("ResNet-50 training, batch 256, bf16, channels_last", "eager img/s", "compiled img/s",
                          "MFU eager", "MFU compiled"),
                   [(f"{px} px", [f"resnet50_train_imgs_per_s_{px}px_eager", f"resnet50_train_imgs_per_s_{px}px_compiled",
                                  f"resnet50_mfu_{px}px_eager", f"resnet50_mfu_{px}px_compiled"])
                    for px in (160, 192, 224)])
    lines += ["", *frontier_table(data)]
    lines += ["", *harness_cost_table(data)]
    lines += ["", *table(data, ("time to accuracy and epochs", "figure"),
                         [("`fashion-mnist-cnn-pytorch`, real Fashion-MNIST, `harness run` (s to 92%)",
                           ["tta_seconds_fashion-mnist-cnn-pytorch"]),
                          ("cifar10-fast, a warm epoch eager (s)", ["cifar10_fast_epoch_s_eager"]),
                          ("cifar10-fast, a warm epoch compiled (s)", ["cifar10_fast_epoch_s_compiled"]),
                          ("squad-bidaf-pytorch, an epoch of SQuAD v1.1's size (s)", ["bidaf_epoch_s_pytorch"])])]
    lines += ["", *steps_table(data, [f"cifar10_{n}" for n in CIFAR_RESNETS]
                                + ["cifar10_fast", "fashion_mnist_cnn", "imagenet_resnet50", "squad_bidaf"])]
    lines += ["", *lm_step_table(data, ("modded", "llmc"))]
    lines += ["", *latency_table(data, [("ResNet-50, 224 px, bf16", "resnet50", "bf16"),
                                        ("ResNet-50, 224 px, fp32", "resnet50", "fp32"),
                                        ("Fashion-MNIST CNN, fp32", "fashion_mnist_cnn", "fp32"),
                                        ("CIFAR ResNet-56, fp32", "cifar10_resnet56", "fp32"),
                                        ("cifar10-fast, fp32", "cifar10_fast", "fp32")])]
    goals: dict[str, list[str]] = {}
    for run in data["runs"]:
        for name, status in run["goals"].items():
            goals.setdefault(name, []).append(status)
    lines += ["", "Goals as `bench/gpu.py` judged them, each time measured: "
              + "; ".join(f"`{name}` {', '.join(statuses)}" for name, statuses in goals.items()) + "."]
    skipped = {name: reason for run in data["runs"] for name, reason in run["not_measured"].items()}
    skipped.update(data.get("not_run", {}))
    if skipped:
        lines += ["", "Not measured: " + "; ".join(f"`{name}`: {reason}" for name, reason in skipped.items()) + "."]
    return lines


def note(data: dict, name: str) -> str:
    """The note the figure was printed with, the first time it was measured."""
    for run in data["runs"]:
        if name in run.get("notes", {}):
            return run["notes"][name]
    raise FiguresError(f"the figure {name} has no note in the measured data")


def block_resnet50(data: dict) -> list[str]:
    lines = heading(data)
    lines += table(data, ("bench/gpu.py's step on this network, batch 256, bf16, channels_last", "eager img/s",
                          "compiled img/s", "MFU eager", "MFU compiled"),
                   [(f"{px} px", [f"resnet50_train_imgs_per_s_{px}px_eager", f"resnet50_train_imgs_per_s_{px}px_compiled",
                                  f"resnet50_mfu_{px}px_eager", f"resnet50_mfu_{px}px_compiled"])
                    for px in (160, 192, 224)])
    lines += ["", *steps_table(data, ["imagenet_resnet50"])]
    lines += ["", *latency_table(data, [("224 px, bf16", "resnet50", "bf16"), ("224 px, fp32", "resnet50", "fp32")])]
    return lines


def block_cifar_fast(data: dict) -> list[str]:
    lines = heading(data)
    lines += frontier_table(data)
    lines += ["", *variants_table(data)]
    lines += ["", *harness_cost_table(data)]
    lines += ["", *first_epoch_table(data)]
    lines += ["", *precision_table(data)]
    lines += ["", *table(data, ("an epoch (48 steps of 1024)", "eager s", "compiled s"),
                         [("first epoch (cuDNN's plans; compilation, inductor's cache warm)",
                           ["cifar10_fast_first_epoch_s_eager", "cifar10_fast_first_epoch_s_compiled"]),
                          ("a warm epoch", ["cifar10_fast_epoch_s_eager", "cifar10_fast_epoch_s_compiled"])])]
    variants = list(dict.fromkeys(name for run in data["runs"] for name in run["figures"]
                                  if name.startswith("cifar10_fast_step_ms[")))
    lines += ["", *table(data, ("ms a step, one change at a time (`bench/cifar_fast_gap.py`)", "ms"),
                         [(name[len("cifar10_fast_step_ms["):-1], [name]) for name in variants]
                         + [("airbench94's train94", ["airbench94_step_ms"])])]
    lines += ["", *table(data, ("torch.profiler, one epoch (48 steps)", "device busy ms", "kernel launches"),
                         [("airbench94 (train94, its setup included)", ["airbench94_profile_device_ms",
                                                                        "airbench94_profile_kernel_launches"]),
                          ("this reference (train_epoch, eager)", ["cifar10_fast_profile_device_ms",
                                                                   "cifar10_fast_profile_kernel_launches"])])]
    lines += ["", *steps_table(data, ["cifar10_fast"])]
    lines += ["", *latency_table(data, [("fp32", "cifar10_fast", "fp32")])]
    return lines


def block_cifar_resnet(key: str):
    def block(data: dict) -> list[str]:
        lines = heading(data) + steps_table(data, [f"cifar10_{key}"])
        if key == "resnet56":
            lines += ["", *latency_table(data, [("fp32", "cifar10_resnet56", "fp32")])]
        return lines
    return block


def block_bidaf(data: dict) -> list[str]:
    lines = heading(data)
    lines += table(data, ("bench/gpu.py's bidaf part: batch 60, contexts of 160 tokens, fp32", "s a step",
                          "questions/s", "s an epoch (1,460 steps)", "s for 10 epochs (projected)"),
                   [("the network, Adam and weight average of train.py", ["bidaf_step_s_pytorch",
                                                                          "bidaf_samples_per_s_pytorch",
                                                                          "bidaf_epoch_s_pytorch",
                                                                          "bidaf_projected_f1_075_s_pytorch"])])
    lines += ["", *steps_table(data, ["squad_bidaf"])]
    return lines


def block_fashion(data: dict) -> list[str]:
    lines = heading(data)
    lines += table(data, ("time to 92% top-1", "s", "official"),
                   [("real Fashion-MNIST (the four IDX files), `harness run`, bubblewrap carried to the machine",
                     ["tta_seconds_fashion-mnist-cnn-pytorch", "tta_official_fashion-mnist-cnn-pytorch"])])
    lines += ["", f"The run's record: {note(data, 'tta_official_fashion-mnist-cnn-pytorch')}.",
              "", *steps_table(data, ["fashion_mnist_cnn"])]
    lines += ["", *latency_table(data, [("fp32", "fashion_mnist_cnn", "fp32")])]
    return lines


def block_lm(key: str):
    def block(data: dict) -> list[str]:
        lines = heading(data) + lm_step_table(data, (key,))
        if key == "modded":
            lines += ["", *lm_cost_table(data), "", *lm_full_run_table(data), "", *lm_eval_table(data)]
        return lines
    return block


BLOCKS = {
    "README.md": block_root,
    "references/imagenet-resnet50-pytorch/README.md": block_resnet50,
    "references/cifar10-fast-pytorch/README.md": block_cifar_fast,
    "references/squad-bidaf-pytorch/README.md": block_bidaf,
    "references/fashion-mnist-cnn-pytorch/README.md": block_fashion,
    **{f"references/cifar10-{key}-pytorch/README.md": block_cifar_resnet(key) for key in CIFAR_RESNETS},
    **{f"references/fineweb-gpt2-{key}-pytorch/README.md": block_lm(key) for key in ("modded", "llmc")},
}


def render(path: str, data: dict) -> str:
    return "\n".join([BEGIN, "", *BLOCKS[path](data), "", END])


def readme_block(text: str) -> str | None:
    if BEGIN not in text or END not in text:
        return None
    return text[text.index(BEGIN):text.index(END) + len(END)]


def check_all(root: Path = REPO, data: dict | None = None) -> None:
    data = data if data is not None else measured()
    for path in BLOCKS:
        found = readme_block((root / path).read_text(encoding="utf-8"))
        if found is None:
            raise FiguresError(f"{path}: no GPU figures block ({BEGIN[:24]}...): place one and run "
                               f"python -m bench.gpu_figures render")
        if found != render(path, data):
            raise FiguresError(f"{path}: the GPU figures block is not bench/measured's: run python -m bench.gpu_figures render")


def render_all(root: Path = REPO) -> list[str]:
    """Rewrite every README's block; the paths changed. A README without the markers is an error:
    where its block goes is the README's decision."""
    data, changed = measured(), []
    for path in BLOCKS:
        text = (root / path).read_text(encoding="utf-8")
        old = readme_block(text)
        if old is None:
            raise FiguresError(f"{path}: no GPU figures block: put the lines\n{BEGIN}\n{END}\nwhere it belongs")
        new = text.replace(old, render(path, data))
        if new != text:
            (root / path).write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


@reports_errors("python -m bench.gpu_figures")
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m bench.gpu_figures", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("render", "check"))
    a = p.parse_args(argv)
    try:
        if a.command == "render":
            for path in render_all():
                print(f"rendered {path}")
        else:
            check_all()
            print(f"{len(BLOCKS)} READMEs hold the measured GPU figures")
    except FiguresError as exc:
        print(f"python -m bench.gpu_figures: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
