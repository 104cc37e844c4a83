"""The page at ``/``: submit text, watch it, listen; upload a book and follow its chapters.

Plain HTML rendered here (voices, formats and limits filled in) with one small script over the
public API: nothing to build, nothing from a CDN, every control labelled and usable from the
keyboard. With ``TTS_AUTH=required`` the page asks for a key and sends it as a Bearer header
(audio is fetched with it and played from memory, since an ``<audio>`` cannot send headers).
"""

from __future__ import annotations

from functools import cache
from html import escape
from pathlib import Path

from flask import Blueprint, Response, current_app, send_from_directory
from werkzeug.exceptions import NotFound

import api.contract as contract
from api.auth import OPEN
from api.services import Services
from tts_queue.enums import BOOK_FORMATS, REQUEST_FORMATS
from tts_queue.synthesis.frontend.language import language_name

bp = Blueprint("web", __name__)
HERE = Path(__file__).resolve().parent
# The page's own files only; the audio comes from the API (blob:), nothing from elsewhere.
POLICY = ("default-src 'self'; media-src 'self' blob:; img-src 'self' data:; object-src 'none'; "
          "base-uri 'none'; frame-ancestors 'none'")
ASSETS = ("tts.js", "tts.css")
PAGE_FORMATS = tuple(f for f in REQUEST_FORMATS if f != "pcm")  # raw PCM does not play in a browser


def _options(values: list[tuple[str, str]], selected: str) -> str:
    return "".join(f'<option value="{escape(v)}"{" selected" if v == selected else ""}>'
                   f"{escape(label)}</option>" for v, label in values)


@cache
def _template() -> str:
    """The page's HTML, read once per process."""
    return (HERE / "index.html").read_text(encoding="utf-8")


@bp.get("/")
@contract.operation("GET", "/", "A web page to submit text, follow books and listen", OPEN, errors=(),
                    responses={200: ("HTML", None, ("text/html",))})
def page() -> Response:
    """The page, with this deployment's voices, formats and limits."""
    services: Services = current_app.extensions["tts"]
    settings = services.settings
    default = services.registry.get(None).id
    # First: no voice named, so the text's script picks one (Japanese text: the Japanese voice)
    by_language: dict[str, list[tuple[str, str]]] = {}
    for spec in services.registry.specs():
        grade = f", grade {spec.grade}" if spec.grade else ""
        label = f"{spec.id} ({', '.join(spec.spoken)}, {spec.traits.title}, {spec.sample_rate} Hz){grade}"
        by_language.setdefault(language_name(spec.language), []).append((spec.id, label))
    groups = "".join(f'<optgroup label="{escape(name)}">{_options(entries, "")}</optgroup>'
                     for name, entries in by_language.items())
    html = _template()
    for name, value in {
        "KEY_HIDDEN": "" if settings.api.auth == "required" else "hidden",
        "MAX_CHARS": str(settings.request.max_text_chars),
        "MIN_SPEED": str(settings.request.min_speed),
        "MAX_SPEED": str(settings.request.max_speed),
        "VOICE_OPTIONS": _options([("", f"by language (default {default})")], "") + groups,
        "FORMAT_OPTIONS": _options([(f, f) for f in PAGE_FORMATS], "mp3" if "mp3" in PAGE_FORMATS else "wav"),
        "BOOK_FORMAT_OPTIONS": _options([(f, f) for f in BOOK_FORMATS], "mp3"),
    }.items():
        html = html.replace("{{" + name + "}}", value)
    response = Response(html, mimetype="text/html")
    response.headers["Content-Security-Policy"] = POLICY
    return response


@bp.get("/ui/<name>")
@contract.operation("GET", "/ui/{name}", "The page's script and style sheet", OPEN, errors=(404,),
                    params=(contract.Param("name", "path",
                                           {"type": "string", "enum": ["tts.js", "tts.css"]}),),
                    responses={200: ("The file", None, ("text/javascript", "text/css"))})
def asset(name: str) -> Response:
    """The page's script or style sheet."""
    if name not in ASSETS:
        raise NotFound(f"no such file: {name}")
    return send_from_directory(HERE, name, max_age=300)
