"""helper-98's review of specctl: offline answers carry the keys the daemon's do."""
import json

from click.testing import CliRunner

from controller.cli.main import cli


def _offline(short_tmp, *args):
    from state.db import open_store
    db = short_tmp / "s.db"
    if not db.exists():
        open_store(db).conn.close()
    return CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), *args])


def test_policy_show_json_offline_says_the_pin_as_the_daemon_does(short_tmp):
    """GET /policy (online `policy show --json`) has `pinned` (the pin, or null); offline it was missing, so a
    script reading it failed only while the daemon was down."""
    first = json.loads(_offline(short_tmp, "policy", "show", "--json").stdout)
    assert first["pinned"] is None and first["daemon_running"] is False
    assert _offline(short_tmp, "threshold", "pin", "7").exit_code == 0
    res = _offline(short_tmp, "policy", "show", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["pinned"] == 7


def test_offline_pin_at_the_saved_pin_changes_nothing_as_online(short_tmp):
    """Online a pin at the pinned value says 'already pinned ...; nothing changed'; offline it said 'saved' again."""
    assert "saved to" in _offline(short_tmp, "threshold", "pin", "7").output
    again = _offline(short_tmp, "threshold", "pin", "7")
    assert again.exit_code == 0 and again.output.strip().endswith("threshold already pinned at 7 in "
                                                                  f"{short_tmp / 's.db'}; nothing changed")
    assert "saved to" in _offline(short_tmp, "threshold", "pin", "8").output
