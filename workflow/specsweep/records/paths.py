"""Where a study keeps its files, relative to the folder Snakemake runs in.

The rules and the package read these names from here, so that the layout is said once.
"""

from __future__ import annotations

from pathlib import Path

RESULTS = Path("results")
RUNS = RESULTS / "runs"  # one result document per measured configuration
FAILURES = RESULTS / "failures"  # failure records, <name>/<time>-attempt<n>.json, kept across reruns
HISTORY = RESULTS / "history"  # a read-only copy of every result ever written, <name>/<sha256>.json
INVALID = RESULTS / "invalid"  # results aggregation refused, moved aside (never deleted)
SUMMARY_CSV = RESULTS / "summary.csv"
SUMMARY_PNG = RESULTS / "summary.png"
TRADEOFF_PNG = RESULTS / "tradeoff.png"  # tok/s per user against tok/s per GPU, across load levels
BEST_CSV = RESULTS / "best.csv"
STUDY_CONFIG = RESULTS / "study" / "config.yaml"  # the merged study config the summary was made from
PARTIAL_CSV = RESULTS / "partial" / "summary.csv"
PARTIAL_PNG = RESULTS / "partial" / "summary.png"
FAILED_CSV = RESULTS / "failed.csv"
REPORT_HTML = RESULTS / "report.html"
REPORT = RESULTS / "report"  # what the Snakemake report shows besides the figures
FRONT_PAGE = REPORT / "front.rst"
COMPARE = RESULTS / "compare"  # this study against compare.baseline
ARCHIVE = RESULTS / "study.tar.gz"
PROVISION = RESULTS / "provision"  # one manifest per provisioned target: <target>.json
LOGS = Path("logs")
SERVER_LOGS = LOGS / "server"  # one server log per configuration, <name>.log

# The rules' wildcard paths, as Snakemake takes them.
RUN_RESULT = f"{RUNS}/{{name}}.json"
RUN_LOG = f"{LOGS}/runs/{{name}}.log"
SERVER_LOG = f"{SERVER_LOGS}/{{name}}.log"


def manifest(target: str) -> Path:
    """The manifest of a provisioned target (llama-server, model, prompts-sharegpt, ...)."""
    return PROVISION / f"{target}.json"


def server_log(name: str) -> Path:
    return SERVER_LOGS / f"{name}.log"


def run_result(name: str, root: Path = Path(".")) -> Path:
    return root / RUNS / f"{name}.json"


def history_of(runs_dir: Path) -> Path:
    """The history folder beside a runs folder (results/runs -> results/history)."""
    return Path(runs_dir).parent / HISTORY.name
