"""Alembic, driven from code: `gpu-tenancy db upgrade` and the demo call this."""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def current(url: str) -> None:
    command.current(alembic_config(url), verbose=True)


def behind(engine: Engine) -> str | None:
    """In words, how the database falls short of this release's schema (none yet, or an older
    one): what `db upgrade` is for. None at the head, and at a revision these migrations do not
    know (a newer release's: `db upgrade` refuses that one, and the code may still read it)."""
    script = ScriptDirectory.from_config(alembic_config(""))
    with engine.connect() as conn:
        at = set(MigrationContext.configure(conn).get_current_heads())
    heads = set(script.get_heads())
    if at == heads or not at <= {r.revision for r in script.walk_revisions()}:
        return None
    return "has no schema" if not at else f"is at revision {', '.join(sorted(at))}, not {', '.join(sorted(heads))}"
