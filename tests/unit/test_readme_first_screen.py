"""The README's first screen tells a newcomer what to install, the two commands, and how to
log in to the dashboard and to a VM (issue 19: it left out Python >= 3.11 and python3-venv)."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_SCREEN = 50   # lines


def first_screen() -> str:
    return "\n".join((ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN])


def test_the_first_screen_names_the_prerequisites_the_project_declares():
    text = first_screen()
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    version = re.fullmatch(r">=\s*(3\.\d+)", setup["options"]["python_requires"].strip()).group(1)
    assert f"Python {version} or newer" in text and "python3-venv" in text


def test_the_first_screen_has_the_two_commands_and_both_logins():
    text = first_screen()
    assert "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/gpu-tenancy demo" in text
    assert "\nscripts/run-tests\n" in text and (ROOT / "scripts/run-tests").stat().st_mode & 0o111
    assert "http://127.0.0.1:8779/dashboard:" in text and "ml-vision" in text and "`member`" in text
    assert re.search(r"`ssh \w+@[\d.]+`", text) and "servers[].ssh" in text
