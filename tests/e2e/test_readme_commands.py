"""The README's commands, run as written, in the README's order.

The ```bash blocks (and the python block that drives ``local up`` with boto3) are read from
``README.md`` when the test runs, so a command edited in the README is the command tested. Each
command runs in a copy of the project (the checkout is never written; ``.venv``,
``node_modules`` and ``.cache`` are linked, as in ``test_scaffold.py``) with ``PYTHONPATH`` on
the copy. A long-running command (``warmstart local up``, a timed Locust run) is started, checked
ready, and stopped when the next ``local up`` starts or the walk ends; the commands after it run
beside it, as in a second terminal. A command that cannot run here is skipped by `SKIPPED`, each
with its reason; every other command must exit 0.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import project_copy

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: Inputs of `make setup`'s targets: aged in the copy so that make never reinstalls into the
#: linked (shared) environments; installing is `make setup`'s business, not the README's walk.
SETUP_INPUTS = ("pyproject.toml", "constraints.txt", "package.json", "package-lock.json")

#: README commands that cannot run inside the suite, matched by regular expression on the
#: command (continuation lines joined, comment dropped), each with its reason.
SKIPPED: dict[str, str] = {
    r"^make demo\b": "the whole main job (~5 min on 2 cores, two full replays): too slow "
                     "inside the suite; its parts (synth, local up, replay) run here",
    r"^make test\b": "the whole suite, this test included",
    r"^make sam-local-invoke\b": "sam local invoke needs Docker (or Finch)",
    r"^\.venv/bin/locust .*--host https://API_ID\.": "needs a deployed API on AWS",
}
#: Commands that run until stopped.
LONG_RUNNING = (r"^\.venv/bin/warmstart local up\b", r"^\.venv/bin/locust\b")


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: its language, its first line number, its text."""

    lang: str
    line: int
    text: str

    def commands(self) -> list[str]:
        """The shell commands of a bash block: continuation lines joined, comment lines
        dropped, the trailing comment kept (bash ignores it)."""
        joined = re.sub(r"\\\n\s*", "", self.text)
        return [c.strip() for c in joined.splitlines() if c.strip() and not c.strip().startswith("#")]


def readme_blocks(text: str) -> list[Block]:
    """The ```bash blocks and the python blocks that use boto3 (the one that drives the local
    stack), in the README's order. Other python blocks are illustrations of an agent's files."""
    blocks = []
    for match in re.finditer(r"^```(\w+)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        lang, body = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if lang == "bash" or (lang == "python" and "import json, boto3" in body):
            blocks.append(Block(lang, line, body))
    return blocks


def bare(command: str) -> str:
    """The command without its trailing comment (what the patterns match)."""
    return re.sub(r"\s+#.*$", "", command).strip()


def skip_reason(command: str) -> str | None:
    matched = [reason for pattern, reason in SKIPPED.items() if re.search(pattern, bare(command))]
    assert len(matched) <= 1, f"{command!r} matches several SKIPPED patterns"
    return matched[0] if matched else None


def is_long_running(command: str) -> bool:
    return any(re.search(pattern, bare(command)) for pattern in LONG_RUNNING)


# --- the list itself ------------------------------------------------------------------------

def test_the_readme_has_the_blocks_this_walk_expects() -> None:
    blocks = readme_blocks(README.read_text())
    commands = [bare(c) for b in blocks if b.lang == "bash" for c in b.commands()]
    assert [b.lang for b in blocks].count("python") == 1, "the boto3 block is gone or doubled"
    assert ".venv/bin/warmstart local up --endpoints-file out/endpoints.json" in commands
    # a continued command is one command
    assert any(c.startswith(".venv/bin/warmstart replay --trace ") and c.endswith("--config both")
               for c in commands)
    # the python block follows the local up it drives
    python = next(i for i, b in enumerate(blocks) if b.lang == "python")
    assert "--endpoints-file out/endpoints.json" in blocks[python - 1].text


def test_every_skipped_pattern_names_a_readme_command_and_a_reason() -> None:
    commands = [bare(c) for b in readme_blocks(README.read_text()) if b.lang == "bash"
                for c in b.commands()]
    for pattern, reason in SKIPPED.items():
        assert any(re.search(pattern, c) for c in commands), f"stale SKIPPED entry {pattern!r}"
        assert len(reason) > 10, pattern
    skipped = [c for c in commands if skip_reason(c)]
    # exactly these are skipped; everything else (new, synth, local up, replay, the local
    # Locust run, boto3) runs
    assert sorted({c.split()[0] + " " + c.split()[1] for c in skipped}) == [
        ".venv/bin/locust -f", "make demo", "make sam-local-invoke", "make test"]
    ran = [c for c in commands if not skip_reason(c)]
    assert any(c.startswith("make synth") for c in ran)
    assert any("--host http://127.0.0.1:GATEWAY_PORT" in c for c in ran)


# --- the walk -------------------------------------------------------------------------------

def _project(tmp_path: Path) -> Path:
    project = project_copy(tmp_path)
    for name in SETUP_INPUTS:
        os.utime(project / name, (0, 0))
    return project


def _env(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMSTART_", "AWS_LAMBDA_"))}
    env.update(JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", CDK_DISABLE_CLI_TELEMETRY="true",
               PYTHONPATH=str(project), MPLCONFIGDIR=str(project / ".cache" / "matplotlib"))
    return env


class Background:
    """A long-running README command: started, read line by line, stopped with Ctrl-C."""

    def __init__(self, command: str, project: Path, log: Path) -> None:
        self.command, self.log = command, log
        self.out = log.open("w")
        self.proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=project,
                                     env=_env(project), stdout=self.out, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, needle: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while needle not in self.text():
            assert self.proc.poll() is None, f"{self.command} exited:\n{self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"{self.command}: no {needle!r} in {timeout_s} s"
            time.sleep(0.5)
        return self.text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()
        return self.proc.returncode


def _gateway(log: str) -> str:
    match = re.search(r"warmstart local: gateway\s+(http://127\.0\.0\.1:\d+)", log)
    assert match, log[-3000:]
    return match.group(1)


@pytest.fixture
def stacks() -> Iterator[list[Background]]:
    running: list[Background] = []
    yield running
    for process in running:
        process.stop()


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not (ROOT / "node_modules" / ".bin" / "cdk").exists(),
                    reason="CDK CLI not installed (make setup)")
def test_readme_commands_run_as_written(tmp_path: Path, stacks: list[Background]) -> None:
    # GIVEN a copy of the project and the README's blocks
    project = _project(tmp_path)
    blocks = readme_blocks(README.read_text())
    ran, skipped = [], []
    gateway = None

    for block in blocks:
        if block.lang == "python":
            # the boto3 block, beside the local up it follows (its "other terminal")
            assert stacks, f"README line {block.line}: no local stack running for the boto3 block"
            done = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c", block.text],
                                  cwd=project, env=_env(project), capture_output=True, text=True,
                                  timeout=120, check=False)
            assert done.returncode == 0, f"README line {block.line}:\n{done.stderr[-3000:]}"
            assert done.stdout.strip() in ("READY", "IN_PROGRESS"), done.stdout
            ran.append("python boto3 block")
            continue
        for command in block.commands():
            where = f"README line {block.line}: {command}"
            if skip_reason(command):
                skipped.append(bare(command))
                continue
            if is_long_running(command) and "local up" in command:
                # WHEN local up starts THEN it gets ready and serves every agent
                for process in stacks:
                    assert process.stop() == 0, f"{process.command}:\n{process.text()[-3000:]}"
                stacks.clear()
                process = Background(bare(command), project, tmp_path / f"local-up-{len(ran)}.log")
                stacks.append(process)
                log = process.wait_for("warmstart local: ready", timeout_s=300)
                gateway = _gateway(log)
                for prefix in re.findall(r"warmstart local: agent\s+\S+\s+http://127\.0\.0\.1:\d+(\S*)", log):
                    health = httpx.get(f"{gateway}{prefix.rstrip('/')}/healthz", timeout=60)
                    assert health.status_code == 200, f"{where}: {prefix}/healthz {health.text}"
                if "--endpoints-file" in command:
                    endpoints = json.loads((project / "out" / "endpoints.json").read_text())
                    assert endpoints["gateway"] == gateway and "lookup" in endpoints["agents"]
                ran.append(bare(command))
                continue
            if is_long_running(command):
                # a timed Locust run against the running stack: some requests, none failed
                assert gateway, f"{where}: no local stack running"
                line = bare(command).replace("http://127.0.0.1:GATEWAY_PORT", gateway)
                # the README's run time shortened to 20 s: Locust ends on its own and exits
                # with its own code (a SIGINT mid-run once took over 60 s to be honoured)
                line, shortened = re.subn(r"(?<!\S)(-t|--run-time)\s+\S+", r"\1 20s", line)
                assert shortened == 1, f"{where}: no run time (-t) to shorten"
                locust = Background(line, project, tmp_path / "locust.log")
                try:
                    code = locust.proc.wait(timeout=180)
                finally:
                    locust.stop()
                report = locust.text()
                assert code == 0, f"{where}:\n{report[-3000:]}"
                total = re.findall(r"Aggregated\s+(\d+)\s+(\d+)\(", report)
                assert total and int(total[-1][0]) > 0 and int(total[-1][1]) == 0, report[-3000:]
                ran.append(bare(command))
                continue
            # WHEN any other command runs THEN it succeeds
            done = subprocess.run(["bash", "-c", command], cwd=project, env=_env(project),
                                  capture_output=True, text=True, timeout=900, check=False)
            assert done.returncode == 0, f"{where}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            ran.append(bare(command))

    # THEN the commands' effects are there, and only the listed commands were skipped
    assert (project / "functions" / "billing_helper" / "handler.py").is_file()
    assert (project / "out" / "replay" / "report.html").is_file()
    assert all(skip_reason(c) for c in skipped)
    assert len(ran) >= 7, ran
