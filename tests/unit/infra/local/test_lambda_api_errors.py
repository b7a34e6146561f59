"""The local Lambda API answers an internal failure as Lambda does (500 ServiceException) with
no internal detail in the body: the exception's text stays in the log."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

import pytest

from infra.local.api import LambdaApiServer


class _FailingEmulator:
    """An emulator whose account settings fail with an internal error (a bug stand-in)."""

    def account_settings(self) -> dict[str, object]:
        raise RuntimeError("KeyError at /srv/secret/emulator.py line 42")


def test_an_internal_failure_is_a_500_service_exception_without_its_text(
        caplog: pytest.LogCaptureFixture) -> None:
    server = LambdaApiServer(_FailingEmulator())  # type: ignore[arg-type]
    server.start()
    try:
        with caplog.at_level(logging.ERROR, logger="warmstart"), pytest.raises(
                urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{server.endpoint}/2016-08-19/account-settings", timeout=10)
    finally:
        server.stop()
    err = caught.value
    body = json.loads(err.read())
    assert err.code == 500
    assert err.headers["x-amzn-ErrorType"] == "ServiceException"
    assert body["Type"] == "Service" and "internal error" in body["Message"]
    assert "secret" not in json.dumps(body) and "KeyError" not in json.dumps(body)
    request_id = err.headers["x-amzn-RequestId"]
    assert request_id in body["Message"]
    # the details are in the log, with the same request id
    assert any("secret" in (r.exc_text or "") or "secret" in str(r.exc_info)
               for r in caplog.records), [r.getMessage() for r in caplog.records]
