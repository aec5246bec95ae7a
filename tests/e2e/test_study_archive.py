"""A study handed over (the suite's shared real study, conftest.shared_study): no secret in
anything it wrote, the report as a reader sees it (headless Chromium), one archive, and its
reproduction elsewhere (verify, rebuild byte-identical, dry-run, tamper)."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import PYTHON_BIN, REPO, docs_text, load


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


# --- the suite's shared real study: report, archive, reproduction, secrets --------------------------

@pytest.mark.e2e
def test_no_planted_secret_is_in_any_file_the_study_wrote_or_any_line_it_printed(shared_study):
    """The keyed server was measured; its key, an HF token and a vLLM key in the environment were
    written nowhere: results, logs, Snakemake's own files, the report, the archive, the terminal."""
    folder = shared_study.folder
    doc = load(folder / "results/launches/tp1-b0-ctx64/launch1.json")
    assert doc["server"]["command"][-2:] == ["--api-key", "<redacted>"]
    written = [p for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "report.html" for p in written) and any(p.name == "study.tar.gz" for p in written)
    assert any(".snakemake" in p.parts for p in written) and any("logs" in p.parts for p in written)
    for path in written:
        data = path.read_bytes()
        for secret in shared_study.secrets:
            assert secret.encode() not in data, (secret, path)
    assert not any(secret in shared_study.output for secret in shared_study.secrets)
    with tarfile.open(folder / "results" / "study.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read()
                assert not any(s.encode() in data for s in shared_study.secrets), member.name


@pytest.mark.e2e
def test_the_archive_verifies_rebuilds_and_replans_elsewhere_as_the_readme_says(shared_study, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "study.tar.gz").write_bytes((shared_study.folder / "results" / "study.tar.gz").read_bytes())
    block = next(b for b in re.findall(r"```bash\n(.*?)```", docs_text(), re.DOTALL)
                 if b.startswith("tar xzf"))
    env = {**os.environ, "PATH": PYTHON_BIN + os.pathsep + os.environ["PATH"]}
    run = subprocess.run(["bash", "-euc", block], cwd=elsewhere, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    folder = elsewhere / "study"
    assert "all" in run.stdout and "files match their checksums" in run.stdout
    assert filecmp.cmp(folder / "rebuilt.csv", folder / "results" / "summary.csv", shallow=False)
    planned = set(re.findall(r"output: results/launches/(tp\S+)/launch1\.json", run.stdout))
    archived = {p.parent.name for p in (folder / "results" / "launches").glob("*/launch1.json")}
    assert planned == archived == {"tp1-b0-ctx64", "tp1-b2-ctx64"}  # the exclusion stays excluded

    assert {"config.yaml", "REPRODUCE.md", "SHA256SUMS", "code", "environment", "results", "logs"} <= \
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
    victim = folder / "results" / "launches" / "tp1-b2-ctx64" / "launch1.json"
    victim.write_text(victim.read_text().replace('"output_tok_s"', '"output_tok_s" ', 1))
    bad = subprocess.run([sys.executable, "-m", "specsweep", "verify", "."], cwd=folder, capture_output=True,
                         text=True)
    assert bad.returncode == 25 and "results/launches/tp1-b2-ctx64/launch1.json: content differs" in bad.stderr


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

    def settled(self, before: str = "") -> str:
        """The page's text once the report's JavaScript has drawn it: changed from ``before`` and the
        same in two readings 0.2 s apart (at most 15 s)."""
        import time

        deadline, last = time.monotonic() + 15, None
        while time.monotonic() < deadline:
            now = self.text()
            if now and now != before and now == last:
                return now
            last = now
            time.sleep(0.2)
        return self.text()

    def first_screen(self) -> str:
        self.driver.get(self.url)
        return self.settled()

    def category(self, name: str) -> str:
        from selenium.webdriver.common.by import By

        before = self.first_screen()
        self.driver.find_element(By.LINK_TEXT, name).click()
        return self.settled(before)

    def open(self, category: str, item: str) -> tuple[str, int]:
        """Open one item with its eye button; (the text shown, images shown)."""
        import time

        from selenium.webdriver.common.by import By

        listed = self.category(category)
        row = self.driver.find_element(By.XPATH, f"//td[normalize-space(text())='{item}']/..")
        row.find_element(By.XPATH, ".//a[@iconname='eye']").click()
        self.settled(listed)
        deadline = time.monotonic() + 3  # a figure is laid out once its image has loaded
        while not (images := len([i for i in self.driver.find_elements(By.TAG_NAME, "img") if i.size["width"] > 200])) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        frames = self.driver.find_elements(By.TAG_NAME, "iframe")
        if frames:
            self.driver.switch_to.frame(frames[0])
            shown = self.settled()
            self.driver.switch_to.default_content()
            return shown, images
        return self.text(), images


@pytest.mark.e2e
def test_the_report_shows_the_answer_first_and_every_part_a_reader_needs(shared_study, browser):
    reader = Reader(browser, shared_study.folder / "results" / "report.html")
    first = reader.first_screen()
    best = __import__("pandas").read_csv(shared_study.folder / "results" / "best.csv")
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
