"""Type stub of the compiled tree walk (``perfmodel/_forest.c``; optional, see ``setup.py``)."""

from typing_extensions import Buffer

def walk(
    x: Buffer,
    nf: int,
    roots: Buffer,
    feature: Buffer,
    threshold: Buffer,
    child: Buffer,
    value: Buffer,
    depth: int,
    base: float,
    out: Buffer,
    /,
) -> None:
    """Sum of leaf values plus ``base`` per row of ``x`` (float32, rows x ``nf``), written to ``out``."""
