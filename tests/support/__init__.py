"""Helpers shared by the unit tests and the registry tests."""
