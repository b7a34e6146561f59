"""WarmerSchedule: the local stack's timer for the warmer, on a fake clock against moto."""

from __future__ import annotations

import datetime as dt
import threading
import time

import boto3
import pytest
from moto import mock_aws

from warmers.config import WarmerConfig
from warmers.runner import WarmerClients
from warmers.schedule import WarmerSchedule

END = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t
        self.lock = threading.Lock()

    def time(self) -> float:
        with self.lock:
            return self.t

    def advance(self, s: float) -> None:
        with self.lock:
            self.t += s


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


@pytest.fixture
def clients():
    with mock_aws():
        yield WarmerClients(cloudwatch=boto3.client("cloudwatch", region_name="us-east-1"),
                            lambda_=boto3.client("lambda", region_name="us-east-1"),
                            application_autoscaling=boto3.client("application-autoscaling",
                                                                 region_name="us-east-1"),
                            ssm=boto3.client("ssm", region_name="us-east-1"))


def test_runs_every_period_of_the_given_clock(clients):
    dims = [{"Name": "FunctionName", "Value": "agent"}, {"Name": "Resource", "Value": "agent:live"}]
    clients.cloudwatch.put_metric_data(Namespace="AWS/Lambda", MetricData=[
        {"MetricName": "ConcurrentExecutions", "Dimensions": dims,
         "Timestamp": END - dt.timedelta(minutes=m), "Value": float(4 + m % 2)}
        for m in range(1, 601)])
    config = WarmerConfig.from_dict({"aliases": [{"function_name": "agent", "alias": "live"}],
                                     "history_days": 0.5, "unreserved_concurrency": 500})
    clock = FakeClock(END.timestamp())
    schedule = WarmerSchedule(config, clients, clock_time=clock.time, period_s=60, poll_s=0.01)
    schedule.start()
    try:
        _wait(lambda: schedule.runs == 1)
        time.sleep(0.1)
        assert schedule.runs == 1  # the clock has not moved: no second run
        clock.advance(60)
        _wait(lambda: schedule.runs == 2)
    finally:
        schedule.stop()
    plan = schedule.last_plans[0]
    assert schedule.errors == 0 and plan.action == "provisioned"
    assert 5 <= plan.provisioned_concurrency <= 6
    target = clients.application_autoscaling.describe_scalable_targets(
        ServiceNamespace="lambda", ResourceIds=["function:agent:live"])["ScalableTargets"]
    assert target[0]["MinCapacity"] == plan.provisioned_concurrency
    with pytest.raises(ValueError):
        WarmerSchedule(config, clients, clock_time=clock.time, period_s=0)
