"""warmstart control plane: metrics source -> forecaster -> planner -> actuators.

Pipeline (one scheduled run, see ``warmers.runner.run_once``)::

    MetricsSource.fetch() per alias -> planner.plan_run() (forecast_alias, plan per alias with
    the account headroom carried over, degradation level) -> RunPlan -> runner.apply()
    (actuators, plan store, SSM level publisher)

Pure modules (no I/O, no clock): ``forecast``, ``planner``, ``cost``, ``degradation`` (its
``level_*`` functions), ``series``. I/O lives in ``cloudwatch``, ``traces``, ``actuators``,
``state``, ``runner`` and ``handler``. No re-exports here (STYLE.md: no barrel imports).
"""
