"""What the GPU overflow endpoint serves, as the warmer publishes it to the handlers
(``WARMSTART_OVERFLOW_CAPACITY_PARAMETER``): the :class:`EndpointCapacity` record and how it is
read off SageMaker's describe answers. Pure: no I/O (the actuators in ``warmers.actuators``
make the calls).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from warmers.plan.endpoint import EndpointPolicy

CapacityState = Literal["in_service", "provisioning", "zero", "unknown"]


#: endpoint statuses in which in-service instances answer
#: (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeEndpoint.html)
SERVING_STATUSES = frozenset({"InService", "Updating", "SystemUpdating", "RollingBack",
                              "UpdateRollbackFailed"})


NOT_SERVING_STATUSES = frozenset({"OutOfService", "Deleting", "Failed"})


@dataclass(frozen=True)
class EndpointCapacity:
    """The endpoint's capacity as the handlers read it (``WARMSTART_OVERFLOW_CAPACITY_PARAMETER``).

    Attributes
    ----------
    capacity : int
        Instances (variant) or copies (inference component) answering now; with ``unknown``,
        the last capacity the warmer knew of.
    state : {"in_service", "provisioning", "zero", "unknown"}
        ``in_service``: at least one instance answers; ``provisioning``: capacity asked for,
        none in service yet (minutes); ``zero``: none asked for, or the endpoint does not
        serve; ``unknown``: the scaling or describe call failed this run.
    at_s : float
        Epoch seconds since the state holds.
    """

    capacity: int
    state: CapacityState
    at_s: float

    def to_json(self) -> str:
        """``{"capacity": n, "state": "...", "at": epoch_s}`` (what the handlers parse)."""
        return json.dumps({"capacity": self.capacity, "state": self.state, "at": self.at_s},
                          separators=(",", ":"))


def capacity_from_describe(response: dict[str, Any], policy: EndpointPolicy,
                           now_s: float) -> EndpointCapacity:
    """Read the capacity answering now from ``DescribeEndpoint`` (variant) or
    ``DescribeInferenceComponent`` (inference component).

    Parameters
    ----------
    response : dict
        The describe call's answer.
    policy : EndpointPolicy
    now_s : float

    Returns
    -------
    EndpointCapacity
        ``in_service`` with the current count when at least one instance (copy) serves,
        ``provisioning`` when some are asked for and none serves yet, else ``zero``;
        ``unknown`` when the variant is not in the answer.

    References
    ----------
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeEndpoint.html
    (``ProductionVariants[].CurrentInstanceCount``, ``DesiredInstanceCount``),
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeInferenceComponent.html
    (``RuntimeConfig.CurrentCopyCount``, ``DesiredCopyCount``).
    """
    if policy.target == "inference_component":
        runtime = response.get("RuntimeConfig") or {}
        status = str(response.get("InferenceComponentStatus", ""))
        current = int(runtime.get("CurrentCopyCount") or 0)
        desired = int(runtime.get("DesiredCopyCount") or 0)
    else:
        status = str(response.get("EndpointStatus", ""))
        rows = [v for v in response.get("ProductionVariants") or ()
                if v.get("VariantName") == policy.variant_name]
        if not rows and status != "Creating":
            return EndpointCapacity(0, "unknown", now_s)
        row = rows[0] if rows else {}
        current = int(row.get("CurrentInstanceCount") or 0)
        desired = int(row.get("DesiredInstanceCount") or 0)
    if status in NOT_SERVING_STATUSES:
        return EndpointCapacity(0, "zero", now_s)
    if current >= 1 and (status in SERVING_STATUSES or policy.target == "inference_component"):
        return EndpointCapacity(current, "in_service", now_s)
    if desired >= 1 or status == "Creating":
        return EndpointCapacity(0, "provisioning", now_s)
    return EndpointCapacity(0, "zero", now_s)


def since(last: EndpointCapacity | None, new: EndpointCapacity) -> EndpointCapacity:
    """``last`` when nothing changed (its ``at_s`` says since when), else ``new``."""
    if last is not None and (last.capacity, last.state) == (new.capacity, new.state):
        return last
    return new


def desired_capacity(described: dict[str, Any], policy: EndpointPolicy) -> int:
    """The capacity asked for now, from a describe answer."""
    if policy.target == "inference_component":
        return int((described.get("RuntimeConfig") or {}).get("DesiredCopyCount") or 0)
    rows = [v for v in described.get("ProductionVariants") or ()
            if v.get("VariantName") == policy.variant_name]
    row = rows[0] if rows else {}
    return int(row.get("DesiredInstanceCount", row.get("CurrentInstanceCount")) or 0)


def unknown_since(last: EndpointCapacity | None, now_s: float) -> EndpointCapacity:
    """What is published when this run could not set or read the capacity: the last capacity
    known (else 0) in the state ``unknown``, so the handlers degrade rather than overflow."""
    return since(last, EndpointCapacity(last.capacity if last is not None else 0, "unknown",
                                        now_s))
