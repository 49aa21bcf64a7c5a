#!/usr/bin/env python3
"""Independent NumPy model of the Echo quantized all-reduce and its error compensator.

Source of the algorithm: Xingyu Xie, Xiaoyong Xie, Zhouchen Lin, Kim-Chuan Toh, "Echo:
Error-Compensated 4-Bit Tensor-Parallel Communication for LLM Training and Inference",
arXiv:2610.14277 (Sec. 4.1 QAR, Sec. 4.3 group quantizer, Sec. 5.1 / Algorithm 1 compensator,
Theorem 1), as pinned down in docs/design.md sections 6, 7 and 8. This file is the "independent
NumPy model" that tests/comm/compensator_mpi_test.cpp
(TEST(Compensator, PartialSumsMatchTheIndependentNumPyModel)) quotes; it was written from the
prose of docs/design.md, not transliterated from the C++, and is meant to be statistically
faithful, not bit-exact.

What it simulates (P ranks in one process, one forward pass of N all-reduce sites):

  inputs     rank r's contribution at site k, n = 4096 float32 values drawn from
             Normal(mean, std). Default mean = 0.2, std = 1.0: that is what the C++ test feeds,
             because its call random_normal(n, seed, rank, 0.2f) passes 0.2 as the *mean*
             (tests/support/test_data.h: random_normal(n, seed, stream, mean = 0, stddev = 1)).
             --input-mean / --input-std change this (e.g. --input-mean 0 --input-std 0.2).
               independent: fresh values per site and rank;
               coherent:    one draw per rank, reused at every site.
  compensator per rank (Eqns. 10-11): c = eta*(a*m1 + (1-a)*m2), x' = x + c, y = QAR(x'),
             u = x' - y/P, m_j <- beta_j*m_j + (1-beta_j)*u; a = 0.35, beta1 = 0.7,
             beta2 = 0.3; m1 = m2 = 0 at the first site; eta in {0, 1}.
  quantizer  asymmetric zero-aware, b = 4 bits, groups of g = 128 consecutive values; scale and
             zero are rounded to fp16 before the codes are formed; codes
             rne(clip(x/s + z, 0, 15)), decode s*(code - z) (docs/design.md section 6).
  QAR        two phases (docs/design.md section 7): the n values are cut into P owner segments
             on group boundaries; each rank quantizes the segments it does not own; the owner
             sums, in fp32 and in rank order, its own segment (full precision) and the P-1
             decoded copies, quantizes that sum once, and every rank decodes the same bytes,
             so all ranks get the same y.
  metrics    S_t = sum_{k<=t} (y_k - sum_r x_{k,r}) (error against the uncompensated sum) and
             delta_k = y_k - sum_r x'_{k,r} (the error injected at site k), both in float64;
             ratio(N) = max_{t<=N} ||S_t|| / max_{k<=N} ||delta_k||.

The state is reset at the start of every stream and the inputs of site k do not depend on N, so
the stream of N sites is exactly the first N sites of the longest stream; ratio(N) is therefore
taken from prefix maxima of one run of max(--sites) sites per (seed, mode, eta), which is what
running each N separately would give.

What it reports: for each (N, mode, eta) the MEAN of ratio(N) over --seeds independent seeds
(seed s uses numpy.random.default_rng([base_seed, s]) for its inputs), and the standard deviation
over those seeds; one seed is enough for the coherent eta = 0 column (exactly N), the others
move by a few percent from seed to seed. --json OUT writes the same table (plus the per-seed
values) as JSON.

Run: /usr/bin/python3 tests/comm/compensator_numpy_model.py [--seed 0] [--seeds 8]
         [--sites 8,32,128,256] [--json OUT]
"""
import argparse
import json
import sys
import time

import numpy as np

P = 4          # ranks
BITS = 4       # bits per value
GROUP = 128    # group size g
NUM = 4096     # elements per contribution
A, BETA1, BETA2 = 0.35, 0.7, 0.3


# ---- group quantizer (docs/design.md section 6) ------------------------------------------------
def _fp16(v):
    """Round float32 values to fp16 (round to nearest even) and back."""
    return v.astype(np.float16).astype(np.float32)


def quantize_dequantize(x, bits=BITS, group=GROUP):
    """x -> x_hat through the asymmetric zero-aware group quantizer; float32 in, float32 out."""
    x = np.asarray(x, dtype=np.float32)
    shape = x.shape
    if shape[-1] % group:
        raise ValueError("this model only handles whole groups")
    if not np.all(np.isfinite(x)):
        raise ValueError("non-finite input (the C++ poisons such groups; not modelled)")
    xg = x.reshape(-1, group)
    f32 = np.float32
    qmax = f32((1 << bits) - 1)
    lo = xg.min(axis=1)
    hi = xg.max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # Naive map: s = (max - min)/(2^b - 1), z = -min/s (fractional), with a fallback onto
        # [min(min, 0), max(max, 0)] where that map has no fp16 form (constant / very narrow groups).
        s_n = (hi - lo) / qmax
        z_n = -lo / s_n
        ok = (_fp16(s_n) > 0) & (np.abs(z_n) < f32(65520))
        s_n = np.where(ok, s_n, np.where(lo >= 0, hi / qmax, np.where(hi <= 0, -lo / qmax, s_n)))
        z_n = np.where(ok, z_n, np.where(lo >= 0, f32(0), np.where(hi <= 0, qmax, f32(0))))
        # Zero-aware blend for groups that straddle zero.
        s0 = (hi - lo) / qmax
        zf = -lo / s0
        lam = np.clip(np.minimum(hi, -lo) / s0, f32(0), f32(1))
        zstar = np.clip(np.rint(zf), f32(1), qmax - f32(1))
        z_b = (f32(1) - lam) * zf + lam * zstar
        s_b = np.maximum(np.where(qmax - z_b > 0, hi / (qmax - z_b), f32(0)),
                         np.where(z_b > 0, -lo / z_b, f32(0)))
        s_b = np.where(lam > 0, s_b, s0)
        z_b = np.where(lam > 0, z_b, zf)
        straddle = (lo < 0) & (hi > 0)
        s = _fp16(np.where(straddle, s_b, s_n).astype(f32))
        z = _fp16(np.where(straddle, z_b, z_n).astype(f32))
        live = s > 0  # zero scale: every value decodes to +0
        s_safe = np.where(live, s, f32(1))[:, None]
        code = np.rint(np.clip(xg / s_safe + z[:, None], f32(0), qmax))
        out = np.where(live[:, None], s_safe * (code - z[:, None]), f32(0))
    return out.astype(f32).reshape(shape)


# ---- two-phase quantized all-reduce (docs/design.md section 7) ---------------------------------
def segments(n, p, group=GROUP):
    groups = -(-n // group)
    stride = -(-groups // p) * group
    return [(min(n, j * stride), min(n, j * stride + stride)) for j in range(p)]


def qar(xs):
    """xs: (P, n) float32 contributions -> the (n,) float32 result every rank receives."""
    p, n = xs.shape
    decoded = quantize_dequantize(xs)  # phase 1: what each rank would send (non-owned parts)
    y = np.empty(n, dtype=np.float32)
    for owner, (b, e) in enumerate(segments(n, p)):
        if b == e:
            continue
        acc = np.zeros(e - b, dtype=np.float32)
        for r in range(p):  # fp32 sum in rank order, the owner's own part in full precision
            acc = acc + (xs[r, b:e] if r == owner else decoded[r, b:e])
        y[b:e] = acc
    return quantize_dequantize(y)  # phase 2: the owner requantizes; everyone decodes it


# ---- one stream of sites with the compensator (docs/design.md section 8) -----------------------
def run_stream(inputs, eta, coherent, num_sites):
    """Returns (prefix max of ||S_t||, prefix max of ||delta_k||), each of length num_sites.

    inputs: (sites, P, n) float32 for independent streams, (P, n) for coherent ones."""
    m1 = np.zeros((P, NUM))
    m2 = np.zeros((P, NUM))
    partial = np.zeros(NUM)
    s_norm = np.empty(num_sites)
    d_norm = np.empty(num_sites)
    for k in range(num_sites):
        x = inputs if coherent else inputs[k]
        xc = x.astype(np.float64) + eta * (A * m1 + (1.0 - A) * m2)
        y = qar(xc.astype(np.float32)).astype(np.float64)
        u = xc - y / P
        m1 = BETA1 * m1 + (1.0 - BETA1) * u
        m2 = BETA2 * m2 + (1.0 - BETA2) * u
        partial += y - x.astype(np.float64).sum(axis=0)
        s_norm[k] = np.linalg.norm(partial)
        d_norm[k] = np.linalg.norm(y - xc.sum(axis=0))
    return np.maximum.accumulate(s_norm), np.maximum.accumulate(d_norm)


def model(base_seed, num_seeds, sites, mean, std):
    longest = max(sites)
    keys = [(mode, eta) for mode in ("independent", "coherent") for eta in (0.0, 1.0)]
    per_seed = {key: {n: [] for n in sites} for key in keys}
    for s in range(num_seeds):
        rng = np.random.default_rng([base_seed, s])
        fresh = rng.normal(mean, std, size=(longest, P, NUM)).astype(np.float32)
        fixed = rng.normal(mean, std, size=(P, NUM)).astype(np.float32)
        for mode, eta in keys:
            coherent = mode == "coherent"
            smax, dmax = run_stream(fixed if coherent else fresh, eta, coherent, longest)
            for n in sites:
                per_seed[(mode, eta)][n].append(float(smax[n - 1] / dmax[n - 1]))
    return per_seed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    ap.add_argument("--seeds", type=int, default=8, help="number of seeds averaged (default 8)")
    ap.add_argument("--sites", default="8,32,128,256", help="comma-separated N values")
    ap.add_argument("--input-mean", type=float, default=0.2, help="contribution mean (C++ test: 0.2)")
    ap.add_argument("--input-std", type=float, default=1.0, help="contribution std (C++ test: 1.0)")
    ap.add_argument("--json", metavar="OUT", help="also write the table as JSON to OUT")
    args = ap.parse_args(argv)
    try:
        sites = sorted({int(v) for v in args.sites.split(",") if v.strip()})
    except ValueError:
        ap.error(f"--sites wants comma-separated integers, got {args.sites!r}")
    if not sites or min(sites) < 1:
        ap.error("--sites wants positive integers")
    if args.seeds < 1:
        ap.error("--seeds wants at least 1")

    t0 = time.time()
    per_seed = model(args.seed, args.seeds, sites, args.input_mean, args.input_std)
    elapsed = time.time() - t0

    print(f"Echo compensator NumPy model: P={P} b={BITS} g={GROUP} n={NUM} a={A} beta1={BETA1} "
          f"beta2={BETA2}, inputs Normal({args.input_mean:g}, {args.input_std:g})")
    print(f"ratio = max_t ||S_t|| / max_k ||delta_k||, mean (std) over {args.seeds} seeds from base seed {args.seed}")
    cols = [("independent", 0.0), ("independent", 1.0), ("coherent", 0.0), ("coherent", 1.0)]
    print(f"{'N':>5}  " + "  ".join(f"{m[:5]} eta={int(e)}".rjust(18) for m, e in cols))
    rows = []
    for n in sites:
        cells, row = [], {"N": n}
        for mode, eta in cols:
            v = np.array(per_seed[(mode, eta)][n])
            cells.append(f"{v.mean():9.3f} ({v.std():6.3f})".rjust(18))
            row[f"{mode}_eta{int(eta)}"] = {"mean": float(v.mean()), "std": float(v.std()),
                                            "per_seed": [float(t) for t in v]}
        print(f"{n:>5}  " + "  ".join(cells))
        rows.append(row)
    print(f"time: {elapsed:.1f} s")
    if args.json:
        doc = {"P": P, "bits": BITS, "group_size": GROUP, "n": NUM, "a": A, "beta1": BETA1, "beta2": BETA2,
               "input_mean": args.input_mean, "input_std": args.input_std, "seed": args.seed,
               "seeds": args.seeds, "statistic": "mean over seeds of max_t ||S_t|| / max_k ||delta_k||",
               "rows": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
