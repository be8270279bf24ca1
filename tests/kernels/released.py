"""The flags a line of generated compiled-kernel source releases, read the
way a reviewer would: a batched release lists them
(``u64* const r[N] = {...}; purlin_release<N>(r);``, one thread a flag),
a single one names its flag (``red_release(f1 + 4)``)."""

from __future__ import annotations

import re

BATCH = re.compile(r"u64\* const r\[(\d+)\] = \{([^}]*)\}; purlin_release<(\d+)>\(r\);")


def released(line: str) -> list[str]:
    batch = BATCH.search(line)
    if batch:
        flags = [f.strip() for f in batch.group(2).split(",")]
        assert int(batch.group(1)) == int(batch.group(3)) == len(flags), line
        assert "red_release(" not in line, line
        return flags
    return re.findall(r"red_release\(([^)]*)\)", line)


def released_in(text: str) -> list[str]:
    return [flag for line in text.splitlines() for flag in released(line)]
