"""The README's Quickstart and CI stay in step, and its example is the real file."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_quickstart_has_two_commands_install_and_run():
    commands = _quickstart_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    main, tests = commands
    assert "pip install -e ." in main and main.endswith("purlin bench all-reduce")
    assert "pip install -e '.[test]'" in tests and "pytest" in tests


def test_ci_runs_exactly_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    last = [line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")][-1]
    assert last == _quickstart_commands()[1]


def test_readme_yaml_example_is_examples_ring_shift():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n(name: ring-shift.*?)```", readme, re.S).group(1)
    assert yaml.safe_load(block) == yaml.safe_load((ROOT / "examples" / "ring-shift.yaml").read_text())
