"""Words the command lines share."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 run`, `3 runs`: a count with its noun in the number it takes (issue 37: `1 runs`)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
