"""The eval set a run or an inference scores: how many predictions are asked for, which are left out
of the score (ImageNet's blacklist), and whether its size is the task's."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalSet:
    """The eval set a run scores: `examples` predictions are asked for, all but the `dropped` ones
    (ImageNet's blacklist) are scored."""
    task: object
    examples: int
    dropped_indices: object = None

    @property
    def dropped(self) -> int:
        return 0 if self.dropped_indices is None else len(self.dropped_indices)

    @property
    def scored(self) -> int:
        return self.examples - self.dropped

    def reasons(self) -> list[str]:
        """Why a run on this eval set is not official: a fixture's or a subset's size."""
        if self.examples == self.task.eval_examples:
            return []
        return [f"the eval set has {self.examples} examples, not the {self.task.eval_examples} of the "
                f"{self.task.name} task (fixture or subset data)"]
