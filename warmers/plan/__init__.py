"""Planning, pure (no I/O, no clock): forecast + cost model + policy -> frozen plans.

``warmers.plan.run.plan_run`` is the one entry (the warmer Lambda, ``warmstart plan`` and the
simulator's warmstart policy call it); each module one part of the plan:

* :mod:`warmers.plan.policy`: the vocabulary every part shares (policies, plans, :class:`Step`,
  the break-even, hysteresis and clamp rules, the demand step).
* :mod:`warmers.plan.alias`: one alias's provisioned concurrency or warm pings.
* :mod:`warmers.plan.managed_instances`: one Lambda Managed Instances alias's minimum.
* :mod:`warmers.plan.endpoint`: the GPU overflow endpoint shared by the agents.
* :mod:`warmers.plan.run`: one warmer run, every alias and endpoint at once.

No re-exports here (a barrel would import every part at init): code imports a name from the
module that defines it.
"""
