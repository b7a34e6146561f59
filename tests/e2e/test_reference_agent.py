"""The reference agent (functions.agent.handler.handler) in the emulator, behind the gateway."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from infra.local.gateway import Gateway
from infra.local.spec import AliasSpec, FunctionSpec

ROOT = Path(__file__).parents[2]
HANDLER = "functions.agent.handler.handler"



def test_agent_snapstart_restore_serves_intents_through_the_gateway(make_emulator):
    # GIVEN the agent with SnapStart: the snapshot init loads web stack + model once
    emu = make_emulator()
    emu.add_function(FunctionSpec(name="agent", handler=HANDLER, code_dir=ROOT, memory_mb=2048,
                                  timeout_s=30, snap_start=True, aliases=(AliasSpec("live", "1"),),
                                  environment={"POWERTOOLS_SERVICE_NAME": "warmstart-agent"}))
    gw = Gateway(emu, "agent", "live")
    gw.start()
    try:
        # WHEN a request arrives from zero
        resp = httpx.post(f"{gw.endpoint}/v1/intent", json={"text": "I want a refund for my order"},
                          timeout=60)
        # THEN a restored environment answers locally with the model's intent
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["intent"] == "refund_request" and body["degraded"] is False
        assert resp.headers["x-warmstart-path"] == "local"
        [env] = emu.environments("agent")
        assert env["init_type"] == "snap-start" and env["restore_duration_ms"] > 0
        assert env["restore_duration_ms"] < emu.snapshot_init_ms("agent")
        # a warm ping by direct invoke is answered by the toolkit on that environment
        ping = emu.invoke("agent", json.dumps({"warmstart": {"ping": True}}).encode(), qualifier="live")
        pong = json.loads(ping.payload)["warmstart"]
        assert pong["pong"] is True and pong["init_type"] == "snap-start"
        assert ping.environment_id == env["id"]
    finally:
        gw.stop()
