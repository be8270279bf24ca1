"""parse_json's checks scan the text before they walk values (a 16 MiB plan took 5 s when
every value went through Python): what lives inside strings must not count."""

from __future__ import annotations

import pytest

from purlin_bench.base.textfile import MAX_DIGITS, MAX_JSON_DEPTH, parse_json


class Refused(Exception):
    pass


def parse(text: str):
    return parse_json(text, "p.json", Refused)


def test_nesting_is_counted_to_the_bound_and_no_further():
    assert parse("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    deep = "[" * (MAX_JSON_DEPTH - 1) + '{"k": 1}' + "]" * (MAX_JSON_DEPTH - 1)
    with pytest.raises(Refused, match=f"nested more than {MAX_JSON_DEPTH} levels"):
        parse(deep.replace('{"k": 1}', '{"k": []}'))
    assert parse(deep)


def test_brackets_and_escapes_inside_strings_do_not_nest():
    text = '["[[[", {"k\\\\": "\\"{{{", "x": ["]]]"]}]'
    assert parse(text) == ["[[[", {"k\\": '"{{{', "x": ["]]]"]}]
    assert parse('["' + "[" * 500 + '"]') == ["[" * 500]
    # An escaped quote does not end the string: the brackets after it are text too.
    assert parse('["\\"' + "[" * 100 + '"]') == ['"' + "[" * 100]
    with pytest.raises(Refused, match="nested more than"):  # an escaped backslash does end it
        parse('["\\\\", ' + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "]")


def test_a_long_number_is_refused_but_long_digits_in_a_string_are_text():
    with pytest.raises(Refused, match=f"a number of {MAX_DIGITS + 1} digits"):
        parse("[" + "9" * (MAX_DIGITS + 1) + "]")
    assert parse('["' + "9" * (MAX_DIGITS + 1) + '", ' + "9" * MAX_DIGITS + "]")[1] == int("9" * MAX_DIGITS)


def test_a_lone_surrogate_is_refused_but_an_escaped_backslash_before_u_is_text():
    for escape in ("\\ud800", "\\uDC00", "\\uDFFF", "\\ud83d"):
        with pytest.raises(Refused, match="lone surrogate"):
            parse(f'["{escape}"]')
        with pytest.raises(Refused, match="lone surrogate"):
            parse(f'{{"{escape}": 1}}')
    assert parse('["\\\\ud800", "\\ud83d\\ude00"]') == ["\\ud800", "\U0001F600"]
