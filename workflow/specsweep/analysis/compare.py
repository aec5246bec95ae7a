"""Did it get faster? Two studies compared configuration by configuration, with honest noise bands.

The unit of replication is one launch of a configuration (``workload.launches``) where both
studies have several: a server of its own, whose section throughput (tokens over wall time)
carries the noise between launches. Where either side has one launch, it is one repeat of a
section (``workload.repeats``): a full pass of its requests on that launch's server. Requests
inside a repeat are not independent samples (they share the server's state and the repeat's
clock), so they are never counted as such.
Each configuration x section gets a two-sided exact Mann-Whitney U test of A's repeats against
B's, p-values corrected for the many rows compared at once (Benjamini-Hochberg), the ratio of
medians B/A, and a bootstrap percentile interval of that ratio. A difference is called only when
the corrected p is below alpha; otherwise the row says "~" and why: too few repeats for the
exact test to ever reach alpha (fewer than 4 per side at 0.05), or a spread too wide.
"""

from __future__ import annotations

import math
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from specsweep import axes
from specsweep.errors import ConfigError
from specsweep.records import migrations, paths, store
from specsweep.records.result import ACROSS_STUDIES, Result
from specsweep.records.status import EXCLUDED, OK
from specsweep.records.store import InvalidResult, read_result
from specsweep.spec import SLO

# A configuration's name says every axis value (axes.config_name): pairs match on all, then on the
# section and load level it was measured at.
KEYS = ["name", "section", "load"]
FASTER, SLOWER, SAME = "faster", "slower", "~"
NEWLY_FAILING, FIXED = "newly failing", "fixed"
SEED = 0  # the bootstrap is seeded: the same two studies always give the same table


@dataclass(frozen=True)
class Study:
    """One side of a comparison: its summary rows and its valid result documents."""

    label: str
    summary: pd.DataFrame
    launches: dict[str, list[Result]]  # every launch of each measured configuration, in launch order


def open_study(path: Path, tmp: Path) -> Study:
    """A results folder (with summary.csv, or partial/summary.csv after failures) or a .tar.gz of one."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path} does not exist: pass a study's results folder or a .tar.gz of one")
    folder = migrations.readable(_unpack(path, tmp) if path.is_file() else path, tmp)
    for candidate in (folder / "summary.csv", folder / "partial/summary.csv"):
        if candidate.is_file():
            summary = pd.read_csv(candidate, dtype={"reason": "string"}).fillna({"reason": ""})
            break
    else:
        raise ConfigError(f"{path}: no summary.csv or partial/summary.csv; pass a study's results folder "
                          f"(after `snakemake --cores 1 results/summary.png`) or an archive of one")
    launches = {}
    for name in summary.loc[summary["status"] == OK, "name"].unique():
        found = paths.launch_results(folder / paths.LAUNCHES.name, name)
        if not found:
            raise ConfigError(f"{path}: the summary says {name} was measured, and {paths.LAUNCHES.name}/ holds no "
                              f"result of it")
        try:
            launches[name] = [read_result(p) for p in found.values()]
        except InvalidResult as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    return Study(label=str(path), summary=_with_load(summary, launches), launches=launches)


def _with_load(summary: pd.DataFrame, launches: dict[str, list[Result]]) -> pd.DataFrame:
    """A summary written before load was a dimension: each section ran at one load, which its
    results say (every configuration of a study runs the same sections)."""
    if axes.LOAD in summary.columns:
        return summary
    loads = {s["name"]: s["load"] for found in launches.values() for r in found for s in r.sections}
    summary = summary.copy()
    summary.insert(list(summary.columns).index(axes.SECTION) + 1, axes.LOAD,
                   [loads.get(section, "") for section in summary[axes.SECTION]])
    return summary


def _unpack(archive: Path, tmp: Path) -> Path:
    if not tarfile.is_tarfile(archive):
        raise ConfigError(f"{archive} is neither a results folder nor a tar archive of one")
    store.extract_tar(archive, tmp, ConfigError)
    found = sorted(p.parent for p in Path(tmp).rglob("summary.csv") if p.parent.name != "partial")
    found += sorted(p.parent.parent for p in Path(tmp).rglob("partial/summary.csv"))
    if not found:
        raise ConfigError(f"{archive} holds no summary.csv")
    return found[0]


def check_comparable(a: Study, b: Study) -> None:
    """Two studies that differ in what they must share (result.ACROSS_STUDIES: the model) are not a
    comparison: refuse them, naming both sides' values. Server version and host may differ: that
    is what a comparison is for."""
    for key in ACROSS_STUDIES:
        side_a = {r.comparability()[key] for found in a.launches.values() for r in found}
        side_b = {r.comparability()[key] for found in b.launches.values() for r in found}
        if side_a and side_b and side_a != side_b:
            raise ConfigError(f"the studies measured different {key}s: A {sorted(side_a)}, B {sorted(side_b)}; "
                              f"compare studies of one {key}")


def repeats_of(result: Result, section: str, load: str) -> list[float]:
    """Each repeat's output tok/s; of the goodput search (load slo), its goodput, if a rate met the objective."""
    if load == SLO:
        goodput = (result.search or {}).get("goodput_tok_s")
        return [] if goodput is None else [goodput]
    return next(s["output_tok_s_repeats"] for s in result.sections if s["name"] == section and s["load"] == load)


def samples_of(results: list[Result], section: str, load: str, *, by_launch: bool) -> list[float]:
    """The units compared: each launch's throughput (its tokens over its wall time; the goodput in
    the search's row) where both sides have several launches, else the one launch's repeats."""
    if not by_launch:
        return repeats_of(results[0], section, load)
    if load == SLO:
        return [g for r in results if (g := (r.search or {}).get("goodput_tok_s")) is not None]
    return [next(s["output_tok_s"] for s in r.sections if s["name"] == section and s["load"] == load)
            for r in results]


def min_repeats(alpha: float) -> int:
    """Fewest repeats per side at which the exact two-sided test can reach p < alpha at all."""
    n = 1
    while 2 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def repeats_needed(cv: float, *, change: float = 0.05, alpha: float = 0.05, power: float = 0.8) -> int:
    """Repeats per side to detect a relative change with this power, given the repeats' CV.

    Normal-approximation sample size for two means, inflated by the Mann-Whitney test's asymptotic
    relative efficiency (3/pi) and never below the exact test's floor.
    """
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    n = 2 * (z * cv / change) ** 2 / (3 / math.pi)
    return max(min_repeats(alpha), math.ceil(n))


def compare(a: Study, b: Study, *, alpha: float) -> pd.DataFrame:
    """One row per configuration x section present on either side, with its verdict."""
    check_comparable(a, b)
    cols = KEYS + ["status", "reason"]
    rows = a.summary[cols].merge(b.summary[cols], on=KEYS, how="outer", suffixes=("_a", "_b"), sort=False)
    out = [_row(a, b, row, alpha) for row in rows.to_dict("records")]
    frame = _with_axes(pd.DataFrame(out), a, b)
    tested = frame["p"].notna()
    frame["q"] = np.nan
    if tested.any():
        frame.loc[tested, "q"] = stats.false_discovery_control(frame.loc[tested, "p"], method="bh")
    for i in frame.index[tested]:
        frame.loc[i, ["verdict", "why"]] = _verdict(frame.loc[i], alpha)
    return frame


def _with_axes(frame: pd.DataFrame, a: Study, b: Study) -> pd.DataFrame:
    """The axis columns of either side's configurations after the name (a side lacking an axis: empty)."""
    names = list(dict.fromkeys(axes.columns(a.summary.columns) + axes.columns(b.summary.columns)))
    values = pd.concat([s.summary[["name", *axes.columns(s.summary.columns)]] for s in (a, b)])
    values = values.drop_duplicates("name").set_index("name").reindex(columns=names)
    joined = frame.join(values, on="name")
    return joined[["name", *names, *[c for c in frame.columns if c != "name"]]]


def _row(a: Study, b: Study, row: dict, alpha: float) -> dict:
    out = {**{k: row[k] for k in KEYS}, "status_a": row["status_a"], "status_b": row["status_b"],
           "n_a": 0, "n_b": 0, "median_a": np.nan, "median_b": np.nan, "ratio": np.nan,
           "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "unit": "", "verdict": "", "why": ""}
    mark = _mark(row)
    if mark:
        out["verdict"], out["why"] = mark
        return out
    launches_a, launches_b = a.launches[row["name"]], b.launches[row["name"]]
    why_not = _incomparable(launches_a[0], launches_b[0], row["section"])
    if why_not:
        out["verdict"], out["why"] = "incomparable", why_not
        return out
    by_launch = min(len(launches_a), len(launches_b)) > 1
    out["unit"] = "launches" if by_launch else "repeats"
    xa, xb = (samples_of(r, row["section"], row["load"], by_launch=by_launch) for r in (launches_a, launches_b))
    if not xa or not xb:
        out["verdict"], out["why"] = "incomparable", "no rate met the objective on " + (
            "either side" if not xa and not xb else "A" if not xa else "B")
        return out
    out.update(n_a=len(xa), n_b=len(xb), median_a=float(np.median(xa)), median_b=float(np.median(xb)))
    out["ratio"] = out["median_b"] / out["median_a"]
    out["ci_low"], out["ci_high"] = _ratio_interval(xa, xb, alpha)
    out["p"] = float(stats.mannwhitneyu(xa, xb, alternative="two-sided", method="exact").pvalue)
    # The repeats' noise, each side about its own mean (a real shift between A and B is not noise),
    # and what it implies: repeats a side to detect a 5% change.
    out["cv"] = float(np.mean([np.std(x, ddof=1) / np.mean(x) for x in (xa, xb)])) if min(len(xa), len(xb)) > 1 \
        else np.nan
    out["repeats_for_5pct"] = repeats_needed(out["cv"]) if not np.isnan(out["cv"]) else np.nan
    return out


def _mark(row: dict) -> tuple[str, str] | None:
    """What is not a number: a configuration failing, excluded or absent on one side."""
    sa, sb = row["status_a"], row["status_b"]
    if isinstance(sa, float) or isinstance(sb, float):  # NaN: not in that study's grid
        return ("only in A", "not in B's grid") if isinstance(sb, float) else ("only in B", "not in A's grid")
    if sa == OK and sb == OK:
        return None
    if EXCLUDED in (sa, sb):
        side = "A" if sa == EXCLUDED else "B"
        return f"excluded in {side}", row[f"reason_{side.lower()}"]
    if sa == OK:
        return NEWLY_FAILING, f"B: {sb}: {row['reason_b']}"
    if sb == OK:
        return FIXED, f"A: {sa}: {row['reason_a']}"
    return "no result in either", f"A: {sa}; B: {sb}"


def _incomparable(result_a: Result, result_b: Result, section: str) -> str:
    """Why one configuration's results in two studies measured different things, or ''."""
    if result_a.prompts.get("sha256") != result_b.prompts.get("sha256"):
        return "different prompt sets (prompts.sha256 differs)"
    sa = next(s for s in result_a.spec["sections"] if s["name"] == section)
    sb = next(s for s in result_b.spec["sections"] if s["name"] == section)
    if sa != sb:
        return f"different workload for section {section}: {sa} vs {sb}"
    return ""


def _ratio_interval(xa: list[float], xb: list[float], alpha: float) -> tuple[float, float]:
    """Bootstrap percentile interval of median(B)/median(A); none below 3 repeats a side."""
    if min(len(xa), len(xb)) < 3:
        return np.nan, np.nan
    res = stats.bootstrap((np.asarray(xa), np.asarray(xb)), lambda x, y: np.median(y) / np.median(x),
                          vectorized=False, paired=False, confidence_level=1 - alpha, n_resamples=2000,
                          method="percentile", rng=np.random.default_rng(SEED))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _verdict(row: pd.Series, alpha: float) -> tuple[str, str]:
    floor = min_repeats(alpha)
    if min(row["n_a"], row["n_b"]) < floor:
        unit = row.get("unit") if isinstance(row.get("unit"), str) else "repeats"
        return SAME, (f"too few samples: {row['n_a']} and {row['n_b']} {unit}; the exact test needs "
                      f"{floor} a side to reach p < {alpha:g} (set workload.launches, or workload.repeats)")
    if row["q"] >= alpha:
        band = "" if pd.isna(row["ci_low"]) else f"; interval [{row['ci_low']:.3f}, {row['ci_high']:.3f}]" + (
            " holds 1" if row["ci_low"] <= 1 <= row["ci_high"] else "")
        return SAME, f"not significant: p = {row['p']:.3f}, {row['q']:.3f} corrected{band}"
    return (FASTER if row["ratio"] > 1 else SLOWER), f"p = {row['p']:.4f}, {row['q']:.4f} corrected"


def regressions(frame: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Significant slowdowns larger than the threshold, and configurations that newly fail."""
    slower = (frame["verdict"] == SLOWER) & (frame["ratio"] < 1 - threshold)
    return frame[slower | (frame["verdict"] == NEWLY_FAILING)]


def table(frame: pd.DataFrame) -> str:
    """The terminal table, benchstat-like: both medians, the ratio with its interval, the verdict."""
    lines = [f"{'configuration':<22}{'section':<9}{'load':<6}{'A tok/s':>10}{'B tok/s':>10}  {'B/A':<24}verdict"]
    for r in frame.itertuples():
        if pd.isna(r.ratio):
            lines.append(f"{r.name:<22}{r.section:<9}{r.load:<6}{'':>10}{'':>10}  {'':<24}{r.verdict}: {r.why}")
            continue
        band = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if not pd.isna(r.ci_low) else "(no interval)"
        lines.append(f"{r.name:<22}{r.section:<9}{r.load:<6}{r.median_a:>10.1f}{r.median_b:>10.1f}  "
                     f"{r.ratio:.3f} {band:<18}{r.verdict} ({r.why})")
    return "\n".join(lines)


def open_both(path_a: Path, path_b: Path) -> tuple[Study, Study, tempfile.TemporaryDirectory]:
    tmp = tempfile.TemporaryDirectory(prefix="specsweep-compare-")
    return open_study(path_a, Path(tmp.name) / "a"), open_study(path_b, Path(tmp.name) / "b"), tmp
