"""CSV cells a spreadsheet will not run. A text cell that starts with = + - @
(or a tab or carriage return, which some spreadsheets skip before reading a
formula) is read as a formula: `=HYPERLINK(...)` as a lease name would become a
link, or worse, in an admin's spreadsheet. Such a cell gets a leading
apostrophe, which spreadsheets show as text (OWASP's advice)."""
from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value):
    """The value to write: None as an empty cell, numbers as they are, text escaped."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
