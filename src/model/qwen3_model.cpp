// Qwen3 forward and backward over the CPU ops.
#include "model/qwen3_model.h"

#include <cmath>
#include <type_traits>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::model {

using comm::Direction;

namespace {

// y (rows, out) = x (rows, in) · W^T, W: (out, in)
template <class T>
void linear(const T* x, const T* w, int64_t rows, int64_t in, int64_t out, T* y) {
  cpu::gemm<T>(false, true, rows, out, in, T(1), x, w, T(0), y);
}
// dx (rows, in) (+)= dy (rows, out) · W
template <class T>
void linear_dx(const T* dy, const T* w, int64_t rows, int64_t in, int64_t out, T* dx, bool accumulate) {
  cpu::gemm<T>(false, false, rows, in, out, T(1), dy, w, accumulate ? T(1) : T(0), dx);
}
// dW (out, in) += dy^T (out, rows) · x (rows, in)
template <class T>
void linear_dw(const T* dy, const T* x, int64_t rows, int64_t in, int64_t out, T* dw) {
  cpu::gemm<T>(true, false, out, in, rows, T(1), dy, x, T(1), dw);
}

}  // namespace

template <class T>
Qwen3Model<T>::Qwen3Model(const ModelShape& shape, TpOps<T>& tp)
    : shape_(shape), plan_(make_qwen3_plan(shape_)), params_(plan_, shape_), tp_(tp) {
  ECHO_CHECK(tp.size() == shape.tp && tp.rank() == shape.tp_rank,
             "the model shape is for tp rank {} of {}, but its TP group has rank {} of {}", shape.tp_rank, shape.tp,
             tp.rank(), tp.size());
}

template <class T>
void Qwen3Model<T>::check_batch(const Batch& b) const {
  ECHO_CHECK(b.batch >= 1 && b.seq >= 1, "a batch needs at least one sequence of one token, got ({}, {})", b.batch,
             b.seq);
  ECHO_CHECK(b.tokens && b.targets, "a batch needs tokens and targets");
  for (int64_t i = 0; i < b.num_tokens(); ++i) {
    ECHO_CHECK(b.tokens[i] >= 0 && b.tokens[i] < shape_.vocab,
               "token id {} at position {} is outside the vocabulary of {} ids", b.tokens[i], i, shape_.vocab);
    ECHO_CHECK(b.targets[i] == kIgnoreIndex || (b.targets[i] >= 0 && b.targets[i] < shape_.vocab),
               "target id {} at position {} is outside the vocabulary of {} ids", b.targets[i], i, shape_.vocab);
  }
}

template <class T>
double Qwen3Model<T>::forward(const Batch& b, bool keep_activations) {
  check_batch(b);
  const int64_t n = b.num_tokens(), H = shape_.hidden;
  batch_ = b;
  positions_.resize(n);
  for (int64_t i = 0; i < n; ++i) positions_[i] = static_cast<int32_t>(i % b.seq);

  // Vocab-parallel embedding: each rank fills the rows it owns, the exact sum completes them.
  std::vector<T> x(n * H);
  cpu::embedding_forward<T>(b.tokens, n, params_.value(plan_.embed), shape_.vocab_begin(), shape_.vocab_local(), H,
                            x.data());
  tp_.edge_sum(x, {0, Direction::forward});

  tp_.begin_pass(Direction::forward);
  acts_.assign(shape_.layers, {});
  for (int64_t l = 0; l < shape_.layers; ++l) layer_forward(l, x, acts_[l]);

  final_hidden_ = x;
  final_norm_out_.resize(n * H);
  final_rstd_.resize(n);
  cpu::rmsnorm_forward<T>(x.data(), params_.value(plan_.final_norm), n, H, static_cast<T>(shape_.norm_eps),
                          final_norm_out_.data(), final_rstd_.data());
  const int64_t V = shape_.vocab_local();
  logits_.resize(n * V);
  linear<T>(final_norm_out_.data(), params_.value(plan_.lm_head), n, H, V, logits_.data());
  ce_lse_.resize(n);
  const double loss = cpu::cross_entropy_forward<T>(logits_.data(), b.targets, n, shape_.vocab_begin(), V,
                                                    kIgnoreIndex, tp_.reducer(), ce_lse_.data());
  count_ = cpu::count_targets(b.targets, n, kIgnoreIndex);
  have_acts_ = keep_activations;
  if (!keep_activations) acts_.clear();
  return loss;
}

template <class T>
void Qwen3Model<T>::layer_forward(int64_t l, std::vector<T>& x, LayerActs& a) {
  const auto& p = plan_.layers[l];
  const int64_t n = batch_.num_tokens(), H = shape_.hidden, D = shape_.head_dim;
  const int64_t hq = shape_.heads_local(), hkv = shape_.kv_heads_local(), F = shape_.ffn_local();
  const T eps = static_cast<T>(shape_.norm_eps);

  // Attention: h1 = RMSNorm(x); q, k, v column-parallel; per-head q_norm, k_norm; RoPE.
  a.x_in = x;
  a.h1.resize(n * H);
  a.rstd1.resize(n);
  cpu::rmsnorm_forward<T>(x.data(), params_.value(p.input_norm), n, H, eps, a.h1.data(), a.rstd1.data());
  a.q_raw.resize(n * hq * D);
  a.k_raw.resize(n * hkv * D);
  a.v.resize(n * hkv * D);
  project(l, kQ, a.h1.data(), p.q, H, hq * D, a.q_raw.data(), a);
  project(l, kK, a.h1.data(), p.k, H, hkv * D, a.k_raw.data(), a);
  project(l, kV, a.h1.data(), p.v, H, hkv * D, a.v.data(), a);
  a.q.resize(a.q_raw.size());
  a.k.resize(a.k_raw.size());
  a.q_rstd.resize(n * hq);
  a.k_rstd.resize(n * hkv);
  cpu::rmsnorm_forward<T>(a.q_raw.data(), params_.value(p.q_norm), n * hq, D, eps, a.q.data(), a.q_rstd.data());
  cpu::rmsnorm_forward<T>(a.k_raw.data(), params_.value(p.k_norm), n * hkv, D, eps, a.k.data(), a.k_rstd.data());
  cpu::rope_forward<T>(a.q.data(), positions_.data(), n, hq, D, shape_.rope_base);
  cpu::rope_forward<T>(a.k.data(), positions_.data(), n, hkv, D, shape_.rope_base);
  a.attn.resize(n * hq * D);
  a.lse.resize(batch_.batch * hq * batch_.seq);
  cpu::attention_forward<T>(a.q.data(), a.k.data(), a.v.data(), batch_.batch, batch_.seq, hq, hkv, D, a.attn.data(),
                            a.lse.data());
  // o row-parallel, then the forward site.
  std::vector<T> o(n * H);
  project(l, kO, a.attn.data(), p.o, hq * D, H, o.data(), a);
  tp_.block_site(o, {static_cast<int>(2 * l), Direction::forward});
  cpu::add_inplace<T>(x.data(), o.data(), n * H);

  // MLP: h2 = RMSNorm(x); down(silu(gate(h2)) * up(h2)).
  a.x_mid = x;
  a.h2.resize(n * H);
  a.rstd2.resize(n);
  cpu::rmsnorm_forward<T>(x.data(), params_.value(p.post_norm), n, H, eps, a.h2.data(), a.rstd2.data());
  a.gate.resize(n * F);
  a.up.resize(n * F);
  a.act.resize(n * F);
  project(l, kGate, a.h2.data(), p.gate, H, F, a.gate.data(), a);
  project(l, kUp, a.h2.data(), p.up, H, F, a.up.data(), a);
  cpu::swiglu_forward<T>(a.gate.data(), a.up.data(), n * F, a.act.data());
  std::vector<T> d(n * H);
  project(l, kDown, a.act.data(), p.down, F, H, d.data(), a);
  tp_.block_site(d, {static_cast<int>(2 * l + 1), Direction::forward});
  cpu::add_inplace<T>(x.data(), d.data(), n * H);
}

template <class T>
void Qwen3Model<T>::backward(T loss_scale) {
  ECHO_CHECK(have_acts_, "backward() needs a forward(keep_activations = true) before it");
  const int64_t n = batch_.num_tokens(), H = shape_.hidden, V = shape_.vocab_local();

  std::vector<T> dlogits(n * V);
  cpu::cross_entropy_backward<T>(logits_.data(), batch_.targets, ce_lse_.data(), n, shape_.vocab_begin(), V,
                                 kIgnoreIndex, count_, loss_scale, dlogits.data());
  linear_dw<T>(dlogits.data(), final_norm_out_.data(), n, H, V, params_.grad(plan_.lm_head));
  // LM-head input gradient: a partial sum over the vocab shards, completed exactly.
  std::vector<T> dh(n * H), dx(n * H);
  linear_dx<T>(dlogits.data(), params_.value(plan_.lm_head), n, H, V, dh.data(), false);
  tp_.edge_sum(dh, {0, Direction::backward});
  cpu::rmsnorm_backward<T>(dh.data(), final_hidden_.data(), params_.value(plan_.final_norm), final_rstd_.data(), n, H,
                           dx.data(), params_.grad(plan_.final_norm));

  tp_.begin_pass(Direction::backward);
  norm_grads_.assign(2 * shape_.layers * shape_.head_dim, T(0));
  int site = 0;
  for (int64_t l = shape_.layers - 1; l >= 0; --l) layer_backward(l, dx, acts_[l], site);

  // Every rank holds the full dx; each scatters into the vocab rows it owns.
  cpu::embedding_backward<T>(batch_.tokens, n, dx.data(), shape_.vocab_begin(), shape_.vocab_local(), H,
                             params_.grad(plan_.embed));
  // q_norm / k_norm act on this rank's heads only: this micro-batch's share of their gradients
  // is a partial sum. It is summed over TP on its own (one collective for all layers) and then
  // added: summing the accumulated gradient instead would count every earlier micro-batch of
  // the step again, micro-batch m of M tp^(M-m) times.
  tp_.exact_sum(norm_grads_);
  for (int64_t l = 0; l < shape_.layers; ++l) {
    const auto& p = plan_.layers[l];
    cpu::add_inplace<T>(params_.grad(p.q_norm), norm_grad(l, false), shape_.head_dim);
    cpu::add_inplace<T>(params_.grad(p.k_norm), norm_grad(l, true), shape_.head_dim);
  }

  acts_.clear();
  have_acts_ = false;
}

template <class T>
void Qwen3Model<T>::layer_backward(int64_t l, std::vector<T>& dx, LayerActs& a, int& site) {
  const auto& p = plan_.layers[l];
  const int64_t n = batch_.num_tokens(), H = shape_.hidden, D = shape_.head_dim;
  const int64_t hq = shape_.heads_local(), hkv = shape_.kv_heads_local(), F = shape_.ffn_local();

  // MLP. dx is the gradient of the block output; the residual passes it through unchanged.
  std::vector<T> dact(n * F), dgate(n * F), dup(n * F), dh(n * H), dnorm(n * H);
  project_backward(l, kDown, dx.data(), a.act.data(), p.down, F, H, dact.data(), false, a);
  cpu::swiglu_backward<T>(dact.data(), a.gate.data(), a.up.data(), n * F, dgate.data(), dup.data());
  project_backward(l, kGate, dgate.data(), a.h2.data(), p.gate, H, F, dh.data(), false, a);
  project_backward(l, kUp, dup.data(), a.h2.data(), p.up, H, F, dh.data(), true, a);
  tp_.block_site(dh, {site++, Direction::backward});
  cpu::rmsnorm_backward<T>(dh.data(), a.x_mid.data(), params_.value(p.post_norm), a.rstd2.data(), n, H, dnorm.data(),
                           params_.grad(p.post_norm));
  cpu::add_inplace<T>(dx.data(), dnorm.data(), n * H);
  a.gate = {}, a.up = {}, a.act = {}, a.h2 = {}, a.x_mid = {};

  // Attention.
  std::vector<T> dattn(n * hq * D), dq(n * hq * D), dk(n * hkv * D), dv(n * hkv * D);
  project_backward(l, kO, dx.data(), a.attn.data(), p.o, hq * D, H, dattn.data(), false, a);
  cpu::attention_backward<T>(dattn.data(), a.q.data(), a.k.data(), a.v.data(), a.attn.data(), a.lse.data(),
                             batch_.batch, batch_.seq, hq, hkv, D, dq.data(), dk.data(), dv.data());
  cpu::rope_backward<T>(dq.data(), positions_.data(), n, hq, D, shape_.rope_base);
  cpu::rope_backward<T>(dk.data(), positions_.data(), n, hkv, D, shape_.rope_base);
  std::vector<T> dq_raw(dq.size()), dk_raw(dk.size());
  cpu::rmsnorm_backward<T>(dq.data(), a.q_raw.data(), params_.value(p.q_norm), a.q_rstd.data(), n * hq, D,
                           dq_raw.data(), norm_grad(l, false));
  cpu::rmsnorm_backward<T>(dk.data(), a.k_raw.data(), params_.value(p.k_norm), a.k_rstd.data(), n * hkv, D,
                           dk_raw.data(), norm_grad(l, true));
  project_backward(l, kQ, dq_raw.data(), a.h1.data(), p.q, H, hq * D, dh.data(), false, a);
  project_backward(l, kK, dk_raw.data(), a.h1.data(), p.k, H, hkv * D, dh.data(), true, a);
  project_backward(l, kV, dv.data(), a.h1.data(), p.v, H, hkv * D, dh.data(), true, a);
  tp_.block_site(dh, {site++, Direction::backward});
  cpu::rmsnorm_backward<T>(dh.data(), a.x_in.data(), params_.value(p.input_norm), a.rstd1.data(), n, H, dnorm.data(),
                           params_.grad(p.input_norm));
  cpu::add_inplace<T>(dx.data(), dnorm.data(), n * H);
  a = {};
}

template <class T>
void Qwen3Model<T>::set_int8_linear(const quant::Int8LinearConfig& cfg, const std::vector<std::string>& projections) {
  ECHO_CHECK((std::is_same_v<T, float>), "INT8 linear layers run in fp32 models only");
  int8_.reset();
  if (cfg.mode == config::LinearMode::bf16) return;
  int8_ = cfg;
  const auto& names = config::LinearConfig::kProjectionNames;
  for (int p = 0; p < kNumProj; ++p) int8_proj_[p] = projections.empty();
  for (const std::string& name : projections) {
    int found = -1;
    for (int p = 0; p < kNumProj; ++p)
      if (name == names[p]) found = p;
    ECHO_CHECK(found >= 0, "'linear.projections' names '{}', which is not a block projection", name);
    int8_proj_[found] = true;
  }
}

template <class T>
quant::LinearContext Qwen3Model<T>::linear_context(int64_t l, Proj proj, int64_t out) const {
  quant::LinearContext ctx;
  ctx.step = step_;
  ctx.layer = static_cast<uint32_t>(l);
  ctx.site = static_cast<uint32_t>(proj);
  ctx.token_offset = token_offset_;
  ctx.seq_len = batch_.seq;
  const bool row_parallel = proj == kO || proj == kDown;
  if (shape_.tp > 1) {
    ctx.tp_style = row_parallel ? quant::TpStyle::row : quant::TpStyle::column;
    ctx.tp = &tp_.reducer();
    // Column shards own output channels [rank * out, (rank + 1) * out) of the full layer.
    if (!row_parallel) ctx.channel_offset = static_cast<int64_t>(shape_.tp_rank) * out;
  }
  return ctx;
}

template <class T>
void Qwen3Model<T>::project(int64_t l, Proj proj, const T* x, size_t w, int64_t in, int64_t out, T* y, LayerActs& a) {
  const int64_t n = batch_.num_tokens();
  if constexpr (std::is_same_v<T, float>) {
    if (int8_ && int8_proj_[proj]) {
      quant::linear_forward(*int8_, linear_context(l, proj, out), x, params_.value(w), n, in, out, y, a.int8[proj]);
      return;
    }
  }
  linear<T>(x, params_.value(w), n, in, out, y);
}

template <class T>
void Qwen3Model<T>::project_backward(int64_t l, Proj proj, const T* dy, const T* x, size_t w, int64_t in, int64_t out,
                                     T* dx, bool accumulate_dx, LayerActs& a) {
  const int64_t n = batch_.num_tokens();
  if constexpr (std::is_same_v<T, float>) {
    if (int8_ && int8_proj_[proj]) {
      quant::linear_backward(*int8_, linear_context(l, proj, out), dy, x, params_.value(w), a.int8[proj], n, in, out,
                             dx, accumulate_dx, params_.grad(w));
      return;
    }
  }
  linear_dw<T>(dy, x, n, in, out, params_.grad(w));
  linear_dx<T>(dy, params_.value(w), n, in, out, dx, accumulate_dx);
}

template <class T>
double Qwen3Model<T>::forward_backward(const Batch& b, T loss_scale) {
  const double loss = forward(b, true);
  backward(loss_scale);
  return loss;
}

template class Qwen3Model<float>;
template class Qwen3Model<double>;

}  // namespace echo::model
