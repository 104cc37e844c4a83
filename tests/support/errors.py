"""An API error answer: its shape checked, its stable code."""

from __future__ import annotations

from typing import Any


def error_of(response: Any) -> str:
    """The stable error code, after checking the error shape."""
    assert response.is_json, response.data[:200]
    error = response.get_json()["error"]
    assert error["message"]
    if response.status_code >= 500:  # a 5xx names the request, so the logs can be found
        assert set(error) == {"code", "message", "request_id"}
        assert error["request_id"] == response.headers["X-Request-ID"]
    else:
        assert set(error) == {"code", "message"}
    return str(error["code"])
