"""`dawnbench data fetch fineweb10B`: the speedrun's token shards, served from 127.0.0.1 (conftest's
http_server) or a file:// folder, in the exact format (tests/fineweb_fixture.py), their sha256s
registered through $DAWNBENCH_DATASETS_MANIFEST as the real ones will be in datasets.toml."""
from __future__ import annotations

import json

import pytest

import dawnbench.fetch as fetcher
from dawnbench import cli
from harness import datasets as hds
from harness.datasets import DatasetError
from tests.fineweb_fixture import NAME, VAL, fixture_manifest, fixture_shards, sha256, shard_bytes, train_name


@pytest.fixture
def shards() -> dict[str, bytes]:
    return fixture_shards(train=3)


@pytest.fixture
def data_root(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    return root


def use(monkeypatch, tmp_path, shards, pinned=True):
    monkeypatch.setenv(hds.MANIFEST_ENV, str(fixture_manifest(tmp_path / "fineweb.toml", shards, train=3,
                                                              pinned=pinned)))


def record(directory) -> dict:
    return json.loads((directory / "dawnbench-prepared.json").read_text())


def test_the_builtin_entry_names_the_speedrun_files_and_pins_nothing_unknown():
    """The published names (modded-nanogpt's data/cached_fineweb10B.py: the val shard, train 1..103); no pin
    is invented: every sha256 pinned is 64 hex digits, and today none is (the README says so)."""
    entry = hds.manifest(NAME)
    assert entry["url_base"] == "https://huggingface.co/datasets/kjj0/fineweb10B-gpt2/resolve/main/"
    from dawnbench.fetch_token_shards import shard_names
    names = shard_names(entry, None)
    assert names[0] == VAL and names[1] == "fineweb_train_000001.bin" and names[-1] == "fineweb_train_000103.bin"
    assert len(names) == 104 and entry["eval_labels"] == VAL
    assert entry["files"] == {} and entry["pins"] == {}


def test_pinned_shards_are_fetched_checked_and_recorded(http_server, shards, data_root, tmp_path, monkeypatch, capsys):
    use(monkeypatch, tmp_path, shards)
    url, requests = http_server(shards)
    directory = fetcher.fetch(NAME, data_root, url_base=url, shards=2, progress=False)
    assert requests == [VAL, train_name(1), train_name(2)]             # --shards 2: the first two train shards
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [VAL, train_name(1), train_name(2), "dawnbench-prepared.json", hds.PREPARED_MANIFEST])   # no temp file
    for name in requests:
        assert (directory / name).read_bytes() == shards[name]
    written = record(directory)
    assert written["official"] is True and written["unofficial_reasons"] == []
    assert written["shards"][VAL] == {"sha256": sha256(shards[VAL]), "size": len(shards[VAL]), "tokens": 1000,
                                      "url": url + VAL, "pinned": True}
    checked, reasons = hds.check_prepared(NAME, data_root)         # what every run checks
    assert checked["count"] == 4 and reasons == []

    # again: nothing downloaded; then all three: only the third
    fetcher.fetch(NAME, data_root, url_base=url, shards=2, progress=False)
    assert "nothing to do" in capsys.readouterr().err and len(requests) == 3
    fetcher.fetch(NAME, data_root, url_base=url, progress=False)
    assert requests[3:] == [train_name(3)]
    hds.check_prepared(NAME, data_root)


def test_a_shard_that_is_not_the_pinned_one_is_refused_and_nothing_is_written(http_server, shards, data_root,
                                                                            tmp_path, monkeypatch):
    use(monkeypatch, tmp_path, shards)
    served = dict(shards, **{train_name(1): shard_bytes(range(1000))})     # a well-formed shard, not the published one
    url, _ = http_server(served)
    with pytest.raises(DatasetError) as err:
        fetcher.fetch(NAME, data_root, url_base=url, shards=1, progress=False)
    message = str(err.value)
    assert f"checksum mismatch for {train_name(1)}" in message and "nothing was written" in message
    assert "\n" not in message and "data fetch fineweb10B" in message
    assert not (data_root / NAME / train_name(1)).exists() and not list((data_root / NAME).glob(".fetch-*"))


@pytest.mark.parametrize("served, problem", [
    (lambda b: b[:-100], "is truncated"),                        # a shard cut short, its Content-Length agreeing
    (lambda b: shard_bytes(range(1000), magic=1234), "has magic 1234, not 20240520"),
])
def test_a_truncated_or_foreign_shard_is_refused_in_one_line(http_server, shards, data_root, tmp_path, monkeypatch,
                                                             served, problem):
    use(monkeypatch, tmp_path, shards, pinned=False)       # unpinned: only the header stands between it and the disk
    url, _ = http_server({**shards, VAL: served(shards[VAL])})
    with pytest.raises(DatasetError) as err:
        fetcher.fetch(NAME, data_root, url_base=url, shards=1, progress=False, allow_unverified=True)
    message = str(err.value)
    assert problem in message and VAL in message and "nothing was written" in message and "\n" not in message
    assert not (data_root / NAME / VAL).exists()


def test_a_connection_closed_early_is_one_line(http_server, shards, data_root, tmp_path, monkeypatch):
    use(monkeypatch, tmp_path, shards)
    url, _ = http_server(shards, **{VAL: "truncate"})
    with pytest.raises(DatasetError, match="interrupted or unreadable"):
        fetcher.fetch(NAME, data_root, url_base=url, shards=1, progress=False)
    assert not (data_root / NAME / VAL).exists()


def test_unpinned_shards_are_refused_before_any_download_unless_allowed(http_server, shards, data_root, tmp_path,
                                                                       monkeypatch, capsys):
    """No pin, no official data: the fetch says which file lacks one and how to go on; --allow-unverified
    records what it downloaded, says so per file, and every run on the data is then unofficial."""
    use(monkeypatch, tmp_path, shards, pinned=False)
    url, requests = http_server(shards)
    with pytest.raises(DatasetError) as err:
        fetcher.fetch(NAME, data_root, url_base=url, shards=1, progress=False)
    assert f"no sha256 is pinned for {VAL} and 1 more" in str(err.value) and "--allow-unverified" in str(err.value)
    assert requests == [] and not (data_root / NAME).exists()

    directory = fetcher.fetch(NAME, data_root, url_base=url, shards=1, progress=False, allow_unverified=True)
    assert f"pinned on first fetch: {VAL} sha256 {sha256(shards[VAL])}" in capsys.readouterr().err
    written = record(directory)
    assert written["official"] is False and written["shards"][VAL]["pinned"] is False
    _, reasons = hds.check_prepared(NAME, data_root)
    assert reasons and "no sha256 pinned" in reasons[0]

    # pinned later: the shards on disk that match are kept, and the data becomes official
    use(monkeypatch, tmp_path, shards, pinned=True)
    fetcher.fetch(NAME, data_root, url_base=url, shards=1, progress=False)
    assert len(requests) == 2 and record(directory)["official"] is True
    assert hds.check_prepared(NAME, data_root)[1] == []


def test_a_file_url_mirror_and_the_command_line(shards, data_root, tmp_path, monkeypatch, capsys):
    """$DAWNBENCH_FINEWEB10B_URL as file:///folder/ (air-gapped sites), through `dawnbench data fetch`."""
    use(monkeypatch, tmp_path, shards)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, data in shards.items():
        (mirror / name).write_bytes(data)
    monkeypatch.setenv("DAWNBENCH_FINEWEB10B_URL", mirror.as_uri() + "/")
    assert cli.main(["data", "fetch", NAME, "--shards", "3", "--data", str(data_root)]) == 0
    assert all((data_root / NAME / n).read_bytes() == b for n, b in shards.items())
    assert cli.main(["data", "verify", NAME, "--data", str(data_root)]) == 0
    assert "5 files" in capsys.readouterr().out
    for args, problem in ((["--shards", "4"], "--shards 4: fineweb10B has train shards 1 to 3"),
                          (["--shards", "x"], "--shards x: give a whole number 1 or more")):
        assert cli.main(["data", "fetch", NAME, *args, "--data", str(data_root)]) == 2
        assert problem in capsys.readouterr().err
    assert cli.main(["data", "fetch", "kjv", "--shards", "2", "--data", str(data_root)]) == 2
    assert "--shards goes with data fetch of token shards" in capsys.readouterr().err
    assert cli.main(["data", "fetch", "squad", "--allow-unverified", "--data", str(data_root)]) == 2
    assert "--allow-unverified only go with data prepare" in capsys.readouterr().err
