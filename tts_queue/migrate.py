"""Apply the Alembic migrations in ``migrations/`` to a database URL."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at the packaged migrations and ``url``."""
    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision``."""
    from tts_queue.db import make_engine

    make_engine(url).dispose()  # creates the SQLite file's directory
    command.upgrade(alembic_config(url), revision)


def revision(url: str, message: str) -> None:
    """Autogenerate a new migration from the models (developers only)."""
    command.revision(alembic_config(url), message=message, autogenerate=True)
