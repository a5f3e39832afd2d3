"""Profiles (hifi.profiles): a named deployment's placement, certificates and token from the user's
config file, picked by name, by HIFI_PROFILE or as the file's `default`; a bad file or an unknown
profile is one line naming the file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hifi.profiles import ProfileError, profile_settings

CONFIG = """
[default]
placement = "127.0.0.1:1"

[prod]
placement = "prod:50050"
tls_dir = "~/prod-tls"
token = "hifi_prod"
"""


@pytest.fixture()
def config(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    return {"HIFI_CONFIG": str(path)}


def test_a_profile_is_picked_by_name_by_the_environment_or_as_the_default(config):
    assert profile_settings("prod", config) == {"HIFI_PLACEMENT": "prod:50050", "HIFI_TOKEN": "hifi_prod",
                                                "HIFI_TLS_DIR": os.path.expanduser("~/prod-tls")}
    assert profile_settings("", {**config, "HIFI_PROFILE": "prod"})["HIFI_PLACEMENT"] == "prod:50050"
    assert profile_settings("", config) == {"HIFI_PLACEMENT": "127.0.0.1:1"}
    assert profile_settings("", {"HIFI_CONFIG": "/nonexistent/config.toml"}) == {}


def test_an_unknown_profile_or_a_broken_file_is_one_line(config, tmp_path):
    with pytest.raises(ProfileError, match=r"config.toml: no profile 'staging' \(it has default, prod\)"):
        profile_settings("staging", config)
    broken = tmp_path / "broken.toml"
    broken.write_text("[prod\nplacement = 1\n")
    with pytest.raises(ProfileError, match="broken.toml: "):
        profile_settings("prod", {"HIFI_CONFIG": str(broken)})


def test_the_cli_reaches_the_profiles_deployment(config):
    """`hifi --profile prod queries` asks prod's placement (nothing listens there: it says so)."""
    hifi = os.path.join(os.path.dirname(sys.executable), "hifi")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIFI_")} | config
    done = subprocess.run([hifi, "--profile", "staging", "cancel", "q1"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.strip().endswith("no profile 'staging' (it has default, prod)")
    assert "Traceback" not in done.stderr
