"""The SDK's warning when PCKV's padding length ``ell`` is below the pairs a device holds.

PCKV (``pckv_ue``, ``pckv_grr``) reports one of max(|S|, ell) slots of a device holding
the pairs S. A device holding more pairs than ell reports each of its keys with
probability 1/|S| instead of 1/ell, so its keys are under-counted by ell/|S| and the
collection's frequencies come out low, by an amount no standard error shows. Only the
device sees |S|, so the SDK says it: the first time a device's freshly perturbed report
truncates its pairs, the collector logs a warning (logger ``kvldp.producer``) naming the
pairs, ell and what to do. Once per device for the life of the collector, never per
report: a memoized re-send is the stored report, truncates nothing anew and warns
nothing, and a device that keeps its state across runs warns again only when it derives
a new report after a restart. A gateway's block of devices gets one record, naming a few.

A block warns only when the pairs it leaves uncounted, sum(max(|S| - ell, 0)) over its
devices, are at least :data:`UNDERCOUNT_WARN` of all its pairs: a population where a few
devices hold a pair more than ell loses a small share (1.8% for the README's ``ell = 2``
over three keys), which is the trade-off ``kvldp advise`` makes against the variance a
larger ell adds, and no warning would be true advice for it. One device holding more
pairs than ell always loses at least 1/(ell + 1) of them, and is warned.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.mechanisms.pckv import PCKV
from kvldp.common.primitives import IntArray
from kvldp.producer.pairs import device_key

#: devices a warning names before it counts the rest
NAMED = 5
#: the share of a block's pairs left uncounted from which it warns
UNDERCOUNT_WARN = 0.05


class TruncationWarner:
    """Remembers which devices were warned that ``ell`` truncates their pairs."""

    def __init__(self, collection: Collection, logger: logging.Logger) -> None:
        mechanism = collection.mechanism
        #: the padding length, or None for a mechanism that does not truncate
        self.ell = mechanism.ell if isinstance(mechanism, PCKV) else None
        self.name = collection.name
        self.logger = logger
        self.warned: set[bytes] = set()

    def check(self, sizes: IntArray, device_ids: Sequence[str | bytes | int]) -> None:
        """Warn about the devices (their pair counts ``sizes``) that hold more pairs than
        ell and were not warned before."""
        if self.ell is None:
            return
        lost = int(np.maximum(sizes - self.ell, 0).sum())
        if not lost or lost < UNDERCOUNT_WARN * int(sizes.sum()):
            return
        fresh: list[tuple[str, int]] = []
        for u in np.flatnonzero(sizes > self.ell).tolist():
            key = device_key(device_ids[u])
            if key not in self.warned:
                self.warned.add(key)
                fresh.append((key.decode(errors="replace"), int(sizes[u])))
        if not fresh:
            return
        advice = (
            "PCKV reports one of {} pairs, so {} keys are under-counted by ell/pairs ({:.0%} of the "
            "pairs sent here go uncounted) and the collection's frequencies come out low; raise ell in the "
            "collection's [params] to cover the pairs devices hold (kvldp advise --dataset on a sample "
            "of devices weighs this against the variance a larger ell adds)"
        ).format(
            *(("its", "its") if len(fresh) == 1 else ("each device's", "their")),
            lost / int(sizes.sum()),
        )
        if len(fresh) == 1:
            device, pairs = fresh[0]
            self.logger.warning(
                "collection %s: device %s holds %d pairs, more than ell=%d: %s",
                self.name,
                device,
                pairs,
                self.ell,
                advice,
            )
            return
        named = ", ".join(f"{device}: {pairs} pairs" for device, pairs in fresh[:NAMED])
        more = f", and {len(fresh) - NAMED} more" if len(fresh) > NAMED else ""
        self.logger.warning(
            "collection %s: %d devices hold more pairs than ell=%d (%s%s): %s",
            self.name,
            len(fresh),
            self.ell,
            named,
            more,
            advice,
        )
