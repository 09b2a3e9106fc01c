"""Offline tools over kbroker data files."""
