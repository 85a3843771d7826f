"""Inference entries: batch size 1 over every eval example, each call timed by the harness.

DAWNBench's inference figure is the mean latency per item at the task's threshold; the
percentiles and the cost per 10,000 items are reported next to it.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from harness import (
    data_formats,
    data_views,
    datasets,
    environment,
    eval_labels,
    inference_engines,
    judge,
    paths,
    result_identity,
    safe_write,
    snapshots,
    verify_run,
    worker_env,
)
from harness.errors import EXIT_FAILED, DawnbenchError, command, shown
from harness.eval_set import EvalSet
from harness.official import official_verdict
from harness.registry import ReferenceSpec, UsageError
from harness.roles import start_worker
from harness.sandbox import handle, kernel, modes, scratch
from harness.tasks import get_task


def infer(spec: ReferenceSpec, model_path: Path, hyperparameters: dict, *, data_root: Path | None = None,
          warmup: int = 50, limit: int | None = None, cost_per_hour: float | None = None,
          out_dir: Path | None = None, progress: bool = True, seed: int = 0,
          threshold: float | None = None, instance: str | None = None, nodes: int = 1,
          price: dict | None = None, runtime: str = "reference", precision: str = "fp32",
          threads: int | None = None) -> dict:
    """`cost_per_hour` is for every node together (price x nodes); `price` is one node's record.

    `runtime` "reference" (or "torch", for a PyTorch reference) times the reference's own infer() in
    the sandboxed predictor; "onnxruntime" and "openvino" run the network the predictor exports, in
    a harness process of their own (harness.inference_engines), at `precision`, on `threads` threads."""
    task = spec.task
    if not task.kind.infers:
        raise UsageError(f"{task.name}'s kind ({task.kind.name}) has no per-example inference yet (issue 50): `infer` "
                         f"times one example at a time; its entries are training runs")
    inference_engines.check_options(runtime, precision, threads, spec.framework)
    if runtime in inference_engines.EXPORTED and not task.kind.exportable:
        raise UsageError(f"--runtime {runtime} runs classifiers (scores out); {task.name}'s answers are text: "
                         f"use --runtime reference")
    threads = threads or inference_engines.physical_cores()
    threshold = task.target(threshold)
    data_root = Path(data_root or datasets.default_data_root())
    model_path = Path(model_path)
    if out_dir is not None and (Path(out_dir) / "inference.json").exists():
        # before the work, and never over another inference's files (nothing already written is lost)
        raise UsageError(f"--out {shown(out_dir, 300)} already holds an inference (inference.json): give a new "
                         f"folder, or move that one away first")
    if out_dir is not None:
        # checked before the work, and nothing made until it is done (issue 47's probe: a read-only --out was
        # refused only after every example had been timed): the nearest folder that exists must be writable
        there = next(p for p in (Path(out_dir), *Path(out_dir).parents) if p.exists())
        if there.is_dir() and not os.access(there, os.W_OK | os.X_OK):
            raise safe_write.WriteError(out_dir, PermissionError(errno.EACCES, "Permission denied"), "--out")
    if not model_path.exists():
        raise FileNotFoundError(f"model {model_path} not found; a converged `{command('run')}` leaves "
                                f"one in results/<reference>/<run id>/model")
    # As a run does: every data file checked and recorded, the labels from the checksummed files
    _, data_reasons = datasets.check_all(task.dataset, data_root)
    labels = eval_labels.load_eval_labels(task.dataset, data_root)
    dropped = eval_labels.load_blacklist(task.dataset, data_root)

    isolation = modes.probe()
    data_views.check_workers_can_read(task.dataset, data_root, isolation)
    model_record = model_source(model_path)
    # Before any of the reference's code runs: the code, data and model this inference is of, and
    # whether it can be an official entry.
    eval_set = EvalSet(task, len(labels), dropped)
    worker = worker_env.describe()
    prov = official_verdict(spec, threshold, data_reasons, eval_set, isolation,
                                   _inference_reasons(limit, len(labels), model_record), data_root=data_root,
                                   worker=worker)
    kernel.protect_harness()
    work = scratch.private_dir("infer")
    os.chmod(work, 0o755)
    models = work / "models"
    if model_path.is_dir():
        shutil.copytree(model_path, models / "model", symlinks=True)
    else:       # one weights file (a published one, say): the reference's load() gets a folder holding it
        (models / "model").mkdir(parents=True)
        shutil.copyfile(model_path, models / "model" / model_path.name)
    try:
        if runtime in inference_engines.EXPORTED:
            run = _run_exported(spec, hyperparameters, data_root, work, isolation, seed, runtime, precision,
                                threads, warmup, limit, len(labels), model_path)
        else:
            run = _run_reference(spec, hyperparameters, data_root, work, isolation, seed, threads, warmup,
                                 limit, len(labels), model_path, progress)
        out_dir = Path(out_dir) if out_dir else paths.results_root() / spec.name / (
            "infer-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, source in run.pop("files", {}).items():     # the exported (and quantized) model that was timed
                shutil.copyfile(source, out_dir / name)
        except OSError as e:
            raise safe_write.WriteError(out_dir, e, "--out") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    outputs, latencies, n = run.pop("outputs"), run.pop("latencies"), run.pop("items")
    run["runtime"] = runtime

    predictions = task.kind.from_outputs(outputs, labels)
    # the blacklist (ImageNet's) applies to the whole eval set, as in a run
    scores = task.score(predictions, labels[:n], dropped if n == len(labels) else None)
    value = scores[task.metric]
    ms = latencies * 1000.0
    mean_ms = float(ms.mean())
    system = environment.describe_system(data_root, worker)
    result = {
        # who and what, as a run's result.json says them (harness.result_identity): an inference-only entry
        # has no run to take them from
        **result_identity.fields(spec, system=system, isolation=isolation, prov=prov,
                                 hardware=environment.hardware_label(system, 1),
                                 cost_per_hour=cost_per_hour, instance=instance, nodes=nodes, price=price, started=None,
                                 used_blacklist=dropped is not None and n == len(labels)),
        "model_path": paths.public(str(model_path)),      # inference.json goes into a public entry
        "model_source": model_record,
        "infers_only": spec.infers_only,
        "items": n,
        "complete_eval_set": n == len(labels) == task.eval_examples,
        "batch_size": 1,
        "warmup_items": min(warmup, n),
        "latency": mean_ms,  # DAWNBench v1 field: ms per item
        "latency_ms": {"mean": mean_ms, "p50": float(np.percentile(ms, 50)),
                       "p90": float(np.percentile(ms, 90)), "p99": float(np.percentile(ms, 99)),
                       "min": float(ms.min()), "max": float(ms.max())},
        "metric": task.metric,
        "metric_value": value,
        **scores,
        "threshold": threshold,
        "official_threshold": threshold == task.threshold,
        "reached_threshold": task.reaches(value, threshold),
        # DAWNBench v1: cost per item = costPerHour x latency / 3.6e6
        "cost": cost_per_hour * mean_ms / 3.6e6 if cost_per_hour is not None else None,
        "cost_per_10k_items_usd": cost_per_hour * mean_ms / 3.6e6 * 1e4 if cost_per_hour is not None else None,
        **run,     # runtime, runtime_version, precision, threads, timer, exported model, calibration
    }
    try:
        if task.kind.keeps_inference_predictions():     # exactly the predictions scored, for anyone to re-score
            np.save(out_dir / "predictions.npy", predictions, allow_pickle=False)
    except OSError as e:
        raise safe_write.WriteError(out_dir / "predictions.npy", e, "--out") from None
    safe_write.write_json(out_dir / "env.json", system, "--out")
    safe_write.write_json(out_dir / "inference.json", result, "--out")     # last: it says the folder is whole
    result["out_dir"] = str(out_dir)
    return result


def _inference_reasons(limit: int | None, total: int, model_record: dict) -> list[str]:
    """Why this inference cannot be an official entry, beyond what a run shares (threshold, data,
    isolation, code): a part of the eval set, or a model whose own run was not official or is not that run's
    scored model."""
    reasons = []
    if limit is not None and limit < total:
        reasons.append(f"--limit {limit} times {limit} of the {total} eval items, not the whole eval set")
    run = model_record.get("run")
    if model_record["kind"] == "run" and run.get("official") is not True:
        reasons.append(f"the model's run ({run.get('reference')}, result.json beside the model) is not official")
    if model_record.get("is_the_runs_model") is False:
        reasons.append(f"the model is not its run's: its files hash to {model_record['sha256'][:16]}..., the run's log scored "
                       f"{str(run.get('scored_snapshot_sha256'))[:16]}... (changed after the run?); infer the run's "
                       f"own model/")
    return reasons


def model_source(model_path: Path) -> dict:
    """Where the model came from, for the record: a run's model folder (its run's result.json beside
    it), another folder, or one file; with the sha256 and size of every file."""
    files = sorted(p for p in model_path.rglob("*") if p.is_file()) if model_path.is_dir() else [model_path]
    hashes = {str(p.relative_to(model_path) if model_path.is_dir() else p.name): {"sha256": inference_engines.sha256(p),
                                                                                 "bytes": p.stat().st_size}
              for p in files}
    record = {"kind": "file" if model_path.is_file() else "folder", "path": paths.public(str(model_path)), "files": hashes}
    result_file = model_path.parent / "result.json"
    if model_path.is_dir() and result_file.is_file():
        try:
            run = json.loads(result_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            run = None
        if isinstance(run, dict):
            record.update(kind="run", run={"reference": run.get("reference"), "status": run.get("status"),
                                           "metric": run.get("metric"), "metric_value": run.get("metric_value"),
                                           "official": run.get("official"),
                                           "result_sha256": inference_engines.sha256(result_file),
                                           "scored_snapshot_sha256": _scored_sha256(model_path.parent)})
    # The files loaded are the run's model only when they hash to the snapshot its log scored: a model
    # fine-tuned on the public test set after the run (and put back before submit) is not (issue 46).
    record["sha256"] = snapshots.manifest_sha256({rel: (f["bytes"], f["sha256"]) for rel, f in hashes.items()})
    if record["kind"] == "run":
        record["is_the_runs_model"] = record["sha256"] == record["run"]["scored_snapshot_sha256"]
    return record


def _scored_sha256(run_dir: Path) -> str | None:
    """The run's log's hash of its scored model (events.jsonl beside the model), or None without one."""
    try:
        return verify_run.scored_model_sha256(verify_run.read_events(run_dir))
    except (OSError, ValueError, DawnbenchError):
        return None


class RuntimeFailed(DawnbenchError):
    """The harness's runtime process failed on the exported model (the runtime's own error)."""

    exit_code = EXIT_FAILED


def _one_line(text: str, default: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()] or [default]
    return " ".join(lines[0].split())[:400]


def _start(role: str, spec, hyperparameters, data_root, work, isolation, seed, snapshots=None, env=None):
    """A sandboxed worker of `role` with the reference set up in it."""
    worker, seen = start_worker(role, spec, isolation, data_root=data_root, derived=work / f"derived-{role}",
                                       snapshots=snapshots, env=env)
    try:
        worker.call("init", name=spec.name, config=dict(hyperparameters), seed=seed, task=spec.task.name, rank=0,
                    world_size=1, local_rank=0, show_progress=False, role=role,
                    data_root=seen["data_root"], work_dir=seen["work_dir"], references=seen["references"])
    except BaseException:
        worker.kill()
        raise
    return worker, seen


def _load(worker, seen, spec, model_path) -> None:
    try:
        worker.call("load", path=f"{seen['snapshots']}/model")
    except handle.WorkerError as e:   # the framework's own error, often many lines: keep it to one
        lines = [line.strip() for line in str(e).splitlines() if line.strip()] or ["load failed"]
        mismatch = [line for line in lines if "mismatch" in line]     # the line that names a shape
        detail = " ".join((mismatch or lines)[0].split())
        raise UsageError(f"model {model_path} does not load into {spec.name} with these hyperparameters "
                         f"({detail[:300]}); give the --set values it was trained with (a run records them "
                         f"in result.json next to model/)") from e


def _hook(worker, op: str, what: str, **fields) -> np.ndarray:
    """One export hook of the reference; its failure as one line (a missing hook is the user's to fix)."""
    try:
        _, array = worker.call(op, **fields)
    except handle.WorkerError as e:
        detail = _one_line(str(e), f"{op} failed").split(": ", 1)[-1]
        if detail.startswith("UsageError: "):
            detail = detail[len("UsageError: "):]
        raise (UsageError if e.usage else RuntimeFailed)(f"{what}: {detail}") from e
    if array is None:
        raise RuntimeFailed(f"{what}: the reference returned no array")
    return array


EXPORT_SLICE_BYTES = 64 << 20     # what one export_inputs call hands over, about


def _export_inputs(worker, spec, n: int, path: Path) -> None:
    """The first `n` eval inputs of the exported model, a slice at a time, into the .npy file `path`
    (memory-mapped): neither the harness nor the channel ever holds the whole eval set (ImageNet's
    crops are 7.5 GB)."""
    what = f"{spec.name} cannot give its eval inputs for the exported model"
    if n < 1:
        raise RuntimeFailed(f"{what}: eval_inputs() gave no examples")
    stored, start, step = None, 0, 16
    while start < n:
        stop = min(n, start + step)
        chunk = _hook(worker, "export_inputs", what, start=start, stop=stop)
        if chunk.ndim < 1 or len(chunk) != stop - start:
            raise RuntimeFailed(f"export_inputs({start}, {stop}) gave {len(chunk) if chunk.ndim else 0} examples, "
                                f"not {stop - start}")
        if stored is None:
            stored = np.lib.format.open_memmap(path, mode="w+", dtype=chunk.dtype, shape=(n, *chunk.shape[1:]))
            step = max(1, EXPORT_SLICE_BYTES // max(1, chunk[:1].nbytes))
        elif chunk.dtype != stored.dtype or chunk.shape[1:] != stored.shape[1:]:
            raise RuntimeFailed(f"export_inputs({start}, {stop}) gave {chunk.dtype} {chunk.shape[1:]} examples, "
                                f"but the first slice was {stored.dtype} {stored.shape[1:]}")
        stored[start:stop] = chunk
        start = stop
    stored.flush()
    del stored


def _run_reference(spec, hyperparameters, data_root, work, isolation, seed, threads, warmup, limit, total,
                   model_path, progress) -> dict:
    """The reference's own infer() in a sandboxed server, timed here, in a process the reference's code
    never enters: each latency is the round trip of one request that carries its example.

    Two workers, so that no process of the reference holds both the model and an eval input before
    that input is asked for: a predictor without the model computes `eval_inputs()` and hands over
    one example at a time; a server whose view holds the model and none of the task's files (role
    "serve") gets each example with its timed request. A predictor that held both once answered every
    timed request from a table computed in `load()`, at the channel's round trip (issue 46). The
    requests come in an order drawn with the seed, so a server cannot know the next example either.

    Where the eval set is image files (ImageNet), DAWNBench's latency is per image from its file: the
    harness reads each file itself and the request carries its bytes, so decoding and preparing the
    image are inside the timed call (the reference's `example_from_wire`, then `infer`); no predictor
    is started. A predictor's `eval_inputs()` gave decoded crops, and the decode was off the clock."""
    producer = server = None
    files = data_formats.eval_image_files(spec.task.dataset, data_root)
    try:
        server, served = _start("serve", spec, hyperparameters, data_root, work, isolation, seed,
                                snapshots=work / "models", env={"OMP_NUM_THREADS": str(threads)})
        _load(server, served, spec, model_path)      # before any eval input exists in a worker
        if files is None:
            producer, _ = _start("predict", spec, hyperparameters, data_root, work, isolation, seed)
            count = int(producer.call("inputs")[0]["count"])
        else:
            count = len(files)
        n = count if limit is None else min(limit, count)
        if limit is None and n != total:
            source = "eval_inputs() gave" if files is None else "the eval folder holds"
            raise ValueError(f"{source} {n} examples; the {spec.task.name} eval set here has {total}")
        overhead = _round_trip_ms(server)
        order = np.random.default_rng(seed).permutation(n)

        def next_example(i: int) -> tuple[dict, np.ndarray | None]:
            if files is not None:       # the image file as stored: read here, before the clock starts
                return {"wire": "bytes"}, np.frombuffer(files[i].read_bytes(), dtype=np.uint8)
            reply, array = producer.call("example", index=int(i))
            return {"wire": reply.get("wire"), **({"example": reply["example"]} if "example" in reply else {})}, array

        def served_call(i: int):
            example, array = next_example(int(i))
            t0 = time.perf_counter()
            answer = server.call("infer", payload=array, **example)
            return time.perf_counter() - t0, answer

        for i in order[:warmup]:   # warm caches, allocators and lazy initialisation
            served_call(i)
        latencies = np.empty(n, dtype=np.float64)
        outputs = [None] * n
        bar = order
        if progress:
            from tqdm import tqdm
            bar = tqdm(bar, total=n, desc="infer", unit="item", leave=False, file=sys.stderr, mininterval=0.5)
        for i in bar:
            latencies[i], (reply, array) = served_call(i)
            outputs[i] = reply["answer"] if "answer" in reply else array
    finally:
        for worker in (producer, server):
            if worker is not None:
                worker.kill()
    return {"outputs": outputs, "latencies": latencies, "items": n,
            "runtime": "reference", "runtime_version": environment.framework_label(
                spec.framework, environment.package_versions(worker_env.describe())),
            "precision": {"requested": "fp32", "used": "as the reference's infer() runs"},
            "threads": threads, "threads_setting": "OMP_NUM_THREADS in the server",
            "timer": "round trip of each request, which carries its example, to the sandboxed server that holds "
                     "the model and no eval input, timed in the harness process",
            "example": EXAMPLE_FILE if files is not None else EXAMPLE_PREPARED,
            "order": f"every example once, in an order drawn with seed {seed}",
            # Each latency is a round trip to the sandboxed server; an empty request's median round trip:
            "round_trip_overhead_ms": overhead}


# What a timed request carries (inference.json `example`): the image file, so that its decode is timed, or
# what the reference's eval_inputs() prepared before the clock (a tensor, a tokenized question)
EXAMPLE_FILE = "the image file's bytes, read by the harness: decoding and preparing it are inside each timed call"
EXAMPLE_PREPARED = "the reference's eval_inputs() example, prepared before the clock"
# The exported runtimes time the runtime call alone, in a judge process of numpy and the runtime: it has no
# decoder of the reference's preparation (Pillow, OpenCV, TensorFlow's), so their inputs come decoded
EXAMPLE_EXPORTED = "the reference's export_inputs() example, prepared before the clock (an image's decode is not timed)"


def _run_exported(spec, hyperparameters, data_root, work, isolation, seed, runtime, precision, threads,
                  warmup, limit, total, model_path) -> dict:
    """The predictor exports the network and the eval inputs; for int8 a trainer (training files only)
    gives the calibration examples; then a harness process (python -m harness.inference_engines), which never
    imports the reference's code, runs the model once per example and times each call."""
    folder = work / "runtime"
    folder.mkdir()
    worker = None
    try:
        worker, seen = _start("predict", spec, hyperparameters, data_root, work, isolation, seed,
                              snapshots=work / "models")
        _load(worker, seen, spec, model_path)
        model = _hook(worker, "export", f"{spec.name} cannot export its model to ONNX")
        (folder / "model.onnx").write_bytes(model.tobytes())
        del model
        count = int(worker.call("inputs")[0]["count"])
        if limit is None and count != total:
            raise RuntimeFailed(f"eval_inputs() gave {count} examples; the {spec.task.name} eval set here has {total}")
        n = count if limit is None else min(limit, count)
        _export_inputs(worker, spec, n, folder / "inputs.npy")
    finally:
        if worker is not None:
            worker.kill()
    calibration = None
    request = {"runtime": runtime, "precision": precision, "threads": threads, "warmup": warmup,
               "model": str(folder / "model.onnx"), "inputs": str(folder / "inputs.npy"), "out": str(folder)}
    if precision == "int8":
        # Calibrated on training images only: in a trainer, whose view holds the training files alone.
        trainer = None
        try:
            # The model too: an entry may prepare its calibration images as its model is evaluated.
            trainer, trainer_seen = _start("train", spec, hyperparameters, data_root, work, isolation, seed,
                                           snapshots=work / "models")
            _load(trainer, trainer_seen, spec, model_path)
            examples = _hook(trainer, "calibration", f"{spec.name} cannot give int8 calibration examples",
                             count=inference_engines.CALIBRATION_EXAMPLES)
        finally:
            if trainer is not None:
                trainer.kill()
        np.save(folder / "calibration.npy", np.ascontiguousarray(examples), allow_pickle=False)
        request["calibration"] = str(folder / "calibration.npy")
        calibration = {"source": "training set, from a trainer-role worker whose view holds the training files only",
                       "examples": int(len(examples)), "requested": inference_engines.CALIBRATION_EXAMPLES,
                       "selection": f"a random subset drawn with seed {seed}, unaugmented",
                       "sha256": hashlib.sha256(np.ascontiguousarray(examples).tobytes()).hexdigest()}
    (folder / "request.json").write_text(json.dumps(request), encoding="utf-8")
    # The timing process is a judge process (harness/judge.py) of the harness's own interpreter, where the
    # runtimes are pinned (requirements/infer-*.txt in the tools environment, /opt/harness in an image): it
    # ran the reference's interpreter once, whose site-packages held whatever `onnxruntime` the entrant's
    # requirements installed, and that build timed 0.070 ms against the honest 0.945 ms (issue 46).
    proc = subprocess.run(judge.command("harness.inference_engines", str(folder / "request.json")), cwd=folder,
                          env=judge.environment(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          preexec_fn=kernel.dies_with_harness())
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()] or [f"exit {proc.returncode}"]
        if proc.returncode == 2 and lines[-1].startswith("error: "):
            raise UsageError(lines[-1][len("error: "):])
        raise RuntimeFailed(f"--runtime {runtime} failed on the exported model: {lines[-1][:400]}")
    facts = json.loads((folder / "facts.json").read_text(encoding="utf-8"))
    outputs = np.load(folder / "outputs.npy", allow_pickle=False)
    latencies = np.load(folder / "latencies.npy", allow_pickle=False)
    if len(outputs) != n or len(latencies) != n:
        raise RuntimeFailed(f"--runtime {runtime} returned {len(outputs)} outputs for {n} inputs")
    files = {"model.onnx": folder / "model.onnx"}
    if precision == "int8":
        files["model.int8.onnx"] = folder / "model.int8.onnx"
    return {"outputs": list(outputs), "latencies": latencies, "items": n, "files": files,
            "runtime": runtime, "runtime_version": facts.pop("runtime_version"),
            "precision": {"requested": precision, "used": facts.pop("precision_used")},
            "threads": threads, "timer": facts.pop("timer"), "example": EXAMPLE_EXPORTED,
            "round_trip_overhead_ms": None,
            "exported_model": {"format": "onnx", "sha256": inference_engines.sha256(folder / "model.onnx"),
                               "bytes": (folder / "model.onnx").stat().st_size, **facts.pop("model")},
            **({"quantized_model_sha256": facts.pop("quantized_model_sha256")} if precision == "int8" else {}),
            "calibration": calibration,
            "runtime_settings": {k: v for k, v in facts.items()
                                 if k not in ("runtime", "precision_requested", "threads", "items")}}


def _round_trip_ms(worker, calls: int = 200) -> float:
    """The median round trip of an empty request: what the channel adds to every latency."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        worker.call("noop")
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1000.0)


def summary_lines(result: dict) -> list[str]:
    lat = result["latency_ms"]
    figure = get_task(result["task"]).kind.figure(result["metric"])
    how = (f"round trips to the sandboxed model; an empty one takes {result['round_trip_overhead_ms']:.3f} ms"
           if result.get("round_trip_overhead_ms") is not None else "each runtime call, timed in the harness's runtime process")
    precision = result.get("precision") or {}
    lines = [
        f"runtime {result.get('runtime', 'reference')} {result.get('runtime_version', '')}, precision "
        f"{precision.get('requested', 'fp32')} (used: {precision.get('used', '?')}), {result.get('threads')} threads",
        f"{result['items']} items, batch 1: mean {lat['mean']:.3f} ms  p50 {lat['p50']:.3f}  "
        f"p90 {lat['p90']:.3f}  p99 {lat['p99']:.3f}  ({how})",
        f"{result['metric']} {figure.said(result['metric_value'])} "
        f"({'reaches' if result['reached_threshold'] else 'does NOT reach'} the {figure.said(result['threshold'])} threshold)",
    ]
    if result["cost_per_10k_items_usd"] is not None:
        lines.append(f"cost per 10,000 items: ${result['cost_per_10k_items_usd']:.6f}")
    reasons = result.get("unofficial_reasons") or []
    lines.append("official: yes" if result.get("official") else f"not official: {'; '.join(reasons)}")
    lines.append(f"results: {result['out_dir']}")
    return lines


