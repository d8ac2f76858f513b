"""A few SVG elements, escaped, for charts drawn on the server (no script, no CDN)."""
from __future__ import annotations

from markupsafe import Markup, escape


def _attrs(attrs: dict) -> str:
    return " ".join(f'{k.rstrip("_").replace("_", "-")}="{escape(v)}"' for k, v in attrs.items() if v is not None)


def rect(x: float, y: float, w: float, h: float, title: str | None = None, **attrs) -> str:
    inner = f"<title>{escape(title)}</title>" if title else ""
    size = f'width="{max(w, 0):.1f}" height="{max(h, 0):.1f}"'
    return f'<rect x="{x:.1f}" y="{y:.1f}" {size} {_attrs(attrs)}>{inner}</rect>'


def line(x1: float, y1: float, x2: float, y2: float, **attrs) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {_attrs(attrs)}/>'


def text(x: float, y: float, content: str, **attrs) -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" {_attrs(attrs)}>{escape(content)}</text>'


def polyline(points: list[tuple[float, float]], **attrs) -> str:
    return f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in points)}" {_attrs(attrs)}/>'


def circle(x: float, y: float, r: float, title: str | None = None, **attrs) -> str:
    inner = f"<title>{escape(title)}</title>" if title else ""
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" {_attrs(attrs)}>{inner}</circle>'


def link(href: str, content: str) -> str:
    return f'<a href="{escape(href)}">{content}</a>'


def document(width: float, height: float, parts: list[str], label: str, defs: str = "") -> Markup:
    return Markup(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
                  f'width="100%" role="img" aria-label="{escape(label)}" class="chart">'
                  f'{"<defs>" + defs + "</defs>" if defs else ""}{"".join(parts)}</svg>')
