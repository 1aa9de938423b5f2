"""CPU seconds of process groups and of the host across one load run (Linux /proc; by process group, never
by name), so that a run's row says whether the daemon's engine, the daemon itself or the host was short of
CPU (12-02c: the engine with speculation varied 6 % run to run, the one without 2 %).

    groups = parse_groups("nospec=1234,daemon=5678")
    before = snapshot(groups); ...; usage(before, snapshot(groups))
    -> {"host_busy": 0.31, "nospec": {"sglang::schedul": 5.9, ...}, "daemon": {...},
        "preempted": {"nospec": {"sglang::schedul": 120, ...}, ...}, "minflt": {...}}

preempted: each process's main thread's involuntary context switches (another thread or process took its core;
/proc/PID/status counts the leader thread only, which is where SGLang's scheduler loop runs), and minflt the
process's minor page faults: the second-started engine ran every CPU op ~1.15x slower (12-04h/i) with its core set
swapped every repeat; these say whether something shared its cores, or its memory was being faulted in, meanwhile.
"""
from __future__ import annotations

import os

TICK = os.sysconf("SC_CLK_TCK")
RESERVED = ("host_busy", "host_steal", "steal_cpus", "preempted", "minflt")     # usage()'s keys beside the groups
STEAL_SHOWN = 0.01     # a core's steal share that a row names it for


def parse_groups(text: str | None) -> dict[str, int]:
    """label=PGID,label=PGID (empty or None: no groups; a label may not be one of usage()'s own keys)."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        label, _, pgid = part.partition("=")
        if not label or not pgid.isdigit():
            raise ValueError(f"--cpu-groups: {part!r} is not label=PGID")
        if label in RESERVED:
            raise ValueError(f"--cpu-groups: {label!r} is a name of the row's own figures ({', '.join(RESERVED)})")
        out[label] = int(pgid)
    return out


# indices into stat_fields' list (after the comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt
# cmajflt utime stime ... processor, the 39th field)
PGRP, MINFLT, UTIME, STIME, PROCESSOR = 2, 7, 11, 12, 36


def stat_fields(path: str) -> tuple[str, list[str]] | None:
    """(comm, the fields after it) of a /proc/.../stat file (a process's or a thread's); None once it is gone."""
    try:
        with open(path) as f:          # (closed here: a sampler reads thousands of these)
            raw = f.read()
    except OSError:
        return None
    return raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()


def _stat(pid: str) -> tuple[str, int, float, int] | None:
    """(comm, pgid, CPU seconds of all its threads, minor page faults) of one process; None once it is gone."""
    st = stat_fields(f"/proc/{pid}/stat")
    if st is None:
        return None
    comm, rest = st
    return comm, int(rest[PGRP]), (int(rest[UTIME]) + int(rest[STIME])) / TICK, int(rest[MINFLT])


def involuntary_switches(status_text: str) -> int:
    """nonvoluntary_ctxt_switches of a /proc/PID/status text (0 where the kernel does not say)."""
    for line in status_text.splitlines():
        if line.startswith("nonvoluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def _preempted(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return involuntary_switches(f.read())
    except OSError:          # gone in between: no count (a 0 would read as a negative count over the run)
        return None


STEAL = 7       # /proc/stat's cpu fields: user nice system idle iowait irq softirq steal guest guest_nice


def parse_proc_stat(text: str) -> dict[str, tuple[int, int, int]]:
    """(busy, total, steal) jiffies since boot per /proc/stat cpu line: "cpu" (all cores), "cpu0", ... Steal is the
    time a virtual machine's core was ready to run but the hypervisor ran someone else (counted busy here): a run
    slower with the same CPU seconds is what steal would explain (12-04g: prefills launched 8-16 ms run to run)."""
    out = {}
    for line in text.splitlines():
        name, *rest = line.split() or [""]
        if not name.startswith("cpu"):
            continue
        fields = [int(x) for x in rest]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)      # idle + iowait
        out[name] = (sum(fields) - idle, sum(fields), fields[STEAL] if len(fields) > STEAL else 0)
    return out


def _host() -> dict[str, tuple[int, int, int]]:
    with open("/proc/stat") as f:
        return parse_proc_stat(f.read())


def snapshot(groups: dict[str, int]) -> dict:
    """CPU seconds per (label, pid, comm) of every process in the groups, their counts (involuntary switches of
    the main thread, minor faults), and the host's jiffies."""
    procs, counts = {}, {}
    by_pgid = {pgid: label for label, pgid in groups.items()}
    for pid in filter(str.isdigit, os.listdir("/proc") if groups else ()):
        st = _stat(pid)
        if st and st[1] in by_pgid:
            key = (by_pgid[st[1]], pid, st[0])
            procs[key] = st[2]
            preempted = _preempted(pid)
            if preempted is not None:
                counts[key] = (preempted, st[3])
    return {"procs": procs, "counts": counts, "host": _host()}


def usage(before: dict, after: dict) -> dict:
    """CPU seconds spent between the snapshots per group and process name (a process that started in
    between counts from 0), the host's busy share of all cores, its steal share, and the cores whose steal share
    reached STEAL_SHOWN (steal_cpus; absent when none did); per group and process name its main threads'
    involuntary switches (preempted) and minor faults (minflt), where the snapshots have them."""
    out: dict = {}
    for name, now in after["host"].items():
        if name not in before["host"]:       # a core brought online in between: its counts are since boot
            continue
        busy, total, steal = (x - y for x, y in zip(now, before["host"][name]))
        if name == "cpu":
            out["host_busy"] = round(busy / total, 3) if total else None
            out["host_steal"] = round(steal / total, 3) if total else None
        elif total and steal / total >= STEAL_SHOWN:
            out.setdefault("steal_cpus", {})[name[3:]] = round(steal / total, 3)
    for (label, pid, comm), seconds in after["procs"].items():
        spent = seconds - before["procs"].get((label, pid, comm), 0.0)
        group = out.setdefault(label, {})
        group[comm] = round(group.get(comm, 0.0) + spent, 2)
    for key, now in after.get("counts", {}).items():
        was = before.get("counts", {}).get(key, (0, 0))
        for i, what in enumerate(("preempted", "minflt")):
            group = out.setdefault(what, {}).setdefault(key[0], {})
            group[key[2]] = group.get(key[2], 0) + now[i] - was[i]
    return out
