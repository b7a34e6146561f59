from __future__ import annotations

import json
import logging
import subprocess
import sys

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


def test_reads_with_ttl_cache(ssm):
    ssm.put_parameter(Name="/warmstart/agent/degradation-level", Value="L2", Type="String")
    clock = Clock()
    reader = DegradationLevelReader("/warmstart/agent/degradation-level", client=ssm,
                                    clock=clock, ttl_s=5)
    assert reader() == "L2" and reader.reads == 1
    ssm.put_parameter(Name="/warmstart/agent/degradation-level", Value="L3", Type="String",
                      Overwrite=True)
    clock.t = 4.9
    assert reader() == "L2" and reader.reads == 1  # cached
    clock.t = 5.0
    assert reader() == "L3" and reader.reads == 2


def test_failures_keep_last_level_and_log_once(ssm, caplog):
    clock = Clock()
    reader = DegradationLevelReader("/missing", default_level="L1", client=ssm, clock=clock,
                                    ttl_s=1)
    with caplog.at_level(logging.WARNING, logger="warmstart.runtime"):
        assert reader() == "L1"
        clock.t = 2
        assert reader() == "L1"
    tags = [json.loads(r.getMessage())["tag"] for r in caplog.records]
    assert tags == ["tool_unavailable"]


def test_invalid_value_is_ignored(ssm, caplog):
    ssm.put_parameter(Name="/p", Value="L9", Type="String")
    reader = DegradationLevelReader("/p", client=ssm, clock=Clock())
    with caplog.at_level(logging.WARNING, logger="warmstart.runtime"):
        assert reader() == "L0"
    assert json.loads(caplog.records[0].getMessage())["tag"] == "bad_request"


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
