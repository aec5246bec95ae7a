"""How one `pytest` runs the whole suite in minutes on 2 cores: the tests that may share the
machine on every worker at once, then the tests that must have it to themselves, one at a time.

Most of the suite waits: on a fault server's token delays, a Snakemake parse, a subprocess's
exit. Those tests share the machine well (pytest-xdist workers, ``-n`` in pyproject.toml). A test
marked ``alone`` must not share it: it measures a real server (every test of tests/e2e, marker
``e2e``), or asserts what the host's timing or the quiet-host guard makes of it. Sharing would make
its outcome depend on its neighbours, which is what a test must never do.

So the scheduler below (xdist's load scheduling, changed in two ways) runs every test that is not
alone first, two queued per worker so no worker sits idle while another holds a backlog, the
``early`` ones (the builds the alone tests need) at the head of the queue; once they are all
done and every other worker has stopped, it hands the alone tests to one worker, in order.
Without xdist (``-n 0``, the mutation harness) the tests run one at a time in pytest's order.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

ALONE = "alone"
EARLY = "early"


def pytest_configure(config):
    config.addinivalue_line("markers", f"{ALONE}: must have the machine to itself (measures, or judges the host's "
                                       "timing): runs after every other test, one at a time")
    config.addinivalue_line("markers", f"{EARLY}: provisions what the alone tests need; first in the queue")


def is_alone(item: pytest.Item) -> bool:
    """Alone: marked so, or a real-server test (e2e), unless it is an early provisioning test."""
    if item.get_closest_marker(EARLY) is not None:
        return False
    return item.get_closest_marker(ALONE) is not None or item.get_closest_marker("e2e") is not None


def pytest_itemcollected(item):
    if is_alone(item):
        item.add_marker(ALONE)  # before -m selects: `pytest -m alone` runs the real-server tier too


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """On an xdist worker, early tests first. One process alone (no -n, the mutation harness) keeps
    pytest's order."""
    if hasattr(config, "workerinput"):
        early = [item for item in items if item.get_closest_marker(EARLY)]
        rest = [item for item in items if not item.get_closest_marker(EARLY)]
        # One early test and one other per worker at the start (a worker runs a test once it holds
        # the next): each build gets a worker of its own instead of queueing behind another.
        items[:] = [item for pair in zip(early, rest[:len(early)]) for item in pair] + rest[len(early):]


# The controller collects nothing: each worker writes the ids of its alone tests to a file the
# controller named (xdist's pytest_configure_node hands it over), before it reports its collection.
ALONE_FILE = "specsweep_alone_ids"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    config = node.config
    if not hasattr(config, "_alone_folder"):
        config._alone_folder = tempfile.mkdtemp(prefix="pytest-alone-")
    node.workerinput[ALONE_FILE] = os.path.join(config._alone_folder, f"{node.gateway.id}.json")


def pytest_unconfigure(config):
    if hasattr(config, "_alone_folder"):
        shutil.rmtree(config._alone_folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    path = getattr(session.config, "workerinput", {}).get(ALONE_FILE)
    if path:
        ids = [item.nodeid for item in session.items if is_alone(item)]
        with open(f"{path}.part", "w") as out:
            json.dump(ids, out)
        os.replace(f"{path}.part", path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return AloneLastScheduling(config, log)


def alone_ids(config) -> set[str]:
    """The alone tests' ids, as the workers wrote them."""
    folder = getattr(config, "_alone_folder", None)
    found: set[str] = set()
    for name in os.listdir(folder) if folder else ():
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as src:
                found.update(json.load(src))
    return found


try:
    from xdist.scheduler import LoadScheduling
except ImportError:  # without xdist the hook above is never called
    LoadScheduling = object


class AloneLastScheduling(LoadScheduling):
    """xdist's load scheduling for the tests that may share the machine, then the alone tests on
    one worker with every other worker stopped."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.alone: list[int] = []
        self.alone_sent = False
        self.runner = None  # the worker that runs the alone tests

    def add_node(self, node):
        super().add_node(node)
        self.runner = self.runner or node

    def schedule(self):
        assert self.collection_is_completed
        if self.collection is None:
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = next(iter(self.node2collection.values()))
            alone = alone_ids(self.config)
            every = range(len(self.collection))
            self.alone = [i for i in every if self.collection[i] in alone]
            self.pending[:] = [i for i in every if self.collection[i] not in alone]
        for node in self.nodes:
            self.check_schedule(node)

    def check_schedule(self, node, duration: float = 0):
        """Keep two tests queued on each worker (it runs one while it holds the next); with none
        left to share, go on to the alone tests."""
        if node.shutting_down:
            return
        if self.pending:
            self._send_tests(node, max(0, 2 - len(self.node2pending[node])))
        else:
            self._start_alone()

    def remove_node(self, node):
        if self.runner is node:  # crashed: another worker takes over (xdist may start a new one)
            self.runner = next((n for n in self.nodes if n is not node), None)
        crashed = super().remove_node(node)
        self._start_alone()
        return crashed

    def _start_alone(self):
        """Stop every other worker; once they have gone, queue the alone tests on the runner."""
        if self.pending or self.alone_sent or self.runner is None:
            return
        others = [n for n in self.nodes if n is not self.runner]
        for node in others:
            if not node.shutting_down:
                node.shutdown()
        if others:
            return  # remove_node calls again as each one leaves
        self.alone_sent = True
        if self.alone:
            self.node2pending[self.runner].extend(self.alone)
            self.runner.send_runtest_some(self.alone)
        self.runner.shutdown()

    @property
    def tests_finished(self) -> bool:
        return super().tests_finished and (self.alone_sent or not self.alone)

    @property
    def has_pending(self) -> bool:
        return super().has_pending or (bool(self.alone) and not self.alone_sent)
