"""Where a study keeps its files, relative to the folder Snakemake runs in.

The rules and the package read these names from here, so that the layout is said once.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path("results")
LAUNCHES = RESULTS / "launches"  # one result document per launch of a configuration: <name>/launch<k>.json
FAILURES = RESULTS / "failures"  # failure records, <name>/<time>-attempt<n>.json, kept across reruns
HISTORY = RESULTS / "history"  # a read-only copy of every result ever written, <name>/<sha256>.json
RACE = RESULTS / "race"  # racing (verdict.until_decided): round<r>.json, who gets launch r+1
SET_ASIDE = RESULTS / "set-aside"  # what each run set aside before measuring again: <digest>.json
SET_ASIDE_RESULTS = SET_ASIDE / "results"  # the result files set aside: moved here, never deleted
SUMMARY_CSV = RESULTS / "summary.csv"
SUMMARY_PNG = RESULTS / "summary.png"
TRADEOFF_PNG = RESULTS / "tradeoff.png"  # tok/s per user against tok/s per GPU, across load levels
BEST_CSV = RESULTS / "best.csv"
DEPLOY = RESULTS / "deploy"  # the server command of each answer's configuration: deploy.json, <name>.sh
STUDY_CONFIG = RESULTS / "study" / "config.yaml"  # the merged study config the summary was made from
PARTIAL_CSV = RESULTS / "partial" / "summary.csv"
PARTIAL_PNG = RESULTS / "partial" / "summary.png"
FAILED_CSV = RESULTS / "failed.csv"
PARTIAL_REPORTS = (PARTIAL_CSV, PARTIAL_PNG, FAILED_CSV)  # after a failed run; gone once nothing is missing
REPORT_HTML = RESULTS / "report.html"
REPORT = RESULTS / "report"  # what the Snakemake report shows besides the figures
FRONT_PAGE = REPORT / "front.rst"
REPORT_SUMMARY = REPORT / "summary.html"  # the summary table as a page
REPORT_BEST = REPORT / "best.html"  # the best table as a page
REPORT_FAILURES = REPORT / "failures.html"  # what has no result, and why
REPORT_CONFIGURATIONS = REPORT / "configurations"  # one page per configuration, <name>.html
REPORT_STUDY = REPORT / "study.html"  # the merged study configuration
ANSWER = REPORT / "answer.txt"  # what the terminal shows after the main command: the verdicts in words
COMPARE = RESULTS / "compare"  # this study against compare.baseline
COMPARE_CSV = COMPARE / "summary.csv"  # every cell of both studies, side by side
COMPARE_REGRESSIONS = COMPARE / "regressions.csv"
COMPARE_PNG = COMPARE / "ratio.png"
ARCHIVE = RESULTS / "study.tar.gz"
PROVISION = RESULTS / "provision"  # one manifest per provisioned target: <target>.json
LOGS = Path("logs")
SERVER_LOGS = LOGS / "server"  # one server log per launch of a configuration, <name>/launch<k>.log
PROVISION_LOGS = LOGS / "provision"  # one per target: <target>.log (a build's output)
SUMMARY_LOG = LOGS / "aggregate" / "summary.log"
ARCHIVE_LOGS = LOGS / "archive"  # the archive rule's log: left out of the archive it is written beside
ARCHIVE_LOG = ARCHIVE_LOGS / "archive.log"
COMPARE_LOG = LOGS / "compare" / "compare.log"

# The rules' wildcard paths, as Snakemake takes them.
LAUNCH_RESULT = f"{LAUNCHES}/{{name}}/launch{{launch}}.json"
LAUNCH_LOG = f"{LOGS}/launches/{{name}}/launch{{launch}}.log"
SERVER_LOG = f"{SERVER_LOGS}/{{name}}/launch{{launch}}.log"
RACE_ROUND = f"{RACE}/round{{round}}.json"
SET_ASIDE_MARKER = f"{SET_ASIDE}/{{digest}}.json"
SET_ASIDE_LOG = f"{LOGS}/set-aside/{{digest}}.log"
RACE_LOG = f"{LOGS}/race/round{{round}}.log"
PROVISION_MANIFEST = f"{PROVISION}/{{target}}.json"
PROVISION_LOG = f"{PROVISION_LOGS}/{{target}}.log"
_LAUNCH_FILE = re.compile(r"launch(\d+)\.json")


def manifest(target: str) -> Path:
    """The manifest of a provisioned target (llama-server, model, prompts-sharegpt, ...)."""
    return PROVISION / f"{target}.json"


def provision_log(target: str) -> Path:
    return PROVISION_LOGS / f"{target}.log"


def set_aside_marker(digest: str) -> Path:
    """The record of one set-aside (analysis/ledger.py SetAside), the input that reruns its launches."""
    return SET_ASIDE / f"{digest}.json"


def server_log(name: str, launch: int = 1) -> Path:
    return SERVER_LOGS / name / f"launch{launch}.log"


def launch_result(name: str, launch: int = 1, launches: Path = LAUNCHES) -> Path:
    """The result of one launch of a configuration."""
    return Path(launches) / name / f"launch{launch}.json"


def race_round(number: int) -> Path:
    return RACE / f"round{number}.json"


def launch_results(launches: Path, name: str) -> dict[int, Path]:
    """Every launch result of a configuration in a launches folder, by launch index, in order."""
    folder = Path(launches) / name
    found = {int(m[1]): path for path in (folder.glob("launch*.json") if folder.is_dir() else ())
             if (m := _LAUNCH_FILE.fullmatch(path.name))}
    return dict(sorted(found.items()))


def result_files(launches: Path) -> list[Path]:
    """Every result file in one launches folder (and a hand run's <name>.json there), sorted."""
    return sorted([*Path(launches).glob("*.json"), *Path(launches).glob("*/launch*.json")])


def launches_of(result: Path) -> Path:
    """The folder a result file lies in: <launches>/<name>/launch<k>.json, or a hand run's --out,
    <folder>/<file>.json."""
    result = Path(result)
    return result.parent.parent if _LAUNCH_FILE.fullmatch(result.name) else result.parent


def configuration_of(result: Path) -> str:
    """The configuration a result file belongs to (its folder, or a hand run's file's stem)."""
    result = Path(result)
    return result.parent.name if _LAUNCH_FILE.fullmatch(result.name) else result.stem


def launch_of(result: Path) -> int:
    """The launch index of a result file (a hand run's <file>.json is launch 1)."""
    match = _LAUNCH_FILE.fullmatch(Path(result).name)
    return int(match[1]) if match else 1


def history_of(launches_dir: Path) -> Path:
    """The history folder beside a launches folder (results/launches -> results/history)."""
    return Path(launches_dir).parent / HISTORY.name
