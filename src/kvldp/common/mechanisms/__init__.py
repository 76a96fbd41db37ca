"""All mechanisms, registered by name on import (see :mod:`kvldp.common.mechanisms.registry`)."""

from kvldp.common.mechanisms import (
    f2m,
    fhr,
    grr,
    hr,
    ioh,
    ioh_hrr,
    kvoh,
    kvue,
    kvue_multi,
    olh,
    pckv,
    privkv,
    privkvm,
    ue,
)
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.registry import create, get, names

__all__ = [
    "Mechanism",
    "create",
    "f2m",
    "fhr",
    "get",
    "grr",
    "hr",
    "ioh",
    "ioh_hrr",
    "kvoh",
    "kvue",
    "kvue_multi",
    "names",
    "olh",
    "pckv",
    "privkv",
    "privkvm",
    "ue",
]
