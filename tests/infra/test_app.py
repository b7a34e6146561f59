"""``infra/app.py`` as ``npx cdk synth`` runs it: an invalid ``warmstart`` config is one line on
stderr and exit 2, not a traceback (``WARMSTART_DEBUG=1`` shows it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.config import StackConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bad_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``main()`` builds the real app from a context with an unknown layer (given to
    ``build_cdk_app`` directly: the CDK CLI's ``CDK_CONTEXT_JSON`` is read once per jsii kernel,
    which the other CDK tests of this session share)."""
    from infra import app

    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    context["warmstart"]["agents"]["lookup"]["layers"] = ["nope"]
    real = app.build_cdk_app
    monkeypatch.setattr(app, "build_cdk_app", lambda: real(context, outdir=str(tmp_path / "cdk.out")))
    monkeypatch.delenv("WARMSTART_DEBUG", raising=False)


def test_a_config_error_is_one_line_and_exit_2(bad_context: None,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from infra import app

    assert app.main() == 2
    assert capsys.readouterr().err == (
        "warmstart synth: error: warmstart.agents.lookup.layers: unknown layer 'nope'; known: "
        "chat, forecast, inference, model, web\n")


def test_debug_keeps_the_traceback(bad_context: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from infra import app

    monkeypatch.setenv("WARMSTART_DEBUG", "1")
    with pytest.raises(StackConfigError, match="unknown layer 'nope'"):
        app.main()
