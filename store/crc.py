"""The store's one checksum: CRC-32 (the zlib / gzip polynomial), from ISA-L when installed.

Why ISA-L: the writer computes a CRC over every record it frames, on the commit path, and
recovery and ``entrepot check`` over every record they read. ``isal_zlib.crc32`` gives the
same values as ``zlib.crc32`` (the on-disk format is unchanged: files written with either
read back with either) with a carry-less-multiply kernel, several times faster for a
record's payload and header. Without the wheel (a platform it is not built for) the
standard library's is used.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["crc32", "ACCELERATED"]

_Crc = Callable[..., int]

try:
    from isal.isal_zlib import crc32 as _isal_crc32
except ImportError:  # pragma: no cover - the wheel exists for the platforms we ship on
    import zlib

    crc32: _Crc = zlib.crc32
    ACCELERATED = False
else:
    crc32 = _isal_crc32
    ACCELERATED = True
