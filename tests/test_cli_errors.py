"""A user's mistake reaches the user as one line naming where and why (exit code 2), never as a
stack trace: every such error is a wire.errors.HiFiError, caught once at the CLI's top."""

from __future__ import annotations

import pytest

from services.cli import main


@pytest.mark.parametrize("argv, says", [
    (["deploy", "compose", "--topology", "no/such/topology.yaml"], "cannot read topology no/such/topology.yaml"),
    (["query", "--since", "yesterday", "SELECT tag_id FROM rfid_stream"],
     "'yesterday' is neither a time (2026-11-25T19:00:00) nor a duration ('10 minutes')"),
    (["agents", "--scenario", "no/such/scenario.yaml"], "needs a broker: set HIFI_KAFKA_BOOTSTRAP"),
    (["query", "--since", "99999999999999999999999 days", "SELECT tag_id FROM rfid_stream"], "is before 1970"),
    (["query", "--until", "99999999999999999999999 days", "SELECT tag_id FROM rfid_stream"], "after the year 9999"),
    (["query", "--since", "1900-01-01", "SELECT tag_id FROM rfid_stream"], "'1900-01-01' is before 1970"),
])
def test_a_mistake_is_one_line_and_exit_code_2(argv, says, capsys, monkeypatch):
    monkeypatch.delenv("HIFI_KAFKA_BOOTSTRAP", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hifi: ") and says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_view_in_a_topology_names_its_line(tmp_path, capsys):
    topology = tmp_path / "t.yaml"
    topology.write_text("nodes:\n  - {id: hq, tier: core}\n  - {id: d1, tier: edge, parent: hq}\n"
                        "views:\n  - {sql: CREATE VIEW v AS SELEC tag_id FROM rfid_stream, tiers: [edge]}\n")
    assert main(["deploy", "compose", "--topology", str(topology), "--output", str(tmp_path / "c.yml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hifi: {topology}: line 5: view SQL: line 1, column") and "Traceback" not in err


def test_since_and_until_take_a_utc_time_or_a_duration_from_now():
    from wire.windows import time_at

    now = 1_795_000_000_000
    assert time_at("10 minutes", now, ago=True) == now - 600_000
    assert time_at("5 minutes", now, ago=False) == now + 300_000
    assert time_at("2026-11-25T19:00:00", now, ago=True) == 1_795_633_200_000        # no zone: UTC
    assert time_at("2026-11-25T20:00:00+01:00", now, ago=True) == 1_795_633_200_000
    assert time_at("2026-11-25T19:00:00Z", now, ago=True) == 1_795_633_200_000


def test_a_priority_out_of_range_is_argparses_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        main(["query", "--priority", "99999999999999", "SELECT tag_id FROM rfid_stream"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "argument --priority: 99999999999999 is outside -100 to 100" in err
    assert "Traceback" not in err


def test_health_of_a_url_urllib_cannot_open_is_one_line(capsys):
    assert main(["health", "--http", "http://[::1"]) == 1
    out = capsys.readouterr()
    assert "unhealthy: http://[::1: Invalid IPv6 URL" in out.out + out.err and "Traceback" not in out.err
