"""A stored time as whole seconds since the epoch, in SQL: what session.to_epoch makes of it
in Python (its fraction of a second dropped), so that a sum over many rows is taken in the
database rather than over the rows fetched (engine/fairshare_usage.py)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


class epoch_seconds(FunctionElement):
    """epoch_seconds(column): an integer, on SQLite and PostgreSQL (the stored times are UTC,
    with no zone)."""
    type = BigInteger()
    inherit_cache = True
    name = "epoch_seconds"


@compiles(epoch_seconds, "sqlite")
def _sqlite(element: epoch_seconds, compiler: Any, **kw: Any) -> str:
    # the stored 'YYYY-MM-DD HH:MM:SS.ffffff' read as UTC, its fraction cut off first: strftime
    # would round it to the millisecond, so that .9996 counted as the next second
    return f"CAST(strftime('%s', substr({compiler.process(element.clauses, **kw)}, 1, 19)) AS INTEGER)"


@compiles(epoch_seconds, "postgresql")
def _postgresql(element: epoch_seconds, compiler: Any, **kw: Any) -> str:
    # a timestamp without time zone is taken as UTC; date_part is a double (exact to well under a
    # microsecond here), where EXTRACT is a numeric since PostgreSQL 14, half again as slow over the
    # window's rows; floor, as int() of a positive number, drops the fraction (a cast would round it)
    return f"CAST(floor(date_part('epoch', {compiler.process(element.clauses, **kw)})) AS BIGINT)"
