from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
import uuid

import boto3
import pytest
from moto import mock_aws

from functions.runtime.degradation_level import DegradationLevelReader


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def ssm():
    with mock_aws():
        yield boto3.client("ssm", region_name="us-east-1")


def test_refresh_reads_and_level_serves_the_cache(ssm):
    ssm.put_parameter(Name="/warmstart/agent/degradation-level", Value="L2", Type="String")
    clock = Clock()
    reader = DegradationLevelReader("/warmstart/agent/degradation-level", client=ssm,
                                    clock=clock, ttl_s=5)
    assert reader.refresh() == "L2" and reader.reads == 1
    ssm.put_parameter(Name="/warmstart/agent/degradation-level", Value="L3", Type="String",
                      Overwrite=True)
    clock.t = 4.9
    assert reader() == "L2" and reader.reads == 1 and not reader.refreshing  # cached
    clock.t = 5.0
    # expired: this call still answers the cached level and refreshes in the background
    assert reader() == "L2"
    assert reader.wait_refresh(5.0)
    assert reader.reads == 2 and reader() == "L3"


def test_a_reader_that_never_read_makes_its_first_read_synchronously(ssm):
    # (a one-off probe; the handler makes this read on its preload thread with refresh())
    ssm.put_parameter(Name="/p0", Value="L1", Type="String")
    reader = DegradationLevelReader("/p0", client=ssm, clock=Clock())
    assert reader() == "L1" and reader.reads == 1 and not reader.refreshing


def test_failures_keep_last_level_and_log_once(ssm, caplog):
    clock = Clock()
    reader = DegradationLevelReader("/missing", default_level="L1", client=ssm, clock=clock,
                                    ttl_s=1)
    with caplog.at_level(logging.WARNING, logger="warmstart.runtime"):
        assert reader.refresh() == "L1"
        clock.t = 2
        assert reader() == "L1"
        assert reader.wait_refresh(5.0) and reader.reads == 2
        assert reader() == "L1"
    tags = [json.loads(r.getMessage())["tag"] for r in caplog.records]
    assert tags == ["tool_unavailable"]


def test_invalid_value_is_ignored(ssm, caplog):
    ssm.put_parameter(Name="/p", Value="L9", Type="String")
    reader = DegradationLevelReader("/p", client=ssm, clock=Clock())
    with caplog.at_level(logging.WARNING, logger="warmstart.runtime"):
        assert reader.refresh() == "L0"
    assert json.loads(caplog.records[0].getMessage())["tag"] == "bad_request"


# -- a real moto server over HTTP, and SSM endpoints that stall or refuse -----------------


@pytest.fixture(scope="module")
def moto_url():
    """A real moto server (SSM over HTTP) on an ephemeral port, stopped after the module."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def stalled_url():
    """An endpoint that accepts TCP connections and never answers (a stalled SSM)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _client(url: str, timeout_s: float = 0.5):
    from botocore.config import Config

    return boto3.client(
        "ssm", region_name="us-east-1", endpoint_url=url, aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(connect_timeout=timeout_s, read_timeout=timeout_s,
                      retries={"total_max_attempts": 1, "mode": "standard"}))


def test_refresh_through_a_real_moto_server(moto_url):
    ssm = _client(moto_url)
    name = f"/warmstart/{uuid.uuid4().hex[:8]}/degradation-level"
    ssm.put_parameter(Name=name, Value="L2", Type="String")
    clock = Clock()
    reader = DegradationLevelReader(name, client=_client(moto_url), clock=clock, ttl_s=5)
    assert reader.refresh() == "L2"
    ssm.put_parameter(Name=name, Value="L1", Type="String", Overwrite=True)
    clock.t = 6.0
    assert reader() == "L2" and reader.wait_refresh(5.0) and reader() == "L1"


def test_a_stalled_ssm_never_blocks_level_and_keeps_the_last_level(moto_url, stalled_url,
                                                                   caplog):
    """GIVEN a level read from SSM, WHEN SSM stalls (accepts, never answers), THEN every
    level() call returns the last level without waiting for the read (the refresh runs on its
    thread until the client's timeout), and the failure is logged once per streak."""
    name = f"/warmstart/{uuid.uuid4().hex[:8]}/degradation-level"
    _client(moto_url).put_parameter(Name=name, Value="L2", Type="String")
    clients = iter([_client(moto_url), _client(stalled_url)])
    clock = Clock()
    reader = DegradationLevelReader(name, clock=clock, ttl_s=1,
                                    client_factory=lambda: next(clients))
    assert reader.refresh() == "L2"
    reader._client = None  # the next read makes the stalled client (SSM went away)
    clock.t = 2.0
    with caplog.at_level(logging.WARNING, logger="warmstart.runtime"):
        calls = []
        for _ in range(50):
            t0 = time.perf_counter()
            calls.append((reader(), time.perf_counter() - t0))
        assert reader.refreshing  # the stalled read is still going on its thread
        assert {lvl for lvl, _ in calls} == {"L2"}
        # never blocked on the 0.5 s read: each call is far below the client's timeout
        assert max(dt for _, dt in calls) < 0.25
        assert reader.wait_refresh(5.0)
        clock.t = 4.0  # the next expiry retries (still stalled): no second log line
        assert reader() == "L2" and reader.wait_refresh(5.0) and reader() == "L2"
    assert reader.reads == 3
    tags = [json.loads(r.getMessage())["tag"] for r in caplog.records
            if r.name == "warmstart.runtime"]
    assert tags == ["tool_unavailable"]


def test_an_unreachable_ssm_keeps_the_static_level(caplog):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there: connection refused
    reader = DegradationLevelReader("/p", default_level="L1", client=_client(f"http://127.0.0.1:{port}"),
                                    clock=Clock())
    with caplog.at_level(logging.WARNING, logger="warmstart.runtime"):
        assert reader.refresh() == "L1"
        reader._read_at = -10.0  # expired: the next call refreshes in the background
        assert reader() == "L1" and reader.wait_refresh(5.0) and reader() == "L1"
    assert reader.reads == 2
    assert [json.loads(r.getMessage())["tag"] for r in caplog.records
            if r.name == "warmstart.runtime"] == ["tool_unavailable"]


def test_no_parameter_means_static_level_and_bad_args():
    assert DegradationLevelReader(None, default_level="L3")() == "L3"
    with pytest.raises(ValueError):
        DegradationLevelReader(None, default_level="L7")
    with pytest.raises(ValueError, match="ttl_s"):
        DegradationLevelReader(None, ttl_s=-1)


def test_import_is_stdlib_only():
    code = ("import sys, functions.runtime.degradation_level; "
            "print(any(m.split('.')[0] in ('boto3','botocore','numpy') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_snapshot_hooks_drop_the_client_and_expire_the_level_without_blocking(ssm):
    # GIVEN a reader that has read L1 with its own client (as at the end of a SnapStart init)
    ssm.put_parameter(Name="/snap", Value="L1", Type="String")
    made: list[object] = []

    def factory():
        client = boto3.client("ssm", region_name="us-east-1")
        made.append(client)
        return client

    clock = Clock()
    reader = DegradationLevelReader("/snap", client_factory=factory, clock=clock, ttl_s=5)
    assert reader.refresh() == "L1" and len(made) == 1
    # WHEN the before-snapshot hook runs, then the level changes while the snapshot is stored
    reader.close()
    ssm.put_parameter(Name="/snap", Value="L3", Type="String", Overwrite=True)
    # AND the after-restore hook runs well within the TTL of the snapshot-time read
    reader.expire()
    # THEN the first request after the restore is answered at once with the cached level
    assert reader() == "L1"
    # AND a background refresh reads the new level through a NEW client
    assert reader.wait_refresh(5.0)
    assert reader() == "L3" and len(made) == 2 and made[0] is not made[1]
