"""Alembic environment: the URL comes from the caller's config, the schema from ``tts_queue.db``."""

from __future__ import annotations

from alembic import context

from tts_queue.db import make_engine
from tts_queue.tables import Base

config = context.config
target_metadata = Base.metadata
url = config.get_main_option("sqlalchemy.url")


def run_offline() -> None:
    """Emit SQL without a connection (``alembic upgrade --sql``)."""
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    """Apply migrations on a live connection."""
    connection = config.attributes.get("connection")
    if connection is None:
        engine = make_engine(url)
        with engine.connect() as connection:
            _run(connection)
        engine.dispose()
    else:
        _run(connection)


def _run(connection: object) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
