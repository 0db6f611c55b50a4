"""The fusion switch file (ATC's ``--fusion_switch_file``): which rules are off.

Both public forms are read (data/FACTS.md, Graph, runtime, collectives):

* lines ``RuleName:off`` (or ``:on``), one a line; blank lines and ``#`` comments are skipped::

      ConvBatchnormFusionPass:off
      MatMulBiasAddFusionPass:off

* JSON, one object per section, ``"ALL": "off"`` turning a whole section off and a named rule
  taking precedence over ``ALL``::

      {"Switch": {"GraphFusion": {"ALL": "off", "MatMulBiasAddFusionPass": "on"},
                  "UBFusion": {"ConvReluFusionPass": "off"}}}

A rule name npulab does not know is an error that lists the known ones (a typo would otherwise
leave the rule on without a word), and so is a rule in the other kind's section; a line or
entry that is not ``Name:on|off`` is an error naming its line. npulab's GE passes (constant
folding, pruning, TransData placement; kind ``GE`` in :data:`~.rules.RULES`) may be named in
either form and either section, but ``ALL`` does not reach them: GE keeps its unswitchable
passes on.
"""
from __future__ import annotations

import json
import os

from ...errors import GraphError
from .rules import RULES

SECTIONS = ("GraphFusion", "UBFusion")
VALUES = ("on", "off")


def _known() -> str:
    lines = []
    for kind in ("GraphFusion", "UBFusion", "GE"):
        names = [r.name for r in RULES.values() if r.kind == kind]
        lines.append(f"  {kind}: {', '.join(names)}")
    return "\n".join(lines)


def _unknown(name: str, where: str) -> GraphError:
    return GraphError(f"fusion switch file, {where}: unknown rule {name!r}. Known rules:\n{_known()}")


class FusionSwitches:
    """Which rules run. ``off`` and ``on`` are sets of rule names; ``all_off`` the sections
    whose ``ALL`` is off. A rule is on unless it is in ``off``, or its section is in
    ``all_off`` and it is not in ``on``."""

    def __init__(self, off=(), on=(), all_off=()):
        for name in (*off, *on):
            if name not in RULES:
                raise _unknown(name, "argument")
        self.off, self.on, self.all_off = set(off), set(on), set(all_off)

    def enabled(self, rule: str) -> bool:
        if rule not in RULES:
            raise _unknown(rule, "query")
        if rule in self.off:
            return False
        return rule in self.on or RULES[rule].kind not in self.all_off

    @classmethod
    def load(cls, path) -> "FusionSwitches":
        """Read a switch file of either form."""
        with open(path, encoding="utf-8") as f:
            return cls.parse(f.read(), os.path.basename(str(path)))

    @classmethod
    def parse(cls, text: str, source: str = "<text>") -> "FusionSwitches":
        """The switches of a switch file's text (``source`` names it in errors)."""
        if text.lstrip().startswith("{"):
            return cls._parse_json(text, source)
        return cls._parse_lines(text, source)

    @classmethod
    def _parse_lines(cls, text: str, source: str) -> "FusionSwitches":
        off, on = set(), set()
        for i, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, value = (s.strip() for s in line.partition(":"))
            where = f"{source} line {i} ({raw.strip()!r})"
            if not sep or not name or value.lower() not in VALUES:
                raise GraphError(f"fusion switch file, {where}: expected RuleName:on or RuleName:off")
            if name == "ALL":
                raise GraphError(f"fusion switch file, {where}: ALL is a JSON-form entry; write "
                                 f'{{"Switch": {{"GraphFusion": {{"ALL": "off"}}, "UBFusion": {{"ALL": "off"}}}}}}')
            if name not in RULES:
                raise _unknown(name, where)
            (off if value.lower() == "off" else on).add(name)
        return cls(off - on, on)

    @classmethod
    def _parse_json(cls, text: str, source: str) -> "FusionSwitches":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GraphError(f"fusion switch file, {source} line {exc.lineno} column {exc.colno}: not valid "
                             f"JSON ({exc.msg})") from None
        sw = doc.get("Switch") if isinstance(doc, dict) else None
        if not isinstance(sw, dict) or set(doc) != {"Switch"}:
            got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
            raise GraphError(f'fusion switch file, {source} line 1: expected {{"Switch": {{"GraphFusion": {{...}}, '
                             f'"UBFusion": {{...}}}}}}, got keys {got}')
        off, on, all_off = set(), set(), set()
        for section, entries in sw.items():
            where = f"{source} line {_line_of(text, section)}"
            if section not in SECTIONS or not isinstance(entries, dict):
                raise GraphError(f"fusion switch file, {where}: section {section!r} must be one of "
                                 f"{', '.join(SECTIONS)}, holding {{\"RuleName\": \"on\" | \"off\"}}")
            for name, value in entries.items():
                where = f"{source} line {_line_of(text, name)}"
                if not isinstance(value, str) or value.lower() not in VALUES:
                    raise GraphError(f"fusion switch file, {where}: {section}.{name} is {value!r}; "
                                     f"expected \"on\" or \"off\"")
                if name == "ALL":
                    if value.lower() == "off":
                        all_off.add(section)
                    continue
                if name not in RULES:
                    raise _unknown(name, where)
                kind = RULES[name].kind
                if kind != "GE" and kind != section:
                    raise GraphError(f"fusion switch file, {where}: {name} is a {kind} rule, listed under {section}")
                (off if value.lower() == "off" else on).add(name)
        return cls(off, on, all_off)

    def __repr__(self) -> str:
        return f"FusionSwitches(off={sorted(self.off)}, on={sorted(self.on)}, all_off={sorted(self.all_off)})"


def _line_of(text: str, key: str) -> int:
    """The 1-based line where ``"key"`` first appears in a JSON text (1 if nowhere)."""
    for i, line in enumerate(text.splitlines(), 1):
        if f'"{key}"' in line:
            return i
    return 1


__all__ = ["FusionSwitches", "SECTIONS"]
