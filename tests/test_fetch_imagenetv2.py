"""`dawnbench data fetch imagenetv2`: a fixture tar in the published layout, served through the mirror
variable, is checked (size, sha256) before it is unpacked, laid out as ImageNet's val (a flat folder, the
harness-only WNID labels) with the index -> WNID map of the paired ImageNet's synsets.txt, and packed as
TFRecord (and RecordIO where MXNet's environment is); a tampered tar, a tar with an unsafe member and a
missing or different synsets.txt are each one line, and leave nothing written."""
from __future__ import annotations

import collections
import hashlib
import json
import sys
import tarfile
import types
from pathlib import Path

import pytest
from imagenet_fixture import jpeg
from imagenetv2_fixture import TAR, TOP, _info, imagenet_lines, manifest_lines, tar_gz

from dawnbench import fetch_imagenetv2
from dawnbench.cli import main
from harness import datasets, eval_labels

REPO = Path(__file__).resolve().parents[1]
MXNET_PYTHON = REPO / ".venv" / "imagenet-resnet152-mxnet" / "bin" / "python"
# Written by hand (the first twelve ILSVRC2012 WNIDs, sorted): folder c of the tar is line c here.
SYNSETS = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475", "n01496331", "n01498041",
           "n01514668", "n01514859", "n01518878", "n01530575", "n01531178"]
# The folders' WNIDs, read off the list above by hand; "10" and "11" sort before "2" as strings, so a
# loader that numbers sorted folder names would label them n01484850 and n01491361.
EXPECTED = {0: "n01440764", 2: "n01484850", 10: "n01530575", 11: "n01531178"}
FOLDERS = {c: [jpeg(100 * c + n, size=(8, 6)) for n in range(3)] for c in EXPECTED}


def setup_data(tmp_path: Path, monkeypatch, tar: bytes, *, synsets: list[str] = SYNSETS, pinned=None) -> Path:
    """A data root whose imagenet/ holds `synsets` as synsets.txt, and a manifest pinning `tar`."""
    root = tmp_path / "data"
    (root / "imagenet").mkdir(parents=True)
    (root / "imagenet" / "synsets.txt").write_text("".join(f"{w}\n" for w in synsets))
    manifest = tmp_path / "datasets.toml"
    manifest.write_text("\n".join(imagenet_lines(SYNSETS) + manifest_lines(pinned or tar, FOLDERS, SYNSETS)) + "\n")
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(manifest))
    return root


def fetch(root: Path, capsys, *options) -> tuple[int, str]:
    code = main(["data", "fetch", "imagenetv2", "--data", str(root), *options])
    return code, capsys.readouterr().err


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if "error" in line]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def test_fetch_lays_out_the_published_tar_with_the_paired_synsets(http_server, tmp_path, monkeypatch, capsys):
    tar = tar_gz(FOLDERS)
    root = setup_data(tmp_path, monkeypatch, tar)
    url, requests = http_server({f"mirror/{TAR}": tar})
    monkeypatch.setenv("DAWNBENCH_IMAGENETV2_URL", url + "mirror/")
    code, err = fetch(root, capsys)
    assert code == 0, err
    assert requests == [f"mirror/{TAR}"]
    target = root / "imagenetv2"
    names = sorted(p.name for p in (target / "val").iterdir())
    assert names == [f"ImageNetV2_{i:05d}.JPEG" for i in range(1, 13)]
    labels = (target / "val_labels.txt").read_text().split()
    source = {data: c for c, images in FOLDERS.items() for data in images}
    for name, wnid in zip(names, labels):            # every image its own bytes, labelled by its folder
        assert wnid == EXPECTED[source[(target / "val" / name).read_bytes()]]
    grouped = [EXPECTED[c] for c in sorted(FOLDERS) for _ in FOLDERS[c]]
    assert labels != grouped                         # the flat order is not the class order
    assert eval_labels.load_eval_labels("imagenetv2", root).tolist() == [SYNSETS.index(w) for w in labels]
    assert (target / "synsets.txt").read_bytes() == (root / "imagenet" / "synsets.txt").read_bytes()
    record = json.loads((target / "dawnbench-prepared.json").read_text())
    assert record["archive"]["sha256"] == hashlib.sha256(tar).hexdigest() and record["archive"]["size"] == len(tar)
    assert record["counts"] == {"classes": 4, "images": 12} and record["skipped"] == []
    assert sorted(record["sources"].values()) == sorted(f"{TOP}/{c}/{n}.jpeg" for c in FOLDERS for n in range(3))
    assert datasets.verify_prepared(target, full=True)["count"] == 12 + 3
    assert main(["data", "verify", "imagenetv2", "--data", str(root)]) == 0
    assert "ok val_labels.txt" in capsys.readouterr().out
    # Again: verified in place, nothing downloaded
    code, err = fetch(root, capsys)
    assert code == 0 and "nothing to do" in err and len(requests) == 1


def test_a_tampered_tar_is_one_line_and_leaves_nothing(http_server, tmp_path, monkeypatch, capsys):
    tar = tar_gz(FOLDERS)
    bad = bytearray(tar)
    bad[len(bad) // 2] ^= 1                          # same size, other bytes
    root = setup_data(tmp_path, monkeypatch, tar)
    url, _ = http_server({TAR: bytes(bad)})
    monkeypatch.setenv("DAWNBENCH_IMAGENETV2_URL", url + TAR)      # a full URL works as well as a base
    code, err = fetch(root, capsys)
    line = one_error_line(err)
    assert code == 2 and f"expected sha256 {hashlib.sha256(tar).hexdigest()}" in line and "nothing was unpacked" in line
    assert not (root / "imagenetv2").exists()


@pytest.mark.parametrize("member, says", [
    ((f"{TOP}/0/../../../escaped.jpeg", b"x"), "points outside the archive (..)"),
    (_info(f"{TOP}/2/3.jpeg", tarfile.SYMTYPE, link="/etc/passwd"), "is a link (to '/etc/passwd')"),
    ((f"/{TOP}/2/4.jpeg", b"x"), "has an absolute path"),
    (("elsewhere/0.jpeg", b"x"), "is outside the published top folder"),
    ((f"{TOP}/1000/0.jpeg", b"x"), "is not in a class folder 0..11"),
])
def test_an_unsafe_member_refuses_the_whole_tar(member, says, tmp_path, monkeypatch, capsys):
    tar = tar_gz(FOLDERS, extra=[member])
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / TAR).write_bytes(tar)
    root = setup_data(tmp_path, monkeypatch, tar)                 # pinned: only the unpacking can refuse it
    monkeypatch.setenv("DAWNBENCH_IMAGENETV2_URL", (tmp_path / "mirror" / TAR).as_uri())
    code, err = fetch(root, capsys)
    line = one_error_line(err)
    assert code == 2 and says in line and "refusing to unpack" in line
    assert not (root / "imagenetv2").exists() and not list(tmp_path.rglob("escaped.jpeg"))


@pytest.mark.parametrize("problem", ["missing", "different"])
def test_the_paired_synsets_must_be_there_and_the_pinned_one(problem, http_server, tmp_path, monkeypatch, capsys):
    tar = tar_gz(FOLDERS)
    synsets = SYNSETS[:-1] + ["n01532829"] if problem == "different" else SYNSETS
    root = setup_data(tmp_path, monkeypatch, tar, synsets=synsets)
    if problem == "missing":
        (root / "imagenet" / "synsets.txt").unlink()
    url, requests = http_server({TAR: tar})
    monkeypatch.setenv("DAWNBENCH_IMAGENETV2_URL", url)
    code, err = fetch(root, capsys)
    line = one_error_line(err)
    assert code == 2 and "imagenetv2's folders are class indices into imagenet's synsets.txt" in line
    assert ("data prepare imagenet" in line) if problem == "missing" else ("checksum mismatch" in line)
    assert requests == [] and not (root / "imagenetv2").exists()          # said before 1.2 GB are downloaded


def test_fetch_packs_val_as_tfrecord(tmp_path, monkeypatch, capsys):
    tf = pytest.importorskip("tensorflow")
    tar = tar_gz(FOLDERS)
    (tmp_path / TAR).write_bytes(tar)
    root = setup_data(tmp_path, monkeypatch, tar)
    monkeypatch.setenv("DAWNBENCH_IMAGENETV2_URL", (tmp_path / TAR).as_uri())
    code, err = fetch(root, capsys, "--format", "tfrecord", "--python", sys.executable)
    assert code == 0, err
    target = root / "imagenetv2"
    assert not (target / "tfrecord" / "train").exists()
    shards = sorted((target / "tfrecord" / "val").glob("val-*"))
    records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset([str(s) for s in shards])]
    files = sorted((target / "val").iterdir())
    assert [r.features.feature["image/filename"].bytes_list.value[0].decode() for r in records] == [f.name for f in files]
    assert [r.features.feature["image/encoded"].bytes_list.value[0] for r in records] == [f.read_bytes() for f in files]
    assert all("image/class/label" not in r.features.feature for r in records)      # no label reaches a predictor
    record = json.loads((target / "dawnbench-prepared.json").read_text())
    assert record["packed"]["tfrecord"]["counts"] == {"val": 12}
    assert datasets.verify_prepared(target, full=True)["count"] == 12 + 3 + len(shards) + 1


def test_format_goes_with_prepare_or_a_fetch_of_a_set_laid_out_as_imagenet_val(capsys, tmp_path):
    assert main(["data", "fetch", "cifar10.1", "--format", "tfrecord", "--data", str(tmp_path)]) == 2
    assert "--format only go with data prepare" in one_error_line(capsys.readouterr().err)
    assert main(["data", "fetch", "imagenetv2", "--format", "zip", "--data", str(tmp_path)]) == 2
    assert "is not one of recordio, tfrecord" in one_error_line(capsys.readouterr().err)
    # a --python that is no executable is said before 1.2 GB are downloaded
    assert main(["data", "fetch", "imagenetv2", "--format", "recordio", "--python", "/no/such/python",
                 "--data", str(tmp_path)]) == 2
    assert "--python /no/such/python: no such executable" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "imagenetv2").exists()


@pytest.mark.second_env
@pytest.mark.skipif(not MXNET_PYTHON.is_file(), reason="no MXNet environment: `make test-mxnet` makes "
                                                       ".venv/imagenet-resnet152-mxnet")
def test_fetch_packs_val_as_recordio_in_the_mxnet_environment(tmp_path, monkeypatch, capsys):
    tar = tar_gz(FOLDERS)
    (tmp_path / TAR).write_bytes(tar)
    root = setup_data(tmp_path, monkeypatch, tar)
    monkeypatch.setenv("DAWNBENCH_IMAGENETV2_URL", (tmp_path / TAR).as_uri())
    code, err = fetch(root, capsys, "--format", "recordio", "--python", str(MXNET_PYTHON))
    assert code == 0, err
    target = root / "imagenetv2"
    assert sorted(p.name for p in (target / "recordio" / "val").iterdir()) == ["names.txt", "val.idx", "val.rec"]
    names = (target / "recordio" / "val" / "names.txt").read_text().splitlines()
    assert names == [f"val/{p.name}" for p in sorted((target / "val").iterdir())]
    assert not (target / "recordio" / "train").exists()


def test_the_manifest_pins_the_published_tar_and_its_labels():
    """The built-in entry against tensorflow-datasets' own files where they are installed: the tar's line of
    imagenet_v2/checksums.tsv, and the label file recomputed here from imagenet2012/labels.txt (the WNIDs
    sorted) for 1,000 folders of 10."""
    entry = datasets.manifest("imagenetv2")
    archive = entry["archive"]
    assert archive["url"] == "https://huggingface.co/datasets/vaishaal/ImageNetV2/resolve/main/" + TAR
    assert entry["fresh_for"] == "imagenet" and entry["url_env"] == "DAWNBENCH_IMAGENETV2_URL"
    assert entry["files"]["synsets.txt"] == datasets.manifest("imagenet")["files"]["synsets.txt"]
    assert (archive["classes"], archive["per_class"], archive["top"]) == (1000, 10, TOP)
    tfds = pytest.importorskip("importlib.util").find_spec("tensorflow_datasets")
    if tfds is None:
        pytest.skip("tensorflow-datasets is not installed here")
    base = Path(tfds.submodule_search_locations[0]) / "datasets"
    line = (base / "imagenet_v2" / "checksums.tsv").read_text().splitlines()
    assert f"{archive['url']}\t{archive['size']}\t{archive['sha256']}\t{TAR}" in line
    wnids = (base / "imagenet2012" / "labels.txt").read_text().split()
    keyed = sorted((hashlib.sha256(f"{c}/{k}".encode()).hexdigest(), wnids[c]) for c in range(1000) for k in range(10))
    labels = "".join(f"{w}\n" for _, w in keyed).encode()
    assert hashlib.sha256(labels).hexdigest() == entry["files"]["val_labels.txt"]["sha256"]
    assert fetch_imagenetv2.flat_order({c: 10 for c in range(1000)})[:2] == [(798, 9), (30, 3)]


def fake_mxnet() -> types.ModuleType:
    """MXNet's recordio writer as pack_recordio uses it, writing each record as a length, then
    the header (JSON) and payload that `mx.recordio.pack` would join: enough to read the order, the
    labels and the bytes back. The real MXNet: the second_env test above."""
    mx = types.ModuleType("mxnet")
    mx.__version__ = "fake"
    header = collections.namedtuple("IRHeader", "flag label id id2")

    class Writer:
        def __init__(self, idx, rec, mode):
            self.idx, self.rec, self.records = idx, rec, []

        def write_idx(self, key, payload):
            self.records.append((key, payload))

        def close(self):
            Path(self.rec).write_bytes(b"".join(len(p).to_bytes(8, "big") + p for _, p in self.records))
            Path(self.idx).write_text("".join(f"{k}\n" for k, _ in self.records))

    mx.recordio = types.SimpleNamespace(
        IRHeader=header, MXIndexedRecordIO=Writer,
        pack=lambda h, data: json.dumps(h._asdict()).encode() + b"\n" + data)
    return mx


def test_pack_recordio_val_only_packs_the_flat_val_alone(tmp_path, monkeypatch, capsys):
    from dawnbench import pack_recordio
    folder = tmp_path / "imagenetv2"
    (folder / "val").mkdir(parents=True)
    images = {f"ImageNetV2_{i:05d}.JPEG": jpeg(i, size=(8, 6)) for i in (3, 1, 2)}
    for name, data in images.items():
        (folder / "val" / name).write_bytes(data)
    monkeypatch.setitem(sys.modules, "mxnet", fake_mxnet())
    assert pack_recordio.main([str(folder)]) == 2                 # without the flag: a prepared ImageNet is wanted
    assert "is not a prepared ImageNet" in capsys.readouterr().err
    assert pack_recordio.main([str(folder), "--val-only"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["counts"] == {"val": 3}
    assert sorted(p.name for p in (folder / "recordio").iterdir()) == ["val"]
    raw, records = (folder / "recordio" / "val" / "val.rec").read_bytes(), []
    while raw:
        size, raw = int.from_bytes(raw[:8], "big"), raw[8:]
        head, payload = raw[:size].split(b"\n", 1)
        records.append((json.loads(head), payload))
        raw = raw[size:]
    assert [payload for _, payload in records] == [images[name] for name in sorted(images)]
    assert [(h["id"], h["label"]) for h, _ in records] == [(0, -1.0), (1, -1.0), (2, -1.0)]
    assert (folder / "recordio" / "val" / "names.txt").read_text().split() == [f"val/{n}" for n in sorted(images)]


def test_the_predictor_is_shown_the_fresh_folders_at_imagenets_paths(tmp_path, monkeypatch, capsys):
    """harness.fresh_eval's view: val/ at imagenet/val, each packed val/ at ImageNet's; a format ImageNet's
    eval set is packed in and the fresh set is not is one line naming the --format to fetch; and where a
    launcher mounted ImageNet's val for the predictor (a container), it says to run on the host."""
    from harness import fresh_eval
    from harness.sandbox import uid_mode
    tar = tar_gz(FOLDERS)
    (tmp_path / TAR).write_bytes(tar)
    root = setup_data(tmp_path, monkeypatch, tar)
    monkeypatch.setenv("DAWNBENCH_IMAGENETV2_URL", (tmp_path / TAR).as_uri())
    assert fetch(root, capsys)[0] == 0
    files, labels = fresh_eval.fresh_view("imagenetv2", "imagenet", root, tmp_path / "derived")
    assert files == [(root / "imagenetv2" / "val", "imagenet/val")]
    assert labels.tolist() == [SYNSETS.index(w) for w in (root / "imagenetv2" / "val_labels.txt").read_text().split()]
    (root / "imagenet" / "tfrecord" / "val").mkdir(parents=True)
    with pytest.raises(fresh_eval.FreshSetError, match="not packed as tfrecord, which imagenet's eval set is.*"
                                                       "data fetch imagenetv2 --format tfrecord"):
        fresh_eval.fresh_view("imagenetv2", "imagenet", root, tmp_path / "derived")
    (root / "imagenetv2" / "tfrecord" / "val").mkdir(parents=True)
    datasets.write_prepared_manifest(root / "imagenetv2")
    files, _ = fresh_eval.fresh_view("imagenetv2", "imagenet", root, tmp_path / "derived")
    assert files[1] == (root / "imagenetv2" / "tfrecord" / "val", "imagenet/tfrecord/val")
    monkeypatch.setattr(uid_mode, "ROLE_MOUNTS", tmp_path / "views")
    (tmp_path / "views" / "predict" / "imagenet" / "val").mkdir(parents=True)
    with pytest.raises(fresh_eval.FreshSetError, match="run `dawnbench analyze generalization` on the host"):
        fresh_eval.fresh_view("imagenetv2", "imagenet", root, tmp_path / "derived")
