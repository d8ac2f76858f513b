"""engine/audit.py: fit keeps the identity headers a caller writes printable and within their
columns, so that an odd header cannot fail (and so undo) the change it is recorded with."""
from __future__ import annotations

import random

from gpu_tenancy.engine.audit import fit


def test_a_printable_header_is_kept_as_it_is():
    assert fit("request_id", "req-0f1e2d3c") == "req-0f1e2d3c"
    assert fit("user_id", None) is None


def test_unprintable_characters_are_dropped_and_the_rest_cut_to_the_column():
    assert fit("request_id", "req\x00-\n1\x1b") == "req-1"
    rng = random.Random(7)
    for _ in range(2000):
        value = "".join(rng.choice("ab\x00\n\t\x7f\u200bé") for _ in range(rng.randint(0, 400)))
        kept = fit("remote_address", value)
        assert kept == "".join(c for c in value if c.isprintable())[:64]   # remote_address is String(64)
