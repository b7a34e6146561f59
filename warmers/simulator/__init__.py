"""Discrete-event policy simulator over the Azure Functions 2019 trace (``warmstart simulate``).

Modules (no re-exports here, STYLE.md: no barrel imports):

- ``constants``: prices, Lambda limits and policy defaults, each with its source.
- ``trace``: the trace reader, arrival spreading and duration sampling.
- ``calibration``: measured init / restore / inference times (JSON written by
  ``warmstart calibrate``).
- ``engine``: the per-function discrete-event core and its accounting.
- ``policies``: the ``Policy`` protocol and the baselines.
- ``warmstart_policy``: the warmstart policy (real forecaster, planner and admission).
- ``report``: tables, ratios and the Pareto plot.
- ``tables``: the text and Markdown table renderer (the replay's tables use it too).
- ``run``: runs every policy over a trace.

Data: Azure Public Dataset, "Serverless in the Wild", Shahrad et al., USENIX ATC 2020
(CC-BY 4.0), as vendored by vHive InVitro (MIT).
"""
