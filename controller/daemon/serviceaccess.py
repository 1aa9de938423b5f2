"""`spec-controller config check` run as root (sudo): can the service's user read what [sglang] names? Root reads
everything, so a model directory of mode 0700 under /data passed the check and SGLang then failed at start in the
journal. Asked in a child process that becomes that user (a fork, as su would), so the check process keeps root."""
from __future__ import annotations

import grp
import os
import pwd
import re
import select
import shutil
import signal
import subprocess
from pathlib import Path

from ..paths import SYSTEM_RUNTIME, SYSTEM_STATE
from .engines.sglang_flags import named_paths

SERVICE_USER = "spec-controller"        # systemd/spec-controller.sysusers and the packaged unit's User= / Group=
UNIT = "spec-controller.service"
ASK_TIMEOUT_S = 10.0
SYSTEMCTL_TIMEOUT_S = 5.0


def service_account(unit: str = UNIT) -> tuple[str, str]:
    """(user, group) the installed unit runs as, read the way systemd reads it (its drop-ins included: an operator's
    `User=` override is the account that must read the model); the packaged spec-controller / spec-controller where
    there is no systemd, the unit is not installed, or it names no user. A Group= left out is the user's own group."""
    words = {}
    systemctl = shutil.which("systemctl")
    try:
        if systemctl:
            out = subprocess.run([systemctl, "show", "-p", "User", "-p", "Group", unit], capture_output=True,
                                 text=True, timeout=SYSTEMCTL_TIMEOUT_S)
            words = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line) \
                if out.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired):
        words = {}
    user = words.get("User", "").strip()
    if not user:
        return SERVICE_USER, SERVICE_USER
    group = words.get("Group", "").strip()
    if not group:
        try:
            group = grp.getgrgid(_passwd(user).pw_gid).gr_name
        except KeyError:
            group = user
    return user, group


def _passwd(user: str) -> pwd.struct_passwd:
    """The account of a User= value, a name or a numeric UID as systemd takes either (KeyError: none here)."""
    return pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)


def paths_in(values: dict) -> list[tuple[str, str]]:
    """(key, path) for each path the [sglang] table names (sglang_flags.named_paths) that is an absolute path existing
    here (a model id is no path)."""
    return [(k, v) for k, v in named_paths(values) if v.startswith("/") and os.path.exists(v)]


def unreadable(paths: list[str]) -> list[str]:
    """Of these, those this process cannot read: a file, or a directory it cannot list and enter or one of whose files
    directly inside it cannot read (a model's config.json, weights, tokenizer)."""
    bad = []
    for path in paths:
        try:                    # (a directory above it this user may not enter: os.path.isdir is False, access too)
            if os.path.isdir(path):
                ok = os.access(path, os.R_OK | os.X_OK) and all(
                    os.access(f, os.R_OK) for f in Path(path).iterdir() if os.path.isfile(f))
            else:
                ok = os.access(path, os.R_OK)
        except OSError:
            ok = False
        if not ok:
            bad.append(path)
    return bad


def service_cannot_read(values: dict, user: str | None = None, config: str | None = None,
                        timeout_s: float = ASK_TIMEOUT_S) -> list[str]:
    """Notes for the [sglang] paths (and the config file itself) that `user` (the service's) may not read, where this
    runs as root and that user exists; else none."""
    user, found = user or SERVICE_USER, paths_in(values) + ([("the config", config)] if config and
                                                              os.path.exists(config) else [])
    if os.geteuid() != 0 or not found:
        return []
    try:
        account = _passwd(user)
    except KeyError:
        return []
    try:
        bad = _ask_as(account, [p for _, p in found], timeout_s)
    except (OSError, TimeoutError) as e:        # no fork or pipe, or a path that hangs (a stale NFS mount)
        return [f"could not ask as {user} whether it reads the [sglang] paths and the config ({e})"]
    return [f"{key} {'' if key == 'the config' else '= '}{path}: the service's user {user} cannot read it (root can: "
            f"config check runs as root); give it read access (e.g. chgrp -R {user} and chmod -R g+rX)"
            for key, path in found if path in bad]


def _ask_as(account: pwd.struct_passwd, paths: list[str], timeout_s: float) -> set[str]:
    """unreadable(paths) as that account, in a forked child that becomes it (killed past timeout_s)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:                                       # the child: the service's user, then its answer, then gone
        status = 1
        try:
            os.close(read_end)
            os.setgroups(os.getgrouplist(account.pw_name, account.pw_gid))
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            os.write(write_end, "\0".join(unreadable(paths)).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as answer:
            if not select.select([answer], [], [], timeout_s)[0]:
                os.kill(pid, signal.SIGKILL)
                raise TimeoutError(f"no answer in {timeout_s:g} s")
            text = answer.read().decode()
    finally:
        _, status = os.waitpid(pid, 0)
    if status != 0:
        raise OSError(f"the check as {account.pw_name} failed (status {status})")
    return set(text.split("\0")) - {""}


# the unit's StateDirectory=, RuntimeDirectory= and CacheDirectory= (systemd/spec-controller.service)
UNIT_WRITABLE = (SYSTEM_STATE, SYSTEM_RUNTIME, Path("/var/cache/spec-controller"))
UNIT_PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))     # the unit's own (PrivateTmp): writable, empty at each start


def unit_cannot_write(cfg: dict, unit_config: Path) -> list[str]:
    """Notes for the unit's own config (unit_config, the unit's --config): a [storage] db or [control] socket outside
    the directories the unit may write, which its ProtectSystem=strict leaves read-only (the start then failed in the
    journal); one under /tmp, which the unit writes in a /tmp of its own that specctl never sees and the next start
    finds empty (a ReadWritePaths=/tmp changes nothing there: helper-145)."""
    if not cfg["_path"] or os.path.realpath(cfg["_path"]) != os.path.realpath(unit_config):
        return []
    notes = []
    for section, key in (("storage", "db"), ("control", "socket")):
        value = cfg[section][key]
        folder = Path(os.path.realpath(value)).parent if value else None
        if folder is None or any(folder.is_relative_to(d) for d in UNIT_WRITABLE):
            continue
        if any(folder.is_relative_to(d) for d in UNIT_PRIVATE_TMP):
            notes.append(f"[{section}] {key} = {value}: the service has its own /tmp and /var/tmp (PrivateTmp), empty at "
                         f"its start, where specctl does not look; move it (e.g. under {UNIT_WRITABLE[0]})")
            continue
        notes.append(f"[{section}] {key} = {value}: the service (ProtectSystem=strict) may write only under "
                     f"{', '.join(map(str, UNIT_WRITABLE))}; let it write {folder} with `systemctl edit "
                     f"{UNIT.removesuffix('.service')}`: [Service] ReadWritePaths={unit_word(folder)}")
    return notes


def unit_word(path: Path) -> str:
    """path as one word of a unit file's list, as systemd reads it back: blanks split words and '%' starts a specifier
    (ReadWritePaths=/data/my models was two paths, /data/my and models: helper-145)."""
    text = str(path).replace("%", "%%")
    return text if not re.search(r'[\s"\'\\]', text) else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
