"""`spark tui`: the server at a glance in a terminal (Textual), over the admin API.

`spark.tui.app.SparkApp` is the app; `spark.tui.client.AdminAPI` the HTTP
client its workers use. This package imports Textual only where the app is
built, so `spark.tui.text` (shared with `spark log`) stays light.
"""
