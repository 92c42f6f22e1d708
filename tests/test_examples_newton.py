"""examples/newton.py at tiny size: Newton's method (Hessian by double backward) beats gradient descent."""
from examples_helpers import assert_report_files, run_ok


def test_newton_quick_converges_and_writes_its_report(tmp_path):
    out = str(tmp_path / "newton")
    m = run_ok("newton", out, "--quick")
    assert m["newton_steps_to_optimum"] is not None and m["newton_steps_to_optimum"] <= 12
    assert m["newton_final_gap"] < 1e-10 < m["gd_final_gap"]  # gradient descent is still far after 200 steps
    assert m["hvp_vs_hessian_max_error"] < 1e-12  # hvp and the Hessian matrix agree
    section, head = assert_report_files(out)
    assert head["example"] == "newton" and head["reached"] is True
    assert "convergence.png" in section
