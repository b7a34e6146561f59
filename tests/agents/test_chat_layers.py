"""The chat agent's dependencies as the synth ships them: ``layers/web`` and ``layers/chat``
(httpx and what pip resolves for it) built for python3.12 manylinux x86_64 from the local
wheelhouse, and the synth's import check of its handler, app and hooks in a clean interpreter
whose ``sys.path`` is the function's code and those two layers only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra.constructs.bundling import PipLocalBundling, lambda_platforms
from infra.constructs.layers import MissingDependencyError, check_imports
from tests.infra.cdk_helpers import REPO

pytestmark = pytest.mark.slow


def _layer(out: Path, name: str) -> Path:
    PipLocalBundling(requirements=REPO / "layers" / name / "requirements.txt", python_version="3.12",
                     platforms=lambda_platforms("x86_64"), no_deps=False).try_bundle(str(out))
    return out / "python"


def _code(root: Path) -> Path:
    """The function's code asset as the synth stages it: functions/, the toolkit, the agent."""
    (root / "functions").mkdir(parents=True)
    shutil.copy(REPO / "functions" / "__init__.py", root / "functions" / "__init__.py")
    for package in ("runtime", "chat"):
        shutil.copytree(REPO / "functions" / package, root / "functions" / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_chat_agent_imports_from_its_code_and_its_two_layers(tmp_path: Path) -> None:
    code = _code(tmp_path / "code")
    web = _layer(tmp_path / "web", "web")
    chat = _layer(tmp_path / "chat", "chat")
    assert (chat / "httpx").is_dir() and (chat / "httpcore").is_dir()
    check = check_imports(agent="chat", handler="functions.chat.handler.handler", code_dir=code,
                          layer_dirs=[web, chat], runtime="python3.12")
    # under python3.12 (when found) every import ran, compiled ones included
    assert check.agent == "chat" and (check.complete or check.note), check
    # without its own layer the check names httpx, the package it is missing
    with pytest.raises(MissingDependencyError, match="module 'httpx' is not in the function's code"):
        check_imports(agent="chat", handler="functions.chat.handler.handler", code_dir=code,
                      layer_dirs=[web], runtime="python3.12")
