"""Where the engines' processes keep their memory (Linux /proc; by process group, never by name): resident MiB,
anonymous huge pages (smaps_rollup) and pages per NUMA node (numa_maps), one line per process of at least
MIN_RSS_MIB. run_pair.sh prints it once the engines are pinned and again at the end.

Why: the engine started second ran every CPU op ~1.15x slower with its core set swapped every repeat (12-04h/i,
the A/A's twin too). Pins move threads, not pages: memory first touched on one node stays there, and a process
whose heap is on the far node, or in 4 KiB pages where the other's is in huge pages, is slower for every op.

    python3 bench/gpu/procmem.py nospec=1234,daemon=5678
    -> nospec sglang::schedul pid 1240: 3,912 MiB resident, 1,024 MiB in huge pages, nodes N0 98 % N1 2 %
"""
from __future__ import annotations

import os
import re
import sys

from proccpu import PGRP, parse_groups, stat_fields     # beside this file

MIN_RSS_MIB = 64
NODE = re.compile(r"\bN(\d+)=(\d+)")
PAGE_KIB = re.compile(r"\bkernelpagesize_kB=(\d+)")


def numa_pages(numa_maps: str) -> dict[int, int]:
    """KiB per NUMA node summed over a /proc/PID/numa_maps text (each mapping's N<node>=<pages> times its
    kernelpagesize_kB: hugetlbfs mappings count their 2 MiB pages as such)."""
    out: dict[int, int] = {}
    for line in numa_maps.splitlines():
        size = PAGE_KIB.search(line)
        for node, pages in NODE.findall(line):
            out[int(node)] = out.get(int(node), 0) + int(pages) * (int(size.group(1)) if size else 4)
    return out


def rollup_kib(smaps_rollup: str, field: str) -> int:
    """A field of /proc/PID/smaps_rollup in KiB (Rss, AnonHugePages, ...; 0 where absent)."""
    m = re.search(rf"^{field}:\s+(\d+) kB", smaps_rollup, re.M)
    return int(m.group(1)) if m else 0


def describe(label: str, pid: int, comm: str, smaps_rollup: str, numa_maps: str) -> str | None:
    """One process's line, or None under MIN_RSS_MIB (helpers, tokenizer stubs)."""
    rss = rollup_kib(smaps_rollup, "Rss") // 1024
    if rss < MIN_RSS_MIB:
        return None
    huge = rollup_kib(smaps_rollup, "AnonHugePages") // 1024
    pages = numa_pages(numa_maps)
    total = sum(pages.values())
    nodes = " ".join(f"N{n} {100 * p / total:.0f} %" for n, p in sorted(pages.items())) if total else "unknown"
    return f"{label} {comm} pid {pid}: {rss:,} MiB resident, {huge:,} MiB in huge pages, nodes {nodes}"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:      # gone, or numa_maps absent (a kernel without NUMA)
        return ""


def lines(groups: dict[str, int]) -> list[str]:
    by_pgid = {pgid: label for label, pgid in groups.items()}
    out = []
    for pid in sorted(filter(str.isdigit, os.listdir("/proc")), key=int):
        st = stat_fields(f"/proc/{pid}/stat")
        if st is None or int(st[1][PGRP]) not in by_pgid:
            continue
        line = describe(by_pgid[int(st[1][PGRP])], int(pid), st[0], _read(f"/proc/{pid}/smaps_rollup"),
                        _read(f"/proc/{pid}/numa_maps"))
        if line:
            out.append(line)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: procmem.py label=PGID,label=PGID", file=sys.stderr)
        return 2
    try:
        groups = parse_groups(argv[0])
    except ValueError as e:
        print(str(e).replace("--cpu-groups", "procmem.py"), file=sys.stderr)
        return 2
    print("\n".join(lines(groups)) or "no process of those groups holds MiB enough to list")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
