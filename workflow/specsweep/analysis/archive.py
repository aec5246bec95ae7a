"""One file that hands a study over: config, code, environment, raw results, failures, logs,
summary and report, every file's SHA-256 (SHA256SUMS) and REPRODUCE.md; and the checks that reproduce it.

Snakemake's own --archive packs the code but leaves results out, so it is not enough here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

import yaml

from specsweep import __version__
from specsweep.analysis import aggregate, ledger
from specsweep.errors import InconsistentStudy, SpecsweepError, VerifyFailed
from specsweep.measure import provenance
from specsweep.records import migrations, paths, store
from specsweep.study.grid import expand_grid

# Every file's SHA-256 in `sha256sum`'s format (`sha256sum -c SHA256SUMS` checks it too); verify
# still reads an older archive's (records/migrations.py). ("Manifest" is a provisioned target's
# record, study/manifests.py.)
CHECKSUMS = "SHA256SUMS"
STUDY_CONFIG = "config.yaml"
# What of a study folder goes in, besides the code and the generated files.
INCLUDE = tuple(str(p) for p in (
    paths.LAUNCHES, paths.FAILURES, paths.HISTORY, paths.SET_ASIDE, paths.REPORT,
    paths.SUMMARY_CSV, paths.SUMMARY_PNG, paths.TRADEOFF_PNG, paths.BEST_CSV, paths.FAILED_CSV, paths.COMPARE,
    paths.PROVISION, paths.REPORT_HTML, paths.LOGS))
LEAVE_OUT = (str(paths.ARCHIVE_LOGS),)  # this rule's own log, written while the archive is made


def frozen_config(config: dict) -> dict:
    """The merged study config as archived: planning facts fixed, so a rebuild elsewhere agrees."""
    frozen = json.loads(json.dumps(config))
    frozen.setdefault("hardware", {})
    if frozen["hardware"].get("compute_capability") is None:
        frozen["hardware"]["compute_capability"] = ledger.planning_capability(config)
    frozen["compare"] = {**frozen.get("compare", {}), "baseline": None}  # a path on this machine only
    return frozen


def check_consistent(config: dict, root: Path) -> list[str]:
    """Why this folder cannot be archived as one study; empty when it can."""
    problems = []
    versions = {}
    for spec in expand_grid(config):
        if ledger.exclusion_reason(config, spec):
            continue
        found = paths.launch_results(root / paths.LAUNCHES, spec.name)
        missing = [k for k in range(1, ledger.launches_planned(config) + 1) if k not in found]
        if missing:
            problems.append(f"{spec.name}: launch {' '.join(map(str, missing))} neither measured nor excluded "
                            f"(run the main command, or exclude it)")
            continue
        for launch, path in found.items():
            try:
                result = store.read_result(path)
            except store.InvalidResult as exc:
                problems.append(f"{path}: {exc}")
                continue
            if (other := ledger.measured_otherwise(result, replace(spec, launch=launch))) is not None:
                problems.append(f"{path}: {other} (the main command measures it again)")
            versions.setdefault(result.specsweep_version, []).append(str(path.relative_to(root)))
    if len(versions) > 1:
        problems.append("results of several specsweep versions: " + "; ".join(
            f"{v} in {', '.join(names)}" for v, names in versions.items()))
    try:
        aggregate.check_comparable(config, root / paths.LAUNCHES)
    except SpecsweepError as exc:
        problems.append(" ".join(exc.reason.splitlines()[:2]))  # what differs, without the advice
    return problems


def build(config: dict, out: Path, *, root: Path = Path(".")) -> dict:
    """Write the archive (atomically); return its checksums {path: sha256}."""
    problems = check_consistent(config, root)
    if problems:
        raise InconsistentStudy("the study cannot be archived as one:\n  " + "\n  ".join(problems))
    files: dict[str, bytes] = {STUDY_CONFIG: yaml.safe_dump(frozen_config(config), sort_keys=True).encode()}
    files.update(_code())
    files["environment/requirements.lock"] = _lock().encode()
    files["environment/provenance.json"] = json.dumps(provenance.collect(), indent=1, sort_keys=True).encode()
    for name in INCLUDE:
        files.update(_tree(root, name))
    files["REPRODUCE.md"] = reproduce_text(out.name).encode()
    checksums = {path: hashlib.sha256(data).hexdigest() for path, data in sorted(files.items())}
    files[CHECKSUMS] = "".join(f"{digest}  {path}\n" for path, digest in checksums.items()).encode()
    _write_tar(out, files)
    return checksums


def _tree(root: Path, name: str) -> dict[str, bytes]:
    target = root / name
    if target.is_file():
        return {name: target.read_bytes()}
    out = {}
    for path in sorted(target.rglob("*")) if target.is_dir() else ():
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(LEAVE_OUT) and not path.name.startswith("."):
            out[rel] = path.read_bytes()
    return out


def _code() -> dict[str, bytes]:
    """The specsweep source: the commit's files (git archive), plus the uncommitted diff if dirty."""
    src = provenance.source_root()
    commit = provenance.git("rev-parse", "HEAD")
    if commit is None:  # not a git checkout: the files as they are
        return {f"code/{p.relative_to(src).as_posix()}": p.read_bytes()
                for part in ("Snakefile", "pyproject.toml", "README.md", "docs", "workflow", "config", "profiles")
                for p in ([src / part] if (src / part).is_file() else sorted((src / part).rglob("*")))
                if p.is_file() and "__pycache__" not in p.parts}
    tar_bytes = subprocess.run(["git", "archive", "--format=tar", commit], cwd=src, capture_output=True,
                               check=True).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                out[f"code/{member.name}"] = tar.extractfile(member).read()
    diff = provenance.git("diff", "HEAD")
    if diff:
        out["code/UNCOMMITTED.diff"] = (diff + "\n").encode()
    out["code/COMMIT"] = f"{commit}\n".encode()
    return out


def _lock() -> str:
    """Every installed distribution of the environment that ran the study, pinned."""
    pins = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata['Name']},
                  key=str.lower)
    return f"# specsweep {__version__}; install with: pip install -r requirements.lock\n" + "\n".join(pins) + "\n"


def _write_tar(out: Path, files: dict[str, bytes]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for path, data in sorted(files.items()):
                info = tarfile.TarInfo(f"study/{path}")
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def unpack(archive: Path, dest: Path) -> Path:
    """Extract an archive; return its study folder. A damaged or truncated file is refused by name."""
    store.extract_tar(archive, dest, VerifyFailed)
    if not (dest / "study").is_dir():
        raise VerifyFailed(f"{archive} holds no study/ folder: not a specsweep study archive")
    return dest / "study"


@dataclass(frozen=True)
class Verified:
    """What `verify` found: the listed files all match their checksums; ``unlisted`` were added after packing."""

    checked: int
    unlisted: tuple[str, ...]


def verify(folder: Path) -> Verified:
    """Check every file SHA256SUMS lists; raise VerifyFailed naming what is missing or changed.

    Files it does not list are not the study's: REPRODUCE.md's own steps add some
    (a virtualenv, rebuilt.csv, Snakemake's .snakemake/ in code/). They are reported, grouped
    by folder, and never fail the check.
    """
    sums = next((folder / name for name in (CHECKSUMS, migrations.CHECKSUMS_BEFORE) if (folder / name).is_file()),
                None)
    if sums is None:
        raise VerifyFailed(f"{folder / CHECKSUMS} is missing: not a specsweep study archive")
    bad, listed = [], set()
    for line in sums.read_text(errors="replace").splitlines():
        digest, _, path = line.partition("  ")
        listed.add(path)
        target = folder / path
        if not target.is_file():
            bad.append(f"{path}: missing")
        elif hashlib.sha256(target.read_bytes()).hexdigest() != digest:
            bad.append(f"{path}: content differs from its checksum in {sums.name}")
    if bad:
        raise VerifyFailed(f"{len(bad)} file(s) fail verification:\n  " + "\n  ".join(bad))
    return Verified(len(listed), _unlisted(folder, listed | {sums.name}))


def _unlisted(folder: Path, listed: set[str]) -> tuple[str, ...]:
    """Files added since packing, as their top folders ('.venv/', 'code/.snakemake/') or names."""
    groups = set()
    for path in folder.rglob("*"):
        rel = path.relative_to(folder).as_posix()
        if not path.is_file() or rel in listed:
            continue
        parts = rel.split("/")
        depth = 2 if parts[0] == "code" and len(parts) > 2 else 1  # code/ is the study's; its new folders are not
        groups.add("/".join(parts[:depth]) + ("/" if len(parts) > depth else ""))
    return tuple(sorted(groups))


def rebuild_summary(folder: Path, out: Path) -> Path:
    """results/summary.csv again, from the archived raw results and the archived study config."""
    from specsweep.study.loading import load_study

    config = load_study(folder / STUDY_CONFIG)
    frame = aggregate.summarize(config, folder / paths.LAUNCHES, folder / paths.FAILURES)
    aggregate.write_summary(frame, out)
    return out


def reproduce_text(archive_name: str) -> str:
    return f"""# Reproducing this study

This archive holds one specsweep study: its merged configuration (`config.yaml`), the
specsweep code that ran it (`code/`, from git; `code/UNCOMMITTED.diff` if the tree was dirty),
the Python environment (`environment/requirements.lock`), every raw result
(`results/launches/<name>/launch<k>.json`), failure record (`results/failures/`), log (`logs/`), the summary, the
report, and `SHA256SUMS`, the SHA-256 of every file.

```bash
tar xzf {archive_name}                           # unpacks into study/
cd study
python3 -m venv .venv && . .venv/bin/activate && pip install -e code
python -m specsweep verify .                     # (a) every file against SHA256SUMS
python -m specsweep rebuild . --out rebuilt.csv  # (b) the summary from the raw results
cmp rebuilt.csv results/summary.csv              #     byte-identical
cd code
snakemake -n --cores 1 results/summary.png --configfile ../config.yaml   # (c) what would be measured
snakemake --cores 1 results/summary.png --configfile ../config.yaml      # (d) measure it again
```

(c) and (d) run in `code/`, which has no results: every configuration that is not excluded is
measured anew, on this machine; compare the two studies with
`python -m specsweep compare ../results results`.
"""
