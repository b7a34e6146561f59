"""One runtime process ("worker") of an emulated Lambda Managed Instances environment.

Run as a script by the emulator (``python lmi_worker.py HANDLER``). It does what each process
AWS's runtime interface client forks on LMI does
(``awslambdaric.lambda_multi_concurrent_utils.MultiConcurrentRunner.run_single``, awslambdaric
4.2: the parent reads ``AWS_LAMBDA_MAX_CONCURRENCY`` and forks that many workers, each importing
the handler itself and serving one invocation at a time through the multi-concurrent runtime
client), with one difference: the emulator starts each worker itself, on a Runtime API address
of its own, instead of one parent forking them onto one address that takes concurrent ``next``
calls. The handler sees what it sees on LMI (``AWS_LAMBDA_MAX_CONCURRENCY``, the
``lambda-managed-instances`` init type, its own init).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    from awslambdaric.lambda_config import LambdaConfigProvider
    from awslambdaric.lambda_multi_concurrent_utils import MultiConcurrentRunner

    config = LambdaConfigProvider(argv)
    MultiConcurrentRunner.run_single(config.handler, config.api_address,
                                     config.use_thread_polling, config.lmi_socket_path)


if __name__ == "__main__":
    # LAMBDA_TASK_ROOT first, as under ``python -m awslambdaric``; never this script's folder
    # (its modules would shadow the function's)
    sys.path[0] = os.getcwd()
    main(sys.argv)
