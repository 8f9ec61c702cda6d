"""Alembic's entry point: run by `store.migrate()` on the connection it hands over (never from a file
of settings), so SQLite and PostgreSQL get the same versioned schema."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True)  # batch: SQLite cannot ALTER most things
with context.begin_transaction():
    context.run_migrations()
