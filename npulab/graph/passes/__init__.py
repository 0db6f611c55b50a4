"""Graph optimisation passes (GE's graph fusion, UB fusion and graph passes), each one a rule
a fusion switch file can turn off, each a function Graph -> Graph that leaves its input as it
is and records what it changed.

=================================  ===========  ==============================================
rule (switch file name)            kind         what it rewrites
=================================  ===========  ==============================================
ConstantFoldingPass                GE           all-constant nodes -> constants (:mod:`.fold`)
ConvBatchnormFusionPass            GraphFusion  Conv2D + BatchNorm -> folded Conv2D (:mod:`.conv`)
MatMulBiasAddFusionPass            GraphFusion  MatMul + Add(bias) -> MatMul(bias) (:mod:`.matmul`)
FlashAttentionFusionPass           GraphFusion  attention found; scale moved onto Q (:mod:`.matmul`)
AvgPoolScaleFusionPass             GraphFusion  AvgPool + Mul(scalar) -> AvgPoolScale (:mod:`.vector`)
SwishFusionPass                    GraphFusion  Mul(x, Sigmoid(x)) -> Swish (:mod:`.vector`)
TransDataInsertPass                GE           TransData to NC1HWC0 / FRACTAL_Z (:mod:`.layout`)
TransOpSymmetryEliminationPass     GE           TransData A -> B -> A removed (:mod:`.layout`)
ConvReluFusionPass                 UBFusion     Conv2D + Relu -> Conv2D(relu) (:mod:`.conv`)
ATbeMatMulElemwiseFusionPass       UBFusion     MatMul + Relu/Gelu -> MatMul(activation)
TbeEltwiseFusionPass               UBFusion     Add + Relu -> AddRelu (:mod:`.vector`)
PrunePass                          GE           nodes no output needs removed (:mod:`.fold`)
=================================  ===========  ==============================================

Each module's docstring says where its rule names come from: GE's and FE's real names where
the CANN documentation or sources have one for the pattern, "npulab name" where they do not.

    from npulab.graph.passes import optimize, FusionSwitches
    g2, report = optimize(g, FusionSwitches.parse("ConvReluFusionPass:off"))
    print(report.summary())
"""
from .draft import Draft, PassRecord
from .rules import KINDS, RULES, Rule
from .switches import FusionSwitches
from .pipeline import ORDER, PassReport, gm_bytes, optimize, run_rule

__all__ = ["Draft", "PassRecord", "KINDS", "RULES", "Rule", "FusionSwitches", "ORDER", "PassReport",
           "gm_bytes", "optimize", "run_rule"]
