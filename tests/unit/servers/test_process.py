"""The package's one teardown (servers/process.py stop_tree), as ServerProcess.stop and the GPU
call's stage stop use it: the group and every process of the tree, a child that left the group
and one that ignores SIGTERM included, all gone and reaped. A server's whole life through the
CLI: tests/workflow/ (the fault server) and tests/e2e (the real ones)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil

from specsweep.servers import process

# A parent in its own group whose child leaves it (a session of its own, as a server's workers may)
# and ignores SIGTERM; both print their pid and wait.
TREE = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import os, signal, time; signal.signal(signal.SIGTERM, "
                          "signal.SIG_IGN); print(os.getpid(), flush=True); time.sleep(120)"],
                         start_new_session=True, stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def _tree() -> tuple[subprocess.Popen, list[psutil.Process]]:
    parent = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True, stdout=subprocess.PIPE,
                              text=True)
    child = int(parent.stdout.readline())
    return parent, [psutil.Process(parent.pid), psutil.Process(child)]


def test_the_teardown_reaches_a_child_outside_the_group_and_one_that_ignores_sigterm():
    parent, tree = _tree()
    t0 = time.monotonic()
    process.stop_tree(parent.pid, tree, grace_s=1.0)
    took = time.monotonic() - t0
    assert tree[0].returncode == -signal.SIGTERM  # the group's SIGTERM, within the grace (reaped by the teardown)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree)
    assert 1.0 <= took < 5  # the child that ignored SIGTERM was given the grace, then killed


def test_no_grace_kills_at_once():
    parent, tree = _tree()
    t0 = time.monotonic()
    process.stop_tree(parent.pid, tree, grace_s=0)
    assert tree[0].returncode == -signal.SIGKILL and time.monotonic() - t0 < 4  # no SIGTERM first
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree)


def test_a_tree_already_gone_is_no_error():
    parent, tree = _tree()
    process.stop_tree(parent.pid, tree, grace_s=0)
    t0 = time.monotonic()
    process.stop_tree(parent.pid, tree, grace_s=1.0)  # nothing left: no signal raises, nothing waits
    assert time.monotonic() - t0 < 0.5
