"""What a new user tripped on (issue 48): a misspelled record key, `--budget` given to a method
without one, a device that runs no op, each answered in one line where they read."""

import numpy as np
import pytest
from click.testing import CliRunner

import regal
from regal.cli import main
from regal.graph import Graph, save


def test_from_records_refuses_an_unknown_key_naming_node_and_key():
    """A misspelled "inputs" is a one-line GraphError naming the node, the key and the likely
    field, not a silently dropped edge; a graph file may still carry other keys (SPEC section 1)."""
    recs = [{"id": "x", "bytes": 4}, {"id": "y", "bytes": 4, "inptus": ["x"]}]
    with pytest.raises(regal.GraphError, match=r"^graph: node 'y' has an unknown key 'inptus' \(did you mean 'inputs'\?\)$"):
        Graph.from_records(recs)
    g = Graph.from_records(recs, unknown_keys="ignore")
    assert g.num_nodes == 2 and g.in_ptr[-1] == 0


def test_a_graph_file_may_carry_other_keys(tmp_path):
    """The file reader ignores keys that are not fields (SPEC section 1: 'Unknown keys are ignored')."""
    import json
    p = tmp_path / "g.json"
    p.write_text(json.dumps({"format": "regal-graph/1", "name": "g", "nodes": [
        {"id": "x", "bytes": 4, "note": "a comment"}, {"id": "y", "bytes": 4, "inputs": ["x"], "shape": [2, 2]}]}))
    assert regal.load(str(p)).num_nodes == 2


def test_solve_refuses_a_budget_in_the_command_lines_words(tmp_path):
    """`regal solve gp-dfs G --budget 2000` is a usage error (2) that names --budget and
    --time-limit, not the Python keyword time_limit_s."""
    from randgraph import random_dag
    p = tmp_path / "g.json"
    save(random_dag(1, num_nodes=30), p)
    r = CliRunner().invoke(main, ["solve", "gp-dfs", str(p), "--budget", "2000"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "--budget" in r.output and "--time-limit" in r.output and "time_limit_s" not in r.output


def test_the_report_names_a_parameter_server_layout(tmp_path):
    """A device holding only weights is named in the report as a parameter-server layout."""
    g = Graph.from_records([{"id": "w", "bytes": 64, "resident": True}, {"id": "v", "bytes": 64, "resident": True},
                            {"id": "a", "bytes": 8, "inputs": ["w"]}, {"id": "b", "bytes": 8, "inputs": ["a", "v"]}],
                           name="ps")
    sol = regal.make_solution(g, np.array([1, 0, 0, 0]), np.arange(4), 2, method="test")
    save(g, tmp_path / "g.json")
    sol.save(tmp_path / "s.json")
    from regal.commands._report import _print_solution
    r = CliRunner().invoke(main, ["evaluate", str(tmp_path / "g.json"), str(tmp_path / "s.json")])
    assert r.exit_code == 0
    import click

    @click.command()
    def show():
        _print_solution(g, sol, None)

    out = CliRunner().invoke(show).output
    line = next(line for line in out.splitlines() if line.strip().startswith("device 1"))
    assert "weights only, it runs no op: a parameter-server layout" in line
    assert "parameter-server" not in next(line for line in out.splitlines() if line.strip().startswith("device 0"))
