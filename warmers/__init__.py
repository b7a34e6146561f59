"""warmstart control plane: metrics source -> forecaster -> planner -> actuators.

Pipeline (one scheduled run, see ``warmers.runner.run_once``)::

    MetricsSource.fetch() -> forecast.forecast_alias() -> planner.plan_alias() -> actuators.apply()
                                                       \\-> degradation.level + SSM publisher

Pure modules (no I/O, no clock): ``forecast``, ``planner``, ``cost``, ``degradation`` (its
``level_*`` functions), ``series``. I/O lives in ``cloudwatch``, ``traces``, ``actuators``,
``state``, ``runner`` and ``handler``. No re-exports here (STYLE.md: no barrel imports).
"""
