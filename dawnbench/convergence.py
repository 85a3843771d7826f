"""The convergence guard (MLPerf's reference convergence points, in this benchmark's terms): a fixed
recipe's epochs-to-threshold distribution (dawnbench/data/convergence.toml, the maintainer's file, each
with its source), and the review flag of an entry that claims the recipe but converges in significantly
fewer epochs. A flag is not a refusal: it says "look at this one" on the entry's page.

    review_flags(results, task)   ["..."]: why runs of one entry are for review ([] when they are not)
"""
from __future__ import annotations

import math
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "convergence.toml"
ALPHA = 0.05            # MLPerf's level for a run that converges faster than its reference points


@dataclass(frozen=True)
class Recipe:
    name: str
    task: str
    threshold: float
    epochs: tuple[int, ...]
    hyperparameters: dict
    source: str

    def claimed_by(self, result: dict) -> bool:
        """Whether a run claims this recipe: its task and threshold, and every hyperparameter of it."""
        given = result.get("hyperparameters")
        return (result.get("task") == self.task and result.get("threshold") == self.threshold
                and isinstance(given, dict) and all(k in given and given[k] == v
                                                    for k, v in self.hyperparameters.items()))


def load(path: Path = DATA) -> list[Recipe]:
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    return [Recipe(name, r["task"], float(r["threshold"]), tuple(int(e) for e in r["epochs"]),
                   dict(r["hyperparameters"]), " ".join(r["source"].split())) for name, r in raw["recipes"].items()]


def p_fewer(epochs: list[int], reference: tuple[int, ...]) -> float:
    """The one-sided p that runs converging in `epochs` come from a recipe that takes `reference`'s epochs
    (H1: fewer). Welch's t-test, which for one run is the one-sample test of the reference's epochs
    against it; with no spread on either side, 0 when fewer, else 1."""
    spread = (statistics.variance(reference) / len(reference) if len(reference) > 1 else 0.0) + \
             (statistics.variance(epochs) / len(epochs) if len(epochs) > 1 else 0.0)
    if spread == 0:
        return 0.0 if statistics.fmean(epochs) < statistics.fmean(reference) else 1.0
    import warnings

    from scipy import stats
    if len(epochs) == 1:
        return float(stats.ttest_1samp(reference, epochs[0], alternative="greater").pvalue)
    with warnings.catch_warnings():      # one side without spread: scipy warns of a precision it keeps
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(epochs, reference, equal_var=False, alternative="less").pvalue)


def review_flags(results: list[dict], recipes: list[Recipe] | None = None) -> list[str]:
    """Why the converged runs of one entry (its run, or every run of its series) are for review: one line
    per recipe they claim and converge significantly faster than ([] when none)."""
    recipes = load() if recipes is None else recipes
    flags = []
    for recipe in recipes:
        claiming = [r for r in results if r.get("status") == "converged" and recipe.claimed_by(r)
                    and isinstance(r.get("epochs"), int) and not isinstance(r.get("epochs"), bool)]
        if not claiming:
            continue
        epochs = [r["epochs"] for r in claiming]
        p = p_fewer(epochs, recipe.epochs)
        if p < ALPHA and math.isfinite(p):
            flags.append(f"for review: converges in {statistics.fmean(epochs):g} epochs (over {len(epochs)} "
                         f"run{'s' if len(epochs) > 1 else ''}) with the hyperparameters of {recipe.name}, whose "
                         f"recipe takes {statistics.fmean(recipe.epochs):.2f} ({len(recipe.epochs)} runs: "
                         f"{recipe.source}); one-sided t-test p = {p:.2g} < {ALPHA:g}")
    return flags
