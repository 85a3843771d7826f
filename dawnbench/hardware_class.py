"""An entry's hardware class: the accelerator model and how many (`8 x V100`), or the CPU model and its
cores (`CPU: Intel Xeon Platinum 8124M, 36 cores`), so that the board can filter like with like.

The class is derived from the hardware the harness recorded for the entry's run (`N x <GPU name>` or
`<CPU model> (K cores...)`, harness.environment.hardware_label) where there is one, else from the
entry's `hardware` text, which DAWNBench v1 entries wrote freely ("Tesla V100 * 8 GPU / 32 GB",
"16 * 8 * Tesla-V100", "1/4 of a TPUv2 Pod", "p3.16xlarge"); an instance name the judge's prices table
knows gives its accelerators. What cannot be read is said ("unclassified"), never guessed: a model
named without a count is "V100 (count not given)".
"""
from __future__ import annotations

import re

from dawnbench import entries, prices
from dawnbench.entries import Entry

UNCLASSIFIED = "unclassified"

# An accelerator model as entries name it: a GPU family letter and digits (V100, P4, K80, A10G, H100), a
# GeForce (GTX 1080 Ti, RTX 2080, also written "2080 RTX"), or a TPU generation.
_GPU = r"(?:(?:GTX|RTX)[\s-]?\d{3,4}(?:\s?Ti)?|\d{4}\s?RTX|[VPKMTAHL]\d{1,3}[A-Z]?)"
_MODEL = re.compile(rf"(?<![A-Za-z0-9])({_GPU})(?![A-Za-z0-9])")
_PREFIX = r"(?:\s*GPUs?\s*\(?)?(?:\s*N[Vv]idia)?(?:\s*GeForce)?(?:\s*Tesla)?[\s-]*"
_COUNTED = (
    re.compile(rf"(\d+)\s*[*x\u00d7]\s*(\d+)\s*[*x\u00d7]{_PREFIX}{_GPU}"),                  # 16 * 8 * Tesla-V100
    re.compile(rf"(\d+)\s+nodes?\b.*?\((\d+)\s*[*x\u00d7]{_PREFIX}{_GPU}.*each node"),      # 8 nodes (8*P100 ... each node)
)
# 8 * V100, 1 K80, 4x GTX 1080 Ti
_COUNT_BEFORE = re.compile(rf"(?<![\w./])(\d+)\s*(?:[*x\u00d7]\s*)?{_PREFIX}({_GPU})(?![A-Za-z0-9])")
_COUNT_AFTER = re.compile(rf"({_GPU})\s*\*\s*(\d+)")                                      # Tesla V100 * 8 GPU, V100*1
_TPU = re.compile(r"TPU\s*-?\s*(v\d)?", re.I)
_POD = re.compile(r"(1/\d+|half|quarter)\s+of\s+a\s+TPU\s*(v\d)?\s*Pod|TPU\s*(v\d)?\s*Pod", re.I)
_CORES = re.compile(r"\((\d+) cores\b")              # the harness's CPU label
_CPU_MODEL = re.compile(r"(Xeon(?:\(\w+\))?\s+[\w ]*?\d{3,5}\w*\+?|EPYC\s+\w+|Core\s+i\d[-\w]*)", re.I)


def short_gpu(name: str) -> str | None:
    """The model of an accelerator's name ("NVIDIA H100 80GB HBM3" -> "H100", "GTX-1080 Ti" -> "GTX 1080 Ti")."""
    found = _MODEL.search(name)
    if found is None:
        return None
    model = re.sub(r"[\s-]+", " ", found[1])
    swapped = re.fullmatch(r"(\d{4}) ?RTX", model)
    model = f"RTX {swapped[1]}" if swapped else re.sub(r"^(GTX|RTX)(\d)", r"\1 \2", model)
    return model.replace("1080Ti", "1080 Ti")


def _cpu(model: str) -> str:
    """A CPU model as a class names it: no (R), (TM), "CPU" or clock speed."""
    model = re.sub(r"\((?:R|TM|G)\)|\bCPU\b|@\s*[\d.]+\s*GHz|\bProcessor\b", " ", model)
    return re.sub(r"\s+", " ", model).strip(" ,")


def _instance(text: str) -> str | None:
    """The class of an instance of the judge's prices table named in `text` ("p3.16xlarge", "16 p3.16xlarge")."""
    try:
        table = prices.load(prices.JUDGE_TABLE)
    except prices.PriceError:
        return None
    for price in table.values():
        found = re.search(rf"(?:(\d+)\s+)?(?<![\w.-]){re.escape(price.instance)}(?![\w.-])", text, re.I)
        if found is None:
            continue
        many = int(found[1]) if found[1] else 1
        if price.accelerator_count and price.accelerator:
            model = short_gpu(price.accelerator) or ("TPU " + m[1] if (m := re.search(r"TPU (v\d)", price.accelerator))
                                                     else price.accelerator)
            return f"{price.accelerator_count * many} x {model}"
        if price.vcpus:
            return f"CPU: {price.instance}, {price.vcpus} vCPUs" + (f" x {many}" if many > 1 else "")
    return None


def of_text(text: str) -> str:
    """The class of a hardware description (the harness's label or an entry's free text)."""
    # an entry's hardware is at most 300 characters (its schema); a record's is cut to that too, so
    # that no string makes the patterns below slow
    text = text.strip()[:300]
    if not text:
        return UNCLASSIFIED
    label = re.fullmatch(r"(\d+) x (.+?)(?: \(\d+ nodes\))?", text)
    if label:                                   # the harness's label of a GPU run: every GPU of every node
        return f"{label[1]} x {short_gpu(label[2]) or label[2]}"
    cores = _CORES.search(text)
    if cores:                                   # the harness's label of a CPU run: rank 0's model and cores
        nodes = re.search(r", (\d+) nodes\)", text)
        return f"CPU: {_cpu(text[:cores.start()])}, {cores[1]} cores" + (f" x {nodes[1]} nodes" if nodes else "")
    pod = _POD.search(text)
    if pod:
        version = pod[2] or pod[3] or ""
        part = {"half": "1/2", "quarter": "1/4"}.get((pod[1] or "").lower(), pod[1])
        return f"TPU {version} Pod".replace("  ", " ") + (f" ({part})" if part else "")
    for pattern in _COUNTED:
        found = pattern.search(text)
        if found:
            return f"{int(found[1]) * int(found[2])} x {short_gpu(found[0][found.end(2) - found.start():])}"
    found = _COUNT_BEFORE.search(text)
    if found:
        return f"{found[1]} x {short_gpu(found[2])}"
    found = _COUNT_AFTER.search(text)
    if found:
        return f"{found[2]} x {short_gpu(found[1])}"
    listed = _instance(text)
    if listed:
        return listed
    model = short_gpu(text)
    if model:
        return f"{model} (count not given)"
    tpu = _TPU.search(text)
    if tpu:
        model = f"TPU {tpu[1] or ''}".strip()
        return f"1 x {model}" if re.search(r"\b1\s*TPU", text) else f"{model} (count not given)"
    cpu = _CPU_MODEL.search(text)
    if cpu:
        cores = re.search(r"(\d+)\s*(?:Cores|vCPUs?|CPU)\b", text, re.I)
        nodes = re.match(r"(\d+) nodes\b", text)
        return (f"CPU: {_cpu(cpu[1])}" + (f", {cores[1]} cores" if cores else "")
                + (f" x {nodes[1]} nodes" if nodes else ""))
    return UNCLASSIFIED


def of_entry(entry: Entry) -> str:
    """The entry's class: from the hardware the harness recorded for its run where it has one (which
    `submit --hardware` does not rename), else from its `hardware` text."""
    return of_text(entries.recorded_hardware(entry) or entries.text(entry.fields.get("hardware")))
