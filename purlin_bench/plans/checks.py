"""A plan's content checked past its JSON Schema: what the published schema
does not say yet, and what needs the registries' own checks.

A plan is code's input twice over: its parameters configure a datapath, and
``purlin export --format header`` writes its fields into C. So every string
that reaches generated code has the shape of what purlin writes there (a
``created`` time, a version), every parameter is one its strategy and
backend take, in their domain, and the rank counts agree with each other and
with the bound the rest of purlin holds.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from purlin_bench.base.errors import ProgramError, PurlinError
from purlin_bench.spec.instance import MAX_RANKS, MAX_RANKS_WHY

# What tune writes: datetime.isoformat() in UTC, seconds or finer.
_CREATED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?")
# A PEP 440 version (with a local part): the characters it may hold.
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}")
# Free text fields (a device name, a sweep name, the link): one line of
# printable characters, no longer than any real one.
_MAX_TEXT = 200
_LAYOUT_RANKS = re.compile(r"(\d+)(?:vr|proc-)|^(?:nvlink|pcie)-(\d+)$")

Fail = Callable[[str, str], Exception]


def check_content(data: dict[str, Any], fail: Fail) -> None:
    """Raise ``fail(field, why)`` for the first field of a schema-valid plan
    that is not what purlin itself would have written."""
    if not _CREATED.fullmatch(data["created"]):
        raise fail("created", f"{_short(data['created'])} is not an ISO 8601 date and time")
    if not _VERSION.fullmatch(data["package_version"]):
        raise fail("package_version", f"{_short(data['package_version'])} is not a package version")
    fp = data["fingerprint"]
    for where, text in (("fingerprint.device_name", fp["device_name"]), ("fingerprint.link", fp["link"]),
                        ("sweep.name", data["sweep"]["name"]), ("fingerprint.cpu_model", fp["cpu_model"])):
        if text is not None and (len(text) > _MAX_TEXT or not text.isprintable()):
            raise fail(where, f"{_short(text)}: expected one line of at most {_MAX_TEXT} printable characters")
    _check_ranks(data, fail)
    for i, entry in enumerate(data["entries"]):
        _check_config(entry["config"], f"entries[{i}].config", fail)


def _check_ranks(data: dict[str, Any], fail: Fail) -> None:
    ranks, fp = data["ranks"], data["fingerprint"]
    if ranks > MAX_RANKS:
        raise fail("ranks", f"{ranks}: at most {MAX_RANKS} ranks ({MAX_RANKS_WHY})")
    if fp["ranks"] != ranks:
        raise fail("fingerprint.ranks", f"{fp['ranks']} contradicts ranks {ranks}")
    match = _LAYOUT_RANKS.search(fp["layout"])
    if match and int(match.group(1) or match.group(2)) != ranks:
        raise fail("fingerprint.layout", f"{fp['layout']!r} is not a layout of {ranks} ranks")


def _check_config(config: dict[str, Any], where: str, fail: Fail) -> None:
    """The parameters as derive_program and the backend check them when the
    plan runs: refused here, when it is read, not at its first call."""
    from purlin_bench.backends import all_params
    from purlin_bench.strategies import get_strategy
    from purlin_bench.strategies.base import check_params as check_plan

    try:
        check_plan(config["strategy"], config["plan_params"], get_strategy(config["strategy"]).params)
    except ProgramError as exc:
        raise fail(f"{where}.plan_params", str(exc)) from None
    # Any backend's parameter, in its domain: which backend runs a plan is
    # the reader's choice (a CPU plan's parameters are inert on the CPU).
    known = all_params()
    for name, value in config["exec_params"].items():
        if name not in known:
            raise fail(f"{where}.exec_params", f"unknown datapath parameter {name!r} (known: {', '.join(known)})")
        try:
            known[name][0].check(value)
        except PurlinError as exc:
            raise fail(f"{where}.exec_params.{name}", str(exc)) from None


def _short(value: Any) -> str:
    # repr() escapes newlines and terminal controls: the error line stays one line.
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["check_content"]
