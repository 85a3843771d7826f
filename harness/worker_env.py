"""The workers' Python environment: which interpreter they run, and what that environment holds.

The harness's process never runs with a reference's environment on its path: a reference's
requirements install what they like there, and a `.pth` file in its site-packages runs in every
interpreter that starts with it (it could patch the harness's clock). So the harness runs from an
environment of its own (the tools environment natively, /opt/harness in an image), and only the
sandboxed workers run the reference's interpreter, named by $DAWNBENCH_WORKER_PYTHON (the launcher
sets it to .venv/REF/bin/python; unset: the harness's own interpreter, the tests' one environment).

What that environment holds is recorded in env.json (`worker_environment`) and its hash in
result.json's provenance: read by the reference's interpreter started as `python -I -S` (no site,
so no `.pth` of the environment runs, nothing of the reference's is imported) with importlib.metadata
over its site-packages. Every `.pth` file there (and a sitecustomize.py or usercustomize.py, which
site.py runs as well) is listed with the distribution whose RECORD names it;
those of no distribution, or of one not known to carry one, are listed again under `pth_unexpected`.
The files themselves are read too (harness.installed_files): each distribution's files hashed and
checked against its RECORD, and the files no RECORD names, so an edited `torch/nn/functional.py`
changes the record's hash. Standard library only: the image's harness reads it too.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from harness import installed_files, paths
from harness.errors import UsageError
from harness.sandbox import kernel, modes

WORKER_PYTHON_ENV = "DAWNBENCH_WORKER_PYTHON"
# The .pth files a reviewer expects (file name pattern, owning distribution): setuptools' shim of
# distutils, and this project's own editable install; any other is listed as unexpected.
EXPECTED_PTH = (("distutils-precedence.pth", "setuptools"), ("__editable__.dawnbench-", "dawnbench"))
PROBE_TIMEOUT_S = 120
IMAGE_PYTHON = "/opt/venv/bin/python"     # the reference's environment in every reference image


def in_containers() -> bool:
    """Whether the workers run as containers of the entrant's image (harness.sandbox.container_mode)."""
    return os.environ.get(modes.ISOLATION_ENV) == "container"

# Run as `python -I -S -c PROBE`: finds the environment's site-packages the way site.py would (the
# pyvenv.cfg beside or above the interpreter), without running site.main() and so without any .pth.
PROBE = r"""
import hashlib, importlib.metadata as md, json, os, site, sys
exe = sys.executable
prefix, cfg = sys.prefix, {}
for folder in (os.path.dirname(exe), os.path.dirname(os.path.dirname(exe))):
    if os.path.isfile(os.path.join(folder, "pyvenv.cfg")):
        prefix = folder
        with open(os.path.join(folder, "pyvenv.cfg"), encoding="utf-8") as f:
            for line in f:
                key, eq, value = line.partition("=")
                if eq:
                    cfg[key.strip().lower()] = value.strip()
        break
# A venv's own folder first, as the venv scheme lays it out: Debian's patched site.getsitepackages
# names only dist-packages folders, which a venv made by Debian's Python does not have.
version = "python%d.%d" % sys.version_info[:2]
dirs = [os.path.join(prefix, lib, version, "site-packages") for lib in ("lib", "lib64")] if cfg else []
dirs += site.getsitepackages([prefix])
if prefix == sys.prefix or cfg.get("include-system-site-packages", "").lower() == "true":
    dirs += site.getsitepackages([sys.base_prefix])
dirs = [d for i, d in enumerate(dirs) if os.path.isdir(d)
        and os.path.realpath(d) not in {os.path.realpath(x) for x in dirs[:i]}]   # lib64 is often lib
STARTUP = ("sitecustomize.py", "usercustomize.py")    # what site.py imports at start-up, like a .pth
dists, owners = {}, {}
for dist in md.distributions(path=dirs):
    name = (dist.metadata["Name"] or "").strip()
    if not name or name.lower() in dists:
        continue
    base = os.path.normpath(str(dist.locate_file("")))
    files = []
    for f in dist.files or ():
        if f.name.endswith(".pth") or str(f) in STARTUP:
            owners[os.path.realpath(str(dist.locate_file(f)))] = name
        rel = os.path.normpath(str(f))
        # the files RECORD puts in site-packages, compiled caches aside (harness.installed_files hashes them)
        if not rel.startswith(".." + os.sep) and not os.path.isabs(rel) and "__pycache__" not in rel.split(os.sep):
            files.append([base, rel, "%s=%s" % (f.hash.mode, f.hash.value) if f.hash else None])
    dists[name.lower()] = {"name": name, "version": dist.version, "files": files}
pth = []
for d in dirs:
    for entry in sorted(os.listdir(d)):
        if entry.endswith(".pth") or entry in STARTUP:
            path = os.path.join(d, entry)
            try:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                digest = None
            pth.append({"file": path, "owner": owners.get(os.path.realpath(path)), "sha256": digest})
print(json.dumps({"python": exe, "prefix": prefix, "base_prefix": sys.base_prefix,
                  "version": sys.version.split()[0], "site_packages": dirs,
                  "distributions": sorted(dists.values(), key=lambda d: d["name"].lower()), "pth": pth}))
"""


def worker_python() -> str:
    """The workers' interpreter: $DAWNBENCH_WORKER_PYTHON, else the harness's own."""
    asked = os.environ.get(WORKER_PYTHON_ENV)
    if in_containers():
        return asked or IMAGE_PYTHON      # a path in the entrant's image, not on this machine
    if not asked:
        return sys.executable
    if not (os.path.isfile(asked) and os.access(asked, os.X_OK)):
        raise UsageError(f"{WORKER_PYTHON_ENV}={asked}: not an executable Python (the reference's environment's "
                         f"bin/python, e.g. .venv/REF/bin/python; make setup REF=... sets it up)")
    return asked


def _pth_content(pth: dict) -> str | None:
    """What is compared of a start-up file: its sha256, but for the expected ones (an editable install's
    names the checkout's path, which differs from machine to machine)."""
    return "expected" if expected(pth) else pth.get("sha256")


def resolved(python: str) -> str:
    """`python` with its folder's links resolved but not its own (a venv's bin/python links to the
    base interpreter, and it is the venv's only when started from the venv): the path a sandboxed
    worker's view holds, whatever link (an environments folder under /tmp, say) named it."""
    return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(python))), os.path.basename(python))


def digest(record: dict) -> str:
    """The sha256 of what an environment holds: its distributions, its .pth files and, in a record that
    read them (harness.installed_files: every record since issue 46), the content of every installed
    file, in a canonical form. A record before that hashes as it did."""
    # a record read back from env.json (verify, reproduce) may hold anything: what is not a dict is skipped
    dists = [d for d in record.get("distributions") or () if isinstance(d, dict)]
    held = {"distributions": sorted(f"{d.get('name', '')}=={d.get('version', '')}".lower() for d in dists),
            "pth": sorted(f"{Path(str(p.get('file', ''))).name}:{p.get('owner')}:{_pth_content(p)}"
                          for p in record.get("pth") or () if isinstance(p, dict))}
    if "unrecorded" in record:
        unrecorded = record["unrecorded"] if isinstance(record["unrecorded"], dict) else {}
        held["files"] = sorted(f"{d.get('name', '')}=={d.get('version', '')}:{d.get('files_sha256')}".lower()
                               for d in dists) + [f"unrecorded:{unrecorded.get('sha256')}"]
    return hashlib.sha256(json.dumps(held, sort_keys=True).encode()).hexdigest()


def expected(pth: dict) -> bool:
    """A start-up file of EXPECTED_PTH, owned by the distribution expected to carry it."""
    name = Path(str(pth.get("file", ""))).name
    return any(name.startswith(pattern) and pth.get("owner") == owner for pattern, owner in EXPECTED_PTH)


def describe(python: str | None = None) -> dict:
    """What the environment of `python` (default: the workers') holds, read without running it."""
    in_image = python is None and in_containers()
    python = python or worker_python()
    if in_image:
        # imported here: it needs numpy, and the launcher's bare python has none
        from harness.sandbox import container_mode
        # the workers' environment is in the entrant's image: read there, its files hashed from here
        with container_mode.probe_container(python, PROBE, PROBE_TIMEOUT_S) as (record, root):
            if not isinstance(record, dict):
                raise UsageError(f"cannot read the workers' environment with {python} -I -S in the image "
                                 f"{container_mode.image()} (is it a Python 3 interpreter?)")
            installed_files.read(record, root)
        record["image"] = container_mode.image()
    else:
        try:
            done = subprocess.run([python, "-I", "-S", "-c", PROBE], stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=PROBE_TIMEOUT_S, preexec_fn=kernel.dies_with_harness())
            record = json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError):
            record = None
        if not isinstance(record, dict):
            raise UsageError(f"cannot read the workers' environment with {python} -I -S (is it a Python 3 interpreter?)")
        installed_files.read(record)        # each distribution's files against its RECORD, and the files of none
    record["pth_unexpected"] = [p["file"] for p in record["pth"] if not expected(p)]
    # whose side this is: the harness's reading of the workers' interpreter, not a claim of theirs
    record["read_by"] = "python -I -S (no site, no .pth run), importlib.metadata over its site-packages"
    # The harness's own environment is not the workers' one unless nobody named another interpreter:
    # then the reference's requirements could have run code in the harness's process too.
    record["shared_with_harness"] = not in_image and os.path.realpath(record["prefix"]) == os.path.realpath(sys.prefix)
    record["sha256"] = digest(record)
    return record


def harness_record(worker: dict) -> dict:
    """The harness's own environment, read as the workers' is: env.json's `harness_environment`."""
    record = worker if worker.get("shared_with_harness") else describe(sys.executable)
    return {k: record.get(k) for k in ("python", "prefix", "pth_unexpected", "sha256")}


def reasons(record: dict, harness: dict | None = None) -> list[str]:
    """Why a run whose workers ran in `record`'s environment (and whose harness ran in `harness`'s,
    harness_record) is not official: start-up code of no known package in the harness's environment,
    which ran in the harness's process: the workers' one when the harness shared it (nobody named
    another, $DAWNBENCH_WORKER_PYTHON), or its own when something put one there."""
    if record.get("shared_with_harness") and record.get("pth_unexpected"):
        return [f"the harness ran in the workers' environment ({paths.public(str(record.get('prefix')))}), whose start-up files "
                f"{', '.join(Path(p).name for p in record['pth_unexpected'])} ran in the harness's process; run "
                f"through bin/dawnbench or make run (the harness from its own environment)"]
    if harness and not record.get("shared_with_harness") and harness.get("pth_unexpected"):
        return [f"the harness's environment ({paths.public(str(harness.get('prefix')))}) holds start-up files of no "
                f"known package "
                f"({', '.join(Path(p).name for p in harness['pth_unexpected'])}), which ran in the harness's "
                f"process; set that environment up again (make tools)"]
    return []


def _file_differences(a: dict, b: dict, same_version: set[str]) -> list[str]:
    """The distributions of the same version whose files differ, each with the files that are not as
    their RECORD says in either record; the files of no distribution, where they differ."""
    def by_name(record):
        return {str(d.get("name", "")).lower(): d for d in record.get("distributions") or () if isinstance(d, dict)}
    first, second = by_name(a), by_name(b)
    found = []
    for name in sorted(same_version):
        x, y = first[name], second[name]
        if "files_sha256" in x and "files_sha256" in y and x["files_sha256"] != y["files_sha256"]:
            off = [f for f in [*(x.get("not_as_recorded") or ()), *(y.get("not_as_recorded") or ())] if isinstance(f, str)]
            found.append(f"{name} {x.get('version')}: its files differ"
                         + (f" ({', '.join(dict.fromkeys(off))} not as its RECORD says)" if off else ""))
    ua, ub = a.get("unrecorded"), b.get("unrecorded")
    if isinstance(ua, dict) and isinstance(ub, dict) and ua.get("sha256") != ub.get("sha256"):
        found.append(f"files of no distribution: {ua.get('count')} ({', '.join(map(str, ua.get('files') or ())) or 'none'}) "
                     f"vs {ub.get('count')} ({', '.join(map(str, ub.get('files') or ())) or 'none'})")
    return found


def differences(a: dict, b: dict) -> list[str]:
    """The distributions (and .pth files) that differ between two records, one phrase each."""
    def held(record):
        return {str(d.get("name", "")).lower(): str(d.get("version"))
                for d in record.get("distributions") or () if isinstance(d, dict)}
    first, second = held(a), held(b)
    found = [f"{name} {first.get(name, 'absent')} vs {second.get(name, 'absent')}"
             for name in sorted(first.keys() | second.keys()) if first.get(name) != second.get(name)]
    found += _file_differences(a, b, {n for n in first.keys() & second.keys() if first[n] == second[n]})
    pth_a = {Path(str(p.get("file"))).name: _pth_content(p) for p in a.get("pth") or () if isinstance(p, dict)}
    pth_b = {Path(str(p.get("file"))).name: _pth_content(p) for p in b.get("pth") or () if isinstance(p, dict)}
    for name in sorted(pth_a.keys() | pth_b.keys()):
        if name not in pth_a or name not in pth_b:
            found.append(f"{name} {'present' if name in pth_a else 'absent'} vs {'present' if name in pth_b else 'absent'}")
        elif pth_a[name] != pth_b[name]:
            found.append(f"{name} differs")
    return found
