"""The allowlist a source EPUB's style sheets, ``<style>`` elements and ``style`` attributes pass
(tinycss2): no ``behavior``, ``-moz-binding`` or ``expression()``; ``@import``, ``@media``,
``@supports``, ``@font-face``, ``@page`` and ``@namespace`` the only at-rules; every URL in a
``url()``, an ``@import`` or a URL function's string allowed by the caller (``sanitize``'s policy:
a shipped file, or a fragment of the same document).

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

MAX_CSS_NESTING = 32  # blocks and functions inside each other in one CSS value or prelude
# Properties that run code, and functions whose string arguments are URLs.
BANNED_PROPERTIES = frozenset({"behavior", "-ms-behavior", "-moz-binding"})
_URL_FUNCTIONS = frozenset({"url", "src", "image", "image-set", "-webkit-image-set"})
_NESTED = (FunctionBlock, ParenthesesBlock, SquareBracketsBlock, CurlyBracketsBlock)
_RULES, _BLOCK, _DECLARATIONS = "rules", "block", "declarations"  # what a CSS block may hold


class StyleRules:
    """What CSS may say in one file: ``allows(url)`` says whether a URL may be pointed at,
    ``ships(url, suffix)`` whether it is a shipped file (with that suffix) other than this one."""

    def __init__(self, allows: Callable[[str], bool], ships: Callable[[str, str], bool]) -> None:
        self.allows = allows
        self.ships = ships

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

    def value(self, text: str) -> bool:
        """Whether an SVG or MathML attribute's value is allowed, read as a CSS value: every
        ``url()`` in it allowed."""
        return "(" not in text or self._tokens(tinycss2.parse_component_value_list(text), urls=True)

    def _node(self, node: Any, context: str, out: list[str]) -> tuple[Iterator[Any], str] | None:
        """Write ``node`` (a rule or declaration in a block holding ``context``) when allowed;
        the contents of the block it opens, and what they may hold."""
        if isinstance(node, Declaration):
            if context != _RULES and self._declaration(node):
                out.append(_declaration_text(node))
        elif isinstance(node, QualifiedRule):
            if context != _DECLARATIONS and self._tokens(node.prelude, urls=False):
                out.append(f"{str(tinycss2.serialize(node.prelude)).strip()} {{")
                return iter(self._contents(node.content)), _BLOCK
        elif isinstance(node, AtRule):
            return self._at_rule(node, context, out)
        return None  # a parse error

    def _at_rule(self, rule: Any, context: str, out: list[str]) -> tuple[Iterator[Any], str] | None:
        """``_node`` for an at-rule: the allowed ones written whole or opened."""
        name = str(rule.lower_at_keyword)
        if not self._tokens(rule.prelude, urls=False):
            return None
        if context == _RULES and (name == "namespace" or (name == "import" and self._import(rule))):
            out.append(str(tinycss2.serialize([rule])))
            return None
        if rule.content is None:
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

    def _import(self, rule: Any) -> bool:
        """Whether an ``@import`` points at a shipped style sheet."""
        tokens = [t for t in rule.prelude if t.type not in ("whitespace", "comment")]
        first = tokens[0] if tokens else None
        if isinstance(first, FunctionBlock) and first.lower_name == "url":
            first = next((a for a in first.arguments if isinstance(a, StringToken)), None)
        if not isinstance(first, (StringToken, URLToken)):
            return False
        return self.ships(str(first.value), ".css")

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
        """Whether a token inside ``function`` ("" for none) is a URL that is allowed, or no URL."""
        if isinstance(token, URLToken) or (isinstance(token, StringToken) and function in _URL_FUNCTIONS):
            return self.allows(str(token.value))
        return True


def _declaration_text(declaration: Any) -> str:
    """A declaration as written, ended by ``;`` (the spaces before the ``;`` left out)."""
    while declaration.value and declaration.value[-1].type == "whitespace":
        declaration.value.pop()
    return str(tinycss2.serialize([declaration]))
