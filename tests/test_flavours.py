"""The references' Dockerfiles come from one template and a few flavours (docker/flavours.py): each
project reference's Dockerfile is what its declared flavour and parts write, an edit of one copy of
a shared part alone fails the check, a fork (`cp -r`, `dawnbench fork`) still passes, and a
reference with a Dockerfile of its own is left to the harness as before. No engine needed: the
engine tests (test_containers.py) build from the same files."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from dawnbench import containers
from dawnbench import fork as fork_command
from harness import registry

TOOL = REPO / "docker" / "flavours.py"
_spec = importlib.util.spec_from_file_location("dockerfile_flavours", TOOL)     # `docker` is also the SDK's name
flavours = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(flavours)

NAMES = registry.available()
FLAVOURED = [n for n in NAMES if flavours.declaration(REPO / "references" / n) is not None]


def check(references: Path, *names: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "check", "--references", str(references), *names],
                          capture_output=True, text=True, timeout=60)


def copy_references(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "references"
    for name in names:
        shutil.copytree(REPO / "references" / name, root / name)
    return root


def test_the_projects_references_name_a_flavour():
    """Every reference the project ships (author dawnbench) is written from a flavour, so that a change
    to a shared part is made once; counted from the references there are, not a number written here."""
    own = [n for n in NAMES if registry.load_spec(n).author == "dawnbench"]
    assert own and set(own) <= set(FLAVOURED), sorted(set(own) - set(FLAVOURED))


@pytest.mark.parametrize("name", FLAVOURED)
def test_dockerfile_is_what_its_flavour_writes(name):
    problem = flavours.difference(REPO / "references" / name)
    assert problem is None, problem


def test_the_check_command_passes_on_this_checkout():
    done = check(REPO / "references")
    assert done.returncode == 0 and not done.stderr, done.stderr


def test_each_flavour_is_used_and_the_template_has_no_stray_slot():
    table = flavours.load_flavours()
    used = {flavours.declaration(REPO / "references" / n)[0] for n in FLAVOURED}
    used |= {v for n in FLAVOURED for v in flavours.variants(REPO / "references" / n).values()}
    assert used == set(table["flavours"]), "a flavour no reference uses: delete it"
    used_parts = {p for n in FLAVOURED for p in flavours.declaration(REPO / "references" / n)[1]}
    assert used_parts == set(table["parts"]), "a part no reference uses: delete it"
    for name in table["flavours"]:
        assert "@{" not in flavours.render(name, [], table), name


def test_editing_one_copy_of_a_shared_part_alone_fails(tmp_path):
    """Two references of the same flavour; the harness layer's USER line edited in one copy only: the
    check names that copy, its line and the way out, in one line, and passes the other."""
    edited, kept = "cifar10-resnet56-pytorch", "squad-bidaf-pytorch"
    assert flavours.declaration(REPO / "references" / edited) == flavours.declaration(REPO / "references" / kept)
    root = copy_references(tmp_path, edited, kept)
    assert check(root).returncode == 0
    dockerfile = root / edited / "Dockerfile"
    text = dockerfile.read_text()
    assert text.count("\nUSER dawn\n") == 1
    dockerfile.write_text(text.replace("\nUSER dawn\n", "\nUSER root\n"))
    done = check(root)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    at = text.splitlines().index("USER dawn") + 1
    assert f"{edited}/Dockerfile: line {at} is not what flavour cuda-pytorch writes" in line
    assert "USER root" in line and "docker/flavours.py generate" in line and "Traceback" not in done.stderr
    assert kept not in line


VARIANTS = [(n, f"Dockerfile.{v}") for n in FLAVOURED for v in flavours.variants(REPO / "references" / n)]


def test_the_tpu_image_is_a_variant_written_and_checked_alike():
    """imagenet-amoebanet-tpu's Dockerfile.tpu is written from a flavour (issue 49: by hand, it lacked the
    harness's environment its entrypoint runs): no reference keeps a second Dockerfile by hand."""
    assert ("imagenet-amoebanet-tpu", "Dockerfile.tpu") in VARIANTS
    by_hand = {(d.name, f.name) for d in (REPO / "references").iterdir() for f in d.glob("Dockerfile.*")}
    assert by_hand == set(VARIANTS)


@pytest.mark.parametrize("name, file", VARIANTS)
@pytest.mark.parametrize("edit", ["harness", "flavour"])
def test_a_variant_that_lacks_the_harness_or_drifts_fails(tmp_path, name, file, edit):
    """The variant without the harness's environment (the entrypoint's /opt/harness), or written by
    hand from another base: the check names that file, its line and the way out, in one line."""
    root = copy_references(tmp_path, name)
    path = root / name / file
    text = path.read_text()
    line = "COPY --from=requirements /opt/harness /opt/harness" if edit == "harness" else text.splitlines()[0]
    assert text.count(line + "\n") == 1
    path.write_text(text.replace(line + "\n", "" if edit == "harness" else "# my own TPU image\n"))
    done = check(root)
    assert done.returncode == 1, done.stderr
    (said,) = done.stderr.splitlines()
    assert f"{name}/{file}: line " in said and "is not what flavour tpu-tensorflow writes" in said
    assert "docker/flavours.py generate" in said and "Traceback" not in done.stderr
    generated = subprocess.run([sys.executable, str(TOOL), "generate", "--references", str(root)],
                               capture_output=True, text=True, timeout=60)
    assert generated.returncode == 0 and path.read_text() == text


def test_a_shared_part_changed_in_the_template_reaches_every_flavour():
    """The harness layer is written once: a line changed in the template changes every flavour's
    Dockerfile, and none keeps the old line."""
    table = flavours.load_flavours()
    template = flavours.TEMPLATE.read_text()
    assert template.count("\nUSER dawn\n") == 1
    changed = template.replace("\nUSER dawn\n", "\nUSER dawn2\n")
    for name in table["flavours"]:
        assert "\nUSER dawn2\n" in flavours.render(name, [], table, changed)
        assert "\nUSER dawn\n" not in flavours.render(name, [], table, changed)


def test_the_imagenet_views_keep_their_modes():
    """The folders ImageNet's train and val are bound into: each entered only by its role's group."""
    views = [n for n in FLAVOURED if "imagenet-views" in flavours.declaration(REPO / "references" / n)[1]]
    assert views
    for name in views:
        assert "&& chmod 0750 /dawnbench-views/*\n" in (REPO / "references" / name / "Dockerfile").read_text()


def test_a_fork_with_an_unchanged_dockerfile_passes(tmp_path):
    """`cp -r` of a directory, and `dawnbench fork`, give a reference whose Dockerfile is still its
    flavour's: nothing in a generated Dockerfile names its reference."""
    original = "fashion-mnist-cnn-pytorch"
    root = copy_references(tmp_path, original)
    shutil.copytree(root / original, root / "fashion-mnist-mynet-pytorch")
    assert fork_command.main([original, "fashion-mnist-other-pytorch", "--author", "someone",
                              "--references", str(root)]) == 0
    done = check(root)
    assert done.returncode == 0, done.stderr
    for name in ("fashion-mnist-mynet-pytorch", "fashion-mnist-other-pytorch"):
        assert (root / name / "Dockerfile").read_bytes() == (REPO / "references" / original / "Dockerfile").read_bytes()


def test_a_dockerfile_of_its_own_is_left_alone(tmp_path):
    """An entrant's reference that names no flavour keeps the Dockerfile it wrote: the check passes
    it, generate leaves it, and the host tools read its base as before (docs/RULES.md: the entrant
    controls the reference folder, its Dockerfile included)."""
    name = "fashion-mnist-cnn-pytorch"
    root = copy_references(tmp_path, name)
    toml = root / name / "reference.toml"
    toml.write_text("".join(line for line in toml.read_text().splitlines(keepends=True)
                            if not line.startswith(("flavour =", "parts ="))))
    own = "ARG FROM_IMAGE_NAME=python:3.11.14-slim-bookworm\nFROM ${FROM_IMAGE_NAME}\n# my own\n"
    (root / name / "Dockerfile").write_text(own)
    assert check(root).returncode == 0
    done = subprocess.run([sys.executable, str(TOOL), "generate", "--references", str(root)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and (root / name / "Dockerfile").read_text() == own
    spec = registry.load_spec(name, root)
    assert containers.default_base(spec) == "python:3.11.14-slim-bookworm"
    named = subprocess.run([sys.executable, str(TOOL), "generate", "--references", str(root), name],
                           capture_output=True, text=True, timeout=60)
    assert named.returncode == 2 and "names no flavour" in named.stderr and len(named.stderr.splitlines()) == 1


def test_generate_writes_what_check_wants(tmp_path):
    name = "imagenet-resnet50-pytorch"
    root = copy_references(tmp_path, name)
    (root / name / "Dockerfile").write_text("FROM scratch\n")
    assert check(root).returncode == 1
    done = subprocess.run([sys.executable, str(TOOL), "generate", "--references", str(root)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "wrote" in done.stdout
    assert (root / name / "Dockerfile").read_bytes() == (REPO / "references" / name / "Dockerfile").read_bytes()


@pytest.mark.parametrize("container, says", [
    ('flavour = "gpu-jax"', "flavour 'gpu-jax' is not in flavours.toml"),
    ('flavour = "cpu-pytorch"\nparts = ["turbo"]', "part 'turbo' is not in flavours.toml"),
    ('flavour = "cpu-pytorch"\nparts = ["dali"]', "part dali goes only with the flavours cuda-pytorch"),
    ('parts = ["imagenet-views"]', "parts without a flavour"),
    ("flavour = 3", "flavour must be a flavour's name"),
    ('flavour = "cpu-pytorch"\nvariants = { tpu = "gpu-jax" }', "flavour 'gpu-jax' is not in flavours.toml"),
    ('flavour = "cpu-pytorch"\nvariants = ["tpu"]', "variants must be a table of name = flavour"),
    ('flavour = "cpu-pytorch"\nvariants = { "../x" = "cpu-pytorch" }', "'../x' is not a name of lower-case"),
    ('variants = { tpu = "tpu-tensorflow" }', "variants without a flavour"),
    ('flavour = "cpu-pytorch"\nparts = "dali"', "parts must be a list of names"),
])
def test_a_bad_declaration_is_one_line(tmp_path, container, says):
    name = "fashion-mnist-cnn-pytorch"
    root = copy_references(tmp_path, name)
    toml = root / name / "reference.toml"
    kept = [line for line in toml.read_text().splitlines()
            if not line.startswith(("flavour =", "parts =", "variants ="))]
    toml.write_text("\n".join(kept).replace("[container]", "[container]\n" + container) + "\n")
    done = check(root)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
