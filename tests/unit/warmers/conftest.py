from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


@pytest.fixture(scope="session")
def realhash_series() -> dict[str, np.ndarray]:
    """The 10 busy full-day functions (1,440 minutes) of the Azure 2019 trace."""
    with (DATA / "azure2019_fullday_realhash" / "invocations.csv").open() as fh:
        rows = list(csv.reader(fh))[1:]
    return {r[2]: np.array(r[4:], dtype=float) for r in rows}
