"""The one base of every error a user can act on. Pure.

A query, topology, scenario, plan or command argument that HiFi cannot take, or a part it needs
that is missing, raises a HiFiError whose message says where (file line, query line and column,
node) and why; every `hifi` command prints it as one line and exits with code 2, never with a
stack trace. Anything else that escapes is a bug: HiFiError is its own root (not a ValueError),
so a handler that turns it into a user's answer (INVALID_ARGUMENT, exit code 2) never reports a bug
as the user's mistake.
"""

from __future__ import annotations


class HiFiError(Exception):
    """A mistake in what was given to HiFi, or a missing part; the message names where and why."""
