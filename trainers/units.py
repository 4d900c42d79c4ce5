"""Units, defined once: bytes in a GiB (every memory figure here is in GiB, 2^30 bytes)."""

GIB = 1024**3
