"""Replay a production trace through the local stack (``warmstart replay``, ``warmstart demo``).

Modules (no re-exports, STYLE.md):

- ``workload``: one trace function's slice as timed requests (reuses the policy simulator's trace
  reader, arrival spreading and duration sampling).
- ``client``: the asyncio HTTP client that sends them to the gateway on time.
- ``observe``: what the emulator measured (an invocation listener, concurrency and provisioned
  concurrency sampler).
- ``services``: the replay's additions to the local stack (a plan-recording subclass of the
  stack's warmer schedule, the warmer document, CloudWatch history); the GPU endpoint and the
  warmer schedule themselves are ``infra.local.services``'.
- ``summary``: the per-run table (counts, latency percentiles, GB-s, USD).
- ``report``: the HTML report with embedded PNGs.
- ``runner``: one run, end to end, in configuration ``off`` or ``on``.

Data: Azure Public Dataset, "Serverless in the Wild", Shahrad et al., USENIX ATC 2020
(CC-BY 4.0), as vendored by vHive InVitro (MIT).
"""
