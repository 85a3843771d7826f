"""The leaderboard: rankings on hand-written entries, the first-row-at-threshold rule, cost arithmetic,
ties, invalid entries (listed, never ranked), --format json, and escaping of every string an entry brings."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from leaderboard_fixture import (
    ARCHIVE,
    EVIL_STEM,
    INFERENCE_COST_ORDER,
    LATENCY_ORDER,
    TRAIN_COST_ORDER,
    TRAIN_TIME_ORDER,
    XSS,
    archive_args,
    archived,
    edit_json,
    inference,
    make_run,
    train,
    use_cifar10_labels,
    write_entries,
    write_reproduction,
)
from markupsafe import escape

from dawnbench import entries, entry_status, ranking, site, submit
from dawnbench.cli import main
from harness.tasks import TASKS


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return write_entries(tmp_path_factory.mktemp("entries"))


@pytest.fixture(scope="module")
def rankings(tree) -> dict:
    loaded, invalid = ranking.load_all(tree)
    return ranking.rank(loaded, invalid, entry_status.verification_statuses(loaded, None, tree), archived=archived(tree))


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory) -> Path:
    """(the folder holding the site, the site); built once through the command."""
    holder = tmp_path_factory.mktemp("built")
    assert main(["leaderboard", str(tree), "--out", str(holder / "site"), *archive_args(tree)]) == 0
    return holder / "site"


def names(rows):
    return [r["entry"] for r in rows]


def by_name(rows):
    return {r["entry"]: r for r in rows}


def test_tables_rank_in_the_known_order(rankings):
    cifar = rankings["tasks"]["CIFAR10"]
    assert names(cifar[ARCHIVE["train_time"]]) == TRAIN_TIME_ORDER
    # hand-typed v1 entries: their prices are the submitter's, ranked apart from the prices table's
    assert names(cifar[ARCHIVE["train_cost_given"]]) == TRAIN_COST_ORDER
    assert cifar["train_cost"] == [] == cifar["train_time"] == cifar["train_submitted"]      # no run: the archive's only
    assert names(cifar[ARCHIVE["inference_latency"]]) == LATENCY_ORDER
    assert names(cifar[ARCHIVE["inference_cost_given"]]) == INFERENCE_COST_ORDER and cifar["inference_cost"] == []
    assert {r["price_basis"] for r in cifar[ARCHIVE["train_cost_given"]] + cifar[ARCHIVE["inference_cost_given"]]} == \
        {entries.GIVEN_PRICE}
    for rows in cifar.values():
        assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert set(rankings["tasks"]) == {task.display_name for task in TASKS.values()}       # every task, from tasks.toml
    assert all(not rows for rows in rankings["tasks"]["FashionMNIST"].values())


def test_late_crossing_ranks_by_its_late_row_and_never_reaching_does_not_rank(rankings):
    rows = by_name(rankings["tasks"]["CIFAR10"][ARCHIVE["train_time"]])
    bob = rows["bob_resnet50_k80_tensorflow"]      # 93.9 at 2.5 h, 94.0 at 3.0 h
    assert (bob["hours"], bob["hms"], bob["epoch"], bob["accuracy"]) == (3.0, "3:00:00", 6.0, 94.0)
    assert rows["alice_resnet18_p3.2xlarge_pytorch"]["hms"] == "0:30:00"
    invalid = {u["entry"]: u for u in rankings["invalid"]}
    assert "the threshold 94 is never reached" in invalid["carol_cnn_cpu_pytorch"]["reason"]
    assert all("carol_cnn_cpu_pytorch" not in names(rows) for rows in rankings["tasks"]["CIFAR10"].values())


def test_rank_uses_the_first_row_at_or_over_the_threshold(rankings):
    # dave: 94.0 at 0.75 h, dips to 93.5, 94.5 at 1.25 h: the 0.75 h row counts
    dave = by_name(rankings["tasks"]["CIFAR10"][ARCHIVE["train_time"]])["dave_dip_v100_pytorch"]
    assert (dave["hours"], dave["epoch"], dave["hms"]) == (0.75, 2.0, "0:45:00")


def test_first_row_rule_on_its_own(tmp_path):
    path = train(tmp_path, "CIFAR10", "x_m_h_f", [(1, 0.2, 94.0001), (2, 0.4, 93.0), (3, 0.6, 99.0)])
    assert entries.training_hours(entries.load(path)) == 0.2
    path = train(tmp_path, "CIFAR10", "y_m_h_f", [(1, 0.2, 93.9999), (2, 0.4, float("nan")), (3, 0.6, 94.0)])
    assert entries.training_hours(entries.load(path)) == 0.6


def test_ties_go_to_the_earlier_timestamp_then_the_name(rankings):
    order = names(rankings["tasks"]["CIFAR10"][ARCHIVE["train_time"]])
    # erin and gina: 0.75 h on 2018-05-01 (name decides); dave: 0.75 h on 2018-06-01
    assert order.index("erin_tie_v100_pytorch") < order.index("gina_tie_v100_pytorch") < order.index("dave_dip_v100_pytorch")


def test_training_cost_is_hours_times_cost_per_hour(rankings):
    cost = by_name(rankings["tasks"]["CIFAR10"][ARCHIVE["train_cost_given"]])
    assert cost["alice_resnet18_p3.2xlarge_pytorch"]["cost_usd"] == pytest.approx(0.5 * 3.06)
    assert cost["bob_resnet50_k80_tensorflow"]["cost_usd"] == pytest.approx(3.0 * 0.9)
    # no price: ranked by time, absent from the cost table
    assert "frank_noprice_tpu_tensorflow" in names(rankings["tasks"]["CIFAR10"][ARCHIVE["train_time"]])
    assert "frank_noprice_tpu_tensorflow" not in cost
    assert by_name(rankings["tasks"]["CIFAR10"][ARCHIVE["train_time"]])["frank_noprice_tpu_tensorflow"]["cost_usd"] is None


def test_inference_cost_per_10000_items(rankings, tmp_path):
    rows = by_name(rankings["tasks"]["CIFAR10"][ARCHIVE["inference_cost_given"]])
    # costPerHour only: 3.06 $/h x 10 ms / 3.6e6 ms/h x 10,000 items
    assert rows["alice_resnet18_p3.2xlarge_pytorch"]["cost_per_10000_usd"] == pytest.approx(3.06 * 10 / 3.6e6 * 1e4)
    assert rows["old_resnet_k80_caffe"]["cost_per_10000_usd"] == pytest.approx(2e-5 * 1e4)   # the v1 `cost` only
    assert "henry_nocost_cpu_onnx" in names(rankings["tasks"]["CIFAR10"][ARCHIVE["inference_latency"]])
    assert "henry_nocost_cpu_onnx" not in rows
    # both given: the entry's own per-item cost stands
    both = entries.load(inference(tmp_path, "CIFAR10", "b_m_h_f", latency=10.0, top1Accuracy=95.0,
                                  costPerHour=3.6, cost=5e-6))
    assert entries.inference_cost(both) == pytest.approx(0.05)
    # a new entry's latency_ms.mean stands in for a missing v1 latency
    new = entries.load(inference(tmp_path, "CIFAR10", "n_m_h_f", latency_ms={"mean": 2.0, "p50": 1.9},
                                 top1Accuracy=95.0, costPerHour=3.6))
    assert entries.latency_ms(new) == 2.0 and entries.inference_cost(new) == pytest.approx(0.02)


def test_inference_under_the_threshold_does_not_rank(rankings):
    assert all("slow_cnn_cpu_pytorch" not in names(rows) for rows in rankings["tasks"]["CIFAR10"].values())
    reason = {u["entry"]: u["reason"] for u in rankings["invalid"]}["slow_cnn_cpu_pytorch"]
    assert reason.endswith("slow_cnn_cpu_pytorch.json:1: top1Accuracy: 93 is below the threshold 94 "
                           "(an inference entry must reach it: submit a model that does)")


def test_f1_is_a_fraction(rankings):
    (ivan,) = rankings["tasks"]["SQuAD"][ARCHIVE["train_time"]]
    assert (ivan["entry"], ivan["hours"], ivan["accuracy"]) == ("ivan_bidaf_k80_tensorflow", 1.0, 0.76)


def test_json_format_prints_the_rankings_and_writes_nothing(tree, rankings, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["leaderboard", str(tree), "--format", "json", *archive_args(tree)]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert printed == json.loads(json.dumps(rankings))
    row = printed["tasks"]["CIFAR10"][ARCHIVE["train_time"]][0]
    assert {"rank", "entry", "author", "model", "hardware", "framework", "hours", "hms"} <= set(row)
    assert list(tmp_path.iterdir()) == []
    # the four entries validate rejects: one line each, validate's first, no traceback
    lines = captured.err.strip().splitlines()
    assert len(lines) == 4 and "Traceback" not in captured.err
    assert all(line.startswith("dawnbench leaderboard: invalid: ") for line in lines)
    assert "slow_cnn_cpu_pytorch.json:1: top1Accuracy:" in lines[0]
    assert "broken_x_y_z.json:1: json: not valid JSON" in lines[1]
    assert "carol_cnn_cpu_pytorch.tsv:3: top1Accuracy:" in lines[2]
    assert "textlog_x_y_z.tsv:2: hours:" in lines[3] and "not a finite number" in lines[3]
    assert [u["entry"] for u in printed["invalid"]] == ["slow_cnn_cpu_pytorch", "broken_x_y_z", "carol_cnn_cpu_pytorch",
                                                        "textlog_x_y_z"]
    assert [u["reason"] for u in printed["invalid"]] == [line.split("invalid: ", 1)[1] for line in lines]


def test_usage_errors_are_one_line(tmp_path, capsys):
    for argv, words in ((["leaderboard", str(tmp_path / "nope"), "--out", str(tmp_path / "s")], "does not exist"),
                        (["leaderboard", str(tmp_path)], "--out SITE_DIR is needed"),
                        (["leaderboard", str(tmp_path), "--out", str(tmp_path / "s")], "no entries under")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "s").exists()


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text = set(), [], []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs += attrs

    def handle_data(self, data):
        self.text.append(data)


ALLOWED_TAGS = {"html", "head", "meta", "title", "link", "body", "header", "h1", "h2", "h3", "p", "nav", "a",
                "section", "small", "figure", "img", "figcaption", "table", "thead", "tbody", "tr", "th", "td",
                "ul", "li", "pre", "span", "code", "details", "summary", "div", "button",
                "form", "label", "input", "datalist", "option", "select", "output", "script"}
SITE_SCRIPT = '<script src="site.js"></script>'     # the index's one script, the site's own file


def test_every_entry_string_is_escaped(built):
    pages = sorted(built.rglob("*.html"))
    assert len(pages) == 13    # the index and the 12 valid entries
    evil_page = built / "CIFAR10" / "train" / (ranking.safe_stem(EVIL_STEM) + ".html")
    assert evil_page in pages
    for page in pages:
        content = page.read_text(encoding="utf-8")
        parsed = Tags()
        parsed.feed(content)
        assert parsed.tags <= ALLOWED_TAGS, (page, parsed.tags - ALLOWED_TAGS)
        assert not [name for name, _ in parsed.attrs if name.startswith("on")], page
        assert ("src", "x") not in parsed.attrs
        assert not [v for name, v in parsed.attrs if name == "href" and v.lower().startswith("javascript")]
        assert content.count(SITE_SCRIPT) == (page.name == "index.html")
        for raw in ("<script", "<img src=x", "<svg", "<b onmouseover"):
            assert raw not in content.replace(SITE_SCRIPT, ""), (page, raw)
    index = (built / "index.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in index           # in text and in attributes
    assert f'data-entry="{escape(EVIL_STEM)}"' in index
    evil = Tags()
    evil.feed(evil_page.read_text(encoding="utf-8"))
    text = "".join(evil.text)
    for value in XSS.values():                 # shown literally, as text
        assert value in text
    assert "javascript:alert(1)" in text       # the code URL, never a link


def test_nothing_is_written_outside_the_site(tree, tmp_path):
    before = {p for p in tmp_path.rglob("*")}
    out = tmp_path / "site"
    assert main(["leaderboard", str(tree), "--out", str(out), *archive_args(tree)]) == 0
    after = {p for p in tmp_path.rglob("*")}
    assert after - before and all(out in p.parents or p == out for p in after - before)
    for p in out.rglob("*"):
        assert re.fullmatch(r"[A-Za-z0-9._/-]+", str(p.relative_to(out))), p
    # the entry named ".." (ImageNet/inference/...json) has its page inside its folder
    assert len(list((out / "ImageNet" / "inference").glob("*.html"))) == 1
    # a second build replaces the first whole; a folder that is not a site is left alone
    assert main(["leaderboard", str(tree), "--out", str(out), *archive_args(tree)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert main(["leaderboard", str(tree), "--out", str(other), *archive_args(tree)]) == 2
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_safe_stem_is_a_plain_distinct_file_name():
    stems = ["a_b_c_d", "..", ".", "...", "../../etc/passwd", "a b", "a_b", 'x"><y', "ünï", "", "a" * 300]
    safe = [ranking.safe_stem(s) for s in stems]
    assert len(set(safe)) == len(stems)
    for s in safe:
        assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", s) and len(s) < 150
    assert ranking.safe_stem("a_b_c_d") == "a_b_c_d"


def test_links_and_money():
    assert site.link("https://github.com/x/y").startswith('<a href="https://github.com/x/y"')
    for url in ("javascript:alert(1)", "data:text/html,<script>", "//evil.example/x", "ftp://x/y",
                "https://a b", " javascript:alert(1)"):
        assert "<a " not in site.link(url), url
    assert site.link('http://x/"onmouseover=alert(1)').count('"') == 4       # href and rel, quotes escaped
    assert [site.usd(v) for v in (1.53, 1234.5, 0.085, 0.2, 0.0012, 0.0)] == \
        ["$1.53", "$1,234.50", "$0.085", "$0.20", "$0.0012", "$0.00"]
    assert entries.hms(0.75) == "0:45:00" and entries.hms(26.5) == "26:30:00"


def test_site_links_resolve(built):
    for page in built.rglob("*.html"):
        parsed = Tags()
        parsed.feed(page.read_text(encoding="utf-8"))
        for name, value in parsed.attrs:
            if name in ("href", "src") and not value.startswith(("http://", "https://", "#")):
                target = (page.parent / value.split("#")[0]).resolve()
                assert target.is_file() and built.resolve() in target.parents, (page, value)


def test_entries_validate_rejects_are_listed_never_ranked(tmp_path, capsys):
    train(tmp_path, "CIFAR10", "w_m_h_f", [(1, 0.5, 95.0)], costPerHour="3.06", author={"name": "<i>x</i>"},
          timestamp=20180420, model=None)
    train(tmp_path, "CIFAR10", "v_m_h_f", [(1, 0.5, 95.0)], costPerHour=True)
    inference(tmp_path, "CIFAR10", "u_m_h_f", latency="10", top1Accuracy=95.0)
    inference(tmp_path, "CIFAR10", "t_m_h_f", latency=10.0, top1Accuracy="95", cost=-1)
    train(tmp_path, "CIFAR10", "ok_m_h_f", [(1, 0.5, 95.0)])
    out = tmp_path / "site"
    assert main(["leaderboard", str(tmp_path), "--out", str(out), *archive_args(tmp_path)]) == 0
    result = ranking.rank(*ranking.load_all(tmp_path), archived=archived(tmp_path))
    assert {t: names(rows) for t, rows in result["tasks"]["CIFAR10"].items() if rows} == {ARCHIVE["train_time"]: ["ok_m_h_f"]}
    reasons = {u["entry"]: u["reason"] for u in result["invalid"]}
    assert set(reasons) == {"t_m_h_f", "u_m_h_f", "v_m_h_f", "w_m_h_f"}
    assert reasons["w_m_h_f"].endswith('w_m_h_f.json:1: model: required field missing (add "model": "ResNet-56")')
    assert reasons["v_m_h_f"].endswith("v_m_h_f.json:1: costPerHour: must be a number above 0 and at most 10,000,000 "
                                       "(USD per hour, all hardware: at most 1,000 a node) or null, not true "
                                       "(write e.g. 0.9)")
    index = (out / "index.html").read_text()
    assert "<i>" not in index and all(f'<li data-entry="{name}">' in index for name in reasons)
    assert not (out / "CIFAR10" / "train" / "w_m_h_f.html").exists()       # no page for an invalid entry
    assert "Traceback" not in capsys.readouterr().err


def test_site_files_are_readable_by_a_web_server(built):
    for p in [built, *built.rglob("*")]:
        assert p.stat().st_mode & 0o004, p       # world-readable, as a server's user needs


def test_an_entry_at_a_lowered_threshold_does_not_rank(tmp_path):
    """`submit --allow-unofficial` writes smoke-test entries; they are listed as unranked, never ranked."""
    train(tmp_path, "CIFAR10", "smoke_net_cpu_pytorch", [(1, 0.01, 95.0)], official_threshold=False, threshold=0.5)
    train(tmp_path, "CIFAR10", "real_net_cpu_pytorch", [(1, 0.02, 95.0)])
    result = ranking.rank(*ranking.load_all(tmp_path), archived=archived(tmp_path))
    assert names(result["tasks"]["CIFAR10"][ARCHIVE["train_time"]]) == ["real_net_cpu_pytorch"]
    (invalid,) = result["invalid"]
    assert invalid["entry"] == "smoke_net_cpu_pytorch" and "lowered threshold" in invalid["reason"]
    assert result["unranked"] == []


def test_a_hostile_tree_is_listed_invalid_and_the_rest_ranked(tmp_path):
    """/dev/zero behind a link, a FIFO, JSON nested 100,000 deep, a 300 MB log and negative hours:
    each is listed invalid with its reason, none is ranked, and the command ends, quickly."""
    tree = tmp_path / "entries"
    train(tree, "CIFAR10", "good_net_gpu_pytorch", [(1, 0.5, 95.0)], costPerHour=1.0)
    inference(tree, "CIFAR10", "good_net_gpu_pytorch", latency=2.0, top1Accuracy=95.0)
    folder = tree / "CIFAR10" / "train"
    (folder / "zero_x_y_z.json").symlink_to("/dev/zero")
    os.mkfifo(folder / "fifo_x_y_z.json")
    (folder / "deep_x_y_z.json").write_text("[" * 100_000 + "]" * 100_000)
    big = train(tree, "CIFAR10", "big_x_y_z", [(1, 0.5, 95.0)]).with_suffix(".tsv")
    os.truncate(big, 300 * 2**20)           # sparse: no disk used, no time spent writing
    train(tree, "CIFAR10", "negative_x_y_z", [(1, -2.0, 95.0)])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, "-m", "dawnbench", "leaderboard", str(tree), "--format", "json", *archive_args(tree)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout)
    tables = result["tasks"]["CIFAR10"]
    assert names(tables[ARCHIVE["train_time"]]) == names(tables[ARCHIVE["train_cost_given"]]) == ["good_net_gpu_pytorch"]
    assert names(tables[ARCHIVE["inference_latency"]]) == ["good_net_gpu_pytorch"]
    reasons = {u["entry"]: u["reason"] for u in result["invalid"]}
    assert set(reasons) == {"zero_x_y_z", "fifo_x_y_z", "deep_x_y_z", "big_x_y_z", "negative_x_y_z"}
    assert "json: is a link out of the entries tree" in reasons["zero_x_y_z"]
    assert "json: is not a regular file" in reasons["fifo_x_y_z"]
    assert "json: nested too deeply" in reasons["deep_x_y_z"]
    assert f"big_x_y_z.tsv:1: tsv: is {300 * 2**20} bytes, over the" in reasons["big_x_y_z"]
    assert "negative_x_y_z.tsv:2: hours: -2 is negative" in reasons["negative_x_y_z"]
    assert sorted(line.split(": invalid: ", 1)[1] for line in done.stderr.splitlines()) == sorted(reasons.values())

    site_dir = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "dawnbench", "leaderboard", str(tree), "--out", str(site_dir),
                           *archive_args(tree)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    index = (site_dir / "index.html").read_text(encoding="utf-8")
    for name, reason in reasons.items():
        assert f'<li data-entry="{name}">' in index and str(escape(reason)) in index
    assert sorted(p.stem for p in (site_dir / "CIFAR10" / "train").glob("*.html")) == ["good_net_gpu_pytorch"]


def test_each_training_entry_shows_its_verification(tmp_path, monkeypatch, capsys):
    """A submitted entry carries its run and is verified again; a changed run or log fails, with the
    reason; hand-written v1 entries have no run; without the eval labels nothing is verified."""
    use_cifar10_labels(monkeypatch, tmp_path / "labels")
    tree = write_entries(tmp_path / "entries")
    stems = {}
    for author, epochs in (("Honest", 3), ("Tampered", 4), ("Relogged", 5)):
        assert submit.main([str(make_run(tmp_path / author, epochs=epochs)), "--out", str(tree), "--author", author]) == 0
        stems[author] = f"{author}_ResNet-56_1-x-NVIDIA-H100-80GB-HBM3_PyTorch-2.13.0"
    capsys.readouterr()
    train_dir = tree / "CIFAR10" / "train"
    (train_dir / f"{stems['Tampered']}.run" / "predictions" / "epoch-002.npz").unlink()
    log = train_dir / f"{stems['Relogged']}.tsv"       # still a valid entry: hours within validate's 1%
    rows = log.read_text().splitlines()
    epoch, hours, accuracy = rows[-1].split("\t")
    log.write_text("\n".join(rows[:-1] + [f"{epoch}\t{float(hours) * 0.995:.6f}\t{accuracy}"]) + "\n")

    def statuses(*extra):
        assert main(["leaderboard", str(tree), "--format", "json", *extra, *archive_args(tree)]) == 0
        printed = json.loads(capsys.readouterr().out)
        tables = printed["tasks"]["CIFAR10"]
        failed = {u["entry"]: u["reason"] for u in printed["invalid"] if ".run: verification failed" in u["reason"]}
        # the runs, not reproduced, rank apart as submitted; the hand-typed entries as the archive's
        assert {r["entry"] for r in tables["train_submitted"]} == {stems["Honest"]} or extra
        return {r["entry"]: r["verification"] for table in ("train_submitted", ARCHIVE["train_time"])
                for r in tables[table]}, failed

    # an entry whose run fails verification is invalid, never ranked: the reason is listed
    got, failed = statuses()
    assert got[stems["Honest"]] == "verified"
    assert stems["Tampered"] not in got and stems["Relogged"] not in got
    assert failed[stems["Tampered"]].endswith(
        f"{stems['Tampered']}.run: verification failed: predictions: epoch 2: predictions/epoch-002.npz is missing "
        f"(a run keeps every evaluated epoch's predictions) (only an entry whose files verify is ranked)")
    assert "failed: the entry's log is not the run's (its TSV must be the run's, byte for byte)" in \
        failed[stems["Relogged"]]
    assert got["alice_resnet18_p3.2xlarge_pytorch"] == entry_status.NO_RUN

    no_labels, failed = statuses("--data", str(tmp_path / "nowhere"))
    assert no_labels[stems["Honest"]] == "not verified: no eval labels on this machine"
    assert "verification failed: predictions: epoch 2" in failed[stems["Tampered"]]    # found without labels too

    site_dir = tmp_path / "site"
    assert main(["leaderboard", str(tree), "--out", str(site_dir), *archive_args(tree)]) == 0
    index = (site_dir / "index.html").read_text()
    assert '<button type="button">Verification</button>' in index
    # a compact badge in the row, the full words on hover (its title) and on the entry's page
    badges = dict(re.findall(r'<tr data-entry="([^"]*)"[^>]*>.*?<td class="status verification" data-sort="[^"]*">'
                             r'<span class="badge \w+" title="([^"]*)">',
                             index.split('id="CIFAR10-train_submitted"')[1].split('id="CIFAR10-inference')[0]))
    assert badges[stems["Honest"]] == "verified" and badges["alice_resnet18_p3.2xlarge_pytorch"] == entry_status.NO_RUN
    assert 'title="verified">\u2713 verified</span>' in index
    assert f'title="{entry_status.NO_RUN}">\u2013 not verified</span>' in index
    assert f">{entry_status.NO_RUN}<" not in index          # never the sentence itself on every row
    assert f'<tr data-entry="{stems["Honest"]}" data-hardware="1 x NVIDIA H100 80GB HBM3" ' in index
    reasons = re.findall(r'<span class="reason">([^<]*)</span>', index)
    assert any("verification failed: predictions: epoch 2: predictions/epoch-002.npz is missing (a run keeps every "
               "evaluated epoch&#39;s predictions)" in r for r in reasons)
    page = (site_dir / ranking.page(entries.load(train_dir / f"{stems['Honest']}.json"))).read_text()
    assert "<th>Verification</th><td>verified</td>" in page
    # the runs inside the tree are not entries: validate passes over them
    assert main(["validate", str(train_dir / f"{stems['Honest']}.json")]) == 0


def test_each_training_entry_shows_its_reproduction(tmp_path, monkeypatch, capsys):
    """The reproduction.json of `dawnbench reproduce` in an entry's run folder is shown as its
    reproduction: reproduced, accuracy only, not reproduced with both figures, or not tried (no
    record, a record of another log, or a record that is not one)."""
    use_cifar10_labels(monkeypatch, tmp_path / "labels")
    tree = write_entries(tmp_path / "entries")
    train_dir = tree / "CIFAR10" / "train"
    runs = {}
    for k, author in enumerate(("Same", "Elsewhere", "Faked", "Stale", "Hostile", "Untried"), start=3):
        assert submit.main([str(make_run(tmp_path / author, epochs=k)), "--out", str(tree), "--author", author]) == 0
        runs[author] = train_dir / f"{author}_ResNet-56_1-x-NVIDIA-H100-80GB-HBM3_PyTorch-2.13.0.run"
    capsys.readouterr()
    write_reproduction(runs["Same"], tta_factor=1.1)
    write_reproduction(runs["Elsewhere"], tta_factor=9.0, hardware="Intel(R) Xeon(R) Processor (2 cores)")
    faked = write_reproduction(runs["Faked"], tta_factor=5.0)
    write_reproduction(runs["Stale"])
    (runs["Stale"] / entry_status.REPRODUCTION_RECORD).write_text(
        (runs["Stale"] / entry_status.REPRODUCTION_RECORD).read_text().replace('"log_sha256": "', '"log_sha256": "0'))
    (runs["Hostile"] / entry_status.REPRODUCTION_RECORD).write_text(json.dumps({"verdict": "<b>reproduced</b>"}))

    assert main(["leaderboard", str(tree), "--format", "json", *archive_args(tree)]) == 0
    tables = json.loads(capsys.readouterr().out)["tasks"]["CIFAR10"]
    got = {r["entry"]: r["reproduction"] for table in ("train_time", "train_submitted", ARCHIVE["train_time"])
           for r in tables[table]}
    stem = {author: run.name[:-len(".run")] for author, run in runs.items()}
    claimed = faked["claimed"]["figures"]["tta_seconds"]
    assert faked["differences"] == [f"time-to-accuracy: {claimed:.3f} s claimed, {5 * claimed:.3f} s reproduced "
                                    f"(the claim -80% of it, tolerance \u00b110%)"]
    # only the reproduced entry ranks in the verified tier, by the judge's time; the others by their claims, apart
    (same,) = tables["train_time"]
    assert same["entry"] == stem["Same"] and same["time_basis"] == "judge"
    assert same["hours"] == pytest.approx(1.1 * same["claimed_hours"], rel=1e-3) and same["judge_runs"] == 1
    assert {r["entry"] for r in tables["train_submitted"]} == {stem[a] for a in runs if a != "Same"}
    assert {author: got[stem[author]] for author in runs} == {
        "Same": "reproduced", "Elsewhere": "accuracy reproduced, time not compared (other hardware)",
        "Faked": f"not reproduced: {faked['differences'][0]}",
        "Stale": "not tried: reproduction.json is of another log than this entry's (reproduce it again)",
        "Hostile": "not tried: reproduction.json holds no verdict of `dawnbench reproduce`",
        "Untried": "not tried"}
    assert got["alice_resnet18_p3.2xlarge_pytorch"] == "not tried"        # a v1 entry: no run to reproduce

    site_dir = tmp_path / "site"
    assert main(["leaderboard", str(tree), "--out", str(site_dir), *archive_args(tree)]) == 0
    index = (site_dir / "index.html").read_text()
    assert '<button type="button">Verification</button></th><th data-type="text"><button type="button">Reproduction' in index
    cells = re.findall(r'<td class="status reproduction" data-sort="([^"]*)"><span class="badge (\w+)" title="([^"]*)">'
                       r'([^<]*)</span>', index)
    assert ("accuracy-only", "part", "accuracy reproduced, time not compared (other hardware)",
            "\u2248 accuracy only") in cells
    assert ("not-reproduced", "bad", str(escape(got[stem["Faked"]])), "\u2717 not reproduced") in cells
    assert ("reproduced", "ok", "reproduced", "\u2713 reproduced") in cells
    assert ("not-tried", "none", "not tried: reproduction.json holds no verdict of `dawnbench reproduce`",
            "\u2013 not tried") in cells
    assert "&lt;b&gt;" not in index and "<b>reproduced" not in index
    page = (site_dir / ranking.page(entries.load(train_dir / f"{stem['Faked']}.json"))).read_text()
    assert f"<th>Reproduction</th><td>{escape(got[stem['Faked']])}</td>" in page


def test_the_verified_tier_has_the_judges_interval_and_ties(tmp_path, monkeypatch, capsys):
    """Issue 48: the verified tier ranks the judge's measurement with the 95% interval of the judge's own
    reproduction runs (Student's t of their mean), and rows whose intervals overlap are tied there as in the
    claimed tiers; a reproduction of one run measures no spread and is never tied. (Before: the verified tier
    had no interval, so no ties: Ann ranked above Bo though the judge's runs cannot tell them apart.)"""
    from scipy import stats
    use_cifar10_labels(monkeypatch, tmp_path / "labels")
    tree = tmp_path / "entries"
    judge = {"Ann": (10, 0.0031, (1.0, 1.02, 0.98)), "Bo": (10, 0.0032, (1.0, 1.03, 0.97)),
             "Cy": (20, 0.0031, (1.0, 1.01, 0.99)), "Di": (5, 0.0031, (1.0,))}
    times, stems = {}, {}
    for author, (epochs, per_epoch, factors) in judge.items():
        run = make_run(tmp_path / author, epochs=epochs, hours_per_epoch=per_epoch)
        assert submit.main([str(run), "--out", str(tree), "--author", author]) == 0
        (entry,) = (tree / "CIFAR10" / "train").glob(f"{author}_*.json")
        stems[author] = entry.stem
        record = write_reproduction(entry.with_suffix(".run"), tta_factors=factors)
        assert record["verdict"] == "reproduced", record
        times[author] = [r["figures"]["tta_seconds"] for r in record["reproduced"]]
    capsys.readouterr()
    assert main(["leaderboard", str(tree), "--format", "json", *archive_args(tree)]) == 0
    tables = json.loads(capsys.readouterr().out)["tasks"]["CIFAR10"]
    rows = {r["entry"]: r for r in tables["train_time"]}
    assert [r["entry"] for r in tables["train_time"]] == [stems[a] for a in ("Di", "Ann", "Bo", "Cy")]
    for author, seconds in times.items():
        row = rows[stems[author]]
        assert row["time_basis"] == "judge" and row["hours"] == pytest.approx(sorted(seconds)[len(seconds) // 2] / 3600)
        if len(seconds) == 1:
            assert row["interval_hours"] is None and row["tied_with"] == [], author
            continue
        lo, hi = stats.t.interval(0.95, len(seconds) - 1, loc=sum(seconds) / len(seconds), scale=stats.sem(seconds))
        assert row["interval_hours"] == pytest.approx([lo / 3600, hi / 3600]), author
        assert row["interval_words"].startswith(f"the judge's measurement: the median of {len(seconds)} reproduction "
                                                f"runs on "), row["interval_words"]
    assert {a: rows[s]["tied_with"] for a, s in stems.items()} == {
        "Ann": [rows[stems["Bo"]]["rank"]], "Bo": [rows[stems["Ann"]]["rank"]], "Cy": [], "Di": []}
    # the cost table: the interval x the price, tied the same way
    (priced,) = [t for t in ("train_cost", "train_cost_given") if tables[t]]
    costs = {r["entry"]: r for r in tables[priced]}
    ann = costs[stems["Ann"]]
    assert ann["cost_interval_usd"] == pytest.approx([h * ann["costPerHour"] for h in rows[stems["Ann"]]["interval_hours"]])
    assert ann["tied_with"] == [costs[stems["Bo"]]["rank"]] and costs[stems["Cy"]]["tied_with"] == []

    site_dir = tmp_path / "site"
    assert main(["leaderboard", str(tree), "--out", str(site_dir), *archive_args(tree)]) == 0
    index = (site_dir / "index.html").read_text(encoding="utf-8")
    table = index.split('id="CIFAR10-train_time"')[1].split("</table>")[0]
    row = table.split(f'<tr data-entry="{stems["Ann"]}" class="tied"')[1].split("</tr>")[0]
    low, high = (entries.hms(h) for h in rows[stems["Ann"]]["interval_hours"])
    assert f'<small class="detail">95%: {low} \u2013 {high}</small>' in row
    assert f'title="{escape(rows[stems["Ann"]]["interval_words"])}"' in row
    assert f'<tr data-entry="{stems["Di"]}" class="tied"' not in table
    page = (site_dir / ranking.page(entries.load(tree / "CIFAR10" / "train" / f"{stems['Ann']}.json"))).read_text()
    assert "the judge&#39;s measurement: the median of 3 reproduction runs on " in page and f"({low} to {high})" in page


def test_tasks_with_entries_come_first_and_empty_ones_share_a_line_at_the_end(tmp_path):
    """A board of FashionMNIST entries (a user's own) opened on three "No entries yet" sections before
    its one table: now the tasks with ranked entries come first, then those with only unranked or
    invalid entries, and the tasks nobody entered are named on one line at the end."""
    train(tmp_path, "FashionMNIST", "ok_m_h_f", [(1, 0.5, 95.0)], costPerHour=1.0)
    train(tmp_path, "ImageNet", "bad_m_h_f", [(1, 0.5, 95.0)], costPerHour=True)      # invalid: listed, not ranked
    loaded, invalid = ranking.load_all(tmp_path)
    index = site.index_page(ranking.rank(loaded, invalid, archived=archived(tmp_path)), {}, len(loaded))
    assert re.findall(r'<section id="(\w+)"', index) == ["FashionMNIST", "ImageNet"]
    # FashionMNIST's tables only: the verified tier's four (empty), the archive's two its entry ranks in
    assert index.count("<table") == 6 and 'id="FashionMNIST-train_time"' in index
    assert 'id="FashionMNIST-train_time_archive"' in index
    imagenet = index.split('<section id="ImageNet" class="task">')[1].split("</section>")[0]
    assert "No ranked entries for ImageNet yet" in imagenet and '<li data-entry="bad_m_h_f">' in imagenet
    assert "<table" not in imagenet and "<form" not in imagenet
    last = index.split("</section>")[-1]
    (line,) = re.findall(r'<p class="muted no-entries">No entries yet for (.*)\.</p>', last)
    assert '<span id="CIFAR10">CIFAR10 (top1Accuracy at least 94%)</span>' in line
    assert '<span id="SQuAD">SQuAD (f1Score at least 0.75)</span>' in line
    assert re.findall(r'<span id="([^"]+)">', line) == [t.display_name for t in TASKS.values()
                                                        if t.display_name not in ("FashionMNIST", "ImageNet")]
    # every task's anchor still resolves
    assert re.findall(r'<nav>(.*)</nav>', index)[0].count("<a ") == len(TASKS)


def test_each_row_links_to_its_code_and_only_an_http_url_is_a_link(built):
    """The code was reachable only through each entry's page. A row's Code cell links to the entry's
    codeURL; an entrant's `javascript:` (or any other non-http) URL is no link, its text shown on hover."""
    index = (built / "index.html").read_text(encoding="utf-8")
    codes = dict(re.findall(r'<tr data-entry="([^"]*)"[^>]*>.*?<td class="code" data-sort="[^"]*">(.*?)</td>', index))
    assert codes["alice_resnet18_p3.2xlarge_pytorch"] == (
        '<a class="code-link" href="https://example.org/alice/code" title="https://example.org/alice/code" '
        'rel="nofollow noopener noreferrer">code</a>')
    evil = codes[str(escape(EVIL_STEM))]
    assert "<a" not in evil and "href" not in evil
    assert evil == '<span class="no-link" title="not an http(s) address, so not a link: javascript:alert(1)">not a link</span>'
    assert not re.search(r'href="\s*javascript', index, re.I)


def test_accuracy_is_shown_in_percent_and_f1_as_a_fraction(built, tmp_path):
    index = (built / "index.html").read_text(encoding="utf-8")
    latency = index.split('id="CIFAR10-inference_latency_archive"')[1].split("</table>")[0]
    assert re.findall(r'<td class="num" data-sort="([\d.]+)">([^<]*%)</td>', latency) == [
        ("94.2", "94.2%"), ("94.0", "94%"), ("94.5", "94.5%")]
    # the column and the page's row are named by the task's figure, never "Accuracy" for an F1
    named = {t.display_name: t.figure.label[:1].upper() + t.figure.label[1:] for t in entries.TASK_BY_DIR.values()}
    assert (named["CIFAR10"], named["SQuAD"]) == ("Top-1 accuracy", "F1")
    assert f'<th data-type="num" data-better="higher"><button type="button">{named["CIFAR10"]}</button></th>' in latency
    page = (built / "CIFAR10" / "inference" / "alice_resnet18_p3.2xlarge_pytorch.html").read_text(encoding="utf-8")
    assert f"<th>{named['CIFAR10']}</th><td>94.2%</td>" in page     # issue 47: not "top1Accuracy 94.2%"
    inference(tmp_path, "SQuAD", "f_m_h_f", latency=9.0, f1Score=0.81)
    (entry,) = ranking.load_all(tmp_path)[0]
    assert f"<th>{named['SQuAD']}</th><td>0.81</td>" in site.entry_page(entry, [], None, None)
    squad = index.split('id="SQuAD-inference_latency"')[1].split("</table>")[0]
    assert f'<button type="button">{named["SQuAD"]}</button>' in squad and ">Accuracy<" not in squad
    assert ranking.threshold_label(entries.TASK_BY_DIR["ImageNet"]) == "top5Accuracy at least 93%"


def test_a_fork_row_shows_its_own_reference_beside_its_model(tmp_path, monkeypatch, capsys):
    """A fork (`dawnbench fork`: its own author and model, its own reference folder) and its original on
    one board: each row names the reference its run came from, under the model."""
    use_cifar10_labels(monkeypatch, tmp_path / "labels")
    tree = tmp_path / "entries"
    for reference, model, epochs in (("cifar10-resnet56-pytorch", "ResNet-56", 3),
                                     ("cifar10-mynet-pytorch", "ResNet-56 (fork cifar10-mynet-pytorch)", 4)):
        run_dir = make_run(tmp_path / reference, reference=reference, epochs=epochs)
        edit_json(run_dir / "result.json", model=model)
        assert submit.main([str(run_dir), "--out", str(tree), "--author", "Ann"]) == 0
    capsys.readouterr()
    assert main(["leaderboard", str(tree), "--out", str(tmp_path / "site"), *archive_args(tree)]) == 0
    capsys.readouterr()
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    table = index.split('id="CIFAR10-train_submitted"')[1].split("</table>")[0]
    models = re.findall(r'<a class="entry-link"[^>]*>([^<]*)</a><small class="reference">([^<]*)</small>', table)
    assert models == [("ResNet-56", "cifar10-resnet56-pytorch"),
                      ("ResNet-56 (fork cifar10-mynet-pytorch)", "cifar10-mynet-pytorch")]
    assert main(["leaderboard", str(tree), "--format", "json", *archive_args(tree)]) == 0
    rows = json.loads(capsys.readouterr().out)["tasks"]["CIFAR10"]["train_submitted"]
    assert [r["reference"] for r in rows] == ["cifar10-resnet56-pytorch", "cifar10-mynet-pytorch"]


def test_an_entry_page_says_where_its_price_came_from(tmp_path):
    added = {"by": "submit", "date": "2026-11-26", "option": "--cost-per-hour 1.25", "usd_per_hour": 1.25,
             "source": submit.SUBMITTER_SOURCE, "nodes": 1}
    train(tmp_path, "CIFAR10", "byhand_m_h_f", [(1, 0.5, 95.0)], costPerHour=1.25, price_added=added)
    record = {"instance": "aws:p3.2xlarge", "usd_per_hour": 3.06, "source": "https://aws.amazon.com/ec2/pricing/",
              "date": "2017-10-25"}
    train(tmp_path, "CIFAR10", "table_m_h_f", [(1, 0.5, 95.0)], costPerHour=3.06, price=record, instance="aws:p3.2xlarge",
          price_added={**added, "option": "--instance aws:p3.2xlarge", "usd_per_hour": 3.06})
    train(tmp_path, "CIFAR10", "none_m_h_f", [(1, 0.5, 95.0)])
    shown = {}
    for entry in ranking.load_all(tmp_path)[0]:
        page = site.entry_page(entry, [], None, None)
        shown[entry.name] = page.split("<tr><th>Price source</th><td>")[1].split("</td>")[0] if "Price source" in page else None
    assert shown == {
        "byhand_m_h_f": "submit --cost-per-hour, given by the submitter on 2026-11-26, after the run",
        "table_m_h_f": "aws:p3.2xlarge: https://aws.amazon.com/ec2/pricing/, published 2017-10-25; added by "
                       "`dawnbench submit --instance aws:p3.2xlarge` on 2026-11-26, after the run",
        "none_m_h_f": None}


def test_the_train_time_is_shown_beside_time_to_accuracy_never_ranked(tmp_path):
    # issue 37: the train time (the train spans only) is a column of the training-time table and a row of the
    # entry's page; the table still ranks by time-to-accuracy (the faster train time ranks second here)
    train(tmp_path, "CIFAR10", "fast_m_h_f", [(1, 0.5, 95.0)], costPerHour=1.0, tta_seconds=1800.0,
          train_seconds=1500.0)
    train(tmp_path, "CIFAR10", "slow_m_h_f", [(1, 0.6, 95.0)], costPerHour=1.0, tta_seconds=2160.0,
          train_seconds=42.125)
    train(tmp_path, "CIFAR10", "old_m_h_f", [(1, 0.7, 95.0)], costPerHour=1.0)
    loaded, invalid = ranking.load_all(tmp_path)
    assert not invalid, invalid
    rows = ranking.rank(loaded, archived=archived(tmp_path))["tasks"]["CIFAR10"][ARCHIVE["train_time"]]
    assert [(r["entry"], r["train_seconds"]) for r in rows] == [
        ("fast_m_h_f", 1500.0), ("slow_m_h_f", 42.125), ("old_m_h_f", None)]
    assert "Train time" in [heading for heading, _, _ in site.COLUMNS[ARCHIVE["train_time"]]]
    assert "Train time" not in [heading for heading, _, _ in site.COLUMNS["train_cost"]]
    pages = {entry.name: site.entry_page(entry, [], None, None) for entry in loaded}
    assert "<tr><th>Train time</th><td>0:25:00: the train spans only" in pages["fast_m_h_f"]
    assert "<tr><th>Train time</th><td>42.12 s: the train spans only" in pages["slow_m_h_f"]
    assert "<tr><th>Train time</th><td>not recorded" in pages["old_m_h_f"]


# ---------------------------------------------------------------- issue 47's board, issue 48's evidence

def test_the_hardware_class_of_harness_labels_and_v1_text():
    """Issue 48: like with like. The accelerator model and count, or the CPU model and cores, from the
    harness's label or a DAWNBench v1 entry's free text; an instance the prices table knows gives its
    accelerators; what cannot be read is "unclassified", never a guess."""
    from dawnbench.hardware_class import UNCLASSIFIED, of_text
    assert {text: of_text(text) for text in (
        "1 x NVIDIA H100 80GB HBM3", "16 x NVIDIA A100-SXM4-40GB (2 nodes)", "Intel(R) Xeon(R) Processor (2 cores)",
        "AMD EPYC 7B13 (8 cores, 2 processes, 2 nodes)", "Tesla V100 * 8 GPU / 32 GB / 40 CPU", "8 * V100 (AWS p3.16xlarge)",
        "16 * 8 * Tesla-V100(ModelArts Service)", "8 nodes with InfiniBand (8*P100 for each node)", "16 p3.16xlarge (AWS)",
        "Lambda GPU Cloud - 4x GTX 1080 Ti", "1 NVidia 2080 RTX (dev box)", "Baidu Cloud Tesla V100*1/60 GB/12 CPU",
        "p3.2xlarge", "1/4 of a TPUv2 Pod", "Paperspace Volta (V100)", "Alibaba Cloud Npu",
        "64 nodes with Xeon Platinum 8124M / 144 GB / 36 Cores (Amazon EC2 [c5.18xlarge])")} == {
        "1 x NVIDIA H100 80GB HBM3": "1 x H100", "16 x NVIDIA A100-SXM4-40GB (2 nodes)": "16 x A100",
        "Intel(R) Xeon(R) Processor (2 cores)": "CPU: Intel Xeon, 2 cores",
        "AMD EPYC 7B13 (8 cores, 2 processes, 2 nodes)": "CPU: AMD EPYC 7B13, 8 cores x 2 nodes",
        "Tesla V100 * 8 GPU / 32 GB / 40 CPU": "8 x V100", "8 * V100 (AWS p3.16xlarge)": "8 x V100",
        "16 * 8 * Tesla-V100(ModelArts Service)": "128 x V100",
        "8 nodes with InfiniBand (8*P100 for each node)": "64 x P100", "16 p3.16xlarge (AWS)": "128 x V100",
        "Lambda GPU Cloud - 4x GTX 1080 Ti": "4 x GTX 1080 Ti", "1 NVidia 2080 RTX (dev box)": "1 x RTX 2080",
        "Baidu Cloud Tesla V100*1/60 GB/12 CPU": "1 x V100", "p3.2xlarge": "1 x V100",
        "1/4 of a TPUv2 Pod": "TPU v2 Pod (1/4)", "Paperspace Volta (V100)": "V100 (count not given)",
        "Alibaba Cloud Npu": UNCLASSIFIED,
        "64 nodes with Xeon Platinum 8124M / 144 GB / 36 Cores (Amazon EC2 [c5.18xlarge])":
            "CPU: Xeon Platinum 8124M, 36 cores x 64 nodes"}


@pytest.fixture(scope="module")
def evidence_board(tmp_path_factory):
    """A board of four series submitted as a user submits them (`dawnbench submit SERIES`), so that every
    figure of theirs is the one submit and validate compute from their runs (CIFAR-10 ranks by the single
    rule, the mean rule's verdict beside it): Ann and Bo five runs each of one fixed schedule, both past 94%
    by the mean rule, their times close (bf16, fp32; one of Bo's runs ends DNC at 93.99%); Cy three runs on
    a CPU, slower (too few for the mean rule); Di five runs at 94% by chance, slower still (no precision
    recorded)."""
    from _pytest.monkeypatch import MonkeyPatch
    from leaderboard_fixture import series_runs, submit_series
    root = tmp_path_factory.mktemp("evidence")
    with MonkeyPatch.context() as monkeypatch:
        use_cifar10_labels(monkeypatch, root / "labels")
        tree = root / "entries"
        stems = {"Ann": submit_series(tree, root, "Ann", series_runs(3, [0.0030, 0.0031, 0.0032, 0.0031, 0.0030],
                                                                     [0.9450, 0.9460, 0.9440, 0.9455, 0.9445]),
                                      precision="bf16"),
                 "Bo": submit_series(tree, root, "Bo", series_runs(4, [0.0023, 0.0024, 0.0022, 0.0023, 0.0025],
                                                                   [0.9600, 0.9600, 0.9600, 0.9600, 0.9399]),
                                     precision="fp32"),
                 "Cy": submit_series(tree, root, "Cy", series_runs(2, [0.0130, 0.0131, 0.0132], [0.9412] * 3),
                                     hardware="Intel(R) Xeon(R) Platinum 8480+ (2 cores)", precision="fp32"),
                 "Di": submit_series(tree, root, "Di", series_runs(2, [0.0300, 0.0303, 0.0297, 0.0300, 0.0306],
                                                                   [0.9420, 0.9410, 0.9395, 0.9405, 0.9390]))}
        assert main(["leaderboard", str(tree), "--out", str(root / "site"), *archive_args(tree)]) == 0
        loaded, invalid = ranking.load_all(tree)
        statuses = entry_status.verification_statuses(loaded, None, tree)
        rankings = ranking.rank(loaded, invalid, statuses, archived=archived(tree))
    loaded = {e.name: e for e in loaded}
    return {"tree": tree, "site": root / "site", "stems": stems, "rankings": rankings, "loaded": loaded,
            "acceptance": {a: loaded[s].fields["runs"]["acceptance"] for a, s in stems.items()},
            "runs": {a: [json.loads(p.read_text()) for p in sorted((tree / "CIFAR10" / "train" / f"{s}.series").glob(
                "seed*/result.json"))] for a, s in stems.items()}}


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def test_series_figures_have_their_intervals_and_overlapping_ones_are_tied(evidence_board):
    """Issue 48: every series figure with its 95% interval; entries whose intervals overlap are tied."""
    from scipy import stats
    stems, cifar = evidence_board["stems"], evidence_board["rankings"]["tasks"]["CIFAR10"]
    accepted = evidence_board["acceptance"]
    rows = {r["entry"]: r for r in cifar["train_submitted"]}
    assert {a: accepted[a]["rule"] for a in stems} == dict.fromkeys(stems, "single")      # CIFAR-10's rule
    # the interval is the Student-t interval of the series' converged runs' times, as its runs give them
    for author, runs in evidence_board["runs"].items():
        times = [r["tta_seconds"] for r in runs if r["status"] == "converged"]
        lo, hi = stats.t.interval(0.95, len(times) - 1, loc=sum(times) / len(times), scale=stats.sem(times))
        assert rows[stems[author]]["interval_hours"] == pytest.approx([lo / 3600, hi / 3600]), author
    # Ann's and Bo's overlap; Cy's and Di's are clear of every other
    spans = {a: accepted[a]["tta_ci95_seconds"] for a in stems}
    assert [(a, b) for a in spans for b in spans if a < b and _overlap(spans[a], spans[b])] == [("Ann", "Bo")]
    assert {a: rows[s]["tied_with"] for a, s in stems.items()} == {
        "Ann": [rows[stems["Bo"]]["rank"]], "Bo": [rows[stems["Ann"]]["rank"]], "Cy": [], "Di": []}
    index = (evidence_board["site"] / "index.html").read_text(encoding="utf-8")
    table = index.split('id="CIFAR10-train_submitted"')[1].split("</table>")[0]
    ann = table.split(f'<tr data-entry="{stems["Ann"]}" class="tied"')[1].split("</tr>")[0]
    low, high = (entries.hms(h) for h in rows[stems["Ann"]]["interval_hours"])
    assert f'<small class="detail">95%: {low} \u2013 {high}</small>' in ann
    assert f'<small class="detail">tied with {rows[stems["Bo"]]["rank"]}</small>' in ann
    assert f'<tr data-entry="{stems["Cy"]}" class="tied"' not in table and f'<tr data-entry="{stems["Cy"]}" ' in table


def test_the_mean_rule_ranks_in_a_table_of_its_own_that_says_so(evidence_board):
    """Issue 48: a task ranked by the single rule has a second table that says it ranks by the mean rule:
    the series the mean rule accepts, by their mean time over every run (a DNC's too), the interval beside
    it; a series it refuses (past the threshold by chance, or too few runs) is not in it."""
    stems, cifar = evidence_board["stems"], evidence_board["rankings"]["tasks"]["CIFAR10"]
    accepted, runs = evidence_board["acceptance"], evidence_board["runs"]
    by_mean = {a: accepted[a]["by_rule"]["mean"] for a in stems}
    assert {a: by_mean[a]["verdict"] for a in stems} == {"Ann": "accepted", "Bo": "accepted", "Cy": "refused",
                                                         "Di": "refused"}
    assert "3 runs; the mean rule needs at least 5" in by_mean["Cy"]["reason"]
    assert "is not past 94% at p < 0.01" in by_mean["Di"]["reason"] and accepted["Di"]["verdict"] == "accepted"
    mean = cifar["train_mean"]
    assert [r["entry"] for r in mean] == [stems["Ann"], stems["Bo"]]
    assert [r["tied_with"] for r in mean] == [[2], [1]] and mean[0]["p_value"] == accepted["Ann"]["p_value"] < 0.01
    # Bo's mean time is of all five runs, its DNC's time too; the single rule's, of the four converged
    every = [r["history"][-1]["tta_seconds"] for r in runs["Bo"]]
    assert mean[1]["hours"] == pytest.approx(sum(every) / 5 / 3600) and runs["Bo"][4]["status"] == "DNC"
    assert mean[1]["interval_hours"] == pytest.approx([t / 3600 for t in by_mean["Bo"]["tta_ci95_seconds"]])
    assert accepted["Bo"]["tta_mean_seconds"] == pytest.approx(sum(every[:4]) / 4) != pytest.approx(sum(every) / 5)
    assert ranking.TABLE_TIERS["train_mean"] == ranking.SERIES_TIER
    index = (evidence_board["site"] / "index.html").read_text(encoding="utf-8")
    assert "<h3>Training time, mean rule (the series&#39; mean time, its 95% interval)</h3>" in index
    assert '<h3 class="tier-heading">Series, mean rule</h3>' in index
    page = (evidence_board["site"] / ranking.page(evidence_board["loaded"][stems["Di"]])).read_text(encoding="utf-8")
    series = page.split("<th>Series</th><td>")[1].split("</td>")[0]
    assert series.startswith(f"single rule, 5 runs: accepted ({escape(accepted['Di']['reason'])}); "
                             f"mean rule: refused ({escape(by_mean['Di']['reason'])}); "), series
    assert f"p = {accepted['Di']['p_value']:.3g}" in series


def test_hardware_class_and_training_precision_on_rows_and_pages(evidence_board, rankings):
    """Issue 48: the hardware class of every entry as a filter (the classes the task's rows have), and the
    training precision each run used in the table and on its page; an entry without one: "not recorded"."""
    stems = evidence_board["stems"]
    rows = {r["entry"]: r for r in evidence_board["rankings"]["tasks"]["CIFAR10"]["train_submitted"]}
    assert {a: (rows[s]["hardware_class"], rows[s]["precision"]) for a, s in stems.items()} == {
        "Ann": ("1 x H100", "bf16"), "Bo": ("1 x H100", "fp32"), "Cy": ("CPU: Intel Xeon Platinum 8480+, 2 cores", "fp32"),
        "Di": ("1 x H100", "not recorded")}
    archive_rows = {r["entry"]: r for r in rankings["tasks"]["CIFAR10"][ARCHIVE["train_time"]]}
    assert archive_rows["alice_resnet18_p3.2xlarge_pytorch"]["precision"] == "not recorded"     # a v1 entry
    rankings = evidence_board["rankings"]
    index = (evidence_board["site"] / "index.html").read_text(encoding="utf-8")
    cifar = index.split('<section id="CIFAR10"')[1].split("</section>")[0]
    select = cifar.split('<select data-filter="hardwareclass">')[1].split("</select>")[0]
    assert re.findall(r'<option value="([^"]*)">', select) == ["", *sorted(       # "any", then the classes there are
        {r["hardware_class"] for rows in rankings["tasks"]["CIFAR10"].values() for r in rows})]
    assert f'<tr data-entry="{stems["Cy"]}" data-hardware="Intel(R) Xeon(R) Platinum 8480+ (2 cores)" ' \
           f'data-hardwareclass="CPU: Intel Xeon Platinum 8480+, 2 cores"' in cifar
    assert '<button type="button">Precision</button>' in cifar and '<td class="text precision">bf16</td>' in cifar
    assert '<td class="text precision muted">not recorded</td>' in cifar
    page = (evidence_board["site"] / ranking.page(evidence_board["loaded"][stems["Ann"]])).read_text(encoding="utf-8")
    assert "<th>Training precision</th><td>bf16: the reference chose bf16 on this device (the harness&#39;s record " \
           "of the run)</td>" in page
    assert "<th>Hardware class</th><td>1 x H100</td>" in page


def test_entry_pages_have_readable_headings_and_say_whether_official(evidence_board, built):
    """Issue 47: a page's heading was the mangled file name (Ann_ResNet-56_1-x-NVIDIA-H100-80GB-HBM3_PyTorch-2.13.0);
    now the model's name and the team, the file name under it; and the page says official or not, and why."""
    stems = evidence_board["stems"]
    page = (evidence_board["site"] / ranking.page(evidence_board["loaded"][stems["Ann"]])).read_text(encoding="utf-8")
    assert "<h1>ResNet-56 by Ann</h1>" in page and f"file {stems['Ann']}.json</p>" in page
    assert "<th>Official</th><td>official: run under the rules, at the task&#39;s threshold" in page
    v1 = (built / "CIFAR10" / "train" / "dave_dip_v100_pytorch.html").read_text(encoding="utf-8")
    assert "<h1>dip by dave</h1>" in v1 and "<th>Official</th><td>not recorded: no run behind it" in v1
    entry = evidence_board["loaded"][stems["Bo"]]
    unofficial = entries.Entry(entry.path, entry.kind, entry.task, {**entry.fields, "official": False,
                                                                    "unofficial_reasons": ["the code differs"]}, entry.rows)
    assert site.official_line(unofficial) == "unofficial: the code differs"
    # a long model is a name and a description: the row and the heading show the name, the page the whole
    long = "airbench94_muon network (whitened 2x2 stem, 3 blocks of conv-pool-BN-GELU-conv-BN-GELU, 64-256-256)"
    assert site.model_name(long) == "airbench94_muon network" and site.model_name("ResNet 164 (with bottleneck)") == \
        "ResNet 164 (with bottleneck)"


def test_empty_tables_say_why(built, evidence_board):
    """Issue 47: the verified tier's four tables, shown even empty, said "no ranked entries" without why."""
    index = (built / "index.html").read_text(encoding="utf-8")
    tables = {chunk.split('"')[0]: chunk.split("</table>")[0] for chunk in index.split('<table id="')[1:]}
    empties = {name: re.findall(r'<tr class="empty"><td colspan="\d+" class="muted">([^<]*)</td>', body)[0]
               for name, body in tables.items() if name.startswith("CIFAR10") and 'class="empty"' in body}
    assert set(empties) == {"CIFAR10-train_time", "CIFAR10-train_cost", "CIFAR10-inference_latency",
                            "CIFAR10-inference_cost"}
    assert empties["CIFAR10-train_time"] == ("no ranked entries: no entry the judge reproduced (dawnbench reproduce); "
                                             "ranked apart below: 7 in training time (DAWNBench v1 archive)")
    assert empties["CIFAR10-inference_cost"].startswith("no ranked entries: no inference entry with a dawnbench infer")
    assert "no ranked entries<" not in index
    # a verified tier with rows and no price from the table: "no priced entries", and how many rank below
    tables = {name: [] for name in ranking.TABLES}
    tables["train_time"], tables["train_cost_given"] = [{"entry": "a"}, {"entry": "b"}], [{"entry": "a"}]
    assert site.empty_reason("train_cost", tables) == (
        "no priced entries: none of the 2 entries above has a price from the prices table (the instance of a verified "
        "run: dawnbench run --instance); 1 with a price the submitter gave rank below")


def test_inference_rows_and_pages_name_their_runtime(tmp_path):
    """Issue 47: an ONNX Runtime latency was listed under "PyTorch": what ran the timed calls is the
    inference record's runtime (its version), the model's framework under it; a v1 entry's framework."""
    def entry(stem, record=None, **fields):
        path = inference(tmp_path, "CIFAR10", stem, latency=2.5, top1Accuracy=94.5, **fields)
        if record is not None:
            path.with_suffix(".run").mkdir()
            (path.with_suffix(".run") / "inference.json").write_text(json.dumps(record))
        return entries.load(path)
    ort = entry("ort_m_h_f", {"runtime": "onnxruntime", "runtime_version": "1.19.2"}, framework="PyTorch 2.13.0")
    own = entry("own_m_h_f", {"runtime": "reference", "runtime_version": "PyTorch 2.13.0"}, framework="PyTorch 2.13.0")
    said = entry("said_m_h_f", framework="PyTorch 2.13.0", misc={"runtime": "openvino"})
    v1 = entry("v1_m_h_f", framework="TensorRT 5.1.5")
    assert [entries.runtime(e) for e in (ort, own, said, v1)] == [
        "onnxruntime 1.19.2", "the reference's infer() (PyTorch 2.13.0)", "openvino", "TensorRT 5.1.5"]
    assert "<tr><th>Runtime</th><td>onnxruntime 1.19.2</td></tr>" in site.entry_page(ort, [], None, None)
    row = {"rank": 1, **ranking._common(ort), "latency_ms": 2.5, "accuracy": 94.5, "runtime": entries.runtime(ort),
           "verification": "verified", "model_provenance": "verified run"}
    cells = site._row(row, "inference_latency", ort.task)
    headings = [h["text"] for h in site._headings("inference_latency", ort.task)]
    runtime = cells["cells"][headings.index("Runtime")]
    assert (runtime["text"], runtime["detail"]) == ("onnxruntime 1.19.2", "PyTorch 2.13.0")
    assert "Framework" not in headings and "onnxruntime" in cells["filters"]["framework"]
