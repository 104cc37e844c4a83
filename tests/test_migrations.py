"""The Alembic migrations build exactly the schema the models describe."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from tts_queue.db import Base, make_engine
from tts_queue.migrate import upgrade


def test_migrations_match_the_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tts.db'}"
    upgrade(url)
    engine = make_engine(url)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []


def test_upgrade_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tts.db'}"
    upgrade(url)
    upgrade(url)
    engine = make_engine(url)
    with engine.connect() as connection:
        assert MigrationContext.configure(connection).get_current_revision() == "0002"
