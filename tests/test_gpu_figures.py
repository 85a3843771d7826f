"""The GPU figures in the READMEs are bench/measured's, rendered by `python -m bench.gpu_figures`:
a number typed into a README, or a README that lost its block, fails here."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import PYTHON, REPO, cli_env

from bench import gpu_figures


def test_every_readme_holds_the_measured_figures():
    proc = subprocess.run([PYTHON, "-m", "bench.gpu_figures", "check"], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{len(gpu_figures.BLOCKS)} READMEs hold the measured GPU figures"


def test_the_data_says_where_and_with_what_it_was_measured():
    data = gpu_figures.measured()
    env = data["environment"]
    assert {"date", "device", "torch", "cuda", "cudnn", "python"} <= set(env)
    assert all(run["command"] and run["figures"] for run in data["runs"])
    block = gpu_figures.render("README.md", data)
    assert env["torch"] in block and env["date"] in block and "the project pins 2.13.0" in block


def copy_readmes(tmp_path):
    for path in gpu_figures.BLOCKS:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, tmp_path / path)


def test_a_figure_typed_by_hand_is_found(tmp_path):
    copy_readmes(tmp_path)
    gpu_figures.check_all(tmp_path)
    readme = tmp_path / "references" / "cifar10-fast-pytorch" / "README.md"
    text = readme.read_text()
    data = gpu_figures.measured()
    measured = gpu_figures.cell(data, "peer_ratio_cifar10_fast_over_airbench94")
    assert f"| {measured} |" in text
    readme.write_text(text.replace(f"| {measured} |", "| 0.95 |", 1))
    with pytest.raises(gpu_figures.FiguresError, match="cifar10-fast-pytorch/README.md: the GPU figures block"):
        gpu_figures.check_all(tmp_path)


def test_a_readme_without_its_block_is_named(tmp_path):
    copy_readmes(tmp_path)
    readme = tmp_path / "references" / "squad-bidaf-pytorch" / "README.md"
    text = readme.read_text()
    readme.write_text(text.replace(gpu_figures.readme_block(text), ""))
    with pytest.raises(gpu_figures.FiguresError, match="squad-bidaf-pytorch/README.md: no GPU figures block"):
        gpu_figures.check_all(tmp_path)


def test_a_row_naming_a_figure_never_measured_fails(tmp_path):
    data = gpu_figures.measured()
    for run in data["runs"]:
        run["figures"].pop("steps_squad_bidaf_step_ms", None)
    with pytest.raises(gpu_figures.FiguresError, match="steps_squad_bidaf_step_ms is not in the measured data"):
        gpu_figures.render("references/squad-bidaf-pytorch/README.md", data)


def test_leases_on_one_device_and_version_are_shown_together_and_others_apart(tmp_path):
    def lease(folder, date, device, torch, x):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "figures.json").write_text(json.dumps(
            {"environment": {"date": date, "device": device, "torch": torch},
             "runs": [{"command": f"bench {date}", "figures": {"x": x}}]}))

    lease("2026-01-01-h200", "2026-01-01", "H200", "2.11", 1.0)
    lease("2026-01-02-h100", "2026-01-02", "H100", "2.11", 5.0)       # another device: never mixed in
    lease("2026-01-03-h200-old", "2026-01-03", "H200", "2.10", 7.0)   # another version: never mixed in
    lease("2026-01-04-h200", "2026-01-04", "H200", "2.11", 2.0)
    data = gpu_figures.measured(tmp_path)
    assert gpu_figures.cell(data, "x") == "1; 2"
    assert data["environment"]["date"] == "2026-01-01, 2026-01-04"
    assert gpu_figures.commands(data, ["x"]) == "`bench 2026-01-01`<br>`bench 2026-01-04`"


def test_every_sample_of_a_figure_is_shown_in_order():
    data = {"runs": [{"command": "a", "figures": {"x": 1.234}}, {"command": "b", "figures": {"x": 2000.0}},
                     {"command": "c", "figures": {}}]}
    assert gpu_figures.cell(data, "x") == "1.23; 2,000"
    assert gpu_figures.commands(data, ["x"]) == "`a`<br>`b`"


def test_the_steps_verdict_falls_only_for_a_step_that_learns():
    """bench.reference_steps on the Fashion-MNIST default's own train_epoch, on the CPU: a rate that
    learns lowers the loss on the learnable images; a rate of 0 leaves it where it was, and says so.
    The rate is 0.02: the recipe's peak of 0.2 makes the loss on these synthetic images spike to 15
    within the 40 steps, and whether its last five then lie 5% under its first five (measured: 6% in
    float32, 3% in bf16) says nothing of the verdict; at 0.02 the loss falls by about half in both."""
    torch = pytest.importorskip("torch")
    from bench import reference_steps
    from bench.gpu_common import Setting
    s = Setting(torch, smoke=True, quick=False)
    images, labels = reference_steps.learnable_images(20 * 256, 28, 1, 10)
    data = {"load_fashion_mnist": lambda root, split: (images[..., 0], labels)}
    verdicts = {}
    for lr in ("0.0", "0.02"):
        overrides = ["batch_size=256", f"lr={lr}"]
        figures = reference_steps.train_reference(s, "fashion-mnist-cnn-pytorch", overrides, data)
        assert figures["steps"] == 20 and len(figures["losses"]) == 40 and figures["peak_mib"] is None
        verdicts[lr] = reference_steps.loss_falls(figures["losses"])[2]
    assert verdicts == {"0.0": False, "0.02": True}
    assert reference_steps.loss_falls([2.0] * 5 + [float("nan")] * 5) == (2.0, pytest.approx(float("nan"), nan_ok=True), False)
