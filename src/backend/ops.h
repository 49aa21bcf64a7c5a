// The CPU reference ops on raw row-major buffers with explicit dimensions: every op the Qwen3
// model needs, forward and backward, exact and templated on the scalar (float and double
// instantiated, so tests can check gradients in double). backend/cpu/cpu_backend.cpp puts them
// behind backend::Backend (backend.h), which is all the model sees; the CUDA kernels implement
// the same names in echo::cuda (kernels/).
#pragma once

#include <cstdint>

#include "backend/tp_reducer.h"

namespace echo::cpu {

// ---- GEMM -------------------------------------------------------------------------------------
// C (m, n) = alpha * op(A) * op(B) + beta * C, row-major, packed (lda = columns of A as stored).
// op(A) is (m, k): A is (m, k), or (k, m) when trans_a; op(B) is (k, n): B is (k, n), or (n, k)
// when trans_b. Through cblas_sgemm / cblas_dgemm (OpenBLAS). As in BLAS, beta == 0 overwrites C
// without reading it. m, n, k >= 0 (k == 0 gives C = beta * C).
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, const T* b, T beta, T* c);

// The same with explicit leading dimensions (row strides, in elements) of A, B and C, for
// operating on strided sub-matrices such as one head of a (tokens, heads, head_dim) tensor.
template <class T>
void gemm_strided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// ---- RMSNorm ----------------------------------------------------------------------------------
// out[r, :] = x[r, :] * rstd[r] * w,  rstd[r] = 1 / sqrt(mean(x[r, :]^2) + eps)
// x, out: (rows, dim)  w: (dim)  rstd: (rows), saved for backward. The mean is accumulated in T,
// sequentially over the row (deterministic). q_norm / k_norm use it over (tokens * heads, head_dim).
template <class T>
void rmsnorm_forward(const T* x, const T* w, int64_t rows, int64_t dim, T eps, T* out, T* rstd);

// dx (rows, dim) = d out / d x applied to dout (overwritten);
// dw_accum (dim) += sum over rows of dout * x * rstd (accumulates, does NOT zero it).
template <class T>
void rmsnorm_backward(const T* dout, const T* x, const T* w, const T* rstd, int64_t rows, int64_t dim, T* dx,
                      T* dw_accum);

// ---- RoPE -------------------------------------------------------------------------------------
// Non-interleaved rotate-half (Hugging Face Qwen3). For i < d/2, theta_i = positions[t] * base^(-2i/d):
//   out[i] = x[i] cos - x[i + d/2] sin;  out[i + d/2] = x[i + d/2] cos + x[i] sin.
// x: (tokens, heads, head_dim), in place; positions: (tokens); head_dim even. Angles, cos and sin
// in double with no cache, so any position works; the rotation is done in double, rounded once.
template <class T>
void rope_forward(T* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, double base);

// The transpose (= inverse) rotation applied to the gradient dx: (tokens, heads, head_dim), in place.
template <class T>
void rope_backward(T* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, double base);

// ---- Attention --------------------------------------------------------------------------------
// Causal GQA attention, scale 1/sqrt(d): out[b, i, h] = sum_{j <= i} softmax_j(q[b,i,h] . k[b,j,g] * scale) v[b,j,g]
// with g = h / (n_q / n_kv).
// q, out: (batch, seq, n_q, d)  k, v: (batch, seq, n_kv, d)  lse: (batch, n_q, seq), the
// log-sum-exp of the scaled scores of each query row, saved for backward. n_q % n_kv == 0.
// Per (batch, head): two GEMMs over the full (seq, seq) score matrix, masked exactly (O(seq^2 d)).
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t batch, int64_t seq, int64_t n_q, int64_t n_kv,
                       int64_t d, T* out, T* lse);

// dq: (batch, seq, n_q, d), dk, dv: (batch, seq, n_kv, d), all overwritten; dk / dv sum over the
// query heads sharing a kv head (in head order). out and lse are the forward's.
template <class T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* out, const T* lse, int64_t batch,
                        int64_t seq, int64_t n_q, int64_t n_kv, int64_t d, T* dq, T* dk, T* dv);

// ---- SwiGLU -----------------------------------------------------------------------------------
// out = silu(gate) * up elementwise, silu(g) = g / (1 + exp(-g)).   gate, up, out: (n)
template <class T>
void swiglu_forward(const T* gate, const T* up, int64_t n, T* out);

// dgate = dout * up * silu'(gate), dup = dout * silu(gate), overwritten.   all: (n)
template <class T>
void swiglu_backward(const T* dout, const T* gate, const T* up, int64_t n, T* dgate, T* dup);

// ---- Embedding (vocab-parallel) ---------------------------------------------------------------
// out[i, :] = table[tokens[i] - vocab_begin, :] when vocab_begin <= tokens[i] < vocab_begin + vocab_local,
// else a zero row (the TP all-reduce sums the shards).
// tokens: (n), each >= 0  table: (vocab_local, hidden), rows [vocab_begin, vocab_begin + vocab_local)  out: (n, hidden)
template <class T>
void embedding_forward(const int32_t* tokens, int64_t n, const T* table, int64_t vocab_begin, int64_t vocab_local,
                       int64_t hidden, T* out);

// dtable_accum[tokens[i] - vocab_begin, :] += dout[i, :] for the tokens this shard holds, in token
// order (accumulates, does NOT zero it).   dout: (n, hidden)  dtable_accum: (vocab_local, hidden)
template <class T>
void embedding_backward(const int32_t* tokens, int64_t n, const T* dout, int64_t vocab_begin, int64_t vocab_local,
                        int64_t hidden, T* dtable_accum);

// ---- Cross-entropy (vocab-parallel) -----------------------------------------------------------
// The reductions over the TP group (backend/tp_reducer.h).
using backend::make_local_reducer;
using backend::make_mpi_reducer;
using backend::TpReducer;

// loss = mean over tokens t with targets[t] != ignore_index of (lse[t] - logit[t, targets[t]]),
// lse[t] = log sum_v exp(logit[t, v]) over the full vocab.
// logits: (tokens, vocab_local) = this rank's vocab columns [vocab_begin, vocab_begin + vocab_local)
// targets: (tokens), global ids  lse: (tokens), saved for backward (also for ignored tokens).
// The row max, the sum of exp and the target logit (held by its owning rank only) go through
// `reducer`; arithmetic in double. Every rank returns the same value. If no token counts the loss
// is 0. A counted target that no shard owns (out of the full vocab) is an error on every rank.
template <class T>
double cross_entropy_forward(const T* logits, const int32_t* targets, int64_t tokens, int64_t vocab_begin,
                             int64_t vocab_local, int32_t ignore_index, const TpReducer& reducer, T* lse);

// dlogits (tokens, vocab_local) = (softmax - onehot(target)) * dloss / count for counted tokens,
// 0 rows for ignored ones (all zero when count == 0). count = count_targets(...) over the same
// tokens (the denominator of the forward's mean). Local: no reduction needed.
template <class T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, int64_t tokens, int64_t vocab_begin,
                            int64_t vocab_local, int32_t ignore_index, int64_t count, T dloss, T* dlogits);

// Number of tokens whose target != ignore_index.   targets: (tokens)
int64_t count_targets(const int32_t* targets, int64_t tokens, int32_t ignore_index);

// ---- Elementwise ------------------------------------------------------------------------------
// y += x (residual add).   x, y: (n)
template <class T>
void add_inplace(T* y, const T* x, int64_t n);

// y = x (copy).   x, y: (n), not overlapping
template <class T>
void copy(T* y, const T* x, int64_t n);

}  // namespace echo::cpu
