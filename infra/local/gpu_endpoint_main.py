"""The local stack's GPU endpoint: ``python -m infra.local.gpu_endpoint_main [options]``.

The options, environment and first stdout line of ``python -m functions.gpu_endpoint``
(`functions.gpu_endpoint.__main__.main`), plus SageMaker's streaming front end
(``POST /endpoints/{name}/invocations-response-stream``, what the SageMaker runtime answers
``InvokeEndpointWithResponseStream``; `functions.gpu_endpoint.stream`), encoded with
`infra.local.eventstream.encode_message`. The container that ``functions/gpu_endpoint`` ships
never serves that route (on AWS the SageMaker service does, and runtime code does not import
``infra``), so the encoder is handed in here. `infra.local.services.GpuEndpointService` starts
this module.

References
----------
InvokeEndpointWithResponseStream:
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpointWithResponseStream.html
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from functions.gpu_endpoint.__main__ import main as endpoint_main
from infra.local.eventstream import encode_message


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """`functions.gpu_endpoint.__main__.main` with the local event-stream encoder; same
    arguments and exit status."""
    return endpoint_main(argv, env, event_encoder=encode_message)


if __name__ == "__main__":
    sys.exit(main())
