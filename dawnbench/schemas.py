"""The entry formats as JSON Schema, versioned with the rules: data/schemas/entry-<kind>.<rules>.schema.json.

`entry-fields` holds every field an entry may carry (its description and an example make the
messages of `dawnbench validate`), `entry-train` and `entry-inference` what each kind requires and
forbids. The files of the current `harness.tasks.RULES_VERSION` are loaded: a rules bump without its
schemas fails at import, not at a user. JSON has no NaN, Infinity or integral floats, so here
`number` is finite and `integer` is a JSON integer; everything else is Draft 2020-12 as written.
"""
from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import harness.precision
import harness.tasks
from harness.arguments import MAX_COST_USD, MAX_ENTRY_USD_PER_HOUR, MAX_SECONDS, MAX_TEXT, MAX_USD_PER_HOUR
from harness.tasks import RULES_VERSION

if TYPE_CHECKING:
    import jsonschema

SCHEMA_DIR = Path(__file__).parent / "data" / "schemas"
RESULT_SCHEMA_FILE = Path(harness.tasks.__file__).parent / "data" / "result.schema.json"   # a run's result.json
KINDS = ("train", "inference")


def schema_file(name: str, rules_version: str = RULES_VERSION) -> Path:
    """data/schemas/entry-<name>.<rules version>.schema.json; name: fields, train or inference."""
    return SCHEMA_DIR / f"entry-{name}.{rules_version}.schema.json"


def _load(name: str) -> dict:
    with open(schema_file(name), encoding="utf-8") as f:
        return json.load(f)


SCHEMAS = {name: _load(name) for name in ("fields", *KINDS)}
with open(RESULT_SCHEMA_FILE, encoding="utf-8") as _f:
    RESULT_SCHEMA = json.load(_f)


def _from_tasks() -> None:
    """The enums and figure fields the tasks define are tasks.toml's, whatever the files say: a task
    added there (with its kind) is a task here. tests/test_task_kinds.py keeps the files equal to it."""
    tasks = harness.tasks.TASKS.values()
    RESULT_SCHEMA["properties"]["task"]["enum"] = list(harness.tasks.TASKS)
    RESULT_SCHEMA["properties"]["metric"]["enum"] = list(dict.fromkeys(t.metric for t in tasks))
    # each task's figure bounds its metric_value and threshold (a fraction at most 1; a loss has no bound)
    RESULT_SCHEMA.setdefault("allOf", []).extend(
        {"if": {"properties": {"task": {"const": t.name}}, "required": ["task"]},
         "then": {"properties": {"metric_value": {"maximum": t.figure.upper}, "threshold": {"maximum": t.figure.upper}}}}
        for t in tasks if t.figure.upper is not None)
    threshold = SCHEMAS["fields"]["properties"]["threshold"]
    if any(t.figure.upper is None for t in tasks):      # an entry's threshold: validate holds it to its task's figure
        threshold.pop("maximum", None)
        threshold["description"] = "a number above 0: the task's figure, as its threshold is written"
    # the words a run's precision may be are the harness's (harness.precision), whatever the file says
    RESULT_SCHEMA["properties"]["precision"]["properties"]["train"]["enum"] = [*harness.precision.PRECISIONS, None]
    SCHEMAS["fields"]["properties"]["precision"]["enum"] = list(harness.precision.PRECISIONS)
    properties = SCHEMAS["fields"]["properties"]
    for name, figure in harness.tasks.FIGURES.items():
        properties.setdefault(name, {"type": "number", "minimum": 0, "description": f"a number >= 0 ({figure.unit_words})",
                                     "examples": [figure.to_log(0.751)]})


_from_tasks()
FIELDS: dict[str, dict] = SCHEMAS["fields"]["properties"]
REQUIRED: tuple[str, ...] = tuple(SCHEMAS["fields"]["required"])
SUBFIELDS: dict[str, tuple[str, ...]] = {name: tuple(spec["properties"]) for name, spec in FIELDS.items()
                                         if "properties" in spec}

# The bounds an entry's figures and texts keep are harness.arguments' (the options' own): the schema file
# writes them out for other readers, and a file that says otherwise fails here, at import, not at a user.
BOUNDS = {
    ("costPerHour", "maximum"): MAX_ENTRY_USD_PER_HOUR,
    ("price", "usd_per_hour", "maximum"): MAX_USD_PER_HOUR,
    ("cost_usd", "maximum"): MAX_COST_USD,
    ("cost_per_10k_items_usd", "maximum"): MAX_COST_USD,
    ("cost", "maximum"): MAX_COST_USD / 1e4,            # one item of the 10,000 of cost_per_10k_items_usd
    ("tta_seconds", "maximum"): MAX_SECONDS,
    ("train_seconds", "maximum"): MAX_SECONDS,
    **{(name, "maxLength"): MAX_TEXT for name in ("author", "authorEmail", "framework", "codeURL", "model", "hardware")},
}


def _check_bounds() -> None:
    for (*path, key), bound in BOUNDS.items():
        spec = {"properties": FIELDS}
        for name in path:
            spec = spec["properties"][name]
        if spec.get(key) != bound:
            raise RuntimeError(f"{schema_file('fields')}: {'.'.join(path)}'s {key} is {spec.get(key)!r}, not "
                               f"harness.arguments' {bound!r}")


_check_bounds()


def _is_number(checker, value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:         # an int too large for a float
        return False


def _is_integer(checker, value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@cache
def _validator_class():
    """Draft 2020-12 with finite numbers and integers that are not booleans. jsonschema is imported
    here, on first use: dawnbench.cli builds every subcommand's options in environments without it."""
    import jsonschema
    return jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
            {"number": _is_number, "integer": _is_integer}))


@cache
def _validator(name: str):
    import referencing
    from referencing.jsonschema import DRAFT202012
    # A referenced schema that names its $schema would be checked by jsonschema's stock class for that
    # draft (`validator_for`), without the type checker above: the registry holds them without it.
    registry = referencing.Registry().with_resources(
        (schema["$id"], DRAFT202012.create_resource({k: v for k, v in schema.items() if k != "$schema"}))
        for schema in SCHEMAS.values())
    cls = _validator_class()
    return cls(SCHEMAS[name], registry=registry, format_checker=cls.FORMAT_CHECKER)


def errors(fields: object, kind: str | None) -> list[jsonschema.ValidationError]:
    """Every way `fields` breaks the schema of its kind (only the common fields' when the kind is
    unknown), in no particular order."""
    return list(_validator(kind if kind in KINDS else "fields").iter_errors(fields))


def result_errors(result: object) -> list[jsonschema.ValidationError]:
    """Every way a run's result.json breaks harness/data/result.schema.json, the field's first."""
    cls = _validator_class()
    found = cls(RESULT_SCHEMA, format_checker=cls.FORMAT_CHECKER).iter_errors(result)
    return sorted(found, key=lambda e: [str(k) for k in e.path])


def field(path: tuple) -> dict | None:
    """The schema of a field or subfield, ("latency_ms", "mean"); None for one the format does not name."""
    spec: dict | None = {"properties": FIELDS}
    for key in path:
        spec = spec.get("properties", {}).get(key) if isinstance(spec, dict) else None
    return spec if isinstance(spec, dict) else None


def example(path: tuple) -> str:
    """A value to write for a field, as JSON text."""
    spec = field(path) or {}
    return json.dumps(spec.get("examples", [None])[0], ensure_ascii=False)


def conforms(path: tuple, value: object) -> bool:
    """Whether `value` is a valid value of the field at `path` (an unknown field accepts anything)."""
    spec = field(path)
    cls = _validator_class()
    return spec is None or cls(spec, format_checker=cls.FORMAT_CHECKER).is_valid(value)
