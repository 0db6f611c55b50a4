"""The instruction set's numbers are declared once (pyx/_isa.pxd): the readable enums of
npulab.sim.isa hold the same names and numbers as npulab._isa, which the Cython modules use."""
from npulab import _isa
from npulab.sim import isa, races, timeline


def test_enums_are_the_declared_numbers():
    assert {p.name: int(p) for p in isa.Pipe} == _isa.PIPES
    assert {k.name: int(k) for k in isa.Kind} == _isa.KINDS
    assert {o.name: int(o) for o in isa.Op} == _isa.OPS
    assert isa.NUM_PIPES == _isa.PIPE_COUNT == len(isa.Pipe) - 1      # every pipe but ALL


def test_the_python_twins_use_the_same_numbers():
    assert (timeline.S, timeline.WORK, timeline.SET, timeline.WAIT, timeline.BARRIER_ALL) == \
        (isa.Pipe.S, isa.Kind.WORK, isa.Kind.SET, isa.Kind.WAIT, isa.Kind.BARRIER_ALL)
    assert (races.S, races.SET, races.WAIT, races.BARRIER_ALL) == \
        (isa.Pipe.S, isa.Kind.SET, isa.Kind.WAIT, isa.Kind.BARRIER_ALL)
    assert timeline.NUM_PIPES == races.NUM_PIPES == isa.NUM_PIPES
