"""The overflow endpoint's published capacity, handler side (`functions.runtime.overflow_capacity`).

The parameter is read through the real boto3 SSM client against moto; the in-process handler
tests reuse test_agent's "orders" agent and its real HTTP SageMaker stand-in, so an overflow
that happens is a real call and one that does not is a request the stand-in never saw.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from functions.runtime.overflow_capacity import (
    UNKNOWN,
    OverflowCapacity,
    OverflowCapacityReader,
)
from tests.unit.agent.conftest import headers_of
from tests.unit.runtime.test_agent import (  # noqa: F401 - fixtures used by name
    ENDPOINT,
    Built,
    SageMakerStandIn,
    _credentials,
    built,
    call,
    endpoint,
    env_for,
    orders_agent,
    sagemaker,
)

PARAMETER = "/warmstart/orders/overflow-capacity"


@pytest.mark.parametrize(("raw", "available"), [
    ('{"capacity": 2, "state": "in_service", "at": 1800000000}', True),
    ('{"capacity": 0, "state": "in_service", "at": 1}', False),
    ('{"capacity": 1, "state": "provisioning", "at": 1}', False),
    ('{"capacity": 0, "state": "zero", "at": null}', False),
    ('{"capacity": 3, "state": "unknown", "at": 1}', False),
])
def test_only_an_in_service_endpoint_with_capacity_is_available(raw: str, available: bool) -> None:
    assert OverflowCapacity.parse(raw).available is available


@pytest.mark.parametrize(("raw", "message"), [
    ("in_service", "not JSON"),
    ("[1]", "not a JSON object"),
    ('{"capacity": -1, "state": "zero"}', "capacity must be an integer >= 0"),
    ('{"capacity": true, "state": "zero"}', "capacity must be an integer >= 0"),
    ('{"capacity": 1.5, "state": "zero"}', "capacity must be an integer >= 0"),
    ('{"capacity": 1, "state": "warm"}', "state must be one of"),
    ('{"capacity": 1, "state": "zero", "at": "now"}', "at must be epoch seconds"),
])
def test_a_malformed_value_is_refused_with_its_reason(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OverflowCapacity.parse(raw)


@pytest.fixture
def ssm() -> Iterator[object]:
    with mock_aws():
        yield boto3.client("ssm", region_name="us-east-1")


def test_the_reader_keeps_the_last_capacity_when_the_parameter_goes_bad(ssm: object) -> None:
    clock = [0.0]
    reader = OverflowCapacityReader(PARAMETER, client=ssm, ttl_s=60.0, clock=lambda: clock[0])
    # GIVEN no parameter yet THEN unknown: overflow is not tried
    assert reader.refresh() == UNKNOWN and not reader.available()
    ssm.put_parameter(Name=PARAMETER, Type="String", Overwrite=True,  # type: ignore[attr-defined]
                      Value='{"capacity": 1, "state": "in_service", "at": 5}')
    assert reader.refresh() == OverflowCapacity(1, "in_service", 5.0) and reader.available()
    # WHEN the parameter holds something unusable THEN the last capacity stays in force
    ssm.put_parameter(Name=PARAMETER, Type="String", Overwrite=True,  # type: ignore[attr-defined]
                      Value="lots")
    assert reader.refresh() == OverflowCapacity(1, "in_service", 5.0)
    assert reader.reads == 3


def _published(ssm: object, state: str, capacity: int) -> None:
    ssm.put_parameter(Name=PARAMETER, Type="String", Overwrite=True,  # type: ignore[attr-defined]
                      Value=json.dumps({"capacity": capacity, "state": state, "at": 1.0}))


@pytest.mark.parametrize(("state", "capacity", "path"), [
    ("in_service", 1, "overflow"),
    ("zero", 0, "degraded"),
    ("provisioning", 0, "degraded"),
    ("unknown", 2, "degraded"),
])
def test_a_cold_request_overflows_only_while_the_endpoint_is_in_service(
    ssm: object, built: Built, endpoint: SageMakerStandIn,  # noqa: F811 - the imported fixtures
    state: str, capacity: int, path: str,
) -> None:
    """GIVEN a cold start whose model cannot be ready within the SLA, a real overflow endpoint,
    and the warmer's published capacity WHEN a model request arrives THEN it overflows when
    the endpoint is in service, and is degraded (the endpoint never called) at zero capacity,
    while provisioning, or when the capacity is unknown."""
    _published(ssm, state, capacity)
    agent = orders_agent(built.gate(), stage_p95_ms={"model": 10_000.0})
    handler, _ = built.handler(agent, env_for(
        WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
        WARMSTART_OVERFLOW_ENDPOINT_URL=endpoint.server.url,
        WARMSTART_OVERFLOW_CAPACITY_PARAMETER=PARAMETER))
    assert handler.preload.wait("overflow", 30) and handler.preload.wait("web", 30)
    assert handler.capacity_reader is not None and handler.capacity_reader.reads == 1
    response = call(handler, "POST", "/v1/status", {"order_id": "B-2"})
    assert response["statusCode"] == 200, response
    assert headers_of(response)["x-warmstart-path"] == path
    assert len(endpoint.requests) == (1 if path == "overflow" else 0)


def test_while_the_first_read_runs_overflow_is_tried_and_after_it_the_state_decides(
    ssm: object,
) -> None:
    """A new environment's first read runs on the preload thread; a cold start's request that
    comes before it is done must not be degraded for want of a read (the endpoint's own answer
    decides then), and once it is done the published state does."""
    import threading

    _published(ssm, "zero", 0)
    entered, release = threading.Event(), threading.Event()

    def hold(**_: object) -> None:  # the real moto call, held until released
        entered.set()
        assert release.wait(10)

    ssm.meta.events.register("before-call.ssm.GetParameter", hold)  # type: ignore[attr-defined]
    reader = OverflowCapacityReader(PARAMETER, client=ssm, ttl_s=60.0)
    assert not reader.first_read_pending
    first = threading.Thread(target=reader.refresh)
    first.start()
    assert entered.wait(10)
    # GIVEN the first read in flight THEN overflow may be tried, without waiting for SSM
    assert reader.first_read_pending and reader.available()
    release.set()
    first.join(10)
    # WHEN it is done THEN the published zero capacity decides: no overflow
    assert not reader.first_read_pending and not reader.available()
    # a first read that fails leaves the default, unknown, in force: no overflow either
    broken = OverflowCapacityReader("/warmstart/no/such-parameter", client=ssm, ttl_s=60.0)
    broken.refresh()
    assert not broken.first_read_pending and not broken.available()


def test_a_reader_that_never_read_starts_its_read_in_the_background_and_does_not_wait(
    ssm: object,
) -> None:
    """Before the preload's first read has even started, a request's check must neither block
    on SSM nor count the endpoint as unavailable: it starts the read on a daemon thread."""
    _published(ssm, "provisioning", 0)
    reader = OverflowCapacityReader(PARAMETER, client=ssm, ttl_s=60.0)
    assert not reader.read_once and reader.available()  # not read yet: overflow is tried
    assert reader.wait_refresh(10) and reader.read_once and reader.reads == 1
    assert not reader.available()  # the published state decides from now on
    assert not OverflowCapacityReader(None).available()  # no parameter: never


def test_a_cold_request_during_the_first_capacity_read_tries_overflow(
    ssm: object, built: Built, endpoint: SageMakerStandIn,  # noqa: F811 - the imported fixtures
) -> None:
    """GIVEN the warmer published no capacity (zero) but this new environment's first read is
    still running WHEN the cold start's request arrives THEN overflow is tried (the real HTTP
    stand-in is called and, knowing nothing of capacity, answers), not degraded unseen."""
    import threading

    _published(ssm, "zero", 0)
    release, entered = threading.Event(), threading.Event()

    def hold(**_: object) -> None:  # the handler's real (moto) SSM call, held until released
        entered.set()
        release.wait(10)

    # the handler makes its SSM client from boto3's default session: the hook goes there
    events = boto3._get_default_session().events  # type: ignore[attr-defined]
    events.register("before-call.ssm.GetParameter", hold)
    agent = orders_agent(built.gate(), stage_p95_ms={"model": 10_000.0})
    handler, _ = built.handler(agent, env_for(
        WARMSTART_OVERFLOW_ENDPOINT_NAME=ENDPOINT,
        WARMSTART_OVERFLOW_ENDPOINT_URL=endpoint.server.url,
        WARMSTART_OVERFLOW_CAPACITY_PARAMETER=PARAMETER))
    try:
        # the preload thread is in the capacity's first read (boto3): the overflow client
        # (awscrt) was made before it, so no request waits on boto3's import to overflow
        assert entered.wait(10)
        assert handler.overflow is not None and handler.overflow.client_ready
        response = call(handler, "POST", "/v1/status", {"order_id": "B-3"})
        assert response["statusCode"] == 200, response
        assert headers_of(response)["x-warmstart-path"] == "overflow"
        assert handler.capacity_reader is not None and not handler.capacity_reader.read_once
        assert len(endpoint.requests) == 1
    finally:
        release.set()
        events.unregister("before-call.ssm.GetParameter", hold)
    assert handler.preload.wait("overflow", 30) and handler.capacity_reader.read_once
    assert not handler.capacity_reader.available()  # read: zero capacity decides from now on
