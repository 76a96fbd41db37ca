"""All mechanisms, registered by name on import (see :mod:`common.mechanisms.registry`)."""

from common.mechanisms import f2m, fhr, grr, hr, ioh, ioh_hrr, kvoh, kvue, olh, pckv, privkv, privkvm, ue
from common.mechanisms.base import Mechanism
from common.mechanisms.registry import create, get, names

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
    "names",
    "olh",
    "pckv",
    "privkv",
    "privkvm",
    "ue",
]
