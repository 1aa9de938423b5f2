"""bench/gpu/cpusets.py: whole physical cores per pinned set, read from a sysfs tree laid out as Linux's."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
import cpusets  # noqa: E402


def sysfs(tmp_path, online: str, siblings: dict[int, str]) -> str:
    (tmp_path / "online").write_text(online + "\n")
    for cpu, sib in siblings.items():
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(sib + "\n")
    return str(tmp_path)


def test_siblings_numbered_apart_stay_in_one_set(tmp_path):
    # 4 cores x 2 threads, siblings n and n + 4 (the usual x86 numbering): a split by CPU number in halves would
    # put 0 and 4 (one core) in different sets
    root = sysfs(tmp_path, "0-7", {c: f"{c % 4},{c % 4 + 4}" for c in range(8)})
    every = set(range(8))
    assert cpusets.physical_cores(root, every) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert cpusets.split(cpusets.physical_cores(root, every), 2) == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_only_the_cpus_this_process_may_use(tmp_path):
    # a container limited to part of the host: cores it may not use are left out, a half-allowed core keeps its half
    root = sysfs(tmp_path, "0-7", {c: f"{c % 4},{c % 4 + 4}" for c in range(8)})
    assert cpusets.physical_cores(root, {0, 4, 1, 2, 6}) == [[0, 4], [1], [2, 6]]


def test_the_compared_sets_are_equal_and_offline_cpus_are_left_out(tmp_path):
    root = sysfs(tmp_path, "0-4", {c: str(c) for c in range(6)})      # cpu5 offline, no SMT
    assert cpusets.split(cpusets.physical_cores(root, set(range(6))), 3) == [[0, 1], [2, 3], [4]]
    assert cpusets.parse_list("0-2,8,10-11") == [0, 1, 2, 8, 10, 11]


@pytest.mark.parametrize("count,sizes", [(16, [5, 5, 6]), (17, [6, 6, 5]), (15, [5, 5, 5]), (3, [1, 1, 1])])
def test_the_two_engines_get_as_many_cores_as_each_other(count, sizes):
    """The H100 / H200 hosts' 16 cores were split 6 / 5 / 5 until 12-05: a single pair's engines ran on 6 and 5."""
    out = cpusets.split([[c] for c in range(count)], 3)
    assert [len(s) for s in out] == sizes and sorted(sum(out, [])) == list(range(count))
    assert [len(s) for s in cpusets.split([[c] for c in range(5)], 2)] == [3, 2]
    assert [len(s) for s in cpusets.split([[c] for c in range(4)], 1)] == [4]


def test_more_sets_than_cores_is_refused(tmp_path):
    root = sysfs(tmp_path, "0-1", {0: "0-1", 1: "0-1"})
    with pytest.raises(ValueError, match="1 physical cores cannot make 3"):
        cpusets.split(cpusets.physical_cores(root, {0, 1}), 3)


def test_rotated_sets_give_each_engine_each_core_set_in_turn():
    groups = [("nospec", 11, [0, 1, 2]), ("daemon", 22, [3, 4])]
    assert cpusets.rotated(groups, 0) == groups
    assert cpusets.rotated(groups, 1) == [("nospec", 11, [3, 4]), ("daemon", 22, [0, 1, 2])]
    assert cpusets.rotated(groups, 2) == groups
    three = [("a", 1, [0]), ("b", 2, [1]), ("c", 3, [2])]
    seen = {label: {tuple(c) for r in range(3) for lab, _, c in cpusets.rotated(three, r) if lab == label}
            for label in "abc"}
    assert seen == {label: {(0,), (1,), (2,)} for label in "abc"}


@pytest.mark.parametrize("bad", ["nospec=12", "nospec=x:0-3", "=12:0", " =12:0", "nospec=12:", "nospec=0:1",
                                 "nospec=1:1", "daemon=7:1", "nospec=12:0-3:5", "nospec=12:9"])
def test_a_pin_rotation_that_is_not_label_pgid_cpus_is_refused(bad):
    # daemon=7:1 repeats a label; 0 and 1 would pin init and every kernel thread; CPU 9 is not online here
    with pytest.raises(ValueError, match="is not label=PGID:CPULIST"):
        cpusets.parse_rotation(f"daemon=5:4-7;{bad}", online=set(range(8)))


def test_pin_rotation_parses_kernel_cpu_lists():
    assert cpusets.parse_rotation(" nospec=12:0-2,5;daemon=34:3 ", online=set(range(8))) == [
        ("nospec", 12, [0, 1, 2, 5]), ("daemon", 34, [3])]
    assert cpusets.parse_rotation(None) == [] == cpusets.parse_rotation("")


def fake_proc(tmp_path, procs: dict[int, tuple[str, int, list[int]]]) -> str:
    """A /proc with, per pid, its command name, process group and thread ids."""
    for pid, (comm, pgid, tids) in procs.items():
        d = tmp_path / str(pid)
        (d / "task").mkdir(parents=True)
        (d / "stat").write_text(f"{pid} ({comm}) S 1 {pgid} {pgid} 0 -1 4194560 0 0\n")
        for t in tids:
            (d / "task" / str(t)).mkdir()
    (tmp_path / "self").mkdir()
    return str(tmp_path)


def test_group_threads_reads_the_group_after_a_command_name_with_parentheses_and_spaces(tmp_path):
    proc = fake_proc(tmp_path, {100: ("sglang) S 1 9", 40, [100, 101]), 200: ("python3", 40, [200]),
                                300: ("other", 41, [300, 301])})
    assert sorted(cpusets.group_threads(40, proc)) == [100, 101, 200]
    assert sorted(cpusets.group_threads(41, proc)) == [300, 301]


def test_pin_group_counts_refused_threads_and_skips_exited_ones(tmp_path, monkeypatch):
    proc = fake_proc(tmp_path, {100: ("a", 40, [100, 101, 102])})
    calls = []

    def setaffinity(tid, cpus):
        calls.append((tid, list(cpus)))
        if tid == 101:
            raise ProcessLookupError(tid)
        if tid == 102:
            raise OSError(22, "Invalid argument")
    monkeypatch.setattr(cpusets.os, "sched_setaffinity", setaffinity)
    assert cpusets.pin_group(40, [3], proc) == (1, 1)
    assert sorted(calls) == [(100, [3]), (101, [3]), (102, [3])]
    with pytest.raises(ValueError, match="process group 1"):
        cpusets.pin_group(1, [3], proc)
