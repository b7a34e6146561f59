"""Lambda API errors as AWS shapes them (``x-amzn-ErrorType`` + ``{"Type", "Message"}``).

References
----------
https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html#API_Invoke_Errors
"""

from __future__ import annotations


class LambdaApiError(Exception):
    """An error the Lambda API returns; ``status`` is the HTTP status code.

    A subclass names its status in its bases (``class X(LambdaApiError, status=404)``); its
    ``error_type`` (the ``x-amzn-ErrorType`` header) is its class name, as AWS names them, and
    its ``kind`` (the body's ``Type``) ``User`` unless given.
    """

    status = 400
    error_type = "ServiceException"
    kind = "User"

    def __init_subclass__(cls, *, status: int, kind: str = "User", **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.status = status
        cls.error_type = cls.__name__
        cls.kind = kind

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason

    def body(self) -> dict[str, str]:
        out = {"Type": self.kind, "Message": self.message, "message": self.message}
        if self.reason:
            out["Reason"] = self.reason
        return out


class ResourceNotFoundException(LambdaApiError, status=404):
    """The function, version or alias does not exist."""


class InvalidRequestContentException(LambdaApiError, status=400):
    """The request body is not valid JSON."""


class InvalidParameterValueException(LambdaApiError, status=400):
    """A parameter of the request is invalid."""


class TooManyRequestsException(LambdaApiError, status=429):
    """Throttled: a concurrency limit is reached (the ``reason`` says which)."""


class ProvisionedConcurrencyConfigNotFoundException(LambdaApiError, status=404):
    """The alias or version has no provisioned concurrency configuration."""


class RequestTooLargeException(LambdaApiError, status=413):
    """The request payload is over the invocation limit."""


class ServiceException(LambdaApiError, status=500, kind="Service"):
    """An internal error of the Lambda service."""
