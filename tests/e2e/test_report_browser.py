"""The reports in a real headless browser (Chromium from Debian's packages, `make browser`):
each renders to a non-blank 1366x900 screenshot, a laptop screen, without horizontal scrolling.

The replay / demo report is built from the synthetic runs of the report's unit test, the
``simulate`` report from a synthetic result; ``out/demo/demo-report.html`` is checked too when
``make demo`` has written one. Skips, saying why, where Chromium is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.unit.infra.replay.test_report import _run, _summary

ROOT = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 1366, 900
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason=(
        "chromium is not installed: `make setup` (its `browser` target) installs it from "
        "Debian's packages when apt-get exists and it runs as root")),
]


def chromium(tmp_path: Path, *args: str, timeout_s: float = 90.0) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with its own profile under ``tmp_path``; its process group is killed
    on a timeout."""
    assert CHROMIUM is not None
    argv = [CHROMIUM, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--no-default-browser-check", f"--user-data-dir={tmp_path / 'profile'}",
            f"--window-size={WIDTH},{HEIGHT}", *args]
    if os.geteuid() == 0:
        argv.insert(2, "--no-sandbox")  # Chromium refuses to run its sandbox as root
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"chromium did not finish in {timeout_s} s: {err[-2000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def assert_renders(html_path: Path, tmp_path: Path) -> Path:
    """Screenshot ``html_path`` at 1366x900: the PNG has that size and is not blank, and the
    page needs no horizontal scrolling at that width."""
    shot = tmp_path / f"{html_path.stem}.png"
    done = chromium(tmp_path, f"--screenshot={shot}", html_path.resolve().as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[:, :, :3]  # height x width x RGB, 0..1
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    painted = (abs(pixels - pixels[0, 0]).sum(axis=2) > 0.05).mean()  # off the page background
    assert painted > 0.03, f"screenshot nearly blank ({painted:.1%} of its pixels painted)"
    # the laid-out page's width, read back from the DOM
    probe = tmp_path / f"{html_path.stem}-probe.html"
    probe.write_text(html_path.read_text(encoding="utf-8").replace(
        "</body>", "<script>document.body.dataset.scrollWidth = "
        "document.documentElement.scrollWidth;</script></body>"), encoding="utf-8")
    dom = chromium(tmp_path, "--dump-dom", probe.as_uri())
    match = re.search(r'data-scroll-width="(\d+)"', dom.stdout)
    assert match, dom.stderr[-2000:]
    assert int(match.group(1)) <= WIDTH, f"{html_path.name} scrolls sideways at {WIDTH} px"
    return shot


def test_the_replay_report_renders_in_chromium(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.replay import report

    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    off = _run("off", _summary(label="off"), pc=0)
    on = _run("on", _summary(label="on", cold_starts=1, sla_breaches=0, p95_ms=900.0,
                             provisioned_gb_s=1200.5, lambda_usd=0.0121, gpu_usd=0.0153),
              pc=2, plans=True)
    path = report.write_report([off, on], tmp_path / "replay.html",  # type: ignore[list-item]
                               title="warmstart demo")
    assert_renders(path, tmp_path)


def test_the_simulate_report_renders_in_chromium(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.commands.simulate import write_html_report
    from warmers.simulator.report import pareto_plot
    from warmers.simulator.run import PolicyTotals, SimulationResult

    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    totals = [PolicyTotals(policy=name, requests=100_000, cold_starts=cold, sla_breaches=900,
                           cold_breaches=cold // 10, cost_usd={"ondemand": usd},
                           endpoint_usd=endpoint, p99_ms=900.0)
              for name, cold, usd, endpoint in [
                  ("on-demand, keep-alive 10 min", 128, 1.23, 0.0),
                  ("target tracking 0.7", 64, 2.23, 0.0), ("SnapStart", 127, 1.62, 0.0),
                  ("warmstart", 52, 1.24, 9.01)]]
    result = SimulationResult(totals=totals, rows=[], n_functions=60, n_minutes=480, seed=2019)
    pareto_plot(result, tmp_path / "pareto.png")
    path = write_html_report(result, tmp_path / "simulate.html", preamble="60 functions.",
                             pareto=tmp_path / "pareto.png")
    assert_renders(path, tmp_path)


@pytest.mark.skipif(not (ROOT / "out" / "demo" / "demo-report.html").is_file(),
                    reason="no out/demo/demo-report.html (make demo writes it)")
def test_the_demo_report_renders_in_chromium(tmp_path: Path) -> None:
    assert_renders(ROOT / "out" / "demo" / "demo-report.html", tmp_path)
