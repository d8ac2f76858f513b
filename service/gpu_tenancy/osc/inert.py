"""What a tenant wrote (a lease's name, its network's name, a failure's words), made inert
before it reaches an operator's terminal or shell.

The API keeps C0 controls out of a lease's name, but not DEL or the C1 controls (U+009B is
CSI, U+009D OSC: xterm acts on them), and a Neutron network's name, shown in a lease's
addresses, is anything its project chose. Printed raw, OSC 52 writes the operator's
clipboard, CSI rewrites the screen, a newline forges a table row. Every character that is
not printable is written as its Python escape (ESC as \\x1b) in every format but json and
yaml, which escape them themselves and stay exact for programs. -f shell is for `eval`, and
cliff escapes only '"' in it: `$(...)`, backquotes and backslashes are escaped here too. -f csv
is for spreadsheets: a cell a spreadsheet would run as a formula (a lease named
`=HYPERLINK(...)`) is written as text, as the API's and the dashboard's CSV files write it
(csv_cells.py)."""
from __future__ import annotations

from typing import Any

from cliff import columns, show

from gpu_tenancy.csv_cells import safe_cell
from gpu_tenancy.inert_text import printable

EXACT = frozenset({"json", "yaml"})
SHELL_SPECIAL = {"\\": "\\\\", "$": "\\$", "`": "\\`"}


def deep(value: Any) -> Any:
    """`value` with every string in it (keys too) printable."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {deep(k): deep(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(deep(v) for v in value)
    if isinstance(value, columns.FormattableColumn):   # re-rendered from its value made printable
        return type(value)(deep(value._value))
    return value


def shell_word(value: Any) -> str:
    """A value as the shell formatter writes it between double quotes (it adds the '\\"')."""
    text = str(value.machine_readable()) if isinstance(value, columns.FormattableColumn) else str(value)
    return "".join(SHELL_SPECIAL.get(c, c) for c in printable(text))


def csv_cell(value: Any) -> Any:
    """A value as the csv formatter writes it (a column as its machine-readable text), printable
    and never a formula."""
    text = str(value.machine_readable()) if isinstance(value, columns.FormattableColumn) else value
    return safe_cell(deep(text))


def cell(value: Any, formatter: str) -> Any:
    if formatter in EXACT:
        return value
    if formatter == "csv":
        return csv_cell(value)
    return shell_word(value) if formatter == "shell" else deep(value)


class InertOutput:
    """A Lister's or ShowOne's produce_output, every value through `cell`."""

    def produce_output(self, parsed_args, column_names, data):
        formatter = parsed_args.formatter
        if formatter not in EXACT:
            if isinstance(self, show.ShowOne):   # one value per column
                data = tuple(cell(v, formatter) for v in data)
            else:                                # a Lister's rows, perhaps a generator
                data = ([cell(v, formatter) for v in row] for row in data)
        return super().produce_output(parsed_args, column_names, data)  # type: ignore[misc]
