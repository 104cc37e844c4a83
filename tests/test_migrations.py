"""The Alembic migrations build exactly the schema the models describe."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from tts_queue.db import make_engine
from tts_queue.migrate import upgrade
from tts_queue.tables import Base


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
        assert MigrationContext.configure(connection).get_current_revision() == head_revision()


def head_revision() -> str:
    """The single head of the migration chain."""
    from alembic.script import ScriptDirectory

    from tts_queue.migrate import alembic_config

    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    assert len(heads) == 1, f"the Alembic chain must stay linear; heads: {heads}"
    return heads[0]


def test_the_migration_chain_is_linear_and_complete() -> None:
    # Given every migration script
    from alembic.script import ScriptDirectory

    from tts_queue.migrate import alembic_config

    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    # Then each revises the one before it, from the base to one head
    chain = [script.revision for script in scripts.walk_revisions()]
    assert len(chain) == len(set(chain)) and chain[-1] == "0001"
    assert head_revision() == chain[0]
