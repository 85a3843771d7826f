"""The training precision a run records (issue 48): what the reference's switches chose on this machine
(`bf16 = "native"` is the switch, bf16 or fp32 its choice), as the reference reports it after setup,
in the log and result.json; `verify` holds result.json to the log, `submit` carries it into the entry
and `validate` holds the entry to the run."""
from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
import torch
from cheats import harness_run, needs_isolation, write_reference
from conftest import REPO
from leaderboard_fixture import edit_json
from test_verify import disagreement

from common.torch_base import native_bf16, switch_precision
from dawnbench import submit, validate_entries
from harness import precision
from harness.errors import UsageError

# Hyperparameters that choose a training precision, in the references' reference.toml files.
SWITCHES = ("bf16", "fp16", "mixed_precision", "precision", "amp")


def logged(run: Path, key: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in (run / "events.jsonl").read_text().splitlines()
            if f'"key": "{key}"' in line]


def test_the_default_records_what_its_native_switch_chose_here(default_run):
    """The default's bf16 = "native" is the switch its hyperparameters record; what it chose on this CPU
    is the run's precision (bf16 where the CPU multiplies bf16 in hardware, else fp32)."""
    result = json.loads((default_run / "result.json").read_text())
    want = "bf16" if native_bf16(torch.device("cpu")) else "fp32"
    assert result["hyperparameters"]["bf16"] == "native"
    assert result["precision"]["train"] == want, result["precision"]
    assert result["precision"]["reason"].startswith('bf16 = "native" on cpu: ')
    (event,) = logged(default_run, "dawnbench_precision")
    assert (event["value"], event["metadata"]["reason"]) == (want, result["precision"]["reason"])


@pytest.fixture
def run_copy(default_run, tmp_path) -> Path:
    return Path(shutil.copytree(default_run, tmp_path / "run"))


def test_a_precision_other_than_the_logged_one_does_not_verify(run_copy, fashion_root, capsys):
    result = json.loads((run_copy / "result.json").read_text())
    other = "fp16" if result["precision"]["train"] != "fp16" else "fp32"
    edit_json(run_copy / "result.json", precision={**result["precision"], "train": other})
    disagreement(run_copy, fashion_root, capsys, f"precision: precision {{'train': '{other}'")
    edit_json(run_copy / "result.json", precision=None)         # removed from result.json, still in the log
    disagreement(run_copy, fashion_root, capsys, "precision: precision None, but the log's dawnbench_precision")


def test_submit_carries_it_and_validate_holds_the_entry_to_the_run(default_run, fashion_root, tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.setenv("DAWNBENCH_DATA", str(fashion_root))    # submit verifies the run first
    out = tmp_path / "entries"
    assert submit.main([str(default_run), "--out", str(out), "--allow-unofficial"]) == 0
    (path,) = (out / "FashionMNIST" / "train").glob("*.json")
    entry = json.loads(path.read_text())
    assert entry["precision"] == json.loads((default_run / "result.json").read_text())["precision"]["train"]
    capsys.readouterr()
    assert validate_entries.main([str(out), "--allow-unofficial"]) == 0, capsys.readouterr()
    edit_json(path, precision="fp8")
    assert validate_entries.main([str(out), "--allow-unofficial"]) == 1
    said = capsys.readouterr()
    assert "precision" in said.out + said.err and "not what its run recorded" in said.out + said.err


def test_a_report_is_one_word_and_one_line_or_the_default():
    assert precision.recorded(None) == precision.DEFAULT and precision.DEFAULT["train"] == "fp32"
    assert precision.recorded(("bf16", " why ")) == {"train": "bf16", "reason": "why"}
    for bad in ("bf16", ("bfloat16", "why"), ("bf16", ""), ("bf16", "two\nlines"), ("bf16", "x" * 301), ["fp32"],
                ("fp32", 3)):
        with pytest.raises(UsageError, match=r"^train_precision\(\) returned .*: return \(one of fp64, "):
            precision.recorded(bad)


def test_the_torch_switches_report_what_they_chose():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert switch_precision({"bf16": "native"}, cpu, bf16=True) == ("bf16", 'bf16 = "native" on cpu: bf16 autocast '
                                                                            "(weights float32)")
    assert switch_precision({"bf16": "native"}, cpu, bf16=False)[1].endswith("float32, bf16 not in this device's "
                                                                              "hardware")
    assert switch_precision({"bf16": "auto", "fp16": "true"}, cuda, bf16=False, fp16=True)[0] == "fp16"
    assert switch_precision({"bf16": "auto", "fp16": "false"}, cpu, bf16=False) == (
        "fp32", 'bf16 = "auto", fp16 = "false" on cpu: float32')


def test_every_reference_with_a_precision_switch_reports_its_choice():
    """A reference whose hyperparameters choose a precision says what they chose (its entry class, or the
    framework base it subclasses, defines train_precision); one without records the default, fp32."""
    missing = []
    for toml in sorted((REPO / "references").glob("*/reference.toml")):
        spec = tomllib.loads(toml.read_text())
        if spec.get("inference", {}).get("only") or not set(spec.get("hyperparameters", {})) & set(SWITCHES):
            continue
        module, _, cls = spec["entry"].partition(":")
        source = (toml.parent / f"{module}.py").read_text()
        body = re.search(rf"^class {cls}\(.*?(?=^class |\Z)", source, re.S | re.M)
        if body is None or "def train_precision(self)" not in body.group(0):
            missing.append(toml.parent.name)
    assert missing == []


def test_a_report_of_another_form_ends_the_run_in_one_line(tmp_path, fashion_root):
    skip = needs_isolation()            # a cheats' module mark: [] where this machine isolates a reference
    if skip:
        pytest.skip(skip.kwargs["reason"])
    write_reference(tmp_path / "references", "cheat", '''
class Cheat(Base):
    def train_precision(self):
        return "half", "a word of its own"
''')
    proc, result, _ = harness_run(tmp_path / "references", "cheat", Path(fashion_root).resolve(), tmp_path / "results")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert result["status"] == "DNC" and "train_precision() returned ('half', 'a word of its own')" in result["dnc_reason"]
    assert result["precision"] == precision.NOT_REPORTED
    said = [line for line in proc.stderr.splitlines() if line.startswith("cheat: ")]     # then the DNC line
    assert len(said) == 1 and "UsageError: train_precision() returned ('half'" in said[0], proc.stderr
