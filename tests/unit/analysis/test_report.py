"""The report (analysis/report.py): what a reader is told beyond the figures."""

from factories import result_doc
from specsweep import study
from specsweep.analysis import aggregate, answer, report
from specsweep.records import store
from specsweep.study.loading import defaults


def test_a_launch_whose_checks_read_nothing_is_named_on_the_front_page_and_its_own_page(tmp_path):
    cfg = study.validate_study({"grid": {"budget": [0, 4], "tp": [1], "context": [128]}, "workload": {"launches": 1}})
    runs, failures = tmp_path / "launches", tmp_path / "failures"
    specs = {s.name: s for s in study.expand_grid(cfg)}
    unread = "context not checked: /props answered 404"
    for name, spec in specs.items():
        doc = result_doc(spec)
        doc["server"]["preflight"] = ({"checked": [], "unchecked": [unread]} if name == "tp1-b4-ctx128" else
                                      {"checked": ["context: 4096 tokens, 161 needed"], "unchecked": []})
        store.write_json_atomic(runs / name / "launch1.json", doc)
    frame = aggregate.summarize(cfg, runs, failures)
    unchecked = report.unchecked_checks(frame, runs)
    assert unchecked == {"tp1-b4-ctx128": [unread]}
    page = report.front_page(cfg, frame, answer.best_table(frame, defaults("verdict")), unchecked)
    assert "Measured with a check unread" in page and f"- ``tp1-b4-ctx128``: {unread}" in page
    assert "tp1-b0-ctx128``:" not in page.split("Measured with a check unread")[1]
    pages = report.configuration_pages(cfg, frame, runs, failures)
    assert f"<th>NOT checked</th><td>{unread}</td>" in pages["tp1-b4-ctx128"]
    assert "<th>NOT checked</th><td>none</td>" in pages["tp1-b0-ctx128"]
    # Every check read: no such list on the front page.
    best = answer.best_table(frame, defaults("verdict"))
    assert "Measured with a check unread" not in report.front_page(cfg, frame, best, {})
