"""Named connection profiles for the CLI, as rpk has: a small TOML file.

    # ~/.config/kbroker/cli.toml (or $KBROKER_CONFIG)
    default = "prod"            # used when no --profile / KBROKER_PROFILE names one

    [profiles.prod]
    bootstrap = "b1:9092,b2:9092"
    timeout = 10                # seconds, optional
    command_config = "~/.config/kbroker/prod.properties"   # TLS/SASL settings, optional

    [profiles.local]
    bootstrap = "127.0.0.1:9092"

``-b``/``KBROKER_BOOTSTRAP`` and ``--timeout`` given explicitly win over the profile.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from kbroker.tools.client import ClientError

KEYS = ("bootstrap", "timeout", "command_config")


class UnknownProfile(ValueError):
    """The profile asked for is not in the file (bad usage, not a failure)."""


def config_path() -> Path:
    env = os.environ.get("KBROKER_CONFIG")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kbroker" / "cli.toml"


def load_profiles(path: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(name -> settings, default profile name); no file is no profiles."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ClientError(f"{path} is not valid TOML: {exc}") from None
    profiles = data.get("profiles", {})
    default = data.get("default")
    if not isinstance(profiles, dict) or not isinstance(default, (str, type(None))):
        raise ClientError(f'{path}: expected [profiles.NAME] tables and default = "NAME"')
    for name, settings in profiles.items():
        if not isinstance(settings, dict):
            raise ClientError(f"{path}: profiles.{name} is not a table")
        for key, value in settings.items():
            if key not in KEYS:
                raise ClientError(
                    f"{path}: profiles.{name} has unknown key {key!r} (known: {', '.join(KEYS)})"
                )
            if key == "bootstrap" and not (isinstance(value, str) and value.strip()):
                raise ClientError(f"{path}: profiles.{name}.bootstrap must be HOST:PORT,...")
            if key == "command_config" and not (isinstance(value, str) and value.strip()):
                raise ClientError(f"{path}: profiles.{name}.command_config must be a file path")
            if key == "timeout" and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
            ):
                raise ClientError(f"{path}: profiles.{name}.timeout must be a positive number")
    if default is not None and default not in profiles:
        raise ClientError(f"{path}: default profile {default!r} is not defined")
    return profiles, default


def profile(name: str | None) -> dict[str, Any]:
    """The settings of profile ``name`` (None: the file's default, or none at all)."""
    path = config_path()
    profiles, default = load_profiles(path)
    chosen = name or default
    if chosen is None:
        return {}
    if chosen not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        raise UnknownProfile(f"no profile {chosen!r} in {path} (profiles: {known})")
    return profiles[chosen]
