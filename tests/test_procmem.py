"""bench/gpu/procmem.py: where a process group's memory is (run_pair.sh prints it for both engines), on a real
process of this machine and on /proc texts of a two-node host."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench/gpu"))

from procmem import describe, lines, numa_pages, rollup_kib  # noqa: E402

ROLLUP = """55d0c0000000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]
Rss:             3145728 kB
Pss:             3000000 kB
AnonHugePages:   1048576 kB
"""
NUMA_MAPS = """7f0000000000 default anon=1000 dirty=1000 N0=900 N1=100 kernelpagesize_kB=4
7f1000000000 interleave:0-1 anon=20 dirty=20 N1=20 kernelpagesize_kB=4
7f2000000000 default file=/usr/lib/libpython3.so mapped=80 N0=80 kernelpagesize_kB=4
7f3000000000 default file=/dev/hugepages/x huge dirty=2 N1=2 kernelpagesize_kB=2048
"""


def test_a_two_node_process_says_its_share_per_node_and_its_huge_pages():
    assert numa_pages(NUMA_MAPS) == {0: 980 * 4, 1: 120 * 4 + 2 * 2048}     # KiB: a huge page counts as 2 MiB
    assert rollup_kib(ROLLUP, "Rss") == 3145728 and rollup_kib(ROLLUP, "AnonHugePages") == 1048576
    assert rollup_kib(ROLLUP, "Swap") == 0
    assert describe("nospec", 12, "sglang::schedul", ROLLUP, NUMA_MAPS) == (
        "nospec sglang::schedul pid 12: 3,072 MiB resident, 1,024 MiB in huge pages, nodes N0 46 % N1 54 %")
    assert describe("daemon", 13, "x", ROLLUP, "").endswith("nodes unknown")     # no numa_maps on this kernel
    assert describe("daemon", 14, "small", "Rss: 1024 kB\n", NUMA_MAPS) is None   # helpers are not listed


def test_the_group_a_process_holds_its_memory_in_is_listed_by_pid_and_another_group_is_not():
    code = "import sys\nb = bytearray(160 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('up', flush=True)\n" \
           "sys.stdin.readline()"
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              process_group=0)
    try:
        assert holder.stdout.readline().strip() == "up"
        got = lines({"held": holder.pid})
        other = lines({"other": holder.pid + 10 ** 7})
    finally:
        holder.kill()
        holder.wait()
    (line,) = got
    assert line.startswith("held python") and f"pid {holder.pid}:" in line
    resident = int(line.split(": ")[1].split(" MiB")[0].replace(",", ""))
    assert 160 <= resident < 400 and other == []


def test_a_bad_group_gets_one_line_and_a_usage_error():
    bad = subprocess.run([sys.executable, str(ROOT / "bench/gpu/procmem.py"), "nospec=abc"], capture_output=True,
                         text=True)
    none = subprocess.run([sys.executable, str(ROOT / "bench/gpu/procmem.py")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip() == "procmem.py: 'nospec=abc' is not label=PGID"
    assert none.returncode == 2 and none.stderr.strip() == "usage: procmem.py label=PGID,label=PGID"
