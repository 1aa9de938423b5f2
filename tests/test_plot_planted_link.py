"""A figure's path through a symbolic link that another user planted in a shared, sticky folder (/tmp) is refused, as
the kernel's fs.protected_symlinks refuses a shell's `>` there (newcomer-146: root's `specctl plot /tmp/demo.png`, with
another user's link /tmp/demo.png -> /etc/passwd, wrote the figure over /etc/passwd). A link of one's own is followed."""
import os

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.outfile import replace_whole
from tests.test_plots import PNG, _store

OTHER_UID = 54321       # (no such user needed: a link's owner is a number)


@pytest.fixture
def shared(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)           # as /tmp: sticky and world-writable
    victim = tmp_path / "victim.txt"
    victim.write_text("root's file\n")
    _store(tmp_path / "s.db").conn.close()
    return tmp_path, folder, victim


def plot(tmp_path, out):
    return CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                    "plot", str(out), "--last", "120"])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a link another owner")
def test_another_users_link_in_a_sticky_folder_is_not_followed(shared):
    tmp_path, folder, victim = shared
    link = folder / "demo.png"
    link.symlink_to(victim)
    os.lchown(link, OTHER_UID, OTHER_UID)
    res = plot(tmp_path, link)
    assert res.exit_code == 2 and "refusing to follow it" in res.output, res.output
    assert victim.read_text() == "root's file\n" and link.is_symlink()
    with pytest.raises(OSError):
        replace_whole(link, lambda partial: open(partial, "w").write("x"))
    assert victim.read_text() == "root's file\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a link another owner")
def test_a_planted_link_to_a_folder_on_the_way_is_not_followed_either(shared):
    tmp_path, folder, victim = shared
    (tmp_path / "elsewhere").mkdir()
    hop = folder / "d"
    hop.symlink_to(tmp_path / "elsewhere")
    os.lchown(hop, OTHER_UID, OTHER_UID)
    from controller.outfile import planted_link
    assert planted_link(hop / "x.png") is not None
    res = plot(tmp_path, hop / "x.png")
    assert res.exit_code == 2 and not (tmp_path / "elsewhere" / "x.png").exists(), res.output


def test_ones_own_link_in_a_sticky_folder_is_followed(shared):
    tmp_path, folder, _ = shared
    real = tmp_path / "real.png"
    real.write_bytes(b"the earlier plot")
    link = folder / "mine.png"
    link.symlink_to(real)
    from controller.outfile import planted_link
    assert planted_link(link) is None
    res = plot(tmp_path, link)
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and real.read_bytes()[:4] == PNG


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a link another owner")
def test_a_planted_link_reached_by_dot_dot_after_a_link_is_not_followed(shared):
    """'..' after a symbolic link is its target's parent, as the kernel and realpath take it, not the name's (abspath
    folded work/lnk/../demo.png into work/demo.png, which is not there: the planted link was followed)."""
    tmp_path, folder, victim = shared
    (folder / "sub").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "lnk").symlink_to(folder / "sub")           # root's own link, in a folder of root's
    planted = folder / "demo.png"
    planted.symlink_to(victim)
    os.lchown(planted, OTHER_UID, OTHER_UID)
    out = f"{work}/lnk/../demo.png"
    assert os.path.realpath(out) == str(victim)
    from controller.outfile import planted_link
    assert planted_link(out) is not None
    res = plot(tmp_path, out)
    assert res.exit_code == 2 and "refusing to follow it" in res.output, res.output
    assert victim.read_text() == "root's file\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a link another owner")
def test_a_link_planted_after_the_check_is_not_followed_by_the_write(shared, monkeypatch):
    """helper-149: replace_whole checked with planted_link, then resolved the path again with realpath: a link planted
    between the two was followed. One walk now gives both the check and the path written; the hook plants the link
    where a second resolution would be made, and the file written is the one checked."""
    tmp_path, folder, victim = shared
    out = folder / "late.png"
    real = os.path.realpath

    def plant_then_resolve(path, *args, **kwargs):
        if str(path) == str(out) and not os.path.lexists(out):
            out.symlink_to(victim)
            os.lchown(out, OTHER_UID, OTHER_UID)
        return real(path, *args, **kwargs)
    monkeypatch.setattr(os.path, "realpath", plant_then_resolve)
    replace_whole(out, lambda partial: open(partial, "w").write("figure"))
    assert victim.read_text() == "root's file\n"
    assert not out.is_symlink() and out.read_text() == "figure"
