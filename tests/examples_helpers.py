"""Running an example script as a user would (a subprocess from a clone), for the example tests."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def run_example(name, *args, timeout=300):
    """Run examples/NAME.py with args; returns the CompletedProcess (stdout and stderr as text)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", MPLBACKEND="Agg")
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, f"{name}.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def run_ok(name, out, *args, timeout=300):
    """Run an example that must succeed; returns its metrics.json as a dict."""
    r = run_example(name, "--out", out, *args, timeout=timeout)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert_verdict(r.stdout, out)
    with open(os.path.join(out, "metrics.json")) as f:
        return json.load(f)


def assert_verdict(stdout, out):
    """A standalone run ends by saying whether it reached its target, as its headline.json says."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("verdict: ")]
    assert len(lines) == 1, f"expected one 'verdict: ' line in the output, got {lines}"
    path = os.path.join(out, "headline.json")
    if not os.path.exists(path):
        assert lines[0].startswith("verdict: not judged"), lines[0]
        return
    with open(path) as f:
        reached = json.load(f)["reached"]
    assert ("target REACHED" if reached else "target NOT reached") in lines[0], lines[0]


def assert_report_files(out):
    """section.md exists and every image it links exists; headline.json has the tour's keys."""
    with open(os.path.join(out, "section.md")) as f:
        section = f.read()
    import re
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section):
        assert os.path.exists(os.path.join(out, link)), f"section.md links {link}, which does not exist"
    with open(os.path.join(out, "headline.json")) as f:
        head = json.load(f)
    assert set(head) >= {"example", "headline", "value", "target", "reached", "seconds"}
    return section, head
