"""The contract between deploy and run: what the deploy side (``infra/``: the CDK constructs,
the local stack, the replay, the commands) writes and the run side (``functions/``,
``warmers/``) reads, spelled once. Standard library only; shipped with every agent (it is under
``functions/runtime/``) and in the warmer's asset (``warmers.handler`` reaches it).

* :mod:`functions.runtime.contract.environment`: every ``WARMSTART_*`` environment variable
  name (``ENV_*``), and what each carries. Imported on the agents' init path
  (`functions.runtime.config`): names only, no other import.
* :mod:`functions.runtime.contract.warmer_document`: the warmer's document (the JSON of
  ``WARMSTART_WARMER_CONFIG``: ``WarmerDocument``, versioned, validated on read with errors
  naming the field) and the Application Auto Scaling resource ids, namespaces and dimensions
  of what the warmer scales, which the construct grants and the warmer calls.
* :mod:`functions.runtime.contract.calibration_document`: the admission calibration document
  (``WARMSTART_CALIBRATION``), written by ``warmstart calibrate``, checked at synth, read by the
  toolkit.
* :mod:`functions.runtime.contract.levels`: the degradation levels ``L0`` .. ``L3`` the warmer
  publishes and the handlers read (``Level``, ``parse_level``).

Four modules, not one: the names are read in every agent's init phase, the documents'
records are ``NamedTuple`` classes whose creation costs milliseconds there (measured with
``-X importtime``), so an agent loads the documents only when it reads one. No re-exports here
(STYLE.md, "no barrel imports"): import the module that defines a name.
"""

from __future__ import annotations


class ContractError(ValueError):
    """A value that crosses from deploy to run is not what the contract says; the message names
    the variable or the document's field and what is accepted. The base of each reader's own
    error (`functions.runtime.config.RuntimeConfigError`, ``warmers.config.WarmerConfigError``,
    ``infra.config.StackConfigError``,
    `functions.runtime.contract.warmer_document.DocumentError`,
    `functions.runtime.contract.calibration_document.CalibrationError`)."""
