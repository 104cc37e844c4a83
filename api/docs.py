"""The published contract: ``GET /openapi.json`` (generated from ``api.contract``) and ``/docs``
(Swagger UI, served from the ``swagger-ui-bundle`` package: no CDN, works offline)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify, request, send_from_directory

import api.contract as contract
import api.schemas as schemas
from api.auth import OPEN, access
from api.services import Services

bp = Blueprint("docs", __name__)
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tts-queue API</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css"></head>
<body><div id="ui"></div><script src="/docs/static/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui"});</script></body></html>
"""


@bp.get("/openapi.json")
@contract.operation("GET", "/openapi.json", "This API's OpenAPI 3.1 description", OPEN, errors=(),
                    responses={200: ("The description", schemas.OpenAPIDocument, ("application/json",))})
def openapi() -> Response:
    """The OpenAPI document of every route, with the server this request reached."""
    services: Services = current_app.extensions["tts"]
    return jsonify(contract.openapi(request.host_url.rstrip("/"), services.settings.api.auth == "required",
                                     services.settings))


@bp.get("/docs")
@contract.operation("GET", "/docs", "A page that renders the description (Swagger UI)", OPEN, errors=(),
                    responses={200: ("HTML", None, ("text/html",))})
def docs() -> Response:
    """Swagger UI over ``/openapi.json``."""
    return Response(PAGE, mimetype="text/html")


@bp.get("/docs/static/<path:name>")
@access(OPEN)
def docs_static(name: str) -> Response:
    """Swagger UI's own files."""
    from swagger_ui_bundle import swagger_ui_path

    return send_from_directory(swagger_ui_path, name, max_age=86400)
