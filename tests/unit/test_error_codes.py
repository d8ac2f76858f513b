"""Every error code the service raises is in gpu_tenancy/error_codes.py: one list that
clients and the docs can read, and that a new code cannot bypass."""
from __future__ import annotations

import re
from pathlib import Path

import gpu_tenancy
from gpu_tenancy import error_codes

SOURCE = Path(gpu_tenancy.__file__).parent
LITERAL = re.compile(r"""["'](gpu_tenancy\.[a-z_]+)["']""")
NOT_ERROR_CODES = {"gpu_tenancy.cloud_drivers"}   # the cloud drivers' entry point group


def raised_codes() -> dict[str, Path]:
    found = {}
    for path in SOURCE.rglob("*.py"):
        if path.name == "error_codes.py":
            continue
        for code in LITERAL.findall(path.read_text()):
            found.setdefault(code, path)
    return {code: path for code, path in found.items() if code not in NOT_ERROR_CODES}


def test_every_code_the_service_raises_is_listed():
    codes = raised_codes()
    assert len(codes) > 20   # the scan finds them (the rest are named constants already)
    missing = {code: str(path.relative_to(SOURCE)) for code, path in codes.items() if code not in error_codes.ALL}
    assert not missing, f"add these to gpu_tenancy/error_codes.py: {missing}"


def test_the_list_holds_each_code_once_and_only_codes():
    names = [n for n in vars(error_codes) if n.isupper() and n not in ("PREFIX", "ALL")
             and isinstance(getattr(error_codes, n), str)]
    values = [getattr(error_codes, n) for n in names]
    assert len(values) == len(set(values))
    assert all(re.fullmatch(r"gpu_tenancy\.[a-z_]+", v) and v == error_codes.PREFIX + n.lower()
               for n, v in zip(names, values))
    assert set(values) <= error_codes.ALL


def test_the_catalog_codes_are_listed():
    assert error_codes.catalog("shape", "not_found") == "gpu_tenancy.shape_not_found" in error_codes.ALL
    assert {"gpu_tenancy.image_exists", "gpu_tenancy.image_retired"} <= error_codes.ALL


def test_every_named_code_the_service_uses_exists():
    """A constant is read only when its error is raised: a misspelt one would answer 500."""
    used = {(name, path.name) for path in SOURCE.rglob("*.py")
            for name in re.findall(r"\bcodes\.([A-Z_]+)\b", path.read_text())}
    assert used
    assert not {(name, where) for name, where in used if not hasattr(error_codes, name)}
