"""``kvldp evaluate --experiment NAME``: the papers' experiments, reproduced (docs/mechanisms.md,
*Experiments*)."""

from __future__ import annotations

from kvldp.experiments import fhr_zipf, horigome, pckv_synthetic, sun
from kvldp.experiments.model import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        horigome.TABLE4_EXPERIMENT,
        horigome.TABLE5_EXPERIMENT,
        sun.FIG1,
        sun.CONDITIONAL,
        pckv_synthetic.EXPERIMENT,
        fhr_zipf.EXPERIMENT,
    )
}
