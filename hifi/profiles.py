"""Named deployments a user reaches: `~/.config/hifi/config.toml` (or $HIFI_CONFIG), one table a
profile, each with the placement service's address, the deployment's certificates directory (its
`ca.pem`) and the user's token:

    [default]
    placement = "127.0.0.1:50050"
    tls_dir = "~/.hifi/tls"

    [prod]
    placement = "hifi.example.com:50050"
    tls_dir = "~/hifi-prod/tls"
    token = "hifi_..."

`hifi --profile prod ...`, `HIFI_PROFILE=prod` or `Client.connect(profile="prod")` picks one; the
`default` table, when there is one, serves when none is named. A profile's settings are what
HIFI_PLACEMENT, HIFI_TLS_DIR and HIFI_TOKEN would say.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping

from wire.errors import HiFiError

SETTINGS = {"placement": "HIFI_PLACEMENT", "tls_dir": "HIFI_TLS_DIR", "token": "HIFI_TOKEN"}
DEFAULT = "default"


class ProfileError(HiFiError):
    """A profile file or a profile that cannot be used, in one line (file, profile, reason)."""


def config_file(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return environ.get("HIFI_CONFIG") or os.path.join(
        environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"), "hifi", "config.toml")


def parse_profiles(text: str, source: str = "config.toml") -> dict[str, dict[str, str]]:
    """Every profile of a config file's `text`, its settings checked.

    >>> parse_profiles('[prod]\\nplacement = "h:1"\\ntoken = "t"\\n')
    {'prod': {'placement': 'h:1', 'token': 't'}}
    >>> parse_profiles('[prod]\\nhost = "h"\\n')
    Traceback (most recent call last):
    ...
    hifi.profiles.ProfileError: config.toml: profile 'prod': unknown setting 'host' (placement, tls_dir, token)
    """
    try:
        tables = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: {exc}") from None
    profiles = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ProfileError(f"{source}: {name!r} is not a profile ([{name}] and its settings)")
        for key, value in table.items():
            if key not in SETTINGS:
                raise ProfileError(f"{source}: profile {name!r}: unknown setting {key!r} ({', '.join(SETTINGS)})")
            if not isinstance(value, str):
                raise ProfileError(f"{source}: profile {name!r}: {key} must be a string")
        profiles[name] = {key: os.path.expanduser(value) if key == "tls_dir" else value for key, value in table.items()}
    return profiles


def profile_settings(name: str = "", environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables profile `name` (else $HIFI_PROFILE, else `default` if the file has
    it) sets, e.g. {"HIFI_PLACEMENT": ...}; {} when no profile is named and there is no default."""
    environ = os.environ if environ is None else environ
    wanted = name or environ.get("HIFI_PROFILE", "")
    path = config_file(environ)
    if not os.path.exists(path):
        if wanted:
            raise ProfileError(f"{path}: no such file, so no profile {wanted!r}")
        return {}
    with open(path) as fh:
        profiles = parse_profiles(fh.read(), path)
    chosen = wanted or DEFAULT
    if chosen not in profiles:
        if wanted:
            raise ProfileError(f"{path}: no profile {wanted!r} (it has {', '.join(sorted(profiles)) or 'none'})")
        return {}
    return {SETTINGS[key]: value for key, value in profiles[chosen].items()}
