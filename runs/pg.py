"""The one way Reckon reaches PostgreSQL past the ORM, for its hot statements."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections


@contextmanager
def server_cursor() -> Iterator[psycopg.Cursor]:
    """A plain psycopg cursor on the default connection, under Django's error mapping.

    It binds server-side: a statement executed with ``prepare=True`` is prepared once per
    connection (settings set psycopg's prepare_threshold, which Django leaves off), and parameters
    or rows travel in binary where the caller asks. The ORM's cursors bind client-side and never
    prepare.
    """
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as cur:
        yield cur
