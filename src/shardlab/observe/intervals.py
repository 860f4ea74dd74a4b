"""Arithmetic on sets of time intervals: the base of overlap and exposed-communication figures.

A set is a list of (start, end) pairs; `union` makes it sorted and disjoint. Every other function
expects (and returns) such normalised sets.
"""
from __future__ import annotations

Intervals = list[tuple[float, float]]


def union(xs) -> Intervals:
    out: Intervals = []
    for a, b in sorted((a, b) for a, b in xs if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def total(xs: Intervals) -> float:
    return sum(b - a for a, b in xs)


def intersect(xs: Intervals, ys: Intervals) -> Intervals:
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs: Intervals, ys: Intervals) -> Intervals:
    """The parts of xs not covered by ys."""
    out = []
    for a, b in xs:
        cur = a
        for c, d in ys:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
            if cur >= b:
                break
        if cur < b:
            out.append((cur, b))
    return out


def clip(xs: Intervals, lo: float, hi: float) -> Intervals:
    return [(max(a, lo), min(b, hi)) for a, b in xs if min(b, hi) > max(a, lo)]
