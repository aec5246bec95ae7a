"""A test that hangs never leaks what it started into the next: pytest-timeout fails it and the
conftest kills its processes; a signal that ends pytest itself kills them first."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parents[1]

HANGING_TEST = """
import subprocess, sys, time

def test_hangs():
    # In a session of its own, as the CLI starts servers: not reached by a group kill.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    open({pidfile!r}, "w").write(str(child.pid))
    time.sleep(600)
"""


def _inner_pytest(tmp_path: Path, *args: str, test: str = "test_hang.py") -> subprocess.Popen:
    """pytest on one test file in tmp_path, under this suite's conftest."""
    for plugin in ("conftest.py", "tiers.py"):  # the conftest and the plugin it names
        shutil.copy(TESTS / plugin, tmp_path / plugin)
    for folder in ("mutation", "doubles"):  # what the conftest imports (doubles: its gpu_box plugin)
        shutil.copytree(TESTS / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                             str(tmp_path / test), *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _hanging(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """pytest on one hanging test; the file its child's pid is written to."""
    pidfile = tmp_path / "child.pid"
    (tmp_path / "test_hang.py").write_text(HANGING_TEST.format(pidfile=str(pidfile)))
    return _inner_pytest(tmp_path, *args), pidfile


def _child(pidfile: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < deadline, "the hanging test never started its child"
        time.sleep(0.05)
    return int(pidfile.read_text())


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_test_that_times_out_has_what_it_started_killed(tmp_path):
    proc, pidfile = _hanging(tmp_path, "--timeout", "3")
    out, _ = proc.communicate(timeout=120)
    child = _child(pidfile, timeout=0)
    try:
        assert proc.returncode == 1 and "Timeout" in out, out
        assert _gone(child), out
        assert "killed 1 process(es) the test left running" in out
    finally:
        if not _gone(child):
            psutil.Process(child).kill()


def test_pytest_ended_by_a_signal_kills_what_its_tests_started(tmp_path):
    proc, pidfile = _hanging(tmp_path, "--timeout", "300")
    child = _child(pidfile)
    try:
        proc.send_signal(signal.SIGTERM)  # as CI, a scheduler or mutmut's timeout ends a run
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGTERM
        assert _gone(child)
    finally:
        if not _gone(child):
            psutil.Process(child).kill()


# A module's long-lived process (a browser) that starts a child of its own during a test (a page
# process), and a process the test itself leaves.
PARENT = """
import os, subprocess, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "the-fixtures-child"])
time.sleep(600)
"""

FIXTURE_AND_TEST = """
import subprocess, sys, time
import psutil, pytest

@pytest.fixture(scope="module")
def parent():
    proc = subprocess.Popen([sys.executable, {parent!r}, {go!r}])
    yield proc
    for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
    proc.kill()
    proc.wait()

def test_leaves_its_own_and_has_the_fixture_start_one(parent):
    open({go!r}, "w").close()
    while not psutil.Process(parent.pid).children():
        time.sleep(0.05)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "the-tests-own"])

def test_the_fixture_and_its_child_outlived_that_teardown(parent):
    kids = psutil.Process(parent.pid).children()  # a killed child stays listed, a zombie, until reaped
    assert parent.poll() is None and [kid.status() != psutil.STATUS_ZOMBIE for kid in kids] == [True]
"""


def test_a_longer_lived_fixtures_processes_outlive_a_tests_teardown_and_the_tests_own_do_not(tmp_path):
    (tmp_path / "parent.py").write_text(PARENT)
    (tmp_path / "test_fixture.py").write_text(FIXTURE_AND_TEST.format(parent=str(tmp_path / "parent.py"),
                                                                      go=str(tmp_path / "go")))
    out, _ = _inner_pytest(tmp_path, test="test_fixture.py").communicate(timeout=120)
    assert "2 passed" in out, out
    assert re.search(r"killed 1 process\(es\) the test left running: \d+ \S+ -c import time; time.sleep\(600\) "
                     r"the-tests-own", out), out
    assert "the-fixtures-child" not in out
