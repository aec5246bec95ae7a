"""Shared fixtures: study configs, the provisioned embedded server and model, workflow runs."""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DOUBLES = TESTS / "doubles"  # test doubles, one folder: the fault server, the SGLang stand-in, result factories
DATA = TESTS / "data"  # fixtures kept as files (a results folder written by an older main)
# The pages whose commands the README tests run: the README, then docs/ by topic.
DOC_PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def docs_text() -> str:
    """The README and every page of docs/, in that order, as one text."""
    return "\n".join(page.read_text() for page in DOC_PAGES)


# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, which this
# project's machines set): the inner loop starts some 340 Python processes (the CLI, Snakemake's
# jobs), each of which would compile specsweep from source again, and each xdist worker (spawned
# after this, with this environment) would rewrite every test module again. Measured on 2 cores:
# the inner loop in 255-268 s with bytecode, 291-305 s without (2026-12-06; docs/development.md's
# history). __pycache__ is git-ignored, and nothing the suite copies or archives takes it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
sys.path.insert(0, str(DOUBLES))

from mutation import hits as mutation_hits  # noqa: E402
from specsweep import study  # noqa: E402
from specsweep.cache import locked  # noqa: E402
from specsweep.study.grid import expand_grid  # noqa: E402
from specsweep.study.loading import validate_study  # noqa: E402
from specsweep.study.targets import provision_embedded  # noqa: E402

# The faked box of GPUs' `nvml` fixture, for the unit and the workflow tests that take it; the
# suite's two phases, the markers alone and early and their scheduler (tests/tiers.py).
pytest_plugins = ["gpu_box", "tiers"]

PYTHON_BIN = str(Path(sys.executable).parent)

if mutation_hits.active():  # run by mutmut (tests/mutation/run.py): subprocesses run the mutant too
    mutation_hits.install(REPO)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item):
    mutation_hits.merge()


def pytest_collection_modifyitems(config, items):
    if mutation_hits.active():
        mutation_hits.killers_first(items, config)


def pytest_runtest_logreport(report):
    if mutation_hits.active():
        mutation_hits.remember_killer(report)


# --- A test never leaks processes into the next -------------------------------------------------
# Snakemake, the CLI and the servers it launches are all descendants of this process (a server's
# own session does not change its parent). A test that ends, fails or times out (pytest-timeout
# raises inside it, so teardown runs) has what it started killed; a signal that ends pytest
# itself (CI's SIGTERM, mutmut's SIGXCPU on a timed-out mutant) kills every descendant first.


def kill_descendants(spare: set[int] = frozenset()) -> list[str]:
    """SIGKILL every descendant not in ``spare``, all at once (so none is orphaned first); reap them."""
    procs = [p for p in psutil.Process().children(recursive=True) if p.pid not in spare]
    names = []
    for proc in procs:
        try:
            names.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)
    return names


def _die_with_descendants(signum, _frame) -> None:
    kill_descendants()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def pytest_configure(config):
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGXCPU):
        signal.signal(sig, _die_with_descendants)


def still_running(procs: list[psutil.Process]) -> set[int]:
    """The pids of those of ``procs`` still running, and of every descendant they have now."""
    pids = set()
    for proc in procs:
        try:
            if proc.is_running():  # the same process, not another on a reused pid
                pids |= {proc.pid, *(child.pid for child in proc.children(recursive=True))}
        except psutil.Error:
            pass
    return pids


@pytest.fixture(autouse=True)
def kill_what_the_test_started():
    """Processes a test leaves behind are killed at its teardown (and named in a warning). What a
    longer-lived fixture runs was there before the test, and is spared with whatever it started
    meanwhile (a module's browser opens a page process per page): that fixture's teardown ends it."""
    before = psutil.Process().children(recursive=True)
    yield
    left = kill_descendants(spare=still_running(before))
    if left:
        warnings.warn(f"killed {len(left)} process(es) the test left running: {'; '.join(left)}", stacklevel=2)


@pytest.fixture(scope="session", autouse=True)
def device_locks(tmp_path_factory):
    """The tests' own device-lock folder: a study the user runs meanwhile is never blocked by them."""
    folder = tmp_path_factory.mktemp("locks")
    os.environ["SPECSWEEP_LOCK_DIR"] = str(folder)
    return folder



@pytest.fixture
def default_config() -> dict:
    """The repository's default study, validated, with defaults filled in."""
    return study.load_study(REPO / "config" / "config.yaml")


def small_study(**overrides) -> dict:
    """A study small enough for end-to-end tests: seconds per configuration on 2 cores."""
    base = study.load_study(REPO / "config" / "config.yaml")  # the schema's defaults filled in
    base["grid"] = {"budget": [0, 4], "tp": [1], "context": [64]}
    base["workload"] = {
        "seed": 1,
        "warmup_requests": 1,
        "warmup_output_tokens": 8,
        "sections": [
            {"name": "short", "output_tokens": 16, "requests": 2, "concurrency": 1},
            {"name": "medium", "output_tokens": 48, "requests": 2, "concurrency": 1},
            {"name": "long", "output_tokens": 96, "requests": 1, "concurrency": 1},
        ],
    }
    base.update(copy.deepcopy(overrides))
    return base


@pytest.fixture
def model(tmp_path) -> Path:
    """A model file for the fault server, which never reads it (preflight wants one to exist)."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF stand-in: the fault server never reads it")
    return path


@pytest.fixture(scope="session")
def embedded() -> dict:
    """The real llama-server and model, provisioned exactly as the workflow does (cached)."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "specsweep-test-build.log"
    # Built (or waited for) in a process ahead of the shared phase's tests, then found in the cache.
    subprocess.run([sys.executable, "-m", "specsweep", "provision", "study", "--config", str(REPO / "config" /
                    "config.yaml"), "--log", str(log)], capture_output=True, timeout=1500, preexec_fn=first_in_line)
    return provision_embedded(study.load_study(REPO / "config" / "config.yaml"), log)


@dataclass(frozen=True)
class SharedStudy:
    folder: Path  # the study folder: results/, logs/, .snakemake/
    output: str  # what the three runs printed
    secrets: tuple[str, ...]  # planted in the environment: none may be written or printed


@pytest.fixture(scope="session")
def shared_study(embedded, tmp_path_factory) -> SharedStudy:
    """The suite's one real sweep for every test that only reads a study: the main command on a small
    study with a keyed server (a key and two tokens planted in the environment), one configuration
    excluded, then its report and its archive. Read by tests/e2e/test_workflow_real.py (the results
    themselves), test_study_archive.py (secrets, report, archive). Made at run time: a literal secret
    here would be found in the archive's copy of this very file."""
    work = tmp_path_factory.mktemp("shared-study")
    planted = {name: f"{prefix}{secrets.token_hex(8)}" for name, prefix in (
        ("SPECSWEEP_TEST_API_KEY", "sk-planted-"), ("HF_TOKEN", "hf_planted_"), ("VLLM_API_KEY", "vllm-planted-"))}
    doc = small_study()
    doc["server"] = {**doc["server"], "api_key_env": "SPECSWEEP_TEST_API_KEY",
                     "command": doc["server"]["command"] + ["--api-key", "{api_key}"]}
    doc["exclude"] = [{"budget": 4, "context": 64, "reason": "left out to show an exclusion"}]
    doc["grid"]["budget"] = [0, 2, 4]
    env = {**os.environ, **planted}
    output = []
    for extra, targets in (((), ()), (("--report", "results/report.html"), ()), ((), ("results/study.tar.gz",))):
        rc, out = finish(run_workflow(work, doc, *targets, extra=extra, env=env), timeout=900)
        assert rc == 0, out[-3000:]
        output.append(out)
    return SharedStudy(work, "\n".join(output), tuple(planted.values()))


@pytest.fixture(scope="session")
def slurm_python(tmp_path_factory) -> Path:
    """A Python with the test environment and the `slurm` extra, as docs/slurm.md installs it, for
    tests/e2e/test_slurm.py and the SLURM profile's command in the docs: a virtualenv layered on
    this one (its packages seen through a .pth file) to which pip adds the executor plugin. The
    plugin stays out of the test environment: Snakemake imports every installed executor plugin
    when it starts, and this one's pandas cost every other Snakemake run of the suite 0.65 CPU-s."""
    venv = tmp_path_factory.mktemp("slurm-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_dir = next((venv / "lib").glob("python*/site-packages"))
    (site_dir / "test-environment.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    extra = [r.split(";")[0] for r in importlib.metadata.requires("specsweep") if 'extra == "slurm"' in r]
    assert extra, "the slurm extra of pyproject.toml names no package"
    python = venv / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                           "--disable-pip-version-check", *extra], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"installing the slurm extra ({extra}) failed: {proc.stderr[-2000:]}"
    return python


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory) -> Path:
    """A folder this test run's xdist workers share (the session's own without workers): what an
    early test prepares in the parallel phase, an alone test finds there (made_once)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def first_in_line() -> None:
    """preexec_fn of an early test's build: ahead of the shared phase's tests on the CPU (nice -5),
    since every alone test waits for it; where this user may not raise a priority, as it is."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -5)
    except OSError:
        pass


def made_once(folder: Path, make) -> Path:
    """``make(folder)`` once per run, whichever worker asks first; the others wait for it (the
    provisioning cache's own lock)."""
    with locked(folder.parent / f".{folder.name}.lock"):
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / ".made").touch()
    return folder


def benchmark_module(name: str):
    """A script of benchmarks/ loaded as a module (they are scripts, not part of the package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_checkout(dest: Path) -> Path:
    """The checkout's own files (tracked and untracked, not ignored: no results, logs or venv) in dest."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def run_workflow(workdir: Path, config: dict, *targets: str, extra: tuple[str, ...] = (), **popen) -> subprocess.Popen:
    """Start the real Snakemake workflow on a study in a scratch directory."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "study.yaml").write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(workdir / "study.yaml"), "--cores", "1", *extra, *(targets or ("results/summary.png",)),
    ]
    env = popen.pop("env", os.environ)
    env = {**env, "PATH": PYTHON_BIN + os.pathsep + env.get("PATH", "")}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, **popen)


def finish(proc: subprocess.Popen, timeout: float = 900) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def measured(runs: Path) -> list[str]:
    """The configurations whose first launch has a result in a runs folder, sorted."""
    return sorted(p.parent.name for p in Path(runs).glob("*/launch1.json"))


def result_path(runs: Path, name: str, launch: int = 1) -> Path:
    """Where one launch of a configuration keeps its result (records/paths.launch_result)."""
    return Path(runs) / name / f"launch{launch}.json"


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


FAULT_SERVER = str(DOUBLES / "fault_server.py")
SGLANG_STANDIN = str(DOUBLES / "sglang_standin.py")
VLLM_STANDIN = str(DOUBLES / "vllm_standin.py")
NAME = "tp1-b0-ctx16"


# The quiet-host guard of a study that tests mechanics (a fault caught, a file written, a job planned)
# and runs beside other such tests on the xdist workers (tests/tiers.py): a neighbour's CPU must
# not turn the test's result into host-not-quiet. The guard's own verdicts are tested alone
# (tests/unit/host/test_quiet_host.py, tests/workflow/test_quiet_host_cli.py, tests/e2e).
SHARED_GUARD = {"max_foreign_cores": 100.0, "max_repeat_spread": 10.0}


def fault_study(model: Path, fault: str = "none", *, token_delay: float = 0.002, guard: dict = SHARED_GUARD,
                **server) -> dict:
    """Warmup is request 1; short = requests 2-3, medium = 4-5, long = 6. ``guard``: the quiet-host
    settings ({}: the schema's, for a test that runs alone)."""
    return validate_study({
        "model": {"path": str(model)},
        "server": {
            "binary": sys.executable,
            "command": ["{binary}", FAULT_SERVER, "--port", "{port}", "--fault", fault,
                        "--token-delay", str(token_delay)],
            "speculative_args": ["--budget", "{budget}"],
            "startup_timeout_s": 10, "stall_timeout_s": 1.5, **server,
        },
        "grid": {"budget": [0], "tp": [1], "context": [16]},
        "quiet_host": dict(guard),
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 1, "sections": [
            {"name": "short", "output_tokens": 8, "requests": 2},
            {"name": "medium", "output_tokens": 8, "requests": 2},
            {"name": "long", "output_tokens": 8, "requests": 1},
        ]},
    })


def goodput_study(model: Path, fault: str = "none", *, max_schedule_lag_s: float = 0.5, **objective) -> dict:
    """The fault server's load model (fault_server.py --busy-above) with a goodput objective over one section.

    ``max_schedule_lag_s``: half a second, not the schema's 50 ms: these tests are about the search,
    and most share the machine (tests/tiers.py), where a client starved for 90 ms failed them as
    client-overload in CI; the lag check has its own test (tests/workflow/test_workload_cli.py).
    """
    # Requests of 10 tokens at 20 ms a token: D is about 0.2 s, so with 2 in flight allowed before
    # the 0.4 s wait the sustainable rate is about 2 / 0.2 = 10 requests/s.
    study = fault_study(model, fault, token_delay=0.02)
    study["server"]["command"] += ["--busy-above", "2", "--slow-ttft", "0.4"]
    study["workload"]["sections"] = [{"name": "short", "output_tokens": 10, "requests": 12, "concurrency": 1,
                                      "request_rate": None}]
    study["workload"]["max_schedule_lag_s"] = max_schedule_lag_s
    study["workload"]["objective"] = {"section": "short", "ttft_p99_s": 0.2, "tpot_p99_s": None, "start_rate": 3.0,
                                      "precision": 0.1, "max_steps": 8, "arrival": "constant", **objective}
    return study


def start_cli(tmp_path: Path, study: dict, *extra: str) -> subprocess.Popen:
    """The CLI on the study's first configuration, with the study's quiet-host settings as the rule
    passes them (a later --quiet-host in ``extra`` wins)."""
    spec = expand_grid(study)[0]
    cmd = [sys.executable, "-m", "specsweep", "launch", "--spec", spec.to_json(),
           "--out", str(tmp_path / "launches" / f"{NAME}.json"), "--server-log", str(tmp_path / "server.log"),
           "--failures-dir", str(tmp_path / "failures"),
           "--quiet-host", json.dumps(study.get("quiet_host", {})), *extra]
    return subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def launch_cli(tmp_path: Path, study: dict, *extra: str) -> tuple[int, str]:
    proc = start_cli(tmp_path, study, *extra)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err
