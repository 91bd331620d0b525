"""Deferring CPython's full garbage collections while the simulator works.

A simulated cluster is millions of small, long-lived, acyclic dicts and lists (API objects in
the store, the scheduler's records). CPython's cyclic collector walks *every* tracked object on
each full (oldest-generation) collection, and it starts one each time the survivors grew by a
quarter, so on a 100,000-GPU cluster full collections took half of the run time while freeing
almost nothing (reference counting frees these objects; they hold no cycles). While the
simulator builds nodes or settles the cluster, the youngest generations are still collected as
usual (short-lived cycles, e.g. an exception's traceback, are freed within a few hundred
allocations) and only the full walk waits until the work returns, when the normal thresholds
are back. Nothing changes what the simulation computes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: a third threshold no run reaches: the oldest generation is not collected automatically
_NEVER = 2**30


@contextmanager
def full_collections_deferred() -> Iterator[None]:
    """Within: automatic collections of the oldest generation wait (nested uses are fine)."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], _NEVER)
    try:
        yield
    finally:
        gc.set_threshold(*before)
