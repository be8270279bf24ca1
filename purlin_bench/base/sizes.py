"""The one grammar for byte sizes, read from the command line and from sweep files.

A size is a whole number of bytes, optionally with a unit K, M, G or T
(powers of 1024, as nccl-tests reads -b/-e), optionally followed by B or iB,
in any case: ``8``, ``64K``, ``64kb``, ``1MiB``, ``1.5M``. A fraction is
accepted only where it names whole bytes (``1.5K`` is 1536, ``1.5`` is not a
size). This module sits below everything else so that every reader of a size,
CLI option or YAML field, agrees on what it means.
"""

from __future__ import annotations

import re
from fractions import Fraction

from purlin_bench.base.errors import PurlinError

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# Far above any buffer a GPU holds, yet small enough that a slip of the
# keyboard (an extra T) is caught here instead of as a failed allocation.
MAX_BYTES = 1 << 60

_SIZE = re.compile(r"(\d+)(?:\.(\d+))?\s*(?:([KMGT])(?:I?B)?|B)?", re.IGNORECASE)
_EXAMPLES = "8, 64K, 1.5M, 1GiB or 2T"


class SizeError(PurlinError):
    """A size that does not parse; ``why`` is the reason without the field's name,
    for callers (sweep files) that name the field their own way."""

    def __init__(self, what: str, why: str):
        super().__init__(f"{what}: {why}")
        self.why = why


def parse_bytes(text: str | int, what: str) -> int:
    """'64K' -> 65536. ``what`` names the option or field in the error.

    An int (a YAML number) is taken as bytes; a bool is refused, since YAML
    reads ``yes`` as True and that is never meant as 1 byte."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise SizeError(what, f"expected a size like {_EXAMPLES}, got {text!r}")
    if isinstance(text, int):
        return _bounded(text, what, text)
    raw = text.strip()
    if not raw:
        raise SizeError(what, f"empty: expected a size like {_EXAMPLES}")
    if raw.startswith("-"):
        raise SizeError(what, f"must not be negative, got '{text}'")
    match = _SIZE.fullmatch(raw)
    if not match:
        raise SizeError(what, f"expected a size like {_EXAMPLES} (units K, M, G, T, powers of 1024), got '{text}'")
    whole, frac, unit = match.group(1).lstrip("0"), (match.group(2) or "").rstrip("0"), (match.group(3) or "").upper()
    # Checked on the digits, before any arithmetic: int() of thousands of
    # digits is slow or refused outright by Python's digit limit. 19 digits
    # bound 2**60, and with more than 40 significant decimals no unit up to
    # 2**40 can make a whole number of bytes.
    if len(whole) > 19:
        raise SizeError(what, f"'{text}' is above the largest size, {format_bytes(MAX_BYTES)} (2**60 bytes)")
    if len(frac) > 40:
        raise SizeError(what, f"'{text}' is not a whole number of bytes")
    value = (Fraction(int(whole or "0")) + (Fraction(int(frac), 10 ** len(frac)) if frac else 0)) * UNITS[unit]
    if value.denominator != 1:
        raise SizeError(what, f"'{text}' is not a whole number of bytes ({float(value):g})")
    return _bounded(int(value), what, text)


def _bounded(n: int, what: str, text: str | int) -> int:
    if n < 0:
        raise SizeError(what, f"must not be negative, got {text!r}")
    if n > MAX_BYTES:
        raise SizeError(what, f"{text!r} is above the largest size, {format_bytes(MAX_BYTES)} (2**60 bytes)")
    return n


def format_bytes(n: int) -> str:
    """65536 -> '64K': the largest unit that divides n exactly, so that
    ``parse_bytes(format_bytes(n)) == n`` (1000 stays '1000')."""
    for unit in ("T", "G", "M", "K"):
        if n >= UNITS[unit] and n % UNITS[unit] == 0:
            return f"{n // UNITS[unit]}{unit}"
    return str(n)


def counted(n: int, noun: str) -> str:
    """'1 rank', '8 ranks': counts said to users agree with their number
    (a one-rank bench said "1 ranks", a one-bucket tune "1 buckets")."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
