"""The server process: launch in its own process group, readiness, liveness, teardown."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

from specsweep.errors import PortConflict, ServerDied, ServerHung, ServerNotReady, ServerStartError
from specsweep.servers import probes, signatures, templates
from specsweep.servers.backends import Backend

TERM_GRACE_S = 5.0
WATCH_INTERVAL_S = 0.05


class ServerProcess:
    """One launched server. Use as a context manager: the whole tree dies on every exit path."""

    def __init__(self, argv: list[str], *, port: int, log_path: Path, startup_timeout_s: float,
                 backend: Backend, env: dict[str, str] | None = None, api_key: str | None = None):
        self.argv = argv
        self.backend = backend  # the server's dialect: health route, stream format, log signatures
        self.env = env or {}  # added to ours: the devices it may use (CUDA_VISIBLE_DEVICES)
        self.headers = probes.auth_headers(api_key)
        self.secrets = (api_key,) if api_key else ()
        self.port = port
        self.base_url = f"http://{probes.HOST}:{port}"
        self.log_path = Path(log_path)
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.log_start = 0  # byte offset of this launch's lines in the (appended) log
        self.died = threading.Event()  # set by the watcher the moment the process is gone
        self._tree: dict[int, psutil.Process] = {}
        self._stop_watch = threading.Event()
        self._watcher: threading.Thread | None = None
        self._shm_before: set[str] = set()
        self.shm_removed: list[str] = []  # shared-memory files this server left behind, removed at teardown

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # A hung server will not honour SIGTERM: no grace period, straight to SIGKILL.
        self.stop(grace_s=0.0 if exc_type is ServerHung else TERM_GRACE_S)

    def start(self) -> None:
        # Never benchmark a stranger: a port that already answers is refused before launch.
        if probes.port_answers(self.port):
            raise PortConflict(f"port {self.port} is already served by another process")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_start = signatures.log_size(self.log_path)
        self._shm_before = shm_files()
        with open(self.log_path, "ab") as log:
            log.write(f"# specsweep: {' '.join(self.shown_argv)}\n".encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(
                    self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,  # own process group: one killpg reaches every child
                    env={**os.environ, **self.env},
                )
            except OSError as exc:
                raise ServerStartError(f"cannot launch {self.argv[0]}: {exc.strerror}") from exc
        self._remember_tree()
        self._watcher = threading.Thread(target=self._watch, name="server-watch", daemon=True)
        self._watcher.start()

    @property
    def shown_argv(self) -> list[str]:
        """The command as specsweep writes it anywhere (log header, job log, result): secrets hidden."""
        return templates.redact(self.argv, self.secrets)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self) -> None:
        """Poll health until 200; fail fast when the process exits, slowly only on timeout."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                err = self.death_error(ServerStartError, "server exited during startup")
                if err.signature == "port-in-use":  # another process took the port meanwhile
                    raise PortConflict(err.reason, evidence=err.evidence, signature=err.signature,
                                       exit_text=err.exit_text)
                raise err
            ok, _ = self._health(timeout=self.backend.health_timeout_s)
            if ok:
                self._check_owner()
                return
            time.sleep(0.1)
        _, detail = self._health(timeout=self.backend.health_timeout_s)
        raise ServerNotReady(
            f"server not ready after {self.startup_timeout_s:g} s ({detail})",
            evidence=[self.log_tail(5)],
        )

    def check_alive(self, where: str, *, http: bool = True) -> None:
        """Raise ServerDied unless the process runs and (optionally) its health route says ok."""
        if not self.alive():
            raise self.death_error(ServerDied, f"server died {where}")
        if http:
            ok, detail = self._health(timeout=self.backend.health_timeout_s)
            if not ok:
                # The process may be dying right now: give it a moment to report its exit.
                time.sleep(0.2)
                if not self.alive():
                    raise self.death_error(ServerDied, f"server died {where}")
                raise ServerDied(f"server unhealthy {where}: {detail}")

    def _health(self, timeout: float) -> tuple[bool, str]:
        return probes.health(self.base_url, timeout=timeout, headers=self.headers, route=self.backend.health_route)

    def death_error(self, cls: type, where: str):
        """The typed error for a process found dead, naming the log's known signature."""
        self._wait_exit(1.0)
        exit_text = signatures.describe_exit(self.proc.returncode if self.proc else None)
        label, lines = signatures.classify(self.log_tail(400), extra=self.backend.signatures)
        cause = lines[0] if lines else exit_text
        return cls(f"{where}: {cause}", evidence=lines, signature=label, exit_text=exit_text)

    def log_tail(self, lines: int) -> str:
        """The last lines this launch wrote, never an earlier attempt's."""
        return signatures.log_tail(self.log_path, lines, start=self.log_start)

    def _wait_exit(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def _check_owner(self) -> None:
        """The listener on our port must belong to our process tree."""
        self._remember_tree()
        owners = _listeners(self.port)
        if owners and not owners & (set(self._tree) | {self.pid}):
            raise PortConflict(f"port {self.port} answers, but from pid(s) {sorted(owners)}, not ours")

    def tree_pids(self) -> set[int]:
        """The server and every descendant seen so far (for the quiet-host guard)."""
        self._remember_tree()
        return set(self._tree) | ({self.pid} if self.proc else set())

    def _remember_tree(self) -> None:
        """Track descendants while they live: children that leave the group are killed too."""
        try:
            root = psutil.Process(self.pid)
            for proc in [root, *root.children(recursive=True)]:
                self._tree.setdefault(proc.pid, proc)
        except psutil.Error:
            pass

    def _watch(self) -> None:
        tick = 0
        while not self._stop_watch.is_set():
            if not self.alive():
                self.died.set()
                return
            tick += 1
            if tick % 10 == 0:
                self._remember_tree()
            self._stop_watch.wait(WATCH_INTERVAL_S)

    def stop(self, grace_s: float = TERM_GRACE_S) -> None:
        """SIGTERM the group, SIGKILL what is left after a grace period, reap everything."""
        if self.proc is None:
            return
        self._stop_watch.set()
        self._remember_tree()
        stop_tree(self.proc.pid, self._tree.values(), grace_s)
        self._wait_exit(TERM_GRACE_S)
        self._clean_shm()
        self._redact_log()

    def _clean_shm(self) -> None:
        """Remove /dev/shm files that appeared during this launch and no process maps or holds.

        A killed vLLM leaves hundreds of MiB there (torch's psm_* segments, sem.mp-* semaphores);
        in a sweep with crashes they would fill the memory-backed disk. Files still in use, by
        another job's server for instance, are left alone.
        """
        new = shm_files() - self._shm_before
        if not new:
            return
        in_use = shm_in_use()
        for name in sorted(new - in_use):
            path = Path(SHM_DIR) / name
            try:
                size = path.stat().st_size
                path.unlink()
            except OSError:
                continue
            self.shm_removed.append(f"{name} ({size / 2**20:.1f} MiB)")
        if self.shm_removed:
            with open(self.log_path, "a") as log:
                log.write(f"# specsweep: removed {len(self.shm_removed)} shared-memory file(s) the server left in "
                          f"{SHM_DIR}: {', '.join(self.shm_removed[:20])}\n")

    def _redact_log(self) -> None:
        """Servers echo their arguments (vLLM prints its api_key): scrub this launch's lines."""
        if not self.secrets:
            return
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return
        head, tail = data[: self.log_start], data[self.log_start:].decode("utf-8", errors="replace")
        clean = templates.redact_text(tail, self.secrets)
        if clean != tail:
            from specsweep.records.store import write_bytes_atomic

            write_bytes_atomic(self.log_path, head + clean.encode())


SHM_DIR = "/dev/shm"


def shm_files() -> set[str]:
    """Names of this user's files in /dev/shm."""
    try:
        return {e.name for e in os.scandir(SHM_DIR) if e.is_file(follow_symlinks=False)
                and e.stat(follow_symlinks=False).st_uid == os.getuid()}
    except OSError:
        return set()


def shm_in_use() -> set[str]:
    """/dev/shm names some process still maps or holds open (by /proc/<pid>/maps and fd links)."""
    used: set[str] = set()
    prefix = SHM_DIR + "/"
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for line in (proc / "maps").read_text().splitlines():
                where = line.find(prefix)
                if where >= 0:
                    used.add(line[where + len(prefix):].split(" ")[0])
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith(prefix):
                    used.add(target[len(prefix):].split(" ")[0])
        except OSError:
            continue
    return used


def _listeners(port: int) -> set[int]:
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return set()
    return {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}


def stop_tree(group: int, tree, grace_s: float = TERM_GRACE_S) -> None:
    """The teardown: SIGTERM process group ``group`` and every process of ``tree`` (psutil
    processes: children that left the group are reached too), SIGKILL what is left after
    ``grace_s``, and reap them. ServerProcess.stop uses it, and so does the GPU call
    (benchmarks/gpu_call.py) for a stage cut short, whose servers run in sessions of their own."""
    procs = [p for p in tree if _running(p)]
    left = procs
    if grace_s > 0:
        _signal_group(group, signal.SIGTERM)
        for proc in procs:
            _send(proc, signal.SIGTERM)
            _send(proc, signal.SIGCONT)  # a stopped process handles SIGTERM only once resumed
        _, left = psutil.wait_procs(procs, timeout=grace_s)
    _signal_group(group, signal.SIGKILL)
    for proc in left:
        _send(proc, signal.SIGKILL)
    psutil.wait_procs(left, timeout=TERM_GRACE_S)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _send(proc: psutil.Process, sig: signal.Signals) -> None:
    try:
        proc.send_signal(sig)
    except psutil.Error:
        pass
