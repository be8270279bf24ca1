"""``python3 -m purlin_bench.plans --schema``: print the plan file's JSON
Schema, the text committed as docs/plan.schema.json."""

from __future__ import annotations

import sys

from purlin_bench.plans.schema import schema_text

USAGE = "usage: python3 -m purlin_bench.plans --schema > docs/plan.schema.json"


def main(argv: list[str]) -> int:
    if argv != ["--schema"]:
        print(USAGE, file=sys.stderr)
        return 2
    sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
