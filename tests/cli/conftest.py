"""Fixtures for the command-line tests: the fake Hugging Face Hub."""

from fakehub import fake_hub, hub_files  # noqa: F401  (fixtures)
