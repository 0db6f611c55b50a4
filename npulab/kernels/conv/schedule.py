"""Who computes what: the block tiles each block of a conv launch works through, in order.

Two schedules (a tiling's ``schedule``):

* ``cyclic``: the matmul templates' block scheduler (with its swizzle) numbers the uniform
  TILE_M x TILE_N tiles and deals them round-robin, tile i to block i mod block_dim;
* ``teams``: the blocks form one team per tile column (block_dim is a multiple of the columns);
  a team splits the output rows into one contiguous run per member, so every core keeps one
  column's weights resident and the runs differ by at most one fractal row (a balance the
  uniform tiles of ``cyclic`` only reach when their count divides). A run may start with small
  tiles (``ramp``: FixPipe gets work early) and end with small ones (``taper``: the last write,
  which nothing overlaps, is short).

The slab a tiling needs in L1 (:func:`slab_elems`) follows from the schedule: the largest any
of its tiles reads (with ``map_resident``: the largest run of rows a core keeps).
"""
from __future__ import annotations

from functools import lru_cache

from ...arch import FRACTAL_ROWS, ceil_div
from ..matmul.tiling import swizzle_coord
from .geometry import max_slab, slab_boxes


@lru_cache(maxsize=4096)
def team_rows(m_total: int, tile_m: int, team: int, r: int, ramp: int = 0, taper: int = 0) -> tuple:
    """(p0, m) of the M tiles of member ``r`` of a team of ``team`` cores: the team's output
    rows split into ``team`` contiguous runs, as equal as 16-row fractals allow, each run cut
    into the fewest tiles of at most ``tile_m`` rows, again as equal as fractals allow.

    ``ramp`` > 0 starts the run with tiles of ramp, 2 x ramp, 4 x ramp ... fractal rows (up to
    tile_m), so the first result is ready, and FixPipe busy, early; ``taper`` > 0 ends it the
    same way in reverse, so the last tile's FixPipe write, which nothing overlaps, is short.
    The tiles between stay large (long mmads)."""
    frac = ceil_div(m_total, FRACTAL_ROWS)
    r0, r1 = r * frac // team, (r + 1) * frac // team
    rows = r1 - r0
    if rows <= 0:
        return ()
    cap = tile_m // FRACTAL_ROWS
    left = rows
    ends = []
    for first in (ramp, taper):
        part, size = [], first
        while first > 0 and size < cap and left > 0:
            part.append(min(size, left))
            left -= part[-1]
            size *= 2
        ends.append(part)
    nt = ceil_div(left, cap)
    middle = [(j + 1) * left // nt - j * left // nt for j in range(nt)]
    bounds = [r0]
    for v in ends[0] + middle + ends[1][::-1]:
        bounds.append(bounds[-1] + v)
    out = []
    for a, b in zip(bounds, bounds[1:]):
        p0, p1 = a * FRACTAL_ROWS, min(m_total, b * FRACTAL_ROWS)
        if p1 > p0:
            out.append((p0, p1 - p0))
    return tuple(out)


def block_work(t, block: int, sample_loops: int = 0) -> list:
    """The block tiles block ``block`` of tiling ``t`` computes, in order: (group, first row,
    rows, n tile, columns). ``sample_loops`` > 0 keeps only the first that many (estimates)."""
    p, s = t.problem, t.tiles
    if s.schedule == "teams":
        team = s.block_dim // t.columns
        col, r = divmod(block, team)
        grp, n_idx = divmod(col, t.n_loops)
        n = min(s.tile_n, p.cout_e - n_idx * s.tile_n)
        out = [(grp, p0, m, n_idx, n) for p0, m in team_rows(p.m, s.tile_m, team, r, s.ramp, s.taper)]
    else:
        gm = t.gemm
        out = []
        for i in range(block, t.core_loops, s.block_dim):
            grp, m_idx, n_idx = swizzle_coord(gm, i)
            out.append((grp, m_idx * s.tile_m, min(s.tile_m, p.m - m_idx * s.tile_m), n_idx,
                        min(s.tile_n, p.cout_e - n_idx * s.tile_n)))
    return out[:sample_loops] if sample_loops else out


def member_rows(t, block: int) -> tuple:
    """(first row, rows) of the run of output rows team member ``block`` computes (teams)."""
    s = t.tiles
    team = max(1, s.block_dim // t.columns)
    tiles = team_rows(t.problem.m, s.tile_m, team, block % team, s.ramp, s.taper)
    if not tiles:
        return 0, 0
    return tiles[0][0], tiles[-1][0] + tiles[-1][1] - tiles[0][0]


def busiest_block(t) -> int:
    """The block with the most fractal steps (ties: the lowest index)."""
    if t.tiles.schedule != "teams":
        return 0                                               # block 0 runs the most tiles
    team = t.tiles.block_dim // t.columns
    load = [sum(ceil_div(m, FRACTAL_ROWS) for _, _, m, _, _ in block_work(t, r)) for r in range(team)]
    return max(range(team), key=lambda r: (load[r], -r))


def slab_elems(t) -> int:
    """The largest slab channel block (elements) any block tile of tiling ``t`` needs (with
    ``map_resident``: that any core's whole run of rows needs)."""
    p, s = t.problem, t.tiles
    if s.map_resident:
        return _run_slab(p.geom, p.batch, p.c0, p.m, s.tile_m, s.block_dim, t.columns, s.ramp, s.taper)
    if s.schedule != "teams":
        return max_slab(p.geom, p.batch, s.tile_m, p.c0)
    return _teams_slab(p.geom, p.batch, p.c0, p.m, s.tile_m, s.block_dim, t.columns, s.ramp, s.taper)


@lru_cache(maxsize=1024)
def _run_slab(geom, batch, c0, m_total, tile_m, block_dim, columns, ramp, taper) -> int:
    team = max(1, block_dim // columns)
    out = c0
    for r in range(team):
        tiles = team_rows(m_total, tile_m, team, r, ramp, taper)
        if tiles:
            p0 = tiles[0][0]
            out = max(out, slab_boxes(geom, batch, p0, tiles[-1][0] + tiles[-1][1] - p0, c0)[1])
    return out


@lru_cache(maxsize=1024)
def _teams_slab(geom, batch, c0, m_total, tile_m, block_dim, columns, ramp, taper) -> int:
    team = max(1, block_dim // columns)
    return max(slab_boxes(geom, batch, p0, m, c0)[1] for r in range(team)
               for p0, m in team_rows(m_total, tile_m, team, r, ramp, taper))


__all__ = ["team_rows", "block_work", "member_rows", "busiest_block", "slab_elems"]
