"""``warmstart forecast``: input checks before any work, hash prefixes, ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.cli import main

REAL = Path(__file__).resolve().parents[4] / "tests/data/traces/azure2019_fullday_realhash"
TRACE = str(REAL / "invocations.csv")
HASH = "f8c5d1ba78b7d2f4d2d2a0d8bbc31f0b93185edce1d0788fbc362f22bd931af2"


@pytest.fixture(autouse=True)
def _mpl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    monkeypatch.chdir(tmp_path)


def test_an_unknown_hash_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forecast", "--trace", TRACE, "--function", "zzz"]) == 2
    assert capsys.readouterr().err == ("warmstart forecast: error: --function zzz: no function "
                                       "in the trace has this hash or prefix (10 functions)\n")


def test_concurrency_without_durations_says_what_to_add(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forecast", "--trace", TRACE, "--function", HASH[:8], "--metric",
                 "concurrency"]) == 2
    assert capsys.readouterr().err == (
        "warmstart forecast: error: --metric concurrency needs --durations FILE (the trace's "
        "durations file, e.g. tests/data/traces/azure2019_fullday_realhash/durations.csv)\n")


def test_a_plot_in_a_missing_folder_is_refused_and_not_created(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "nonexistent-dir" / "x" / "f.png"
    assert main(["forecast", "--trace", TRACE, "--function", HASH[:8], "--plot", str(plot)]) == 2
    assert capsys.readouterr().err == (
        f"warmstart forecast: error: --plot is in a folder that does not exist, got {plot} "
        f"(create {plot.parent} first) (see warmstart forecast --help)\n")
    assert not (tmp_path / "nonexistent-dir").exists()


def test_start_minute_out_of_range_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forecast", "--trace", TRACE, "--function", HASH[:8], "--start-min", "1439"]) == 2
    assert capsys.readouterr().err == (
        "warmstart forecast: error: --start-min must be in [0, 1420] for 1440 minutes with "
        "--lead-min 15 and --window-min 5, got 1439\n")


def test_json_and_the_default_plot_under_the_output_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out-dir", str(tmp_path / "results"), "forecast", "--trace", TRACE,
                 "--function", HASH[:8], "--step-min", "240", "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    plot = tmp_path / "results" / f"forecast-{HASH[:8]}.png"
    assert doc["function"] == HASH and doc["trigger"] == "queue" and doc["minutes"] == 1440
    assert doc["lead_min"] == 15 and doc["reach_min"] == 20 and doc["quantile"] == 0.95
    assert doc["metric"] == "invocations/min" and doc["plot"] == str(plot)
    assert [o["minute"] for o in doc["origins"]] == [721, 961, 1201]
    assert set(doc["origins"][0]) == {"minute", "actual", "q50", "q", "naive_q", "method"}
    methods = {m["method"]: m for m in doc["methods"]}
    assert "selector" in methods and "seasonal_naive" in methods
    assert set(methods["selector"]) == {"method", "pinball", "coverage", "vs_seasonal_naive"}
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert captured.err == f"wrote {plot}\n"
    assert main(["--quiet", "forecast", "--trace", TRACE, "--function", HASH[:8], "--step-min",
                 "240", "--json"]) == 0
    assert capsys.readouterr().err == ""
    assert (tmp_path / "out" / f"forecast-{HASH[:8]}.png").is_file()  # default: out/


def test_a_multi_day_one_series_file_is_accepted(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """One function, many days, one count per minute (the 14-day file's format)."""
    import numpy as np

    series = tmp_path / "fn-multi.csv"
    rng = np.random.default_rng(0)
    series.write_text("0\n" + "\n".join(str(v) for v in rng.poisson(3, 3 * 1440)) + "\n")
    assert main(["--out-dir", str(tmp_path / "r"), "forecast", "--trace", str(series),
                 "--function", "fn-multi", "--step-min", "720", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["function"] == "fn-multi" and doc["minutes"] == 3 * 1440
    assert doc["origins"][0]["minute"] == 1 + 3 * 1440 // 2
    assert "seasonal_naive" in {m["method"] for m in doc["methods"]}
    # three days: the weekly season is not used, and the answer says so
    assert any("weekly season (10080 min) not used" in n for n in doc["last"]["notes"])
