"""A study handed over: provenance in every result, the report as a reader sees it (headless
Chromium), one archive, and its reproduction elsewhere (verify, rebuild byte-identical, dry-run,
tamper)."""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest

from conftest import NAME, PYTHON_BIN, REPO, docs_text, fault_study, finish, load, run_cli, run_workflow, small_study
from factories import result_doc
from specsweep import study
from specsweep.analysis import aggregate, archive
from specsweep.errors import IncomparableResults
from specsweep.measure import provenance
from specsweep.records import store
from specsweep.records.result import InvalidResult, Result


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


# --- provenance ------------------------------------------------------------------------------------

def test_provenance_names_the_commit_and_detects_a_dirty_tree(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    git("init", "-q", cwd=src)
    (src / "f.py").write_text("x = 1\n")
    git("add", "f.py", cwd=src)
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one", cwd=src)
    monkeypatch.setattr(provenance, "source_root", lambda: src)
    clean = provenance.code()
    assert clean["git_commit"] == git("rev-parse", "HEAD", cwd=src) and clean["git_dirty"] is False
    (src / "f.py").write_text("x = 2\n")
    assert provenance.code()["git_dirty"] is True


def test_a_result_records_where_it_came_from(tmp_path, model, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "planted-secret-in-env")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    relaxed = json.dumps({"max_foreign_cores": 100.0, "max_repeat_spread": 10.0})  # provenance, not the quiet host
    code, err = run_cli(tmp_path, fault_study(model), "--quiet-host", relaxed)
    assert code == 0, err
    doc = load(tmp_path / "runs" / f"{NAME}.json")
    assert doc["schema_version"] == 5
    prov = doc["provenance"]
    assert prov["code"]["git_commit"] == git("rev-parse", "HEAD")
    assert prov["code"]["git_dirty"] == bool(git("status", "--porcelain", "--untracked-files=no"))
    assert doc["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert prov["packages"]["snakemake"] == metadata.version("snakemake")
    assert prov["packages"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert " run --spec " in prov["invocation"]
    assert prov["environment"]["OMP_NUM_THREADS"] == "1" and prov["environment"]["VLLM_API_KEY"] == "<redacted>"
    assert doc["hardware"]["cpu_model"] and doc["hardware"]["memory_bytes"] > 0
    assert doc["started_at"] < doc["finished_at"]
    kept = list((tmp_path / "history" / NAME).glob("*.json"))  # kept at once, not at the next run
    assert len(kept) == 1 and kept[0].read_bytes() == (tmp_path / "runs" / f"{NAME}.json").read_bytes()


def test_results_of_different_models_are_refused_by_aggregation(tmp_path):
    cfg = study.validate_study({"grid": {"budget": [0, 4], "tp": [1], "context": [128]}})
    runs = tmp_path / "runs"
    for spec in study.expand_grid(cfg):
        doc = result_doc(spec)
        doc["model"]["sha256"] = ("a" if spec.budget == 0 else "b") * 64
        store.write_json_atomic(runs / f"{spec.name}.json", doc)
    with pytest.raises(IncomparableResults, match=r"model: 'a{64}' in tp1-b0-ctx128.json; 'b{64}' in tp1-b4-ctx128"):
        aggregate.check_comparable(cfg, runs)
    proc = subprocess.run([sys.executable, "-m", "specsweep", "aggregate", "--config-json", json.dumps(cfg),
                           "--runs", str(runs), "--csv", str(tmp_path / "s.csv")], capture_output=True, text=True)
    assert proc.returncode == 23 and "different provenance" in proc.stderr


def test_an_older_result_is_migrated_and_a_newer_one_refused():
    spec = study.expand_grid(study.validate_study({}))[0]
    doc = result_doc(spec)
    old = {k: v for k, v in doc.items() if k not in ("provenance", "hardware")} | {"schema_version": 1}
    migrated = Result.from_json(old)
    assert migrated.provenance == {"migrated_from": 1} and migrated.to_json()["schema_version"] == 5
    with pytest.raises(InvalidResult, match="schema version 99"):
        Result.from_json({**doc, "schema_version": 99})
    assert Result.from_json(doc).summary_rows()[0]["output_tok_s"] == doc["sections"][0]["output_tok_s"]


# --- a real study: report, archive, reproduction, secrets ------------------------------------------

# Made at run time: a literal here would be found in the archive's copy of this very file.
KEY, HF, ENV_SECRET = (f"{prefix}{secrets.token_hex(8)}" for prefix in ("sk-planted-", "hf_planted_", "vllm-planted-"))


@pytest.fixture(scope="module")
def handed_over(embedded, tmp_path_factory):
    """A small real study with a keyed server, its report and its archive, made once."""
    work = tmp_path_factory.mktemp("study")
    env = {"SPECSWEEP_TEST_API_KEY": KEY, "HF_TOKEN": HF, "VLLM_API_KEY": ENV_SECRET}
    doc = small_study()
    doc["server"] = {**doc["server"], "api_key_env": "SPECSWEEP_TEST_API_KEY",
                     "command": doc["server"]["command"] + ["--api-key", "{api_key}"]}
    doc["exclude"] = [{"budget": 4, "context": 64, "reason": "left out to show an exclusion"}]
    doc["grid"]["budget"] = [0, 2, 4]
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for extra, targets in (((), ()), (("--report", "results/report.html"), ()), ((), ("results/study.tar.gz",))):
            rc, out = finish(run_workflow(work, doc, *targets, extra=extra), timeout=900)
            assert rc == 0, out[-3000:]
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return work


@pytest.mark.e2e
def test_no_planted_secret_is_in_any_file_the_study_wrote(handed_over):
    written = [p for p in handed_over.rglob("*") if p.is_file()]
    assert any(p.name == "report.html" for p in written) and any(p.name == "study.tar.gz" for p in written)
    for path in written:
        data = path.read_bytes()
        for secret in (KEY, HF, ENV_SECRET):
            assert secret.encode() not in data, (secret, path)
    with tarfile.open(handed_over / "results" / "study.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read()
                assert not any(s.encode() in data for s in (KEY, HF, ENV_SECRET)), member.name


@pytest.mark.e2e
def test_the_archive_verifies_rebuilds_and_replans_elsewhere_as_the_readme_says(handed_over, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "study.tar.gz").write_bytes((handed_over / "results" / "study.tar.gz").read_bytes())
    block = next(b for b in re.findall(r"```bash\n(.*?)```", docs_text(), re.DOTALL)
                 if b.startswith("tar xzf"))
    env = {**os.environ, "PATH": PYTHON_BIN + os.pathsep + os.environ["PATH"]}
    run = subprocess.run(["bash", "-euc", block], cwd=elsewhere, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    folder = elsewhere / "study"
    assert "all" in run.stdout and "files match the manifest" in run.stdout
    assert filecmp.cmp(folder / "rebuilt.csv", folder / "results" / "summary.csv", shallow=False)
    planned = set(re.findall(r"output: results/runs/(tp\S+)/launch1\.json", run.stdout))
    archived = {p.parent.name for p in (folder / "results" / "runs").glob("*/launch1.json")}
    assert planned == archived == {"tp1-b0-ctx64", "tp1-b2-ctx64"}  # the exclusion stays excluded

    assert {"config.yaml", "REPRODUCE.md", "MANIFEST.sha256", "code", "environment", "results", "logs"} <= \
        {p.name for p in folder.iterdir()}
    assert (folder / "code" / "COMMIT").read_text().strip() == git("rev-parse", "HEAD")
    assert "snakemake==" in (folder / "environment" / "requirements.lock").read_text()
    assert (folder / "results" / "report.html").is_file()
    # The block's own steps added rebuilt.csv and Snakemake's code/.snakemake/: verify still
    # passes, and names them apart as not part of the study.
    again = subprocess.run([sys.executable, "-m", "specsweep", "verify", "."], cwd=folder, capture_output=True,
                           text=True)
    assert again.returncode == 0, again.stderr
    assert re.search(r"not checked, added after packing .*code/\.snakemake/.*rebuilt\.csv", again.stdout), again.stdout
    victim = folder / "results" / "runs" / "tp1-b2-ctx64" / "launch1.json"
    victim.write_text(victim.read_text().replace('"output_tok_s"', '"output_tok_s" ', 1))
    bad = subprocess.run([sys.executable, "-m", "specsweep", "verify", "."], cwd=folder, capture_output=True,
                         text=True)
    assert bad.returncode == 25 and "results/runs/tp1-b2-ctx64/launch1.json: content differs" in bad.stderr


def test_a_truncated_archive_is_named_by_verify_and_compare_without_a_traceback(tmp_path):
    folder = tmp_path / "study"
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "summary.csv").write_text("name,status\n" + "x,ok\n" * 20000)
    (folder / archive.MANIFEST).write_text("")
    whole = tmp_path / "study.tar.gz"
    with tarfile.open(whole, "w:gz") as tar:
        tar.add(folder, arcname="study")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    for argv, code in ((["verify", str(cut)], 25), (["compare", str(cut), str(cut)], 2)):
        proc = subprocess.run([sys.executable, "-m", "specsweep", *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, proc.stderr
        assert f"{cut} cannot be unpacked" in proc.stderr and "damaged or truncated" in proc.stderr, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    missing = subprocess.run([sys.executable, "-m", "specsweep", "compare", str(tmp_path / "old"), str(folder)],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and f"{tmp_path / 'old'} does not exist" in missing.stderr


def test_an_inconsistent_folder_is_not_archived(tmp_path):
    cfg = study.validate_study({"grid": {"budget": [0, 4], "tp": [1], "context": [128]}})
    spec = study.expand_grid(cfg)[0]
    store.write_json_atomic(tmp_path / "results" / "runs" / f"{spec.name}.json", result_doc(spec))
    problems = archive.check_consistent(cfg, tmp_path)
    assert problems == ["tp1-b4-ctx128: launch 1 neither measured nor excluded (run the main command, or exclude it)"]
    other = study.validate_study({**cfg, "workload": {"seed": 7}})
    assert any("another configuration" in p for p in archive.check_consistent(other, tmp_path))


# --- the report, read in a real headless browser ---------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, driven by its chromedriver (tests/system-packages.sh installs both)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    yield driver
    driver.quit()


class Reader:
    """What a person sees: the first screen, and an item opened from a category's list."""

    def __init__(self, driver, report: Path):
        self.driver, self.url = driver, report.as_uri()

    def text(self) -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.TAG_NAME, "body").text

    def first_screen(self) -> str:
        import time

        self.driver.get(self.url)
        time.sleep(1.5)  # the report renders itself with JavaScript
        return self.text()

    def category(self, name: str) -> str:
        import time

        from selenium.webdriver.common.by import By

        self.first_screen()
        self.driver.find_element(By.LINK_TEXT, name).click()
        time.sleep(1.0)
        return self.text()

    def open(self, category: str, item: str) -> tuple[str, int]:
        """Open one item with its eye button; (the text shown, images shown)."""
        import time

        from selenium.webdriver.common.by import By

        self.category(category)
        row = self.driver.find_element(By.XPATH, f"//td[normalize-space(text())='{item}']/..")
        row.find_element(By.XPATH, ".//a[@iconname='eye']").click()
        time.sleep(1.5)
        images = len([i for i in self.driver.find_elements(By.TAG_NAME, "img") if i.size["width"] > 200])
        frames = self.driver.find_elements(By.TAG_NAME, "iframe")
        if frames:
            self.driver.switch_to.frame(frames[0])
            shown = self.text()
            self.driver.switch_to.default_content()
            return shown, images
        return self.text(), images


@pytest.mark.e2e
def test_the_report_shows_the_answer_first_and_every_part_a_reader_needs(handed_over, browser):
    reader = Reader(browser, handed_over / "results" / "report.html")
    first = reader.first_screen()
    best = __import__("pandas").read_csv(handed_over / "results" / "best.csv")
    assert "Best draft budget" in first and "best set" in first and "confidence" in first
    for row in best.itertuples():  # the answer, as numbers the reader sees
        assert f"{row.output_tok_s:.1f} ({row.output_tok_s_min:.1f}-{row.output_tok_s_max:.1f})" in first
    assert "tp1-b4-ctx64: excluded: left out to show an exclusion" in first
    for category in ("Summary", "Configurations", "Failures and exclusions", "Study"):
        assert category in first

    summary = reader.category("Summary")
    assert {"summary table", "throughput and speedup figure", "best budget per tp, context, section and load"} <= \
        set(summary.splitlines())
    _, images = reader.open("Summary", "throughput and speedup figure")
    assert images >= 1
    table, _ = reader.open("Summary", "summary table")
    assert "tp1-b2-ctx64" in table and "excluded" in table
    listed = reader.category("Configurations")
    assert {"tp1-b0-ctx64", "tp1-b2-ctx64", "tp1-b4-ctx64"} <= set(listed.splitlines())  # one page each
    page, _ = reader.open("Configurations", "tp1-b2-ctx64")
    assert "Per section" in page and "--spec-ngram-mod-n-max 2" in page and "git_commit" in page
    assert "<redacted>" in page  # the key on the command line, hidden
    excluded, _ = reader.open("Configurations", "tp1-b4-ctx64")
    assert "excluded" in excluded and "left out to show an exclusion" in excluded
    failures, _ = reader.open("Failures and exclusions", "configurations without a result")
    assert "tp1-b4-ctx64" in failures and "left out to show an exclusion" in failures
    config, _ = reader.open("Study", "merged study configuration")
    assert "api_key_env: SPECSWEEP_TEST_API_KEY" in config
