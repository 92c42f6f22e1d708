"""The shared example machinery: flags, bad input, the report files, and the tour's report.md."""
import json
import os
import re

from examples_helpers import EXAMPLES, assert_report_files, run_example, run_ok


def test_moons_quick_writes_metrics_report_and_figure(tmp_path):
    out = str(tmp_path / "moons")
    m = run_ok("moons", out, "--quick")
    assert m["test_accuracy"] > 0.9
    section, head = assert_report_files(out)
    assert head["example"] == "moons" and head["reached"] is True
    assert "decision_boundary.png" in section


def test_bad_flags_get_a_message_not_a_traceback(tmp_path):
    for args, expected in [(["--no-such-flag"], "unrecognized arguments"),
                           (["--seed", "one"], "invalid int value"),
                           (["--threads", "0"], "--threads"),
                           (["--out", "/proc/no/such/place"], "cannot write to")]:
        r = run_example("moons", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert expected in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_unwritable_out_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = run_example("moons", "--out", str(blocker / "sub"))
    assert r.returncode == 2 and "cannot write to" in r.stderr and "Traceback" not in r.stderr
    assert blocker.read_text() == "not a folder"


def test_threads_flag_pins_blas_before_numpy(tmp_path):
    r = run_example("moons", "--quick", "--threads", "2", "--out", str(tmp_path / "m"))
    assert r.returncode == 0, r.stderr
    assert "BLAS threads 2" in r.stdout


def test_tour_writes_report_with_existing_image_links(tmp_path):
    out = tmp_path / "tour"
    r = run_example("tour", "--out", str(out), "--only", "moons")
    assert r.returncode == 0, r.stdout + r.stderr
    report = (out / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert links and all(os.path.exists(out / link) for link in links), links
    summary = json.loads((out / "summary.json").read_text())
    assert [s["example"] for s in summary] == ["moons"]
    assert set(summary[0]) == {"example", "headline", "value", "target", "reached", "seconds", "cpu_seconds"}
    assert 0 < summary[0]["cpu_seconds"] <= summary[0]["seconds"] * 2 + 1  # its process's CPU time


def test_tour_rejects_unknown_example(tmp_path):
    r = run_example("tour", "--out", str(tmp_path / "t"), "--only", "nope")
    assert r.returncode == 2 and "unknown example" in r.stderr


def test_every_example_is_run_through_run_ok_which_checks_its_verdict():
    """run_ok asserts the run's last word, a `verdict:` line matching headline.json (examples_helpers.py); every
    example of the tour must be run that way by some test."""
    import glob
    import re
    import sys
    sys.path.insert(0, EXAMPLES)
    from tour import EXAMPLES as TOUR
    here = os.path.dirname(os.path.abspath(__file__))
    called = set()
    for path in glob.glob(os.path.join(here, "test_*.py")):
        with open(path) as f:
            called |= set(re.findall(r"run_ok\(\s*[\"'](\w+)[\"']", f.read()))
    missing = sorted({name for name, _ in TOUR} - called)
    assert not missing, f"examples no test runs through run_ok (so nothing checks their verdict line): {missing}"


def test_the_verdict_line_says_reached_or_not():
    import sys
    sys.path.insert(0, EXAMPLES)
    import common
    head = {"headline": "test accuracy", "value": 0.991, "target": ">= 0.95", "reached": True}
    assert common.verdict(head, "quick") == ("verdict: target REACHED (quick settings): test accuracy = 0.991, "
                                             "target >= 0.95")
    assert "target NOT reached" in common.verdict(dict(head, reached=False), "default")
    assert common.verdict(None, "default").startswith("verdict: not judged")
