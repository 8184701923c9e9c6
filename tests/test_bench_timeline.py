"""`python -m benchmarks.bench_timeline` (issue 36, docs/engine-speed.md's large-graph section):
the command runs, its plan is written and the timeline names the deadline and the steps."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_timeline_reports_the_deadline_and_the_plan_written(tmp_path):
    """A run stopped by its time limit: the plan exists, the report gives the deadline, the
    plan's time after it, the peak RSS, and the loop's steps with their times."""
    graph = os.path.join(ROOT, "data", "graphs", "synthetic_layered", "layered_s0_0000_resnet.json.gz")
    plan = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_timeline", graph, "-d", "2", "-n", "10000000",
                           "--time-limit", "8", "-o", str(plan), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert plan.exists()
    m = re.search(r"deadline at ([\d.]+) s; plan written at ([\d.]+) s \(([+-][\d.]+) s\), peak RSS ([\d.]+) GiB",
                  proc.stderr)
    assert m, proc.stderr[-2000:]
    at, written = float(m.group(1)), float(m.group(2))
    # the search stops 5 % before the limit and the report ends within 10 % of it (issue 48): a
    # latency target, measured by the benchmark itself; here only a bound a hang would break (a
    # fresh clone's cold kernel cache at load 9 wrote the plan 130 s after the deadline)
    assert 1.5 < at and written <= at + 280 and float(m.group(4)) > 0
    assert "run_loop" in proc.stderr and "| step after the deadline |" in proc.stderr
