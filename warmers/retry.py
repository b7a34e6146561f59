"""Bounded retries with full jitter for control-plane calls that botocore does not retry.

botocore's ``standard`` retry mode (set on the clients, see ``warmers.config.boto_config``)
already retries throttling; Application Auto Scaling's ``ConcurrentUpdateException`` and Lambda's
``ResourceConflictException`` are not in its list, so they get this small loop.

References
----------
AWS Architecture Blog, "Exponential Backoff And Jitter" (full jitter),
https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/ ;
botocore retry modes, https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

RETRYABLE_CODES = frozenset({
    "ConcurrentUpdateException", "ResourceConflictException", "ThrottlingException",
    "Throttling", "TooManyRequestsException", "RequestLimitExceeded",
})


def call_with_retries(fn: Callable[..., T], *args: Any, attempts: int = 5, base_s: float = 0.2,
                      cap_s: float = 3.0, sleep: Callable[[float], None] = time.sleep,
                      rng: Callable[[], float] = random.random, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)``; on a retryable AWS error wait ``U(0, min(cap, base 2^i))``.

    Raises
    ------
    botocore.exceptions.ClientError
        The last error once ``attempts`` are spent, or at once for a non-retryable code.
    """
    from botocore.exceptions import ClientError

    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    for attempt in range(attempts):
        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code not in RETRYABLE_CODES or attempt == attempts - 1:
                raise
            sleep(rng() * min(cap_s, base_s * (2 ** attempt)))
    raise AssertionError("unreachable")  # pragma: no cover
