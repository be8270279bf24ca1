"""The one size grammar (purlin_bench.base.sizes) and that every reader of a size uses it."""

from __future__ import annotations

import pytest

from purlin_bench.base.errors import PurlinError
from purlin_bench.base.sizes import MAX_BYTES, SizeError, format_bytes, parse_bytes

K, M, G, T = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("0", 0),
        ("8", 8),
        ("  8 ", 8),
        ("8B", 8),
        ("8b", 8),
        ("1000", 1000),
        ("64K", 64 * K),
        ("64k", 64 * K),
        ("64KB", 64 * K),
        ("64KiB", 64 * K),
        ("64kib", 64 * K),
        ("64 K", 64 * K),
        ("1M", M),
        ("1MiB", M),
        ("1G", G),
        ("3gb", 3 * G),
        ("2T", 2 * T),
        ("2TiB", 2 * T),
        ("1.5M", 3 * M // 2),
        ("0.5K", 512),
        ("1.0", 1),
        ("0.0625K", 64),
        ("007K", 7 * K),
        (4096, 4096),  # a YAML number
        (str(MAX_BYTES), MAX_BYTES),
        ("1048576T", MAX_BYTES),
    ],
)
def test_accepted(text, nbytes):
    assert parse_bytes(text, "--x") == nbytes


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("-1", "must not be negative"),
        ("-4K", "must not be negative"),
        (-1, "must not be negative"),
        ("4Q", "units K, M, G, T"),
        ("4P", "units K, M, G, T"),
        ("4iB", "units K, M, G, T"),
        ("K", "units K, M, G, T"),
        ("lots", "units K, M, G, T"),
        ("1e6", "units K, M, G, T"),
        (".5K", "units K, M, G, T"),
        ("1.", "units K, M, G, T"),
        ("4KK", "units K, M, G, T"),
        ("1.5", "not a whole number of bytes"),
        ("0.1K", "not a whole number of bytes"),
        ("1." + "1" * 60 + "T", "not a whole number of bytes"),
        (str(MAX_BYTES + 1), "above the largest size"),
        ("1048577T", "above the largest size"),
        ("9" * 5000, "above the largest size"),
        (MAX_BYTES + 1, "above the largest size"),
        (True, "expected a size"),
        (1.5, "expected a size"),
        (None, "expected a size"),
    ],
)
def test_refused_with_one_line_naming_the_field(text, why):
    with pytest.raises(SizeError) as info:
        parse_bytes(text, "--slice-bytes")
    message = str(info.value)
    assert isinstance(info.value, PurlinError)
    assert message.startswith("--slice-bytes: ") and why in message and "\n" not in message
    assert info.value.why == message[len("--slice-bytes: ") :]


def test_the_bound_is_named_in_the_error():
    with pytest.raises(SizeError, match=r"2\*\*60"):
        parse_bytes("2000000T", "--maxbytes")


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0"),
        (8, "8"),
        (1000, "1000"),
        (64 * K, "64K"),
        (3 * M // 2, "1536K"),
        (M, "1M"),
        (3 * G, "3G"),
        (5 * T, "5T"),
        (T + 1, str(T + 1)),
    ],
)
def test_format_is_exact_and_round_trips(nbytes, text):
    assert format_bytes(nbytes) == text
    assert parse_bytes(format_bytes(nbytes), "x") == nbytes


def test_sizes_module_imports_nothing_of_the_package_but_errors():
    import ast
    import inspect

    import purlin_bench.base.sizes as sizes

    imported = [n.module for n in ast.walk(ast.parse(inspect.getsource(sizes))) if isinstance(n, ast.ImportFrom)]
    assert [m for m in imported if m and m.startswith("purlin_bench")] == ["purlin_bench.base.errors"]
