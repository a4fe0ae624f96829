"""Spark's SQLite store: the database, its migrations and its tables."""

from spark.store.db import MIGRATIONS, Database
from spark.store.meta import get_meta, set_meta
from spark.store.models import ModelRecord, ModelTable

__all__ = ["MIGRATIONS", "Database", "ModelRecord", "ModelTable", "get_meta", "set_meta"]
