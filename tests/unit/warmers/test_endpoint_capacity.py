"""What serves now, read off SageMaker's describe answers (``endpoint_state.capacity_from_describe``):
the shapes of DescribeEndpoint / DescribeInferenceComponent documented in the SageMaker API
reference; a capacity stuck at provisioning stays ``provisioning`` (the handlers degrade)."""

from __future__ import annotations

import pytest

from warmers.endpoint_state import EndpointCapacity, capacity_from_describe
from warmers.plan.endpoint import EndpointPolicy

VARIANT = EndpointPolicy("gpu", ("a:live",))
COMPONENT = EndpointPolicy("gpu", ("a:live",), target="inference_component",
                           inference_component="ic")


def endpoint(status: str, current: int | None, desired: int | None,
             variant: str = "AllTraffic") -> dict[str, object]:
    row: dict[str, object] = {"VariantName": variant}
    if current is not None:
        row["CurrentInstanceCount"] = current
    if desired is not None:
        row["DesiredInstanceCount"] = desired
    return {"EndpointName": "gpu", "EndpointStatus": status, "ProductionVariants": [row]}


@pytest.mark.parametrize(("answer", "expected"), [
    (endpoint("InService", 2, 2), (2, "in_service")),
    (endpoint("Updating", 1, 3), (1, "in_service")),  # scaling out: 1 answers meanwhile
    (endpoint("Creating", None, None), (0, "provisioning")),
    ({"EndpointName": "gpu", "EndpointStatus": "Creating"}, (0, "provisioning")),
    (endpoint("Updating", 0, 1), (0, "provisioning")),
    (endpoint("Failed", 1, 1), (0, "zero")),
    (endpoint("OutOfService", 1, 1), (0, "zero")),
    (endpoint("InService", 1, 1, variant="Other"), (0, "unknown")),
])
def test_a_variant_serves_what_its_current_instances_are(answer: dict[str, object],
                                                          expected: tuple[int, str]) -> None:
    got = capacity_from_describe(answer, VARIANT, 10.0)
    assert (got.capacity, got.state) == expected and got.at_s == 10.0


@pytest.mark.parametrize(("status", "current", "desired", "expected"), [
    ("InService", 2, 2, (2, "in_service")),
    ("InService", 0, 0, (0, "zero")),
    ("Updating", 0, 1, (0, "provisioning")),  # from zero: minutes until the first copy
    ("Failed", 0, 1, (0, "zero")),
])
def test_an_inference_component_serves_its_current_copies(status: str, current: int,
                                                           desired: int,
                                                           expected: tuple[int, str]) -> None:
    answer = {"InferenceComponentName": "ic", "InferenceComponentStatus": status,
              "RuntimeConfig": {"CurrentCopyCount": current, "DesiredCopyCount": desired}}
    got = capacity_from_describe(answer, COMPONENT, 0.0)
    assert (got.capacity, got.state) == expected


def test_the_published_json_is_what_the_handlers_parse() -> None:
    from functions.runtime.overflow_capacity import OverflowCapacity

    state = EndpointCapacity(2, "provisioning", 5.0)
    assert OverflowCapacity.parse(state.to_json()) == OverflowCapacity(2, "provisioning", 5.0)
    assert EndpointPolicy("gpu", ("a:live",)).resource_id == "endpoint/gpu/variant/AllTraffic"
    assert COMPONENT.resource_id == "inference-component/ic"
    assert COMPONENT.scalable_dimension == "sagemaker:inference-component:DesiredCopyCount"
