"""File-system operations per start, counted with a real tracer (issue #44): a tiny known
payload that opens N files of a bound directory, reads them, and looks for N that are not
there; the counts by class and location, the cut at a moment of the payload's own, and the
parser on the lines strace writes for threads (unfinished and resumed calls)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

from scalesweep.measure import fsops

pytestmark = pytest.mark.skipif(shutil.which("strace") is None,
                                reason="strace not installed (apt-get install strace)")

N = 25
PAYLOAD = textwrap.dedent("""
    import os, sys, time
    data, n, mark = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    for i in range(n):
        with open(os.path.join(data, f"f{i}"), "rb") as f:
            f.read()
        try:
            os.stat(os.path.join(data, f"absent{i}"))
        except FileNotFoundError:
            pass
    open(mark, "w").write(repr(time.time()))   # the payload's own "first step"
    time.sleep(0.02)
    for i in range(n):
        open(os.path.join(data, f"f{i}"), "rb").close()
""")


def test_a_known_payloads_operations(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(N):
        (data / f"f{i}").write_bytes(b"x" * 1000)
    script, mark = tmp_path / "payload.py", tmp_path / "mark"
    script.write_text(PAYLOAD)
    argv = [sys.executable, "-S", str(script), str(data), str(N), str(mark)]
    counts = fsops.trace(argv, bound=[str(data)])
    assert counts["exit_code"] == 0
    # every open of the bound directory, both rounds, and its reads: each file's 1000 bytes
    # and the read that finds its end
    assert counts["open_bound"] == 2 * N
    assert counts["read_bound"] == 2 * N
    assert counts["stat_failed"] >= N and counts["stat_bound"] >= N + N  # the absent + fstat
    assert counts["bytes_read"] >= N * 1000
    assert counts["open_root"] > 0  # the interpreter's own files
    # the files opened: the N of the directory, the script, the interpreter's own
    assert counts["files"] >= N + 2

    # cut at the payload's own moment: only the first round
    out = tmp_path / "trace"
    subprocess.run(fsops.strace_argv(argv, out), check=True)
    until = float(mark.read_text())
    first = fsops.count_file(out, [str(data)], until=until).as_dict()
    whole = fsops.count_file(out, [str(data)]).as_dict()
    assert first["open_bound"] == N and whole["open_bound"] == 2 * N
    assert first["bytes_read"] >= N * 1000


def test_threads_unfinished_and_resumed_calls_and_locations():
    """strace -f -y lines: a descriptor's call is placed by the path strace prints with it
    (threads share descriptors, children inherit them); pipes, sockets and anonymous
    memory are no file-system operations; a relative path lies in its directory's place."""
    lines = [
        '10 1.000001 openat(AT_FDCWD</mnt/code>, "/img/lib/a.so", O_RDONLY|O_CLOEXEC) = 3</img/lib/a.so>\n',
        '11 1.000002 read(3</img/lib/a.so>,  <unfinished ...>\n',
        '10 1.000003 newfstatat(3</img/lib/a.so>, "", {st_mode=S_IFREG|0755, st_size=10, ...}, AT_EMPTY_PATH) = 0\n',
        '11 1.000004 <... read resumed>..., 832) = 832\n',
        '10 1.000005 openat(AT_FDCWD</mnt/code>, "x.py", O_RDONLY) = 4</mnt/code/x.py>\n',
        '12 1.000006 read(4</mnt/code/x.py>, ..., 4096) = 100\n',
        '10 1.000007 openat(AT_FDCWD</mnt/code>, "/proc/self/maps", O_RDONLY) = 5</proc/10/maps>\n',
        '10 1.000008 stat("/nope", 0x7ff) = -1 ENOENT (No such file or directory)\n',
        '10 1.000009 mmap(NULL, 8192, PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f00\n',
        '10 1.000010 mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, 3</img/lib/a.so>, 0) = 0x7f00\n',
        '10 1.000011 openat(AT_FDCWD</mnt/code>, "/host/images/x/etc/passwd", O_RDONLY) = 6</host/images/x/etc/passwd>\n',
        '10 1.000012 read(7<pipe:[4242]>, ..., 100) = 100\n',
        '10 1.000013 readlink("/proc/self/exe", "/usr/bin/python3.11", 4096) = 19\n',
        '10 1.000014 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED} ---\n',
        '12 1.000015 +++ exited with 0 +++\n',
        'garbage\n',
    ]
    c = fsops.count(lines, bound=["/mnt/code"], image="/host/images/x").as_dict()
    assert c["open"] == 4 and c["open_root"] == 1 and c["open_bound"] == 1
    assert c["open_kernel"] == 1 and c["open_image"] == 1
    # the resumed read of thread 11 and thread 12's read of fd 4, placed by their paths;
    # the pipe's 100 bytes are not the file system's
    assert c["read"] == 2 and c["read_root"] == 1 and c["read_bound"] == 1
    assert c["bytes_read"] == 932
    # fd 3's fstat, /nope, and the readlink of /proc/self/exe (a path call, not a read)
    assert c["stat"] == 3 and c["stat_failed"] == 1 and c["stat_root"] == 2
    assert c["stat_kernel"] == 1
    assert c["mmap"] == 1 and c["mmap_root"] == 1  # the anonymous mapping is no file
    assert c["processes"] == 3 and c["files"] == 4


def test_no_tracer_is_said(monkeypatch):
    monkeypatch.setattr(fsops.shutil, "which", lambda name: None)
    with pytest.raises(fsops.TraceError, match="strace not found"):
        fsops.strace_argv(["true"], "/tmp/x")


def test_a_program_strace_cannot_trace_is_said_not_counted_as_zero(tmp_path):
    with pytest.raises(fsops.TraceError, match="strace recorded no call of /nonexistent"):
        fsops.trace(["/nonexistent/program"])
