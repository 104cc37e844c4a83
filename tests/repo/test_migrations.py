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


# What an upgrade may not do while the previous release's pods still run (the chart applies it
# as a pre-upgrade hook, before they are replaced): take away or rename what their code reads or
# writes, or add a column they would have to fill.
BREAKING = {"drop_column", "drop_table", "rename_table", "drop_constraint"}


def _breaking_calls(source: str) -> list[str]:
    """The calls in a migration's ``upgrade()`` that the previous release could not run beside."""
    import ast

    tree = ast.parse(source)
    upgrade_fn = next(node for node in tree.body
                      if isinstance(node, ast.FunctionDef) and node.name == "upgrade")

    def required(column: ast.expr) -> bool:  # sa.Column(..., nullable=False) without a server default
        keywords = {k.arg: k.value for k in column.keywords} if isinstance(column, ast.Call) else {}
        nullable = keywords.get("nullable")
        return (isinstance(nullable, ast.Constant) and nullable.value is False
                and "server_default" not in keywords)

    found = []
    for node in ast.walk(upgrade_fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        keywords = {k.arg: k.value for k in node.keywords}
        if name in BREAKING:
            found.append(f"{name} (line {node.lineno})")
        elif name == "alter_column" and ({"new_column_name", "type_"} & set(keywords) or required(node)):
            found.append(f"alter_column renaming, retyping or making a column required (line {node.lineno})")
        elif name == "add_column" and any(required(arg) for arg in node.args):
            found.append(f"a required column added without a server default (line {node.lineno})")
    return found


def test_every_upgrade_runs_beside_the_previous_release() -> None:
    # Given every migration after the first (the first creates the schema)
    versions = Path(__file__).resolve().parents[2] / "migrations" / "versions"
    scripts = sorted(p for p in versions.glob("0*.py") if not p.name.startswith("0001"))
    assert len(scripts) >= 14
    # Then none takes away, renames or retypes what the release before it uses, nor adds a column
    # it would have to fill: the previous release's pods keep running while it applies
    broken = {p.name: calls for p in scripts if (calls := _breaking_calls(p.read_text()))}
    assert broken == {}


def test_the_compatibility_check_finds_a_breaking_upgrade() -> None:
    source = '''
def upgrade():
    with op.batch_alter_table("tasks") as batch_op:
        batch_op.drop_column("worker")
        batch_op.add_column(sa.Column("lane", sa.String(8), nullable=False))
        batch_op.alter_column("queue", new_column_name="queue_name")
'''
    assert len(_breaking_calls(source)) == 3
