"""The local stack's GPU endpoint with planned capacity: an inference component whose copies
the warmer sets, as the deployed warmer sets the endpoint's capacity.

The deployed warmer registers the planned capacity with Application Auto Scaling
(``warmers.actuators.EndpointCapacityActuator``), which sets the endpoint's capacity; moto's
Application Auto Scaling has no ``sagemaker:inference-component:DesiredCopyCount`` dimension,
so the local warmer sets the copy count with SageMaker's own API
(``warmers.actuators.SageMakerCapacityActuator``, ``"endpoint_actuator": "sagemaker"``), as it
sets provisioned concurrency with Lambda's own API. The GPU endpoint server (``python -m
functions.gpu_endpoint --inference-component NAME``) answers those SageMaker calls with the
real boto3 ``sagemaker`` client (:func:`sagemaker_client`), brings a scale-out into service
``provisioning_delay_s`` after it is asked for, serves ``copies x
concurrent_requests_per_copy`` requests at once (more wait), refuses invocations while no copy
serves, and bills copy-seconds from the scale-out request until the scale-in
(``GET /_capacity``, :func:`read_capacity`). The warmer publishes what serves to the SSM
parameter the handlers read (``WARMSTART_OVERFLOW_CAPACITY_PARAMETER``), created first with
:data:`INITIAL_CAPACITY` (:func:`create_capacity_parameter`).

:class:`PlannedEndpoint` holds the settings and writes the warmer's ``endpoints`` entry
(:meth:`PlannedEndpoint.warmer_entry`, a ``warmers.plan.endpoint.EndpointPolicy``).

References
----------
https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html
(inference components scale to zero; provisioning "takes several minutes", and invocations fail
meanwhile),
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateInferenceComponentRuntimeConfig.html
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.runtime.contract.warmer_document import DEFAULT_FAILED_ANSWER_USD

DEFAULT_INFERENCE_COMPONENT = "warmstart-local-overflow"
DEFAULT_CAPACITY_PARAMETER = "/warmstart/local/overflow-capacity"
#: What the handlers read before the warmer's first run (as the deployed construct creates it).
INITIAL_CAPACITY = '{"capacity":0,"state":"unknown","at":null}'
#: SageMaker provisioning of a copy from zero, s ("several minutes"; the simulator's default,
#: ``warmers.simulator.endpoint.PROVISIONING_DELAY_S``).
PROVISIONING_DELAY_S = 600.0


@dataclass(frozen=True)
class PlannedEndpoint:
    """The local GPU endpoint as an inference component whose copies the warmer plans.

    Parameters
    ----------
    inference_component : str
        The component's name (``InferenceComponentName``).
    concurrent_requests_per_copy : int
        Requests one copy answers at once (more wait in a FIFO queue); the planner's
        ``EndpointPolicy.concurrent_requests_per_instance`` too.
    provisioning_delay_s : float
        Clock seconds from a scale-out request to the copies in service (the server runs in
        real time: divide by the stack's time scale, :meth:`real_delay_s`).
    floor, cap : int
        Copies the warmer may plan (``EndpointPolicy``; an inference component can hold 0).
    budget_usd_per_hour : float
    failed_answer_usd : float or None
        The planner's value of a failed answer, USD (default the planner's
        ``DEFAULT_FAILED_ANSWER_USD``; None: not priced).
    instance_type : str
        Priced from ``warmers/prices.json``.
    capacity_parameter : str
        SSM parameter the warmer publishes the capacity to and the handlers read.
    environment_idle_min : int
        ``EndpointPolicy.environment_idle_min``.

    Raises
    ------
    ValueError
        For an empty name or parameter, a per-copy concurrency < 1, a negative delay, floor or
        budget, or floor > cap.
    """

    inference_component: str = DEFAULT_INFERENCE_COMPONENT
    concurrent_requests_per_copy: int = 4
    provisioning_delay_s: float = PROVISIONING_DELAY_S
    floor: int = 0
    cap: int = 2
    budget_usd_per_hour: float = 5.0
    failed_answer_usd: float | None = DEFAULT_FAILED_ANSWER_USD
    instance_type: str = "ml.g6.xlarge"
    capacity_parameter: str = DEFAULT_CAPACITY_PARAMETER
    environment_idle_min: int = 5

    def __post_init__(self) -> None:
        if not self.inference_component or not self.capacity_parameter:
            raise ValueError("inference_component and capacity_parameter must be non-empty")
        if self.concurrent_requests_per_copy < 1:
            raise ValueError("concurrent_requests_per_copy must be >= 1, got "
                             f"{self.concurrent_requests_per_copy}")
        if not self.provisioning_delay_s >= 0 or self.floor < 0 or self.budget_usd_per_hour < 0:
            raise ValueError("provisioning_delay_s, floor and budget_usd_per_hour must be >= 0")
        if self.floor > self.cap:
            raise ValueError(f"floor {self.floor} > cap {self.cap}")

    def real_delay_s(self, time_scale: float) -> float:
        """The provisioning delay in real seconds at ``time_scale`` (clock s per real s)."""
        return self.provisioning_delay_s / time_scale

    def warmer_entry(self, endpoint_name: str, agents: Collection[str]) -> dict[str, Any]:
        """The warmer document's ``endpoints`` entry (``warmers.config``; an ``EndpointPolicy``).

        Parameters
        ----------
        endpoint_name : str
        agents : collection of str
            ``FUNCTION:ALIAS`` of the agents that overflow to it (managed aliases).
        """
        return {"endpoint_name": endpoint_name, "agents": sorted(agents),
                "target": "inference_component", "inference_component": self.inference_component,
                "instance_type": self.instance_type, "floor": self.floor, "cap": self.cap,
                "budget_usd_per_hour": self.budget_usd_per_hour,
                "concurrent_requests_per_instance": self.concurrent_requests_per_copy,
                "environment_idle_min": self.environment_idle_min,
                "failed_answer_usd": self.failed_answer_usd,
                "capacity_parameter": self.capacity_parameter}


def sagemaker_client(url: str, region: str) -> Any:
    """The real boto3 ``sagemaker`` (control plane) client pointed at the local GPU endpoint
    server, with botocore's standard retries (``warmers.config.boto_config``)."""
    import boto3

    from warmers.config import boto_config

    return boto3.client("sagemaker", endpoint_url=url, region_name=region,
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=boto_config())


def read_capacity(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """``GET {url}/_capacity`` of the GPU endpoint server: copies desired and in service, the
    billed copy-seconds and the history of changes.

    Raises
    ------
    OSError
        When the server does not answer (``urllib.error.URLError`` is one).
    ValueError
        When the answer is not a JSON object.
    """
    with urllib.request.urlopen(f"{url}/_capacity", timeout=timeout_s) as resp:
        doc = json.loads(resp.read())
    if not isinstance(doc, dict):
        raise ValueError(f"{url}/_capacity did not answer a JSON object")  # noqa: TRY004
    return doc


def create_capacity_parameter(ssm: Any, planned: PlannedEndpoint) -> bool:
    """Create the capacity parameter with :data:`INITIAL_CAPACITY` unless it exists (the
    deployed construct creates it so; the handlers degrade until the warmer's first run).

    Returns
    -------
    bool
        True when created.

    Raises
    ------
    botocore.exceptions.ClientError
        When SSM refuses for another reason.
    """
    try:
        ssm.put_parameter(Name=planned.capacity_parameter, Value=INITIAL_CAPACITY,
                          Type="String", Overwrite=False)
    except ssm.exceptions.ParameterAlreadyExists:
        return False
    return True


def planned_endpoint_from_cdk_json(cdk_json: Path) -> tuple[PlannedEndpoint, Any, str]:
    """The ``on`` run's GPU endpoint (``warmstart demo``, ``warmstart replay --endpoint
    planned``): an inference component whose copies the warmer plans (:class:`PlannedEndpoint`)
    with ``gpu_endpoint.capacity`` of cdk.json where it says (``floor``, ``cap``,
    ``budget_usd_per_hour``, ``concurrent_requests_per_instance``, ``failed_answer_usd``,
    ``environment_idle_min``), else the planner's defaults, requests per copy as ``warmstart
    calibrate`` measured them for the simulator (``warmers/simulator/calibration.json``), and
    the simulator's provisioning delay.

    Returns
    -------
    (PlannedEndpoint, warmers.simulator.endpoint.EndpointModel, str)
        The endpoint to run; the same endpoint as the simulator models it (for the slice rule of
        ``infra.replay.pick``); one sentence saying what it is and where its numbers come from.

    Raises
    ------
    ValueError
        If cdk.json cannot be read or its capacity options are invalid.
    """
    from infra.config import StackConfigError, load_config
    from warmers.plan.endpoint import EndpointPolicy
    from warmers.simulator.calibration import load_calibration
    from warmers.simulator.endpoint import EndpointModel

    try:
        gpu = load_config(cdk_json, strategy="provisioned").gpu_endpoint
    except StackConfigError as exc:
        raise ValueError(f"{cdk_json}: {exc}") from exc
    options = dict(gpu.options.get("capacity") or {})
    defaults = EndpointPolicy("overflow", ("demo:live",))
    measured = load_calibration().endpoint_concurrency
    configured = options.get("concurrent_requests_per_instance")
    per_copy = configured if configured is not None else (
        measured or defaults.concurrent_requests_per_instance)
    try:
        if isinstance(per_copy, bool) or not isinstance(per_copy, int):
            raise TypeError(f"concurrent_requests_per_instance must be an integer, got "
                            f"{per_copy!r}")
        planned = PlannedEndpoint(
            concurrent_requests_per_copy=per_copy,
            floor=int(options.get("floor", 0)), cap=int(options.get("cap", defaults.cap)),
            budget_usd_per_hour=float(options.get("budget_usd_per_hour",
                                                  defaults.budget_usd_per_hour)),
            failed_answer_usd=options.get("failed_answer_usd", DEFAULT_FAILED_ANSWER_USD),
            environment_idle_min=int(options.get("environment_idle_min",
                                                 defaults.environment_idle_min)),
            instance_type=gpu.instance_type)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{cdk_json}: gpu_endpoint.capacity: {exc}") from exc
    model = EndpointModel(mode="planned", concurrent_requests_per_instance=per_copy,
                          provisioning_delay_s=planned.provisioning_delay_s, cap=planned.cap,
                          budget_usd_per_hour=planned.budget_usd_per_hour,
                          failed_answer_usd=planned.failed_answer_usd, floor=planned.floor,
                          environment_idle_min=planned.environment_idle_min)
    source = ("cdk.json gpu_endpoint.capacity" if configured is not None
              else "measured by warmstart calibrate, warmers/simulator/calibration.json"
              if measured else "the planner's default")
    deployed = ("the CDK construct deploys it so too (gpu_endpoint.target inference_component)"
                if gpu.options.get("target") == "inference_component" else
                "the CDK construct deploys a production variant (at least 1 instance) instead, "
                "unless gpu_endpoint.target is inference_component")
    price = ("not priced: the cap and budget bound it" if planned.failed_answer_usd is None
             else f"${planned.failed_answer_usd:g} per failed answer")
    return planned, model, (
        f"'on' overflows to the local GPU endpoint as an inference component whose copies the "
        f"warmer plans like provisioned concurrency (0 to {planned.cap} copies of "
        f"{planned.instance_type}, {planned.concurrent_requests_per_copy} requests at once per "
        f"copy ({source}); a copy asked for is in service "
        f"{planned.provisioning_delay_s / 60:g} trace min later (SageMaker: provisioning "
        "'takes several minutes'), billed from the request; failed answers "
        f"{price}); {deployed}")
