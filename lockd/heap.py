"""Giving the memory that start-up freed back to the kernel.

lockd's start-up allocates far more than it keeps: compiling nothing (the image ships .pyc files) but
importing some 380 modules, parsing the policy file, and in cluster mode decoding the first list of the
node's pods, of which only a lean copy is kept. glibc's malloc keeps what was freed in its heap for
reuse, so a lockd at rest would carry that peak for its whole life on every node. `malloc_trim(0)`
(glibc, malloc_trim(3)) returns the free pages; it is called once lockd is ready, and never on a request.
Elsewhere than glibc (musl, macOS) there is no such call and nothing is done.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def trim() -> bool:
    """Ask glibc to give free heap pages back to the kernel; whether it could be asked."""
    import ctypes  # here, not at import: ~0.2 MiB, and only this one call needs it

    try:
        libc = ctypes.CDLL("libc.so.6")
        malloc_trim = libc.malloc_trim
    except (OSError, AttributeError):
        logger.debug("no glibc malloc_trim here; freed heap memory stays with the process")
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    malloc_trim(0)
    return True
