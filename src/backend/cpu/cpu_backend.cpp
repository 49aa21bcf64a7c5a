// CpuBackend: argument checks, then the echo::cpu / quant reference ops in the tensors' dtype.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/ops.h"
#include "core/error.h"
#include "quant/int8_linear.h"

namespace echo::backend {
namespace {

// ---- argument checks: every failure names the op and the tensor ------------------------------

void check_tensor(const char* op, const char* name, const Tensor& t) {
  ECHO_CHECK(t.defined(), "{}: {} is undefined", op, name);
  ECHO_CHECK(t.is_cpu(), "{}: {} must be a host tensor on the CPU backend, got {}", op, name, t.describe());
}

void check_packed(const char* op, const char* name, const Tensor& t) {
  check_tensor(op, name, t);
  ECHO_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {}", op, name, t.describe());
}

void check_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  ECHO_CHECK(t.dtype() == dtype, "{}: {} must be {}, got {}", op, name, dtype, t.describe());
}

void check_numel(const char* op, const char* name, const Tensor& t, int64_t n) {
  ECHO_CHECK(t.numel() == n, "{}: {} must hold {} elements, got {}", op, name, n, t.describe());
}

void check_rank(const char* op, const char* name, const Tensor& t, int rank) {
  ECHO_CHECK(t.ndim() == rank, "{}: {} must have {} dimensions, got {}", op, name, rank, t.describe());
}

// A packed operand of the op's compute dtype holding n elements.
void check_operand(const char* op, const char* name, const Tensor& t, DType dtype, int64_t n) {
  check_packed(op, name, t);
  check_dtype(op, name, t, dtype);
  check_numel(op, name, t, n);
}

// Runs f(T{}) with T the C++ type of a floating compute dtype.
template <class F>
void on_float(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::f64:
      f(double{});
      return;
    default:
      ECHO_FAIL("{}: the CPU backend computes in f32 or f64, got {}", op, dtype);
  }
}

template <class T>
T* ptr(Tensor& t) {
  return t.data<T>();
}
template <class T>
const T* ptr(const Tensor& t) {
  return t.data<T>();
}

// Token ids (i32) and a 2-D table (vocab_local, hidden) of the embedding ops; returns hidden.
int64_t check_tokens_and_table(const char* op, const Tensor& tokens, const char* table_name, const Tensor& table) {
  check_packed(op, "tokens", tokens);
  check_dtype(op, "tokens", tokens, DType::i32);
  check_packed(op, table_name, table);
  check_rank(op, table_name, table, 2);
  return table.dim(1);
}

// Logits (tokens, vocab_local) with their targets (i32) and saved log-sum-exps; returns tokens.
int64_t check_logits(const char* op, const Tensor& logits, const Tensor& targets, const Tensor& lse) {
  check_packed(op, "logits", logits);
  check_rank(op, "logits", logits, 2);
  const int64_t tokens = logits.dim(0);
  check_operand(op, "targets", targets, DType::i32, tokens);
  check_operand(op, "lse", lse, logits.dtype(), tokens);
  return tokens;
}

// q (batch, seq, n_q, d) and k (batch, seq, n_kv, d) of the attention ops.
struct AttentionDims {
  int64_t batch, seq, n_q, n_kv, d;
};
AttentionDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse) {
  check_packed(op, "q", q);
  check_rank(op, "q", q, 4);
  check_packed(op, "k", k);
  check_rank(op, "k", k, 4);
  const AttentionDims a{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  ECHO_CHECK(k.dim(0) == a.batch && k.dim(1) == a.seq && k.dim(3) == a.d, "{}: k {} does not match q {}", op,
             k.describe(), q.describe());
  check_operand(op, "k", k, q.dtype(), a.batch * a.seq * a.n_kv * a.d);
  check_operand(op, "v", v, q.dtype(), k.numel());
  check_operand(op, "lse", lse, q.dtype(), a.batch * a.n_q * a.seq);
  return a;
}

}  // namespace

Tensor CpuBackend::empty(std::vector<int64_t> shape, DType dtype) { return Tensor::empty(std::move(shape), dtype); }

void CpuBackend::copy_from(Tensor& dst, const Tensor& src) {
  check_tensor("copy_from", "dst", dst);
  ECHO_CHECK(src.defined(), "copy_from: src is undefined");
  dst.copy_from(src);
}

Tensor CpuBackend::to_host(const Tensor& src) {
  check_tensor("to_host", "src", src);
  return src;
}

void CpuBackend::gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
                      Tensor& c) {
  for (auto [name, t] : {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"c", static_cast<const Tensor*>(&c)}}) {
    check_tensor("gemm", name, *t);
    check_rank("gemm", name, *t, 2);
    check_dtype("gemm", name, *t, c.dtype());
    ECHO_CHECK(t->stride(1) == 1, "gemm: {} must have unit column stride, got {}", name, t->describe());
  }
  const int64_t m = c.dim(0), n = c.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  ECHO_CHECK((trans_a ? a.dim(1) : a.dim(0)) == m && (trans_b ? b.dim(1) : b.dim(0)) == k &&
                 (trans_b ? b.dim(0) : b.dim(1)) == n,
             "gemm: op(a) {} x op(b) {} does not give c {} (trans_a {}, trans_b {})", format_shape(a.shape()),
             format_shape(b.shape()), format_shape(c.shape()), trans_a, trans_b);
  // A packed operand's leading dimension is its column count, at least 1 (as BLAS requires).
  auto ld = [](const Tensor& t) { return std::max<int64_t>({1, t.stride(0), t.dim(1)}); };
  on_float("gemm", c.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::gemm_strided<T>(trans_a, trans_b, m, n, k, static_cast<T>(alpha), ptr<T>(a), ld(a), ptr<T>(b), ld(b),
                         static_cast<T>(beta), ptr<T>(c), ld(c));
  });
}

void CpuBackend::rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& out, Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  check_packed(op, "x", x);
  const int64_t dim = x.dim(-1), rows = x.numel() / std::max<int64_t>(dim, 1);
  check_operand(op, "w", w, x.dtype(), dim);
  check_operand(op, "out", out, x.dtype(), x.numel());
  check_operand(op, "rstd", rstd, x.dtype(), rows);
  on_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::rmsnorm_forward<T>(ptr<T>(x), ptr<T>(w), rows, dim, static_cast<T>(eps), ptr<T>(out), ptr<T>(rstd));
  });
}

void CpuBackend::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                                  Tensor& dw_accum) {
  const char* op = "rmsnorm_backward";
  check_packed(op, "x", x);
  const int64_t dim = x.dim(-1), rows = x.numel() / std::max<int64_t>(dim, 1);
  check_operand(op, "dout", dout, x.dtype(), x.numel());
  check_operand(op, "w", w, x.dtype(), dim);
  check_operand(op, "rstd", rstd, x.dtype(), rows);
  check_operand(op, "dx", dx, x.dtype(), x.numel());
  check_operand(op, "dw_accum", dw_accum, x.dtype(), dim);
  on_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::rmsnorm_backward<T>(ptr<T>(dout), ptr<T>(x), ptr<T>(w), ptr<T>(rstd), rows, dim, ptr<T>(dx), ptr<T>(dw_accum));
  });
}

namespace {

void rope(const char* op, Tensor& x, const Tensor& positions, double base, bool forward) {
  check_packed(op, "x", x);
  check_rank(op, "x", x, 3);
  check_operand(op, "positions", positions, DType::i32, x.dim(0));
  on_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    (forward ? cpu::rope_forward<T> : cpu::rope_backward<T>)(ptr<T>(x), ptr<int32_t>(positions), x.dim(0), x.dim(1),
                                                             x.dim(2), base);
  });
}

}  // namespace

void CpuBackend::rope_forward(Tensor& x, const Tensor& positions, double base) {
  rope("rope_forward", x, positions, base, true);
}

void CpuBackend::rope_backward(Tensor& dx, const Tensor& positions, double base) {
  rope("rope_backward", dx, positions, base, false);
}

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const AttentionDims a = check_attention(op, q, k, v, lse);
  check_operand(op, "out", out, q.dtype(), q.numel());
  on_float(op, q.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::attention_forward<T>(ptr<T>(q), ptr<T>(k), ptr<T>(v), a.batch, a.seq, a.n_q, a.n_kv, a.d, ptr<T>(out),
                              ptr<T>(lse));
  });
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  const AttentionDims a = check_attention(op, q, k, v, lse);
  for (auto [name, t] :
       {std::pair{"dout", &dout}, std::pair{"out", &out}, std::pair{"dq", static_cast<const Tensor*>(&dq)}})
    check_operand(op, name, *t, q.dtype(), q.numel());
  for (auto [name, t] :
       {std::pair{"dk", static_cast<const Tensor*>(&dk)}, std::pair{"dv", static_cast<const Tensor*>(&dv)}})
    check_operand(op, name, *t, q.dtype(), k.numel());
  on_float(op, q.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::attention_backward<T>(ptr<T>(dout), ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(out), ptr<T>(lse), a.batch, a.seq,
                               a.n_q, a.n_kv, a.d, ptr<T>(dq), ptr<T>(dk), ptr<T>(dv));
  });
}

void CpuBackend::swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
  const char* op = "swiglu_forward";
  check_packed(op, "gate", gate);
  check_operand(op, "up", up, gate.dtype(), gate.numel());
  check_operand(op, "out", out, gate.dtype(), gate.numel());
  on_float(op, gate.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::swiglu_forward<T>(ptr<T>(gate), ptr<T>(up), gate.numel(), ptr<T>(out));
  });
}

void CpuBackend::swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
  const char* op = "swiglu_backward";
  check_packed(op, "gate", gate);
  for (auto [name, t] :
       {std::pair{"dout", &dout}, std::pair{"up", &up}, std::pair{"dgate", static_cast<const Tensor*>(&dgate)},
        std::pair{"dup", static_cast<const Tensor*>(&dup)}})
    check_operand(op, name, *t, gate.dtype(), gate.numel());
  on_float(op, gate.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::swiglu_backward<T>(ptr<T>(dout), ptr<T>(gate), ptr<T>(up), gate.numel(), ptr<T>(dgate), ptr<T>(dup));
  });
}

void CpuBackend::embedding_forward(const Tensor& tokens, const Tensor& table, int64_t vocab_begin, Tensor& out) {
  const char* op = "embedding_forward";
  const int64_t n = tokens.numel(), hidden = check_tokens_and_table(op, tokens, "table", table);
  check_operand(op, "out", out, table.dtype(), n * hidden);
  on_float(op, table.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::embedding_forward<T>(ptr<int32_t>(tokens), n, ptr<T>(table), vocab_begin, table.dim(0), hidden, ptr<T>(out));
  });
}

void CpuBackend::embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                                    Tensor& dtable_accum) {
  const char* op = "embedding_backward";
  const int64_t n = tokens.numel(), hidden = check_tokens_and_table(op, tokens, "dtable_accum", dtable_accum);
  check_operand(op, "dout", dout, dtable_accum.dtype(), n * hidden);
  on_float(op, dtable_accum.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::embedding_backward<T>(ptr<int32_t>(tokens), n, ptr<T>(dout), vocab_begin, dtable_accum.dim(0), hidden,
                               ptr<T>(dtable_accum));
  });
}

void CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                                       int32_t ignore_index, const TpReducer& reducer, Tensor& lse, double divisor,
                                       Tensor& loss_acc) {
  const char* op = "cross_entropy_forward";
  const int64_t tokens = check_logits(op, logits, targets, lse);
  check_operand(op, "loss_acc", loss_acc, DType::f64, 1);
  ECHO_CHECK(divisor > 0, "{}: divisor {} must be > 0", op, divisor);
  double loss = 0;
  on_float(op, logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    loss = cpu::cross_entropy_forward<T>(ptr<T>(logits), ptr<int32_t>(targets), tokens, vocab_begin, logits.dim(1),
                                         ignore_index, reducer, ptr<T>(lse));
  });
  *loss_acc.data<double>() += loss / divisor;
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                        int64_t vocab_begin, int32_t ignore_index, int64_t count, double dloss,
                                        Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const int64_t tokens = check_logits(op, logits, targets, lse);
  check_operand(op, "dlogits", dlogits, logits.dtype(), logits.numel());
  on_float(op, logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::cross_entropy_backward<T>(ptr<T>(logits), ptr<int32_t>(targets), ptr<T>(lse), tokens, vocab_begin,
                                   logits.dim(1), ignore_index, count, static_cast<T>(dloss), ptr<T>(dlogits));
  });
}

void CpuBackend::add_inplace(Tensor& y, const Tensor& x) {
  check_packed("add_inplace", "y", y);
  check_operand("add_inplace", "x", x, y.dtype(), y.numel());
  on_float("add_inplace", y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cpu::add_inplace<T>(ptr<T>(y), ptr<T>(x), y.numel());
  });
}

void CpuBackend::copy(Tensor& y, const Tensor& x) {
  check_tensor("copy", "y", y);
  check_tensor("copy", "x", x);
  check_dtype("copy", "x", x, y.dtype());
  y.copy_from(x);
}

void CpuBackend::cast(Tensor& y, const Tensor& x) {
  check_packed("cast", "y", y);
  check_packed("cast", "x", x);
  check_numel("cast", "x", x, y.numel());
  y.copy_from(x.to(y.dtype()).view(y.shape()));
}

void CpuBackend::fill(Tensor& y, double value) {
  check_packed("fill", "y", y);
  on_float("fill", y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    std::fill(ptr<T>(y), ptr<T>(y) + y.numel(), static_cast<T>(value));
  });
}

void CpuBackend::scale(Tensor& y, double factor) {
  check_packed("scale", "y", y);
  on_float("scale", y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T f = static_cast<T>(factor);
    T* p = ptr<T>(y);
    for (int64_t i = 0; i < y.numel(); ++i) p[i] *= f;
  });
}

void CpuBackend::adamw_step(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, float decay, const AdamWScalars& s) {
  const char* op = "adamw_step";
  check_operand(op, "w", w, DType::f32, w.numel());
  for (auto [name, t] : {std::pair{"g", &g}, std::pair{"m", static_cast<const Tensor*>(&m)},
                         std::pair{"v", static_cast<const Tensor*>(&v)}})
    check_operand(op, name, *t, DType::f32, w.numel());
  float* pw = w.data<float>();
  const float* pg = g.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  for (int64_t e = 0; e < w.numel(); ++e) adamw_update(pw[e], pg[e], pm[e], pv[e], decay, s);
}

void CpuBackend::accumulate_sum_squares(const Tensor& x, Tensor& acc) {
  check_packed("accumulate_sum_squares", "x", x);
  check_operand("accumulate_sum_squares", "acc", acc, DType::f64, 1);
  double sum = *acc.data<double>();
  on_float("accumulate_sum_squares", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = ptr<T>(x);
    for (int64_t i = 0; i < x.numel(); ++i) sum += static_cast<double>(p[i]) * p[i];
  });
  *acc.data<double>() = sum;
}

void CpuBackend::accumulate_max_abs(const Tensor& x, Tensor& acc) {
  check_packed("accumulate_max_abs", "x", x);
  check_operand("accumulate_max_abs", "acc", acc, DType::f64, 1);
  double result = *acc.data<double>();
  on_float("accumulate_max_abs", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = ptr<T>(x);
    T local = 0;
    bool finite = true;
    for (int64_t i = 0; i < x.numel(); ++i) {
      // NOTE: fmax drops NaN, so finiteness is tracked separately; both loops vectorize.
      local = std::fmax(local, std::fabs(p[i]));
      finite &= std::isfinite(p[i]);
    }
    result = finite ? std::max(result, static_cast<double>(local)) : std::numeric_limits<double>::infinity();
  });
  *acc.data<double>() = result;
}

void CpuBackend::int8_linear_forward(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx,
                                     const Tensor& x, const Tensor& w, Tensor& y, quant::Int8LinearSaved& saved) {
  const char* op = "int8_linear_forward";
  check_packed(op, "x", x);
  check_packed(op, "w", w);
  check_rank(op, "w", w, 2);
  const int64_t out = w.dim(0), in = w.dim(1), rows = x.numel() / std::max<int64_t>(in, 1);
  check_operand(op, "x", x, DType::f32, rows * in);
  check_operand(op, "w", w, DType::f32, out * in);
  check_operand(op, "y", y, DType::f32, rows * out);
  quant::linear_forward(cfg, ctx, x.data<float>(), w.data<float>(), rows, in, out, y.data<float>(), saved);
}

void CpuBackend::int8_linear_backward(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx,
                                      const Tensor& dy, const quant::Int8LinearSaved& saved, Tensor* dx,
                                      bool accumulate_dx, Tensor* dw_accum) {
  const char* op = "int8_linear_backward";
  const int64_t rows = saved.rows, in = saved.in, out = saved.out;
  check_operand(op, "dy", dy, DType::f32, rows * out);
  if (dx) check_operand(op, "dx", *dx, DType::f32, rows * in);
  if (dw_accum) check_operand(op, "dw_accum", *dw_accum, DType::f32, out * in);
  quant::linear_backward(cfg, ctx, dy.data<float>(), nullptr, nullptr, saved, rows, in, out,
                         dx ? dx->data<float>() : nullptr, accumulate_dx, dw_accum ? dw_accum->data<float>() : nullptr);
}

}  // namespace echo::backend
