"""Lambda API errors as AWS shapes them (``x-amzn-ErrorType`` + ``{"Type", "Message"}``).

References
----------
https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html#API_Invoke_Errors
"""

from __future__ import annotations


class LambdaApiError(Exception):
    """An error the Lambda API returns; ``status`` is the HTTP status code."""

    status = 400
    error_type = "ServiceException"
    kind = "User"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason

    def body(self) -> dict[str, str]:
        out = {"Type": self.kind, "Message": self.message, "message": self.message}
        if self.reason:
            out["Reason"] = self.reason
        return out


class ResourceNotFoundException(LambdaApiError):
    status = 404
    error_type = "ResourceNotFoundException"


class InvalidRequestContentException(LambdaApiError):
    status = 400
    error_type = "InvalidRequestContentException"


class InvalidParameterValueException(LambdaApiError):
    status = 400
    error_type = "InvalidParameterValueException"


class TooManyRequestsException(LambdaApiError):
    status = 429
    error_type = "TooManyRequestsException"


class ProvisionedConcurrencyConfigNotFoundException(LambdaApiError):
    status = 404
    error_type = "ProvisionedConcurrencyConfigNotFoundException"


class RequestTooLargeException(LambdaApiError):
    status = 413
    error_type = "RequestTooLargeException"


class ServiceException(LambdaApiError):
    status = 500
    error_type = "ServiceException"
    kind = "Service"
