"""The errors of the security room."""

from __future__ import annotations


class AuthenticationFailed(Exception):
    """An authentication that must not go on. The text is for the broker's log and
    names what was wrong in the exchange, never a secret."""
