"""The estimate cells of the demo's tables: an estimate ± its standard error, or what the
demo is still waiting for.

Before the aggregator has folded a report its estimates are not numbers (NaN); a key
whose estimated holders are still none has no mean. The cells say so in words (``no
reports yet``, ``too few reports``) instead of printing ``nan ± nan`` or ``undefined``.
"""

from __future__ import annotations

import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.estimation.estimate import Estimate

#: a cell's text before the estimate has any report behind it
NO_REPORTS = "no reports yet"
#: a mean cell's text while the reports so far estimate no holder of the key
TOO_FEW = "too few reports"
#: the widths of the frequency and mean cells
FREQUENCY_WIDTH = 17
MEAN_WIDTH = 19


def has_reports(estimate: Estimate | None) -> bool:
    """Whether ``estimate`` exists and stands on at least one report."""
    return estimate is not None and estimate.n_reports > 0


def frequency_cell(estimate: Estimate | None, i: int) -> str:
    """Estimated frequency of key ``i`` ± one standard error (17 wide)."""
    if estimate is None or not has_reports(estimate) or not np.isfinite(estimate.frequency[i]):
        return f"{NO_REPORTS:>{FREQUENCY_WIDTH}}"
    return f"{estimate.frequency[i]:8.4f} ± {estimate.frequency_stderr[i]:6.4f}"


def mean_cell(collection: Collection, estimate: Estimate | None, i: int) -> str:
    """Estimated mean of key ``i`` ± one standard error, in collection units (19 wide)."""
    if estimate is None or not has_reports(estimate):
        return f"{NO_REPORTS:>{MEAN_WIDTH}}"
    m = collection.raw_mean(estimate.mean[i : i + 1])[0]
    ms = collection.raw_scale(estimate.mean_stderr[i : i + 1])[0]
    if not np.isfinite(m):
        return f"{TOO_FEW:>{MEAN_WIDTH}}"
    return f"{m:9.3f} ± {ms:7.3f}" if np.isfinite(ms) else f"{m:{MEAN_WIDTH}.3f}"
