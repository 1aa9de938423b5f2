"""CPU seconds of process groups and of the host across one load run (Linux /proc; by process group, never
by name), so that a run's row says whether the daemon's engine, the daemon itself or the host was short of
CPU (12-02c: the engine with speculation varied 6 % run to run, the one without 2 %).

    groups = parse_groups("nospec=1234,daemon=5678")
    before = snapshot(groups); ...; usage(before, snapshot(groups))
    -> {"host_busy": 0.31, "nospec": {"sglang::schedul": 5.9, ...}, "daemon": {...}}
"""
from __future__ import annotations

import os

TICK = os.sysconf("SC_CLK_TCK")


def parse_groups(text: str | None) -> dict[str, int]:
    """label=PGID,label=PGID (empty or None: no groups)."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        label, _, pgid = part.partition("=")
        if not label or not pgid.isdigit():
            raise ValueError(f"--cpu-groups: {part!r} is not label=PGID")
        out[label] = int(pgid)
    return out


# indices into stat_fields' list (after the comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt
# cmajflt utime stime ... processor, the 39th field)
PGRP, UTIME, STIME, PROCESSOR = 2, 11, 12, 36


def stat_fields(path: str) -> tuple[str, list[str]] | None:
    """(comm, the fields after it) of a /proc/.../stat file (a process's or a thread's); None once it is gone."""
    try:
        raw = open(path).read()
    except OSError:
        return None
    return raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()


def _stat(pid: str) -> tuple[str, int, float] | None:
    """(comm, pgid, CPU seconds of all its threads) of one process; None once it is gone."""
    st = stat_fields(f"/proc/{pid}/stat")
    if st is None:
        return None
    comm, rest = st
    return comm, int(rest[PGRP]), (int(rest[UTIME]) + int(rest[STIME])) / TICK


def _host() -> tuple[float, float]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)      # idle + iowait
    return sum(fields) - idle, sum(fields)


def snapshot(groups: dict[str, int]) -> dict:
    """CPU seconds per (label, pid, comm) of every process in the groups, and the host's jiffies."""
    procs = {}
    by_pgid = {pgid: label for label, pgid in groups.items()}
    for pid in filter(str.isdigit, os.listdir("/proc") if groups else ()):
        st = _stat(pid)
        if st and st[1] in by_pgid:
            procs[(by_pgid[st[1]], pid, st[0])] = st[2]
    return {"procs": procs, "host": _host()}


def usage(before: dict, after: dict) -> dict:
    """CPU seconds spent between the snapshots per group and process name (a process that started in
    between counts from 0), and the host's busy share of all cores."""
    busy, total = (a - b for a, b in zip(after["host"], before["host"]))
    out: dict = {"host_busy": round(busy / total, 3) if total else None}
    for (label, pid, comm), seconds in after["procs"].items():
        spent = seconds - before["procs"].get((label, pid, comm), 0.0)
        group = out.setdefault(label, {})
        group[comm] = round(group.get(comm, 0.0) + spent, 2)
    return out
