"""Bench-only: split this host's CPUs into N sets of whole physical cores (hyperthread siblings together), for
run_pair.sh's PIN_CPUS=1 (no-spec engine, daemon + its engine, load client).

Why whole cores: 12-03g's calibration (procspeed.py) found either idle scheduler running the same pure-Python loop
~1.6x slower in about half of its one-second looks, switching within seconds, with nothing in either process to
explain it (no hook, no thread, same GC); a core shared with a busy sibling was the suspect. A pinning that puts two
engines on siblings of one core (12-02c split the CPU numbers in thirds, blind to siblings) would keep that lottery.
12-03h (a host with no siblings visible) still saw slow looks pinned (9 of 24): the cause lies below the guest.

Usage: python3 cpusets.py N [SYSFS_CPU_DIR] prints N lines of taskset lists (split(): the first N - 1 equal).
python3 cpusets.py pin PGID CPULIST pins every thread of that process group (by PID, never by name) and prints how
many (exit 1 with one line when none or not all could be).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

SYSFS = "/sys/devices/system/cpu"


def parse_list(text: str) -> list[int]:
    """"0-2,8" -> [0, 1, 2, 8] (the kernel's cpulist format)."""
    out: list[int] = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def online_cpus(root: str = SYSFS) -> list[int]:
    """The host's online CPUs (the kernel's cpulist)."""
    with open(os.path.join(root, "online")) as f:
        return parse_list(f.read())


def physical_cores(root: str = SYSFS, allowed: set[int] | None = None) -> list[list[int]]:
    """The online CPUs this process may use (allowed; default its affinity) grouped by physical core (each group: a
    core's sibling threads), ordered by first CPU."""
    allowed = os.sched_getaffinity(0) if allowed is None else allowed
    online = [c for c in online_cpus(root) if c in allowed]
    cores = {}
    for cpu in online:
        path = os.path.join(root, f"cpu{cpu}", "topology", "thread_siblings_list")
        siblings = parse_list(Path(path).read_text()) if os.path.exists(path) else [cpu]
        cores[tuple(c for c in siblings if c in online)] = None
    return sorted((list(c) for c in cores), key=lambda c: c[0])


def split(cores: list[list[int]], n: int) -> list[list[int]]:
    """n sets of whole cores, as even as the core count allows, the first n - 1 of the same size: run_pair.sh's two
    engines (no-spec's, the daemon's) get equal sets and the load client the remainder (16 cores: 5 / 5 / 6, 17: 6 / 6
    / 5). Until 12-05 the extra cores went to the first sets (6 / 5 / 5): the sets, swapped every repeat, were unbiased
    over a call, but a single pair's two engines ran on different core counts."""
    if n < 1 or len(cores) < n:
        raise ValueError(f"{len(cores)} physical cores cannot make {n} sets of whole cores")
    per, extra = divmod(len(cores), n)
    first = per + (extra >= n - 1)      # the compared sets take an extra core each only if all can (n = 1: none)
    sizes = [first] * (n - 1) + [len(cores) - first * (n - 1)]
    out, i = [], 0
    for take in sizes:
        out.append(sorted(c for core in cores[i:i + take] for c in core))
        i += take
    return out


def group_threads(pgid: int, proc: str = "/proc") -> list[int]:
    """Every thread id of every process in process group pgid (by PID, never by name)."""
    tids: list[int] = []
    for entry in os.listdir(proc):
        if not entry.isdecimal():
            continue
        try:
            with open(os.path.join(proc, entry, "stat")) as f:
                fields = f.read().rsplit(")", 1)[1].split()     # after the command name, which may hold spaces
            if int(fields[2]) == pgid:                          # state ppid pgrp ...
                tids.extend(int(t) for t in os.listdir(os.path.join(proc, entry, "task")))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue                                            # gone meanwhile
    return tids


def pin_group(pgid: int, cpus: list[int], proc: str = "/proc") -> tuple[int, int]:
    """Every thread of the group onto cpus (sched_setaffinity per thread id); (pinned, failed) thread counts. A thread
    that appears during the pass inherits its creator's old mask: passes repeat until no new thread shows up."""
    if pgid <= 1:
        raise ValueError(f"process group {pgid}: not an engine's (0 and 1 would pin init and kernel threads)")
    tried: set[int] = set()
    pinned = failed = 0
    for _ in range(3):
        new = [t for t in group_threads(pgid, proc) if t not in tried]
        if not new:
            break
        tried.update(new)
        for tid in new:
            try:
                os.sched_setaffinity(tid, cpus)
                pinned += 1
            except ProcessLookupError:         # exited meanwhile
                continue
            except OSError:                    # EINVAL (no usable CPU in the list), EPERM
                failed += 1
    return pinned, failed


def rotated(groups: list[tuple[str, int, list[int]]], rep: int) -> list[tuple[str, int, list[int]]]:
    """Repeat rep's pins: the core sets shifted by rep over the groups (12-04c: the daemon's engine on cores 6-10 for
    a whole call, slow in 4 of 6 runs, no-spec on 0-5 in none). Each engine gets each set equally often when the
    repeats are a multiple of the groups; with two engines loads.py's order (run_order) repeats every 4, so set and
    order effects separate at 4 repeats, not 2."""
    k = rep % len(groups)
    sets = [cpus for _, _, cpus in groups]
    sets = sets[k:] + sets[:k]
    return [(label, pgid, cpus) for (label, pgid, _), cpus in zip(groups, sets)]


def parse_rotation(text: str | None, online: set[int] | None = None) -> list[tuple[str, int, list[int]]]:
    """"nospec=PGID:0-5;daemon=PGID:6-10" -> [(label, pgid, cpus)]; empty for None or "". Refused (ValueError, one
    line): a missing or repeated label, a process group <= 1, an empty CPU list or one with CPUs not online."""
    online = set(online_cpus()) if online is None else online
    out: list[tuple[str, int, list[int]]] = []
    for part in (text or "").split(";"):
        if not part.strip():
            continue
        label, _, rest = part.partition("=")
        pgid, _, cpus = rest.partition(":")
        label, pgid = label.strip(), pgid.strip()
        try:
            cpu_list = parse_list(cpus)
        except ValueError:
            cpu_list = []
        if (not label or label in {g[0] for g in out} or not pgid.isdecimal() or int(pgid) <= 1 or not cpu_list
                or not set(cpu_list) <= online):
            raise ValueError(f"--pin-rotate: {part!r} is not label=PGID:CPULIST (a new label, a process group > 1, "
                             "online CPUs)")
        out.append((label, int(pgid), cpu_list))
    return out


def main() -> None:
    if sys.argv[1] == "pin":          # cpusets.py pin PGID CPULIST: the group's threads pinned, their count printed
        try:
            pinned, failed = pin_group(int(sys.argv[2]), parse_list(sys.argv[3]))
        except ValueError as e:
            sys.exit(f"cpusets.py pin: {e}")
        if failed or not pinned:
            sys.exit(f"cpusets.py pin: {pinned} threads of group {sys.argv[2]} pinned on {sys.argv[3]}, "
                     f"{failed} refused")
        print(pinned)
        return
    n = int(sys.argv[1])
    cores = physical_cores(sys.argv[2] if len(sys.argv) > 2 else SYSFS)
    print(f"{len(cores)} physical cores: {cores}", file=sys.stderr)
    for cpus in split(cores, n):
        print(",".join(map(str, cpus)))


if __name__ == "__main__":
    main()
