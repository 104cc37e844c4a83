"""The allowlist a source EPUB's style sheets, ``<style>`` elements and ``style`` attributes pass
(tinycss2): no ``behavior``, ``-moz-binding`` or ``expression()``; ``@import``, ``@media``,
``@supports``, ``@font-face``, ``@page`` and ``@namespace`` the only at-rules; every URL in a
``url()``, a URL function's string or a prelude pointed by the caller (``sanitize``'s policy) at
a shipped image or font, or a fragment of the same document, and written as the caller says (the
file's shipped name), else the declaration or rule goes. An ``@import`` is written again from its
URL alone (``@import url("...")``, a shipped style sheet), an ``@namespace`` from its prefix and a
namespace the sanitizer keeps: no media list, ``layer()`` or ``supports()`` of the source's is left.

Bounds: parsed by tinycss2 without recursion; its serializer recurses into nested blocks, so a
value or prelude nested deeper than ``MAX_CSS_NESTING`` is dropped, and nested rules are written
with an explicit stack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import tinycss2
from tinycss2.ast import (
    AtRule,
    CurlyBracketsBlock,
    Declaration,
    FunctionBlock,
    ParenthesesBlock,
    QualifiedRule,
    SquareBracketsBlock,
    StringToken,
    URLToken,
)
from tinycss2.serializer import serialize_identifier, serialize_string_value, serialize_url

from tts_queue.books.readalong.media import Kind
from tts_queue.books.readalong.tree import NAMESPACES

MAX_CSS_NESTING = 32  # blocks and functions inside each other in one CSS value or prelude
# Properties that run code, and functions whose string arguments are URLs.
BANNED_PROPERTIES = frozenset({"behavior", "-ms-behavior", "-moz-binding"})
_URL_FUNCTIONS = frozenset({"url", "src", "image", "image-set", "-webkit-image-set"})
_NESTED = (FunctionBlock, ParenthesesBlock, SquareBracketsBlock, CurlyBracketsBlock)
_RULES, _BLOCK, _DECLARATIONS = "rules", "block", "declarations"  # what a CSS block may hold
SHOWN = frozenset({Kind.IMAGE, Kind.FONT})  # what a url() may load
STYLES = frozenset({Kind.STYLE})  # what an @import may load
# A URL as the file's policy writes it (``None``: it goes): the URL, the kinds of file it may
# point at, and whether a fragment of this file (or the file itself) will do.
Point = Callable[[str, frozenset[Kind], bool], str | None]


class StyleRules:
    """What CSS may say in one file; ``point`` says where a URL in it may point (``Point``)."""

    def __init__(self, point: Point) -> None:
        self.point = point

    def stylesheet(self, text: str) -> str:
        """A style sheet's rules that are allowed, with what is allowed inside them."""
        out: list[str] = []
        rules = tinycss2.parse_stylesheet(text, skip_comments=True, skip_whitespace=True)
        stack: list[tuple[Iterator[Any], str]] = [(iter(rules), _RULES)]
        while stack:
            node = next(stack[-1][0], None)
            if node is None:
                stack.pop()
                if stack:
                    out.append("}")
                continue
            opened = self._node(node, stack[-1][1], out)
            if opened is not None:
                stack.append(opened)
        return "\n".join(out)

    def declarations(self, text: str) -> str:
        """A style attribute's allowed declarations."""
        nodes = tinycss2.parse_blocks_contents(text, skip_comments=True, skip_whitespace=True)
        return " ".join(_declaration_text(node) for node in nodes
                        if isinstance(node, Declaration) and self._declaration(node))

    def value(self, text: str) -> str | None:
        """An SVG or MathML attribute's value read as a CSS value, every ``url()`` in it pointed
        again; ``None`` when one is not allowed."""
        if "(" not in text:
            return text
        tokens = tinycss2.parse_component_value_list(text)
        return str(tinycss2.serialize(tokens)) if self._tokens(tokens, urls=True) else None

    def _node(self, node: Any, context: str, out: list[str]) -> tuple[Iterator[Any], str] | None:
        """Write ``node`` (a rule or declaration in a block holding ``context``) when allowed;
        the contents of the block it opens, and what they may hold."""
        if isinstance(node, Declaration):
            if context != _RULES and self._declaration(node):
                out.append(_declaration_text(node))
        elif isinstance(node, QualifiedRule):
            if context != _DECLARATIONS and self._tokens(node.prelude, urls=True):
                out.append(f"{str(tinycss2.serialize(node.prelude)).strip()} {{")
                return iter(self._contents(node.content)), _BLOCK
        elif isinstance(node, AtRule):
            return self._at_rule(node, context, out)
        return None  # a parse error

    def _at_rule(self, rule: Any, context: str, out: list[str]) -> tuple[Iterator[Any], str] | None:
        """``_node`` for an at-rule: the allowed ones written whole or opened."""
        name = str(rule.lower_at_keyword)
        if name in ("import", "namespace"):
            written = self._import(rule) if name == "import" else _namespace(rule)
            if context == _RULES and written is not None:
                out.append(written)
            return None
        if rule.content is None or not self._tokens(rule.prelude, urls=True):
            return None
        head = " ".join(filter(None, (f"@{name}", str(tinycss2.serialize(rule.prelude)).strip())))
        if name in ("media", "supports") and context != _DECLARATIONS:
            out.append(f"{head} {{")
            if context == _RULES:
                rules = tinycss2.parse_rule_list(rule.content, skip_comments=True, skip_whitespace=True)
                return iter(rules), _RULES
            return iter(self._contents(rule.content)), _BLOCK
        if name in ("font-face", "page") and context == _RULES:
            out.append(f"{head} {{")
            return iter(self._contents(rule.content)), _DECLARATIONS
        return None  # @charset, and every other at-rule

    def _import(self, rule: Any) -> str | None:
        """An ``@import`` written again from its URL alone, pointed at a shipped style sheet;
        ``None`` when it points at none."""
        url = _url(_significant(rule.prelude)[:1])
        written = None if url is None else self.point(url, STYLES, False)
        return None if written is None else f'@import url("{serialize_string_value(written)}");'

    @staticmethod
    def _contents(tokens: Iterable[Any]) -> list[Any]:
        """A block's declarations and nested rules."""
        return list(tinycss2.parse_blocks_contents(tokens, skip_comments=True, skip_whitespace=True))

    def _declaration(self, declaration: Any) -> bool:
        """Whether a declaration is allowed: its property, and what its value says."""
        return declaration.lower_name not in BANNED_PROPERTIES and self._tokens(declaration.value, urls=True)

    def _tokens(self, tokens: Iterable[Any], urls: bool) -> bool:
        """Whether component values are allowed: no parse error, no ``expression()``, nothing
        nested deeper than ``MAX_CSS_NESTING``, and (``urls``) every URL inside allowed."""
        stack: list[tuple[Iterator[Any], str]] = [(iter(tokens), "")]
        while stack:
            token = next(stack[-1][0], None)
            if token is None:
                stack.pop()
            elif isinstance(token, _NESTED):
                function = str(token.lower_name) if isinstance(token, FunctionBlock) else ""
                inside = token.arguments if function else token.content
                if function == "expression" or len(stack) >= MAX_CSS_NESTING or (
                        urls and function in ("url", "src")
                        and not any(isinstance(a, StringToken) for a in inside)):
                    return False
                stack.append((iter(inside), function))
            elif token.type == "error" or (urls and not self._token(token, stack[-1][1])):
                return False  # a bad URL or string, an unmatched bracket, or a URL not allowed
        return True

    def _token(self, token: Any, function: str) -> bool:
        """Whether a token inside ``function`` ("" for none) is no URL, or a URL that is allowed
        (then written as the policy points it)."""
        if isinstance(token, URLToken) or (isinstance(token, StringToken) and function in _URL_FUNCTIONS):
            written = self.point(str(token.value), SHOWN, True)
            if written is None:
                return False
            token.value = written
            token.representation = (f"url({serialize_url(written)})" if isinstance(token, URLToken)
                                    else f'"{serialize_string_value(written)}"')
        return True


def _significant(tokens: Iterable[Any]) -> list[Any]:
    """Component values without whitespace and comments."""
    return [t for t in tokens if t.type not in ("whitespace", "comment")]


def _url(tokens: list[Any]) -> str | None:
    """The URL that ``tokens`` are, alone: a string, a ``url(...)`` token or ``url("...")``."""
    if len(tokens) != 1:
        return None
    token = tokens[0]
    if isinstance(token, FunctionBlock) and token.lower_name == "url":
        inside = _significant(token.arguments)
        token = inside[0] if len(inside) == 1 else None
    return str(token.value) if isinstance(token, (StringToken, URLToken)) else None


def _namespace(rule: Any) -> str | None:
    """An ``@namespace`` written again from its prefix and namespace name, when that is one of the
    namespaces a cleaned document keeps (XHTML, SVG, MathML, EPUB's, XLink); else ``None``."""
    tokens = _significant(rule.prelude)
    prefix = str(tokens.pop(0).value) if tokens and tokens[0].type == "ident" else None
    name = _url(tokens)
    if name not in NAMESPACES:
        return None
    head = f"@namespace {serialize_identifier(prefix)} " if prefix else "@namespace "
    return f'{head}"{serialize_string_value(name)}";'


def _declaration_text(declaration: Any) -> str:
    """A declaration as written, ended by ``;`` (the spaces before the ``;`` left out)."""
    while declaration.value and declaration.value[-1].type == "whitespace":
        declaration.value.pop()
    return str(tinycss2.serialize([declaration]))
