"""Tests of the compiled scan index (domain/scan_index.c) run where it was built: skipped on a
machine that installed without a C compiler, a failure in CI (which builds it)."""
from __future__ import annotations

import os

import pytest

from gpu_tenancy.domain import scan_index


def require_scan_index() -> None:
    if scan_index.available:
        return
    if os.environ.get("CI") == "true":
        pytest.fail("the scan index (gpu_tenancy.domain._scan_index) was not built: CI builds it")
    pytest.skip("the scan index is not built here (no C compiler at install)")
