"""The rule table: every pass by the name a fusion switch file uses for it, its kind, and what it
does. Each pass module registers its rules here with :func:`rule`; :data:`RULES` is read by the
switch file parser (:mod:`.switches`) and the pipeline (:mod:`.pipeline`).

Kinds (the sections of GE's JSON switch file, plus one):

* ``GraphFusion``: graph fusion rules, run on the whole graph (ConvBatchnormFusionPass, ...);
* ``UBFusion``: UB (buffer) fusion rules, which let one kernel keep a result in the Unified
  Buffer and apply the next op before writing it to GM (Conv + ReLU, MatMul + activation);
* ``GE``: GE's own graph passes (constant folding, pruning, TransData placement). The real
  switch file does not reach these; npulab lets a ``RuleName:off`` line or an entry in either
  JSON section turn them off, so a learner can see what each one buys, but ``"ALL": "off"``
  leaves them on, as GE keeps its unswitchable passes on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

KINDS = ("GraphFusion", "UBFusion", "GE")


@dataclass(frozen=True)
class Rule:
    name: str          # the switch file's name for it
    kind: str          # one of KINDS
    run: Callable      # (draft, record, chip) -> None: rewrites the draft, records each change
    summary: str


#: rule name -> Rule, in registration order
RULES: dict[str, Rule] = {}


def rule(name: str, kind: str, summary: str):
    assert kind in KINDS, kind
    def deco(fn):
        RULES[name] = Rule(name, kind, fn, summary)
        return fn
    return deco


__all__ = ["KINDS", "RULES", "Rule", "rule"]
