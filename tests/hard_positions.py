"""Search a whole float32 sinusoidal table for the entries hardest to round (not a test module).

A float32 entry can be off by more than half a float32 ulp only where the exact value lies
within the float64 error of a float32 rounding midpoint. This script computes a table in
float64 slice by slice, keeps the entries within ``margin`` of a midpoint, and evaluates
those exactly with mpmath (sin and cos of ``p * base ** (-2k / d)`` at 120 bits). It reports:

- the largest error of posenc's float32 table, and where;
- how posenc's table differs from another table given as a module (e.g. an older posenc,
  or the straightforward float64 method), and which of the two is right where they differ.

    python tests/hard_positions.py [--rows 1048576] [--d-model 512] [--compare old.module]

The positions that tests/test_sinusoid.py checks were found with it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

import mpmath
import numpy as np
import torch

import posenc

mpmath.mp.prec = 120


def exact(position: int, column: int, d_model: int, base: float) -> mpmath.mpf:
    k = column // 2
    omega = mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * k) / d_model)
    angle = position * omega
    return mpmath.sin(angle) if column % 2 == 0 else mpmath.cos(angle)


def nearest_float32(value: mpmath.mpf) -> float:
    """The float32 number nearest to ``value`` (no double rounding through float64)."""
    guess = np.float32(float(value))
    around = (np.nextafter(guess, np.float32(-2)), guess, np.nextafter(guess, np.float32(2)))
    return float(min(around, key=lambda f: abs(mpmath.mpf(float(f)) - value)))


def midpoint(value: mpmath.mpf) -> mpmath.mpf:
    """The float32 rounding midpoint nearest to ``value``."""
    low = np.float32(float(value))
    if mpmath.mpf(float(low)) > value:
        low = np.nextafter(low, np.float32(-2))
    high = np.nextafter(low, np.float32(2))
    return (mpmath.mpf(float(low)) + mpmath.mpf(float(high))) / 2


def midpoint_distance(values: np.ndarray) -> np.ndarray:
    """Distance of each float64 value to the nearest float32 rounding midpoint."""
    nearest = values.astype(np.float32)
    half_ulp = np.spacing(np.abs(nearest)).astype(np.float64) / 2
    off = np.abs(values - nearest.astype(np.float64))
    return np.abs(half_ulp - off)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2**20)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--base", type=float, default=10_000.0)
    parser.add_argument("--slice", type=int, default=1 << 15)
    parser.add_argument("--compare", help="module with a sinusoidal_table to compare with")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument(
        "--margin", type=float, help="check entries this close to a midpoint (default: from p)"
    )
    args = parser.parse_args()
    d, base = args.d_model, args.base
    other = importlib.import_module(args.compare).sinusoidal_table if args.compare else None

    worst: list[tuple[float, int, int]] = []
    worst_other: list[tuple[float, int, int]] = []
    wrong_ours = wrong_other = differ = candidates = 0
    misrounded: list[tuple[int, int, float]] = []
    differ_ours_right = differ_other_right = 0
    max_diff = 0.0
    started = time.time()
    for start in range(args.first, args.first + args.rows, args.slice):
        stop = min(start + args.slice, args.first + args.rows)
        pos = torch.arange(start, stop)
        wide = posenc.sinusoidal_table(pos, d, base=base, dtype=torch.float64).numpy()
        ours = posenc.sinusoidal_table(pos, d, base=base).numpy()
        theirs = other(pos, d, base=base).numpy() if other else ours
        # The float64 values are within |p| * 2**-54 + 1e-14 of the exact ones.
        margin = args.margin or 2 * (stop * 2.0**-54 + 1e-14)
        near = midpoint_distance(wide) < margin
        diff = ours != theirs
        differ += int(diff.sum())
        if diff.any():
            max_diff = max(max_diff, float(np.abs(ours - theirs)[diff].max()))
        check = near | diff
        rows, cols = np.nonzero(check)
        candidates += len(rows)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            p = start + r
            e = exact(p, c, d, base)
            err_ours = float(abs(mpmath.mpf(float(ours[r, c])) - e))
            err_theirs = float(abs(mpmath.mpf(float(theirs[r, c])) - e))
            rounded = nearest_float32(e)
            if float(ours[r, c]) != rounded:
                wrong_ours += 1
                misrounded.append((p, c, float(abs(e - midpoint(e)))))
            wrong_other += float(theirs[r, c]) != rounded
            if diff[r, c]:
                differ_ours_right += err_ours < err_theirs
                differ_other_right += err_theirs < err_ours
            worst.append((err_ours, p, c))
            worst_other.append((err_theirs, p, c))
        worst = sorted(worst, reverse=True)[: args.top]
        worst_other = sorted(worst_other, reverse=True)[: args.top]
        print(
            f"rows {start}..{stop - 1}: {candidates} checked, worst {worst[0][0]:.6e} "
            f"at {worst[0][1:]}, {time.time() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    print(f"d_model={d}, base={base}, rows {args.first}..{args.first + args.rows - 1}")
    print(f"entries checked exactly: {candidates}")
    print(f"posenc float32 entries not correctly rounded: {wrong_ours}")
    for p, c, distance in misrounded[:20]:
        print(f"  position {p}, column {c}: the exact value is {distance:.2e} from a midpoint")
    print("largest errors of posenc's float32 table (error, position, column):")
    for err, p, c in worst:
        print(f"  {err:.6e}  {p}  {c}")
    if other:
        print(f"other table: entries not correctly rounded: {wrong_other}")
        print("largest errors of the other table (error, position, column):")
        for err, p, c in worst_other:
            print(f"  {err:.6e}  {p}  {c}")
        print(f"entries that differ: {differ}, largest difference {max_diff:.6e}")
        print(f"  where they differ, posenc is closer to the exact value: {differ_ours_right}")
        print(f"  where they differ, the other table is closer: {differ_other_right}")


if __name__ == "__main__":
    main()
