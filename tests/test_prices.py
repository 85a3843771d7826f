"""The prices file, its checks and look-ups, and the cost arithmetic of run and infer."""
import datetime
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from dawnbench import prices
from dawnbench.cli import main
from harness.errors import UsageError

SCHEMA = json.loads((Path(__file__).parent.parent / "harness/data/result.schema.json").read_text())

GOOD_RECORD = {"provider": "aws", "instance": "p3.2xlarge", "accelerator": "NVIDIA V100", "accelerator_count": 1,
               "vcpus": 8, "usd_per_hour": 3.06, "region": "us-east-1", "date": "2017-10-25",
               "source": "https://aws.amazon.com/ec2/pricing/on-demand/"}


def write_prices(path: Path, *records, **top) -> Path:
    doc = {"version": 1, "updated": "2026-01-01", "instances": list(records), **top}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# --- the shipped file ---------------------------------------------------------------------------

def test_the_shipped_file_covers_the_instances_the_rules_name():
    table = prices.load()
    for key in ["aws:p3.2xlarge", "aws:p3.8xlarge", "aws:p3.16xlarge", "aws:p4d.24xlarge", "aws:p5.48xlarge",
                "aws:g5.xlarge", "aws:c5.4xlarge", "aws:p2.xlarge", "gcp:a2-highgpu-1g", "gcp:a3-highgpu-8g",
                "gcp:n1-standard-16", "gcp:tpu-v3-8", "azure:NC6s_v3", "azure:ND96asr_v4"]:
        assert key.lower() in table, key
    raw = yaml.safe_load(prices.PRICES_FILE.read_text())
    updated = raw["updated"]
    assert isinstance(updated, datetime.date) and isinstance(raw["version"], int)
    for p in table.values():
        assert datetime.date.fromisoformat(p.date) <= updated, p.key      # no price from the future
        assert p.source.startswith("https://") and p.usd_per_hour > 0
        assert (p.accelerator_count == 0) == (p.accelerator is None), p.key
    # the CPU instances, and the DAWNBench-era on-demand prices (us-east-1, Linux)
    assert table["aws:c5.4xlarge"].accelerator_count == 0 and table["gcp:n1-standard-16"].accelerator_count == 0
    assert table["aws:p3.2xlarge"].usd_per_hour == 3.06 and table["aws:p3.16xlarge"].usd_per_hour == 24.48
    assert table["aws:p2.xlarge"].usd_per_hour == 0.90 and table["aws:p3.16xlarge"].accelerator_count == 8


def test_the_header_says_on_demand_only():
    header = prices.PRICES_FILE.read_text().split("\nversion:")[0]
    assert "ON-DEMAND ONLY" in header and "spot" in header


# --- lookup ----------------------------------------------------------------------------------

def test_lookup_gives_the_record_and_ignores_case():
    p = prices.lookup("aws:p3.2xlarge")
    assert p.key == "aws:p3.2xlarge" and p.usd_per_hour == 3.06 and p.accelerator_count == 1
    assert p.record() == {"instance": "aws:p3.2xlarge", "usd_per_hour": 3.06, "date": p.date,
                          "source": "https://aws.amazon.com/ec2/pricing/on-demand/"}
    assert prices.lookup("AZURE:nc6s_V3").key == "azure:NC6s_v3"


@pytest.mark.parametrize("name, expected", [("aws:p3.2xlarg", "aws:p3.2xlarge"), ("p3.16xlarge", "aws:p3.16xlarge"),
                                            ("gcp:a2-highgpu-8g", "gcp:a2-highgpu-1g")])
def test_unknown_instance_lists_close_matches_and_the_file(name, expected):
    with pytest.raises(prices.PriceError) as e:
        prices.lookup(name)
    msg = str(e.value)
    assert "\n" not in msg and f"unknown instance {name!r}" in msg
    assert "close matches: " in msg and expected in msg.split("close matches: ")[1].split(";")[0]
    assert str(prices.PRICES_FILE) in msg
    assert ("PROVIDER:INSTANCE" in msg) == (":" not in name)


def test_prices_env_names_another_file(tmp_path, monkeypatch):
    other = write_prices(tmp_path / "site.yaml", {**GOOD_RECORD, "instance": "dgx", "provider": "onprem",
                                                  "usd_per_hour": 12.5})
    monkeypatch.setenv(prices.PRICES_ENV, str(other))
    assert prices.lookup("onprem:dgx").usd_per_hour == 12.5
    with pytest.raises(prices.PriceError, match="site.yaml"):
        prices.lookup("aws:p3.2xlarge")


# --- a malformed file: file, instance and field, in one line ------------------------------------

@pytest.mark.parametrize("change, field, says", [
    ({"usd_per_hour": -1}, "usd_per_hour", "positive number"),
    ({"usd_per_hour": "3.06"}, "usd_per_hour", "positive number"),
    ({"usd_per_hour": True}, "usd_per_hour", "positive number"),
    ({"usd_per_hour": float("nan")}, "usd_per_hour", "positive number"),
    ({"source": "aws.amazon.com"}, "source", "https URL"),
    ({"date": "25/10/2017"}, "date", "yyyy-mm-dd"),
    ({"date": "2017-02-30"}, "date", "yyyy-mm-dd"),
    ({"accelerator_count": 0}, "accelerator", "null for a CPU instance"),
    ({"accelerator": None}, "accelerator", "name the accelerator"),
    ({"accelerator_count": 1.5}, "accelerator_count", "whole number"),
    ({"vcpus": 0}, "vcpus", "whole number"),
    ({"spot_usd_per_hour": 0.9}, "spot_usd_per_hour", "not a prices field"),
])
def test_a_bad_field_names_file_instance_and_field(tmp_path, change, field, says):
    path = write_prices(tmp_path / "prices.yaml", {**GOOD_RECORD, **change})
    with pytest.raises(prices.PriceError) as e:
        prices.load(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: instance aws:p3.2xlarge: field {field!r}") and says in msg


def test_a_missing_field_and_a_duplicate(tmp_path):
    record = dict(GOOD_RECORD)
    del record["region"]
    path = write_prices(tmp_path / "p.yaml", record)
    with pytest.raises(prices.PriceError, match=r"instance aws:p3.2xlarge: field 'region' is missing"):
        prices.load(path)
    path = write_prices(tmp_path / "p.yaml", GOOD_RECORD, {**GOOD_RECORD, "instance": "P3.2xlarge"})
    with pytest.raises(prices.PriceError, match="listed twice"):
        prices.load(path)
    path = write_prices(tmp_path / "p.yaml", {**GOOD_RECORD, "instance": None})
    with pytest.raises(prices.PriceError, match=r"instance #1: field 'instance'"):
        prices.load(path)


@pytest.mark.parametrize("text, says", [
    ("version: 1\nupdated: 2026-01-01\ninstances: [\n", "p.yaml:4: not valid YAML"),
    ("- a\n- b\n", "expected a mapping"),
    ("version: 1\nupdated: 2026-01-01\n", "field 'instances'"),
    ("version: one\nupdated: 2026-01-01\ninstances: [{}]\n", "field 'version'"),
    ("version: 1\nupdated: soon\ninstances: [{}]\n", "field 'updated'"),
    ("version: 1\nupdated: 2026-01-01\nprices: []\ninstances: [{}]\n", "unknown top-level field 'prices'"),
    ("version: 1\nupdated: 2026-01-01\ninstances: [42]\n", "instance #1: expected a record"),
])
def test_a_malformed_file_is_one_line(tmp_path, text, says):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(prices.PriceError) as e:
        prices.load(path)
    assert "\n" not in str(e.value) and says in str(e.value) and str(path) in str(e.value)


def test_the_file_is_data_only(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "p.yaml"
    path.write_text(f"version: 1\nupdated: 2026-01-01\ninstances:\n"
                    f"  - !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(prices.PriceError, match="not valid YAML"):
        prices.load(path)
    assert not marker.exists()


# --- cost through the command: run and infer ---------------------------------------------------

@pytest.fixture
def refs(references_root, fashion_root):
    pass


def one_run(tmp_path, *args):
    code = main(["run", "scripted-test", "--results", str(tmp_path / "results"), "--no-progress",
                 "--set", "train_sleep=0.05", "--no-save", *args])
    (run_dir,) = (tmp_path / "results" / "scripted-test").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    return code, result


def test_run_on_an_instance_costs_hours_times_price_times_nodes(refs, tmp_path):
    code, result = one_run(tmp_path, "--instance", "aws:p3.16xlarge", "--nodes", "4")
    assert code == 0
    assert result["instance"] == "aws:p3.16xlarge" and result["nodes"] == 4
    assert result["price"] == prices.lookup("aws:p3.16xlarge").record()
    assert result["costPerHour"] == pytest.approx(24.48 * 4)
    assert result["cost_usd"] == pytest.approx(result["tta_seconds"] / 3600 * 24.48 * 4)
    assert result["cost_usd"] > 0


def test_run_with_a_given_price_and_nodes(refs, tmp_path):
    code, result = one_run(tmp_path, "--cost-per-hour", "2.5", "--nodes", "3")
    assert code == 0
    assert result["instance"] is None and result["price"] is None and result["nodes"] == 3
    assert result["costPerHour"] == pytest.approx(7.5)
    assert result["cost_usd"] == pytest.approx(result["tta_seconds"] / 3600 * 7.5)


def test_run_without_a_price_has_no_cost(refs, tmp_path):
    code, result = one_run(tmp_path)
    assert code == 0
    assert result["nodes"] == 1 and result["costPerHour"] is None and result["cost_usd"] is None
    assert result["instance"] is None and result["price"] is None


@pytest.mark.parametrize("args, says", [
    (["--instance", "aws:p3.2xlarge", "--cost-per-hour", "3"], "not both"),
    (["--nodes", "0", "--cost-per-hour", "3"], "--nodes 0"),
    (["--cost-per-hour", "-1"], "--cost-per-hour -1"),
    (["--cost-per-hour", "nan"], "--cost-per-hour nan"),
    (["--instance", "aws:p3.2xlarg"], "close matches: aws:p3.2xlarge"),
])
def test_bad_cost_options_are_one_line_and_write_nothing(refs, tmp_path, capsys, args, says):
    code = main(["run", "scripted-test", "--results", str(tmp_path / "r"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert not (tmp_path / "r").exists()


def test_a_malformed_prices_file_stops_the_run_before_it_starts(refs, tmp_path, capsys, monkeypatch):
    bad = write_prices(tmp_path / "bad.yaml", {**GOOD_RECORD, "usd_per_hour": "lots"})
    monkeypatch.setenv(prices.PRICES_ENV, str(bad))
    code = main(["run", "scripted-test", "--results", str(tmp_path / "r"), "--instance", "aws:p3.2xlarge"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert str(bad) in err[0] and "aws:p3.2xlarge" in err[0] and "'usd_per_hour'" in err[0]
    assert not (tmp_path / "r").exists()


def test_infer_on_an_instance_costs_price_times_latency(refs, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.txt").write_text("1")
    code = main(["infer", "scripted-test", "--model", str(model), "--no-progress", "--out", str(tmp_path / "inf"),
                 "--instance", "aws:g5.xlarge", "--warmup", "5", "--limit", "300"])
    assert code == 0
    report = json.loads((tmp_path / "inf" / "inference.json").read_text())
    assert report["instance"] == "aws:g5.xlarge" and report["nodes"] == 1
    assert report["price"] == prices.lookup("aws:g5.xlarge").record()
    assert report["costPerHour"] == 1.006
    mean = report["latency_ms"]["mean"]
    assert report["cost"] == pytest.approx(1.006 * mean / 3.6e6)
    assert report["cost_per_10k_items_usd"] == pytest.approx(1.006 * mean / 3.6e6 * 1e4)
    assert "cost per 10,000 items" in capsys.readouterr().out


def test_the_schema_checks_the_cost_fields(refs, tmp_path):
    _, result = one_run(tmp_path, "--instance", "aws:p3.2xlarge")
    for bad in ({"nodes": 0}, {"nodes": 1.5}, {"instance": "p3.2xlarge"},
                {"price": {"instance": "aws:p3.2xlarge", "usd_per_hour": 3.06, "source": "x"}},
                {"price": {**result["price"], "date": "Oct 2017"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**result, **bad}, SCHEMA)


# --- --instance on the host, a price record for the harness --------------------------------------

def test_resolve_instance_args_replaces_the_instance_by_its_record():
    record = prices.lookup("aws:p3.16xlarge").record()
    for given in (["--instance", "aws:p3.16xlarge"], ["--instance=aws:p3.16xlarge"]):
        args = ["run", "REF", "--seed", "3", *given, "--nodes", "4"]
        out = prices.resolve_instance_args(args)
        assert out[:4] == ["run", "REF", "--seed", "3"] and out[4] == "--price-record" and out[6:] == ["--nodes", "4"]
        assert json.loads(out[5]) == record
    unpriced = ["run", "REF", "--cost-per-hour", "3", "--", "--instance", "x"]
    assert prices.resolve_instance_args(unpriced) == unpriced       # nothing to price; after -- is not ours


@pytest.mark.parametrize("args, says", [
    (["run", "R", "--instance", "aws:p3.2xlarg"], "close matches: aws:p3.2xlarge"),
    (["run", "R", "--instance"], "--instance needs PROVIDER:INSTANCE"),
    (["run", "R", "--instance", "--nodes", "2"], "--instance needs PROVIDER:INSTANCE"),
    (["run", "R", "--instance=aws:p3.2xlarge", "--instance", "aws:g5.xlarge"], "given twice"),
    (["run", "R", "--instance", "aws:p3.2xlarge", "--cost-per-hour=3"], "not both"),
])
def test_resolve_instance_args_refuses_in_one_line(args, says):
    with pytest.raises(UsageError, match=says) as err:
        prices.resolve_instance_args(args)
    assert "\n" not in str(err.value)


def test_what_resolve_instance_args_gives_the_harness_runs(refs, tmp_path):
    from harness.cli import main as harness_main
    args = prices.resolve_instance_args(["run", "scripted-test", "--results", str(tmp_path / "results"), "--no-progress",
                                         "--no-save", "--instance", "aws:p3.8xlarge", "--nodes", "2"])
    assert harness_main(args) == 0
    (run_dir,) = (tmp_path / "results" / "scripted-test").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    assert result["price"] == prices.lookup("aws:p3.8xlarge").record() and result["nodes"] == 2
    assert result["costPerHour"] == pytest.approx(2 * prices.lookup("aws:p3.8xlarge").usd_per_hour)
