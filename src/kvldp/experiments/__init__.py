"""``kvldp evaluate --experiment NAME``: the papers' experiments, reproduced (docs/mechanisms.md,
*Experiments*), and kvldp's own studies (docs/privacy.md)."""

from __future__ import annotations

from kvldp.experiments import change_times, fhr_zipf, horigome, instantaneous_price, pckv_synthetic, sun
from kvldp.experiments.model import Experiment
from kvldp.experiments.study import Study

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

#: studies that are not a grid of scored estimates (instantaneous randomization's price
#: and what it hides of change times)
STUDIES: dict[str, Study] = {s.name: s for s in (instantaneous_price.STUDY, change_times.STUDY)}
