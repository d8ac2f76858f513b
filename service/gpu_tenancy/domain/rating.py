"""Rating usage for billing: GPU-hours times the operator's price per GPU-hour of the
GPU model. A model without a price is not rated (None), rather than rated at nothing."""
from __future__ import annotations

from collections.abc import Iterable, Mapping


def rated(gpu_hours: float, price: float | None) -> float | None:
    return None if price is None else round(gpu_hours * price, 4)


def total(amounts: Iterable[float | None]) -> float | None:
    """The sum of the rated amounts; None if none was rated."""
    known = [a for a in amounts if a is not None]
    return round(sum(known), 4) if known else None


def price_of(prices: Mapping[str, float], gpu_model: str) -> float | None:
    price = prices.get(gpu_model)
    return None if price is None else float(price)
