"""Lambda freezes an idle execution environment between invocations; so does the emulator.

Real processes: a handler's background thread counts ticks; with ``freeze_idle`` on it makes
no progress while its environment is idle, with it off it does. Frozen environments are still
reclaimed, time out and end like any other.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
"""

from __future__ import annotations

import json
import threading
import time

from infra.local.spec import AliasSpec
from tests.e2e.conftest import alive, assert_gone, spec

IDLE_S = 0.8
#: ticks (10 ms each) allowed across the freeze/thaw edges: the few ms between the result
#: being sent and SIGSTOP, and between SIGCONT and the handler reading its counter
EDGE_SLACK_TICKS = 5


def _call(emu, name: str, event: dict | None = None) -> dict:
    result = emu.invoke(name, json.dumps(event or {}).encode(), qualifier="live")
    assert result.function_error is None, result.payload
    return json.loads(result.payload)


def _process_state(pid: int) -> str:
    """The one-letter state in /proc/<pid>/stat (``T`` = stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: str, timeout_s: float = 2.0) -> str:
    deadline = time.monotonic() + timeout_s
    state = _process_state(pid)
    while state != want and time.monotonic() < deadline:
        time.sleep(0.01)
        state = _process_state(pid)
    return state


def _idle_progress(emu) -> tuple[int, str]:
    """Ticks the background thread counted while its environment sat idle for IDLE_S."""
    emu.add_function(spec("ticker", "ticker.handler"))
    first = _call(emu, "ticker")
    state = _wait_state(first["pid"], "T", timeout_s=0.3)
    time.sleep(IDLE_S)
    second = _call(emu, "ticker")
    assert second["pid"] == first["pid"]  # the same (warm) environment
    return second["ticks_at_start"] - first["ticks_at_end"], state


def test_background_thread_makes_no_progress_while_frozen(make_emulator):
    emu = make_emulator()
    progress, state = _idle_progress(emu)
    assert state == "T"  # stopped between invocations
    assert 0 <= progress <= EDGE_SLACK_TICKS


def test_without_freeze_the_background_thread_keeps_running(make_emulator):
    emu = make_emulator(freeze_idle=False)
    progress, state = _idle_progress(emu)
    assert state != "T"
    assert progress >= 0.4 * IDLE_S / 0.01  # well above the slack, even on a busy machine


def test_provisioned_environment_is_frozen_after_its_init(make_emulator):
    emu = make_emulator()
    emu.add_function(spec("ticker", "ticker.handler",
                          aliases=(AliasSpec("live", "1", provisioned_concurrency=1),)))
    [env] = emu.environments("ticker")
    assert _wait_state(env["pid"], "T") == "T"
    time.sleep(IDLE_S)
    body = _call(emu, "ticker")
    assert body["pid"] == env["pid"]
    # init took well under IDLE_S; the thread ran only until the environment was frozen
    assert body["ticks_at_start"] < 0.5 * IDLE_S / 0.01


def test_snapstart_freezes_the_restored_environment_never_the_template(make_emulator):
    emu = make_emulator()
    emu.add_function(spec("snap", "snap.handler", snap_start=True))
    [template] = emu.process_ids()
    first = _call(emu, "snap")
    assert _wait_state(first["pid"], "T") == "T"
    assert _process_state(template) != "T"
    # a second restore while the first environment is frozen: the template still forks
    results = []

    def hold() -> None:
        results.append(_call(emu, "snap", {"sleep_s": 0.3}))

    busy = threading.Thread(target=hold)
    busy.start()
    time.sleep(0.05)
    second = _call(emu, "snap", {"sleep_s": 0.3})
    busy.join()
    # one reuses the thawed first environment, the other is a fresh restore
    assert {second["pid"], results[0]["pid"]} > {first["pid"]}
    assert _process_state(template) != "T"


def test_idle_reclaim_ends_a_frozen_environment(make_emulator):
    emu = make_emulator(idle_timeout_s=0.3)
    emu.add_function(spec("ticker", "ticker.handler"))
    pid = _call(emu, "ticker")["pid"]
    assert _wait_state(pid, "T") == "T" or not alive(pid)
    deadline = time.monotonic() + 5
    while emu.environments("ticker") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emu.environments("ticker") == []
    assert_gone([pid])


def test_timeout_ends_a_frozen_then_thawed_environment(make_emulator):
    emu = make_emulator()
    emu.add_function(spec("ticker", "ticker.handler", timeout_s=0.5))
    pid = _call(emu, "ticker")["pid"]
    assert _wait_state(pid, "T") == "T"
    result = emu.invoke("ticker", b'{"sleep_s": 5}', qualifier="live")
    assert result.function_error == "Unhandled"
    assert "Task timed out after 0.50 seconds" in json.loads(result.payload)["errorMessage"]
    assert_gone([pid])
    after = _call(emu, "ticker")
    assert after["pid"] != pid


_HARD_KILL_SCRIPT = """
import json, sys, time
from infra.local.emulator import Emulator, EmulatorConfig
from infra.local.spec import AliasSpec, FunctionSpec
emu = Emulator(EmulatorConfig(), log_stream=sys.stderr)
for name, snap in (("ticker", False), ("snap", True)):
    emu.add_function(FunctionSpec(name=name, handler=name + ".handler", code_dir=sys.argv[1],
                                  snap_start=snap, aliases=(AliasSpec("live", "1"),)))
    emu.invoke(name, b"{}", qualifier="live")
print(json.dumps(emu.process_ids()), flush=True)
time.sleep(60)
"""


def test_frozen_environments_end_when_the_emulator_is_killed(tmp_path):
    # GIVEN an emulator process with a frozen on-demand and a frozen restored environment
    import subprocess
    import sys
    from pathlib import Path

    from tests.e2e.conftest import HANDLERS

    repo = Path(__file__).parents[2]
    proc = subprocess.Popen([sys.executable, "-c", _HARD_KILL_SCRIPT, str(HANDLERS)], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        pids = json.loads(proc.stdout.readline())
        assert len(pids) == 3  # two environments and one SnapStart template
        frozen = [p for p in pids if _wait_state(p, "T") == "T"]
        assert len(frozen) == 2
    finally:
        # WHEN the emulator dies without cleaning up (SIGKILL)
        proc.kill()
        proc.wait(timeout=5)
        proc.stdout.close()
    # THEN no environment stays stopped forever: the kernel thaws an orphaned process group
    # with stopped members (SIGHUP, SIGCONT) and each one ends
    assert_gone(pids)


def test_frozen_only_when_the_runtime_and_every_extension_wait_on_next(make_emulator):
    # GIVEN an internal extension that works 0.5 s after each response
    emu = make_emulator()
    emu.add_function(spec("ext", "extension_app.handler"))
    body = _call(emu, "ext", {"post_s": 0.5})
    # THEN the environment stays thawed while it works, and is frozen once it called next
    time.sleep(0.1)
    assert _process_state(body["pid"]) != "T"
    assert _wait_state(body["pid"], "T", timeout_s=3.0) == "T"
