"""On-demand cloud prices (data/prices.yaml): read and checked, looked up by `provider:instance`.

A result's cost is hours x usd_per_hour x nodes; the record a run keeps (`price` in result.json)
names the instance, the price, and where and when that price was published.

A host tool: images carry no prices. `dawnbench run|infer --instance PROVIDER:INSTANCE` looks the
instance up here and hands the harness its record (`--price-record JSON`); resolve_instance_args
does the same to an argument list, for the runners that start a harness elsewhere (containers).

Two tables: the one a run is priced from (`prices_file()`: $DAWNBENCH_PRICES, e.g. a site's own list,
else this checkout's) and the judge's, this checkout's `PRICES_FILE`, which `submit`, `validate` and
the leaderboard check and price every entry by (`JUDGE_TABLE`): the variable never swaps it, and they
say so when it is set (`override_note`).
"""
from __future__ import annotations

import argparse
import datetime
import difflib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness import safe_read
from harness.arguments import MAX_USD_PER_HOUR, path_problem
from harness.errors import UsageError

PRICES_FILE = Path(__file__).parent / "data" / "prices.yaml"
PRICES_ENV = "DAWNBENCH_PRICES"      # another prices file (e.g. a site's negotiated list price)

_FIELDS = {"provider", "instance", "accelerator", "accelerator_count", "vcpus", "usd_per_hour", "region",
           "date", "source", "note"}
_OPTIONAL = {"note"}
_TOP_FIELDS = {"version", "updated", "instances"}


class PriceError(UsageError):
    """An unknown instance or a malformed prices file; the message is one line."""


@dataclass(frozen=True)
class Price:
    provider: str
    instance: str
    accelerator: str | None
    accelerator_count: int
    vcpus: int | None
    usd_per_hour: float
    region: str
    date: str            # yyyy-mm-dd: when this figure was published at `source`
    source: str
    note: str = ""

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.instance}"

    def record(self) -> dict:
        """The `price` object of result.json and inference.json."""
        return {"instance": self.key, "usd_per_hour": self.usd_per_hour, "source": self.source,
                "date": self.date}


JUDGE_TABLE = PRICES_FILE          # what entries are checked and ranked by, whatever $DAWNBENCH_PRICES says


def prices_file() -> Path:
    return Path(os.environ.get(PRICES_ENV) or PRICES_FILE)


def override_note() -> str | None:
    """The line `submit`, `validate` and `leaderboard` print when $DAWNBENCH_PRICES is set: they do not
    read it (an entrant's table must not price, or vouch for, its own entry); None when it is not set."""
    other = os.environ.get(PRICES_ENV)
    if not other or Path(other).resolve() == PRICES_FILE.resolve():
        return None
    return (f"note: ${PRICES_ENV} ({other}) is not read here: an entry's price is checked against "
            f"{JUDGE_TABLE}, the table the leaderboard prices from")


def load(path: str | os.PathLike | None = None) -> dict[str, Price]:
    """Every instance of the prices file, by lower-cased `provider:instance`."""
    path = Path(path) if path else prices_file()
    try:
        import yaml  # PyYAML: a host tool's dependency (requirements/tools.txt), needed only to price
    except ModuleNotFoundError as e:
        raise PriceError(f"pricing an instance needs the {e.name} module: pip install -r requirements/tools.txt "
                         f"(or give --cost-per-hour USD)") from None
    problem = path_problem(path, ("a file",))           # a FIFO would block the read for ever
    if problem:
        raise PriceError(f"{path}: {problem}; set ${PRICES_ENV} to a prices file or unset it to use {PRICES_FILE}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PriceError(f"{path}: cannot read the prices file ({e.strerror or e}); "
                         f"set ${PRICES_ENV} to a prices file or unset it to use {PRICES_FILE}") from None
    try:
        raw = yaml.safe_load(text)   # plain data only: a tag that would build an object is refused
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise PriceError(f"{where}: not valid YAML: {problem}") from None
    if not isinstance(raw, dict):
        raise PriceError(f"{path}: expected a mapping with fields {', '.join(sorted(_TOP_FIELDS))}")
    unknown = sorted(map(str, set(raw) - _TOP_FIELDS))
    if unknown:
        raise PriceError(f"{path}: unknown top-level field {unknown[0]!r}; fields: {', '.join(sorted(_TOP_FIELDS))}")
    version = raw.get("version")
    if type(version) is not int or version < 1:
        raise PriceError(f"{path}: field 'version' must be a whole number >= 1 (got {version!r})")
    _date(raw.get("updated"), lambda problem: PriceError(f"{path}: field 'updated' {problem}"))
    entries = raw.get("instances")
    if not isinstance(entries, list) or not entries:
        raise PriceError(f"{path}: field 'instances' must be a non-empty list of instance records")
    prices: dict[str, Price] = {}
    for i, entry in enumerate(entries, 1):
        price = _check_entry(path, i, entry)
        if price.key.lower() in prices:
            raise PriceError(f"{path}: instance {price.key!r} is listed twice; keep one record per instance")
        prices[price.key.lower()] = price
    return prices


def lookup(name: str, path: str | os.PathLike | None = None) -> Price:
    """The price of `provider:instance` (case-insensitive), e.g. lookup("aws:p3.2xlarge")."""
    path = Path(path) if path else prices_file()
    prices = load(path)
    found = prices.get(str(name).strip().lower())
    if found:
        return found
    hint = "" if ":" in str(name) else " (give PROVIDER:INSTANCE, e.g. aws:p3.2xlarge)"
    raise PriceError(f"unknown instance {name!r}{hint}; {_close_matches(str(name), prices)}; "
                     f"the prices are in {path}: add the instance there with its on-demand price, date "
                     f"and source, or give --cost-per-hour USD")


def _close_matches(name: str, prices: dict[str, Price]) -> str:
    # Compare with the full keys and with the bare instance names, so "p3.2xlarge" finds aws's.
    candidates = {key: p.key for key, p in prices.items()}
    candidates.update({p.instance.lower(): p.key for p in prices.values()})
    close = difflib.get_close_matches(name.strip().lower(), list(candidates), n=8, cutoff=0.6)
    matches = list(dict.fromkeys(candidates[c] for c in close))[:4]
    if matches:
        return "close matches: " + ", ".join(matches)
    return "known: " + ", ".join(p.key for p in prices.values())


def _check_entry(path: Path, index: int, entry) -> Price:
    label = f"#{index}"
    if isinstance(entry, dict) and isinstance(entry.get("provider"), str) and isinstance(entry.get("instance"), str):
        label = f"{entry['provider']}:{entry['instance']}"

    def bad(field: str, problem: str) -> PriceError:
        return PriceError(f"{path}: instance {label}: field {field!r} {problem}")

    if not isinstance(entry, dict):
        raise PriceError(f"{path}: instance {label}: expected a record with fields "
                         f"{', '.join(sorted(_FIELDS - _OPTIONAL))}")
    unknown = sorted(map(str, set(entry) - _FIELDS))
    if unknown:
        raise bad(unknown[0], f"is not a prices field; fields: {', '.join(sorted(_FIELDS))}")
    missing = sorted(_FIELDS - _OPTIONAL - set(entry))
    if missing:
        raise bad(missing[0], "is missing")
    for field in ("provider", "instance"):
        value = entry[field]
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", value):
            raise bad(field, f"must be a name of letters, digits, '.', '_' or '-' (got {value!r})")
    count = entry["accelerator_count"]
    if type(count) is not int or count < 0:
        raise bad("accelerator_count", f"must be a whole number >= 0 (got {count!r})")
    accelerator = entry["accelerator"]
    if count == 0 and accelerator is not None:
        raise bad("accelerator", f"must be null for a CPU instance (accelerator_count 0), got {accelerator!r}")
    if count > 0 and (not isinstance(accelerator, str) or not accelerator.strip()):
        raise bad("accelerator", f"must name the accelerator model (got {accelerator!r})")
    vcpus = entry["vcpus"]
    if vcpus is not None and (type(vcpus) is not int or vcpus < 1):
        raise bad("vcpus", f"must be a whole number >= 1, or null (got {vcpus!r})")
    usd = entry["usd_per_hour"]
    if type(usd) not in (int, float) or not math.isfinite(usd) or not 0 < usd <= MAX_USD_PER_HOUR:
        raise bad("usd_per_hour", f"must be a positive number of US dollars per hour, at most "
                                  f"{MAX_USD_PER_HOUR:,} (one node; got {usd!r})")
    region = entry["region"]
    if not isinstance(region, str) or not region.strip():
        raise bad("region", f"must name the region the price is for (got {region!r})")
    date = _date(entry["date"], lambda problem: bad("date", problem))
    source = entry["source"]
    if not isinstance(source, str) or not re.fullmatch(r"https://\S+", source):
        raise bad("source", f"must be the https URL of the provider's pricing page (got {source!r})")
    note = entry.get("note", "")
    if note is None:
        note = ""
    if not isinstance(note, str):
        raise bad("note", f"must be text (got {note!r})")
    return Price(provider=entry["provider"], instance=entry["instance"], accelerator=accelerator,
                 accelerator_count=count, vcpus=vcpus, usd_per_hour=float(usd), region=region, date=date,
                 source=source, note=note)


def _date(value, error) -> str:
    """yyyy-mm-dd, given unquoted (YAML reads a date) or as a string."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        try:
            return datetime.date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise error(f"must be a date yyyy-mm-dd (got {value!r})")


# --- --instance: the host's side of a priced run ---------------------------------------------------

INSTANCE_OPTION = "--instance"
PRICE_OPTIONS = ("--cost-per-hour", "--price-record")    # the harness's: --instance replaces them


def instance_price_record(instance: str, price_given: bool = False) -> str:
    """The harness's `--price-record` value (JSON) for `--instance PROVIDER:INSTANCE`; `price_given`
    says a --cost-per-hour (or a record) was given too, which is refused."""
    if price_given:
        raise UsageError(f"give --instance or --cost-per-hour, not both: --instance takes its price from {prices_file()}")
    return json.dumps(lookup(instance).record(), separators=(",", ":"))


def table_disagreement(record: object, path: Path | None = None) -> str | None:
    """Why a price record (`price` of result.json or inference.json, or --price-record's JSON) names an
    instance of the prices table (`path`, default prices_file()) at another price than the table's, or
    None. A named instance is priced from the table, never by whoever wrote the record; an instance the
    table does not know is the recorder's own price (shown as such)."""
    if not isinstance(record, dict) or not isinstance(record.get("instance"), str):
        return None
    path = Path(path) if path is not None else prices_file()
    try:
        listed = load(path).get(record["instance"].strip().lower())
    except PriceError:
        return None
    usd = record.get("usd_per_hour")
    if listed is None or (type(usd) in (int, float) and math.isclose(usd, listed.usd_per_hour, rel_tol=1e-9)):
        return None
    return (f"{listed.key} at {usd!r} USD per hour is not the prices table's {listed.usd_per_hour:g} "
            f"({listed.date}, {listed.source}; {path})")


def check_price_record(text: str) -> None:
    """Refuse (one line) a --price-record that prices an instance of the table at another price: such a
    record is what `--instance` passes, and any other figure for that instance is not its price. A
    record that is not JSON is left to the harness's parser, which says what is wrong with it."""
    try:
        record = safe_read.parse_json(text, "a price record")
    except safe_read.Refused:
        return
    problem = table_disagreement(record)
    if problem:
        instance = record["instance"]
        raise PriceError(f"--price-record: {problem}: give --instance {instance} (the table's price), or "
                         f"--cost-per-hour USD for a price of your own (ranked as submitter-given)")


def add_instance_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(INSTANCE_OPTION, default=None, metavar="PROVIDER:INSTANCE",
                   help="the cloud instance it runs on, priced from dawnbench/data/prices.yaml (e.g. aws:p3.2xlarge); "
                        "instead of --cost-per-hour")


def apply_instance(args: argparse.Namespace) -> None:
    """Turn the parsed --instance into the harness's --price-record (and clear it), in place."""
    if args.instance is None:
        if getattr(args, "price_record", None) is not None:
            check_price_record(args.price_record)
        return
    given = args.cost_per_hour is not None or args.price_record is not None
    args.price_record = instance_price_record(args.instance, given)
    args.instance = None


def resolve_instance_args(args: list[str]) -> list[str]:
    """A harness run/infer argument list with `--instance X` (or `--instance=X`) replaced by
    `--price-record JSON`, X's record from the prices file; the list unchanged without --instance.
    Everything after `--` is left alone. Raises UsageError (one line) for an unknown instance, a
    malformed prices file, a missing value, --instance twice, or --instance with a price given."""
    out: list[str] = []
    instance, at = None, 0
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out += args[i:]
            break
        if arg == INSTANCE_OPTION or arg.startswith(INSTANCE_OPTION + "="):
            if arg == INSTANCE_OPTION:
                value = args[i + 1] if i + 1 < len(args) else None
                i += 2
            else:
                value = arg.partition("=")[2]
                i += 1
            if not value or value.startswith("-"):
                raise UsageError(f"{INSTANCE_OPTION} needs PROVIDER:INSTANCE, e.g. {INSTANCE_OPTION} aws:p3.2xlarge")
            if instance is not None:
                raise UsageError(f"{INSTANCE_OPTION} given twice ({instance}, {value}): give it once")
            instance, at = value, len(out)
            continue
        out.append(arg)
        i += 1
    options = out[:out.index("--")] if "--" in out else out
    for k, arg in enumerate(options):           # a record of the caller's: the table's price or refused
        if arg == "--price-record" and k + 1 < len(options):
            check_price_record(options[k + 1])
        elif arg.startswith("--price-record="):
            check_price_record(arg.partition("=")[2])
    if instance is None:
        return list(args)
    given = any(a in PRICE_OPTIONS or a.partition("=")[0] in PRICE_OPTIONS for a in options)
    out[at:at] = ["--price-record", instance_price_record(instance, given)]
    return out
