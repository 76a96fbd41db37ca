"""Give freed heap memory back to the operating system after each refit.

Folding a fetch allocates transient arrays (decoded columns, masks, sort buffers) whose
size follows the fetch, not the stream. glibc keeps freed heap pages, and raises its
mmap threshold after large frees, so without help the aggregator's resident memory
settles at the high-water mark of its largest fetch rather than at its live state — a
long-running process looks like it leaks. ``malloc_trim(0)`` returns the free pages;
it costs well under a millisecond per call at these heap sizes and runs once per refit.
On other C libraries (musl, macOS) it is absent and this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> None:
    """Release free heap pages to the OS (glibc), or do nothing."""
    if _TRIM is not None:
        _TRIM(0)
