"""Text from outside the service (a tenant's Neutron network name, the cloud's words for a
failure, a guest's report) made inert before others read it: every character that is not
printable (C0 and C1 controls, DEL, line and paragraph separators, zero-width and
direction-turning characters) written as its Python escape (ESC as \\x1b), so that a
terminal printing it acts on nothing and a newline forges no line."""
from __future__ import annotations


def printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
