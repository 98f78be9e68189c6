"""lockd gives the heap its start-up freed back to the kernel: `heap.trim` reaches glibc's malloc_trim
where there is one (this test's machine, when it runs glibc) and does nothing elsewhere."""

from __future__ import annotations

import platform

import pytest

from lockd import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_reaches_glibc() -> None:
    garbage = [bytearray(512) for _ in range(20_000)]  # ~10 MiB of small blocks, then freed
    del garbage
    assert heap.trim() is True
