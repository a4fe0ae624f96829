"""The admin API's library (docs/admin-api.md, "Library and pulls")."""

from __future__ import annotations

from spark.server.routes.pulls import PULL_ROUTES

LIBRARY_ROUTES = [*PULL_ROUTES]
