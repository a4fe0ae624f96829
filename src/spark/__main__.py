"""`python -m spark` runs the CLI."""

from spark.cli import main

main()
