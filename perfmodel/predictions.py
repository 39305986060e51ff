"""The answer type of every prediction route: per-row throughput, its interval and confidence. Pure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Predictions:
    """Predictions for a batch of rows, in row order (plain lists, one entry per row).

    ``low``/``high`` bound ``samples_per_s`` (the ~80% interval); ``iters_low``/``iters_high`` bound
    ``iters_per_s``. ``low_confidence`` marks rows whose model or GPU was not known to the zoo/catalogue.
    """

    samples_per_s: list[float]
    iters_per_s: list[float]
    low: list[float]
    high: list[float]
    iters_low: list[float]
    iters_high: list[float]
    low_confidence: list[bool]

    def __len__(self) -> int:
        return len(self.samples_per_s)
