// Forward references of the CPU ops: RoPE against the Hugging Face formula and hand-worked
// values, attention against a naive masked softmax, causality, cross-entropy against a direct
// log-softmax (whole vocab and vocab-parallel shards run in threads), and float vs double.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "../support/thread_tp_group.h"
#include "backend/ops.h"
#include "core/error.h"
#include "ops_test_util.h"

namespace echo::cpu {
namespace {

using testing::cast_vec;
using testing::expect_close;
using testing::float_exact;
using testing::max_rel_error;
using testing::random_ints;
using testing::random_vec;

constexpr uint64_t kSeed = 777;
constexpr int32_t kIgnore = -100;

// ---- RoPE ---------------------------------------------------------------------------------------

// Hugging Face Qwen3, written as the Python does it: inv_freq = 1 / base^(arange(0, d, 2) / d),
// emb = cat(freqs, freqs), out = x * cos(emb) + rotate_half(x) * sin(emb), rotate_half = cat(-x2, x1).
std::vector<double> rope_hf_reference(const std::vector<double>& x, const std::vector<int32_t>& pos, int64_t tokens,
                                      int64_t heads, int64_t hd, double base) {
  const int64_t half = hd / 2;
  std::vector<double> out(x.size());
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> cos_e(hd), sin_e(hd);
    for (int64_t i = 0; i < hd; ++i) {
      const double inv_freq = 1.0 / std::pow(base, static_cast<double>(2 * (i % half)) / static_cast<double>(hd));
      cos_e[i] = std::cos(pos[t] * inv_freq);
      sin_e[i] = std::sin(pos[t] * inv_freq);
    }
    for (int64_t h = 0; h < heads; ++h) {
      const double* xh = x.data() + (t * heads + h) * hd;
      double* oh = out.data() + (t * heads + h) * hd;
      for (int64_t i = 0; i < hd; ++i) {
        const double rotated = i < half ? -xh[i + half] : xh[i - half];
        oh[i] = xh[i] * cos_e[i] + rotated * sin_e[i];
      }
    }
  }
  return out;
}

TEST(RopeRefTest, HandWorkedPositionOne) {
  // d = 4, base 10000: theta = (1, 0.01). Pairs (x0, x2) rotate by 1 rad, (x1, x3) by 0.01 rad.
  std::vector<double> x = {1.0, 2.0, 3.0, 4.0};
  const int32_t pos = 1;
  rope_forward<double>(x.data(), &pos, 1, 1, 4, 10000.0);
  const std::vector<double> expected = {1 * std::cos(1.0) - 3 * std::sin(1.0), 2 * std::cos(0.01) - 4 * std::sin(0.01),
                                        3 * std::cos(1.0) + 1 * std::sin(1.0), 4 * std::cos(0.01) + 2 * std::sin(0.01)};
  // The same numbers, worked by hand (cos 1 = 0.5403023058681398, sin 1 = 0.8414709848078965, ...).
  const std::vector<double> by_hand = {-1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994};
  expect_close(x, expected, 1e-15, 1e-15, "rope d=4 pos=1");
  expect_close(x, by_hand, 1e-15, 1e-15, "rope d=4 pos=1 by hand");
  // Position 0 is the identity.
  std::vector<double> y = {1.0, 2.0, 3.0, 4.0};
  const int32_t zero = 0;
  rope_forward<double>(y.data(), &zero, 1, 1, 4, 10000.0);
  EXPECT_EQ(y, (std::vector<double>{1.0, 2.0, 3.0, 4.0}));
}

TEST(RopeRefTest, MatchesHuggingFaceFormula) {
  const int64_t shapes[][3] = {{1, 1, 2}, {5, 3, 8}, {7, 2, 16}, {3, 4, 128}};
  for (double base : {10000.0, 1e6}) {
    for (const auto& s : shapes) {
      const int64_t tokens = s[0], heads = s[1], hd = s[2];
      const auto x = random_vec(tokens * heads * hd, kSeed, hd * 10 + heads);
      const auto pos = random_ints(tokens, kSeed, hd + 3, 0, 4095);
      const auto ref = rope_hf_reference(x, pos, tokens, heads, hd, base);
      auto y = x;
      rope_forward<double>(y.data(), pos.data(), tokens, heads, hd, base);
      const std::string what = "rope head_dim " + std::to_string(hd) + " base " + std::to_string(base);
      expect_close(y, ref, 1e-12, 1e-12, what);
      auto yf = cast_vec<float>(x);
      rope_forward<float>(yf.data(), pos.data(), tokens, heads, hd, base);
      expect_close(yf, ref, 1e-6, 1e-6, what + " float");
    }
  }
}

TEST(RopeRefTest, LargePositionsNeedNoCache) {
  const int64_t tokens = 6, heads = 2, hd = 8;
  const std::vector<int32_t> pos = {0, 1, 4095, 32768, 65535, 100000};
  const auto x = random_vec(tokens * heads * hd, kSeed, 51);
  const auto ref = rope_hf_reference(x, pos, tokens, heads, hd, 1e6);
  auto y = x;
  rope_forward<double>(y.data(), pos.data(), tokens, heads, hd, 1e6);
  // Angles up to 1e5 rad: the two ways of forming inv_freq differ by an ulp, i.e. ~1e-11 rad.
  expect_close(y, ref, 1e-9, 1e-9, "rope large positions");
  // Angles in double: the float op loses nothing to the phase, even at 1e5.
  auto yf = cast_vec<float>(x);
  rope_forward<float>(yf.data(), pos.data(), tokens, heads, hd, 1e6);
  expect_close(yf, ref, 1e-6, 1e-6, "rope large positions float");
  // Each (i, i + d/2) pair keeps its length, and the backward rotation undoes the forward.
  for (int64_t r = 0; r < tokens * heads; ++r)
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double before = std::hypot(x[r * hd + i], x[r * hd + i + hd / 2]);
      EXPECT_NEAR(std::hypot(y[r * hd + i], y[r * hd + i + hd / 2]), before, 1e-14 * (1 + before));
    }
  rope_backward<double>(y.data(), pos.data(), tokens, heads, hd, 1e6);
  expect_close(y, x, 1e-13, 1e-13, "rope backward(forward(x))");
}

TEST(RopeRefTest, RejectsOddHeadDim) {
  std::vector<double> x(3, 1.0);
  const int32_t pos = 2;
  EXPECT_THROW(rope_forward<double>(x.data(), &pos, 1, 1, 3, 1e6), echo::Error);
}

// ---- RMSNorm, SwiGLU, embedding -----------------------------------------------------------------

TEST(RmsNormRefTest, MatchesDefinition) {
  const std::vector<double> x = {1.0, 2.0, 3.0, 4.0, -0.5, 0.25, 2.0, -1.0};
  const std::vector<double> w = {1.0, 0.5, -2.0, 3.0};
  std::vector<double> out(8), rstd(2);
  rmsnorm_forward<double>(x.data(), w.data(), 2, 4, 1e-6, out.data(), rstd.data());
  // Row 0: mean(x^2) = 30 / 4 = 7.5; row 1: (0.25 + 0.0625 + 4 + 1) / 4 = 1.328125.
  const double r0 = 1.0 / std::sqrt(7.5 + 1e-6), r1 = 1.0 / std::sqrt(1.328125 + 1e-6);
  expect_close(rstd, {r0, r1}, 1e-15, 0.0, "rmsnorm rstd");
  std::vector<double> ref(8);
  for (int i = 0; i < 8; ++i) ref[i] = x[i] * (i < 4 ? r0 : r1) * w[i % 4];
  expect_close(out, ref, 1e-15, 0.0, "rmsnorm out");
}

TEST(SwigluRefTest, MatchesStableSigmoid) {
  const std::vector<double> gate = {1.0, -40.0, 40.0, 0.0, -1.5};
  const std::vector<double> up = {2.0, 1.0, 0.5, 3.0, -2.0};
  std::vector<double> out(5), ref(5);
  swiglu_forward<double>(gate.data(), up.data(), 5, out.data());
  // sigmoid in the form that cannot overflow: e^g / (1 + e^g) for g < 0, in long double.
  for (int i = 0; i < 5; ++i) {
    const long double g = gate[i], e = std::exp(-std::abs(g));
    const long double sig = g >= 0 ? 1 / (1 + e) : e / (1 + e);
    ref[i] = static_cast<double>(g * sig * up[i]);
  }
  expect_close(out, ref, 1e-14, 1e-300, "swiglu");
  EXPECT_NEAR(out[0], 1.4621171572600098, 1e-15);  // silu(1) * 2 = 2 / (1 + e^-1)
}

TEST(EmbeddingRefTest, ShardsSumToTheFullTable) {
  const int64_t vocab = 12, hidden = 3, n = 10;
  const auto table = random_vec(vocab * hidden, kSeed, 61);
  const auto tokens = random_ints(n, kSeed, 62, 0, vocab - 1);
  std::vector<double> full(n * hidden);
  embedding_forward<double>(tokens.data(), n, table.data(), 0, vocab, hidden, full.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < hidden; ++c) EXPECT_EQ(full[i * hidden + c], table[tokens[i] * hidden + c]);
  for (int shards : {2, 4}) {
    std::vector<double> sum(n * hidden, 0.0), part(n * hidden, 9.0);
    const int64_t local = vocab / shards;
    for (int s = 0; s < shards; ++s) {
      embedding_forward<double>(tokens.data(), n, table.data() + s * local * hidden, s * local, local, hidden,
                                part.data());
      for (int64_t i = 0; i < n; ++i) {
        const bool mine = tokens[i] >= s * local && tokens[i] < (s + 1) * local;
        for (int64_t c = 0; c < hidden; ++c) {
          if (!mine) {
            EXPECT_EQ(part[i * hidden + c], 0.0);
          }
          sum[i * hidden + c] += part[i * hidden + c];
        }
      }
    }
    EXPECT_EQ(sum, full) << shards << " shards";
  }
}

// ---- Attention ----------------------------------------------------------------------------------

struct AttnShape {
  int64_t batch, seq, n_q, n_kv, d;
};

// softmax(Q K^T / sqrt(d) + causal mask) V, one (batch, head, query) at a time, in long double.
void attention_naive(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                     const AttnShape& s, std::vector<double>& out, std::vector<double>& lse) {
  out.assign(s.batch * s.seq * s.n_q * s.d, 0.0);
  lse.assign(s.batch * s.n_q * s.seq, 0.0);
  const int64_t group = s.n_q / s.n_kv;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.n_q; ++h)
      for (int64_t i = 0; i < s.seq; ++i) {
        std::vector<long double> score(s.seq);
        for (int64_t j = 0; j < s.seq; ++j) {
          if (j > i) {
            score[j] = -std::numeric_limits<long double>::infinity();
            continue;
          }
          long double dotp = 0;
          for (int64_t c = 0; c < s.d; ++c)
            dotp += static_cast<long double>(q[((b * s.seq + i) * s.n_q + h) * s.d + c]) *
                    k[((b * s.seq + j) * s.n_kv + h / group) * s.d + c];
          score[j] = dotp / std::sqrt(static_cast<long double>(s.d));
        }
        long double denom = 0;
        for (int64_t j = 0; j < s.seq; ++j) denom += std::exp(score[j]);  // exp(-inf) = 0
        for (int64_t c = 0; c < s.d; ++c) {
          long double acc = 0;
          for (int64_t j = 0; j < s.seq; ++j)
            acc += std::exp(score[j]) / denom * v[((b * s.seq + j) * s.n_kv + h / group) * s.d + c];
          out[((b * s.seq + i) * s.n_q + h) * s.d + c] = static_cast<double>(acc);
        }
        lse[(b * s.n_q + h) * s.seq + i] = static_cast<double>(std::log(denom));
      }
}

const AttnShape kAttnShapes[] = {{1, 1, 1, 1, 2}, {2, 5, 4, 1, 8}, {1, 7, 4, 4, 2}, {2, 6, 6, 2, 16}, {1, 9, 2, 1, 4}};

TEST(AttentionRefTest, MatchesNaiveMaskedSoftmax) {
  for (const auto& s : kAttnShapes) {
    const uint64_t st = static_cast<uint64_t>(s.seq * 100 + s.n_q * 10 + s.d);
    const auto q = random_vec(s.batch * s.seq * s.n_q * s.d, kSeed, st, 1.5);
    const auto k = random_vec(s.batch * s.seq * s.n_kv * s.d, kSeed, st + 1, 1.5);
    const auto v = random_vec(s.batch * s.seq * s.n_kv * s.d, kSeed, st + 2);
    std::vector<double> ref_out, ref_lse;
    attention_naive(q, k, v, s, ref_out, ref_lse);
    std::vector<double> out(ref_out.size()), lse(ref_lse.size());
    attention_forward<double>(q.data(), k.data(), v.data(), s.batch, s.seq, s.n_q, s.n_kv, s.d, out.data(), lse.data());
    const std::string what = "attention seq " + std::to_string(s.seq) + " n_q " + std::to_string(s.n_q) + " n_kv " +
                             std::to_string(s.n_kv) + " d " + std::to_string(s.d);
    expect_close(out, ref_out, 1e-12, 1e-13, what + " out");
    expect_close(lse, ref_lse, 1e-12, 1e-13, what + " lse");
  }
}

TEST(AttentionRefTest, IsCausal) {
  const AttnShape s = {2, 8, 4, 2, 8};
  const int64_t row_q = s.n_q * s.d, row_kv = s.n_kv * s.d;
  auto q = random_vec(s.batch * s.seq * row_q, kSeed, 71);
  auto k = random_vec(s.batch * s.seq * row_kv, kSeed, 72);
  auto v = random_vec(s.batch * s.seq * row_kv, kSeed, 73);
  std::vector<double> out0(q.size()), lse0(s.batch * s.n_q * s.seq);
  attention_forward<double>(q.data(), k.data(), v.data(), s.batch, s.seq, s.n_q, s.n_kv, s.d, out0.data(), lse0.data());
  const int64_t changed = 5;  // change q, k and v of token 5 in every batch
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t c = 0; c < row_q; ++c) q[(b * s.seq + changed) * row_q + c] += 1.0;
    for (int64_t c = 0; c < row_kv; ++c) k[(b * s.seq + changed) * row_kv + c] -= 2.0;
    for (int64_t c = 0; c < row_kv; ++c) v[(b * s.seq + changed) * row_kv + c] += 3.0;
  }
  std::vector<double> out1(q.size()), lse1(lse0.size());
  attention_forward<double>(q.data(), k.data(), v.data(), s.batch, s.seq, s.n_q, s.n_kv, s.d, out1.data(), lse1.data());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.seq; ++i) {
      bool same = true;
      for (int64_t c = 0; c < row_q; ++c)
        same &= out0[(b * s.seq + i) * row_q + c] == out1[(b * s.seq + i) * row_q + c];
      for (int64_t h = 0; h < s.n_q; ++h)
        same &= lse0[(b * s.n_q + h) * s.seq + i] == lse1[(b * s.n_q + h) * s.seq + i];
      // Earlier tokens: bitwise unchanged. The changed token and later ones: changed.
      EXPECT_EQ(same, i < changed) << "batch " << b << " token " << i;
    }
}

// ---- Cross-entropy ------------------------------------------------------------------------------

// Direct log-softmax over the whole vocab: loss = mean(-log softmax[target]) over counted tokens,
// dlogits = (softmax - onehot) * dloss / count.
void cross_entropy_naive(const std::vector<double>& logits, const std::vector<int32_t>& targets, int64_t vocab,
                         double dloss, double& loss, std::vector<double>& lse, std::vector<double>& dlogits) {
  const int64_t tokens = static_cast<int64_t>(targets.size());
  int64_t count = 0;
  for (int32_t t : targets) count += t != kIgnore;
  loss = 0;
  lse.assign(tokens, 0.0);
  dlogits.assign(tokens * vocab, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    long double denom = 0;
    for (int64_t j = 0; j < vocab; ++j) denom += std::exp(static_cast<long double>(logits[t * vocab + j]));
    lse[t] = static_cast<double>(std::log(denom));
    if (targets[t] == kIgnore) continue;
    loss -= static_cast<double>(std::log(std::exp(static_cast<long double>(logits[t * vocab + targets[t]])) / denom));
    for (int64_t j = 0; j < vocab; ++j)
      dlogits[t * vocab + j] = static_cast<double>(
          (std::exp(static_cast<long double>(logits[t * vocab + j])) / denom - (j == targets[t] ? 1 : 0)) * dloss /
          count);
  }
  if (count > 0) loss /= count;
}

struct CeCase {
  int64_t tokens, vocab;
};

TEST(CrossEntropyRefTest, MatchesLogSoftmaxOnTheFullVocab) {
  for (const CeCase c : {CeCase{1, 5}, CeCase{6, 24}, CeCase{9, 40}}) {
    const auto logits = random_vec(c.tokens * c.vocab, kSeed, 80 + c.vocab, 3.0);
    auto targets = random_ints(c.tokens, kSeed, 81 + c.vocab, 0, static_cast<int32_t>(c.vocab - 1));
    if (c.tokens > 3) targets[2] = kIgnore;
    double ref_loss;
    std::vector<double> ref_lse, ref_dlogits;
    cross_entropy_naive(logits, targets, c.vocab, 0.5, ref_loss, ref_lse, ref_dlogits);
    std::vector<double> lse(c.tokens), dlogits(c.tokens * c.vocab, 4.0);
    const double loss = cross_entropy_forward<double>(logits.data(), targets.data(), c.tokens, 0, c.vocab, kIgnore,
                                                      make_local_reducer(), lse.data());
    cross_entropy_backward<double>(logits.data(), targets.data(), lse.data(), c.tokens, 0, c.vocab, kIgnore,
                                   count_targets(targets.data(), c.tokens, kIgnore), 0.5, dlogits.data());
    EXPECT_NEAR(loss, ref_loss, 1e-13 * std::abs(ref_loss)) << "vocab " << c.vocab;
    expect_close(lse, ref_lse, 1e-13, 0.0, "cross_entropy lse");
    expect_close(dlogits, ref_dlogits, 1e-12, 1e-15, "cross_entropy dlogits");
  }
}

using echo::testing::ThreadTpGroup;

struct ShardedResult {
  std::vector<double> loss;     // per shard
  std::vector<double> lse;      // per shard, concatenated
  std::vector<double> dlogits;  // (tokens, vocab), assembled from the shards' columns
};

// `bounds` has shards + 1 entries: shard s holds vocab columns [bounds[s], bounds[s + 1]).
ShardedResult run_sharded(const std::vector<double>& logits, const std::vector<int32_t>& targets, int64_t vocab,
                          const std::vector<int64_t>& bounds, double dloss) {
  const int shards = static_cast<int>(bounds.size()) - 1;
  const int64_t tokens = static_cast<int64_t>(targets.size());
  ShardedResult res{std::vector<double>(shards), std::vector<double>(shards * tokens),
                    std::vector<double>(tokens * vocab)};
  ThreadTpGroup group(shards);
  const int64_t count = count_targets(targets.data(), tokens, kIgnore);
  std::vector<std::thread> threads;
  for (int s = 0; s < shards; ++s) {
    threads.emplace_back([&, s] {
      const int64_t begin = bounds[s], local = bounds[s + 1] - bounds[s];
      std::vector<double> shard(tokens * local), dshard(tokens * local), lse(tokens);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < local; ++j) shard[t * local + j] = logits[t * vocab + begin + j];
      res.loss[s] = cross_entropy_forward<double>(shard.data(), targets.data(), tokens, begin, local, kIgnore,
                                                  group.reducer(s), lse.data());
      cross_entropy_backward<double>(shard.data(), targets.data(), lse.data(), tokens, begin, local, kIgnore, count,
                                     dloss, dshard.data());
      for (int64_t t = 0; t < tokens; ++t) {
        res.lse[s * tokens + t] = lse[t];
        for (int64_t j = 0; j < local; ++j) res.dlogits[t * vocab + begin + j] = dshard[t * local + j];
      }
    });
  }
  for (auto& th : threads) th.join();
  return res;
}

TEST(CrossEntropyRefTest, VocabParallelShardsMatchTheFullVocab) {
  const int64_t tokens = 7, vocab = 24;
  const auto logits = random_vec(tokens * vocab, kSeed, 91, 3.0);
  auto targets = random_ints(tokens, kSeed, 92, 0, vocab - 1);
  targets[3] = kIgnore;
  targets[0] = 23;  // the last column: owned by the last shard
  targets[1] = 0;   // the first column
  double ref_loss;
  std::vector<double> ref_lse, ref_dlogits;
  cross_entropy_naive(logits, targets, vocab, 1.0, ref_loss, ref_lse, ref_dlogits);
  const std::vector<std::vector<int64_t>> splits = {{0, 12, 24}, {0, 6, 12, 18, 24}, {0, 5, 13, 14, 24}};
  for (const auto& bounds : splits) {
    const auto res = run_sharded(logits, targets, vocab, bounds, 1.0);
    const std::string what = std::to_string(bounds.size() - 1) + " shards";
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
      EXPECT_NEAR(res.loss[s], ref_loss, 1e-13 * ref_loss) << what << ", shard " << s;
      EXPECT_EQ(res.loss[s], res.loss[0]) << what << ": every shard returns the same loss";
      expect_close(std::vector<double>(res.lse.begin() + s * tokens, res.lse.begin() + (s + 1) * tokens), ref_lse,
                   1e-13, 0.0, what + " lse");
    }
    expect_close(res.dlogits, ref_dlogits, 1e-12, 1e-15, what + " dlogits");
  }
}

TEST(CrossEntropyRefTest, IgnoreIndex) {
  const int64_t tokens = 6, vocab = 10;
  const auto logits = random_vec(tokens * vocab, kSeed, 95, 2.0);
  auto targets = random_ints(tokens, kSeed, 96, 0, vocab - 1);
  // The loss over the counted tokens only equals the loss with the others ignored.
  auto with_ignored = targets;
  with_ignored[1] = with_ignored[4] = kIgnore;
  std::vector<double> kept_logits, lse(tokens), lse_kept(4);
  std::vector<int32_t> kept_targets;
  for (int64_t t = 0; t < tokens; ++t) {
    if (with_ignored[t] == kIgnore) continue;
    kept_targets.push_back(targets[t]);
    kept_logits.insert(kept_logits.end(), logits.begin() + t * vocab, logits.begin() + (t + 1) * vocab);
  }
  const TpReducer local = make_local_reducer();
  const double loss =
      cross_entropy_forward<double>(logits.data(), with_ignored.data(), tokens, 0, vocab, kIgnore, local, lse.data());
  const double loss_kept = cross_entropy_forward<double>(kept_logits.data(), kept_targets.data(), 4, 0, vocab, kIgnore,
                                                         local, lse_kept.data());
  EXPECT_NEAR(loss, loss_kept, 1e-14 * loss_kept);
  EXPECT_EQ(count_targets(with_ignored.data(), tokens, kIgnore), 4);
  std::vector<double> dlogits(tokens * vocab, 8.0);
  cross_entropy_backward<double>(logits.data(), with_ignored.data(), lse.data(), tokens, 0, vocab, kIgnore, 4, 1.0,
                                 dlogits.data());
  for (int64_t t : {1, 4})
    for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(dlogits[t * vocab + j], 0.0) << "ignored token " << t;
  // Rows of counted tokens sum to zero (softmax minus one-hot).
  for (int64_t t : {0, 2, 3, 5}) {
    double row_sum = 0;
    for (int64_t j = 0; j < vocab; ++j) row_sum += dlogits[t * vocab + j];
    EXPECT_NEAR(row_sum, 0.0, 1e-15);
  }

  // No token counts: loss 0, zero gradient.
  const std::vector<int32_t> none(tokens, kIgnore);
  EXPECT_EQ(cross_entropy_forward<double>(logits.data(), none.data(), tokens, 0, vocab, kIgnore, local, lse.data()),
            0.0);
  EXPECT_EQ(count_targets(none.data(), tokens, kIgnore), 0);
  cross_entropy_backward<double>(logits.data(), none.data(), lse.data(), tokens, 0, vocab, kIgnore, 0, 1.0,
                                 dlogits.data());
  for (double g : dlogits) EXPECT_EQ(g, 0.0);
}

TEST(CrossEntropyRefTest, RejectsTargetsOutsideTheVocab) {
  const int64_t tokens = 2, vocab = 4;
  const auto logits = random_vec(tokens * vocab, kSeed, 97);
  std::vector<double> lse(tokens), dlogits(tokens * vocab);
  const TpReducer local = make_local_reducer();
  const std::vector<int32_t> too_big = {1, 4}, negative = {-1, 2};
  EXPECT_THROW(
      cross_entropy_forward<double>(logits.data(), too_big.data(), tokens, 0, vocab, kIgnore, local, lse.data()),
      echo::Error);
  EXPECT_THROW(
      cross_entropy_forward<double>(logits.data(), negative.data(), tokens, 0, vocab, kIgnore, local, lse.data()),
      echo::Error);
  const std::vector<int32_t> ok = {1, 2};
  cross_entropy_forward<double>(logits.data(), ok.data(), tokens, 0, vocab, kIgnore, local, lse.data());
  // count smaller than the counted tokens is a caller bug.
  EXPECT_THROW(cross_entropy_backward<double>(logits.data(), ok.data(), lse.data(), tokens, 0, vocab, kIgnore, 1, 1.0,
                                              dlogits.data()),
               echo::Error);
}

// ---- float vs double ----------------------------------------------------------------------------

constexpr double kFloatRel = 1e-5;  // normwise: max|f - d| / max|d|

TEST(FloatVsDoubleTest, EveryOpAgreesWithinOneEMinusFive) {
  // RMSNorm (rows, dim) = (5, 64).
  {
    const int64_t rows = 5, dim = 64;
    const auto x = float_exact(random_vec(rows * dim, kSeed, 101)), w = float_exact(random_vec(dim, kSeed, 102));
    const auto dy = float_exact(random_vec(rows * dim, kSeed, 103));
    std::vector<double> out(rows * dim), rstd(rows), dx(rows * dim), dw(dim, 0.0);
    rmsnorm_forward<double>(x.data(), w.data(), rows, dim, 1e-6, out.data(), rstd.data());
    rmsnorm_backward<double>(dy.data(), x.data(), w.data(), rstd.data(), rows, dim, dx.data(), dw.data());
    const auto xf = cast_vec<float>(x), wf = cast_vec<float>(w), dyf = cast_vec<float>(dy);
    std::vector<float> outf(rows * dim), rstdf(rows), dxf(rows * dim), dwf(dim, 0.0f);
    rmsnorm_forward<float>(xf.data(), wf.data(), rows, dim, 1e-6f, outf.data(), rstdf.data());
    rmsnorm_backward<float>(dyf.data(), xf.data(), wf.data(), rstdf.data(), rows, dim, dxf.data(), dwf.data());
    EXPECT_LE(max_rel_error(outf, out), kFloatRel) << "rmsnorm out";
    EXPECT_LE(max_rel_error(dxf, dx), kFloatRel) << "rmsnorm dx";
    EXPECT_LE(max_rel_error(dwf, dw), kFloatRel) << "rmsnorm dw";
  }
  // RoPE (tokens, heads, head_dim) = (4, 2, 16).
  {
    const int64_t tokens = 4, heads = 2, hd = 16;
    const auto x = float_exact(random_vec(tokens * heads * hd, kSeed, 111));
    const auto pos = random_ints(tokens, kSeed, 112, 0, 30000);
    auto y = x;
    auto yf = cast_vec<float>(x);
    rope_forward<double>(y.data(), pos.data(), tokens, heads, hd, 1e6);
    rope_forward<float>(yf.data(), pos.data(), tokens, heads, hd, 1e6);
    EXPECT_LE(max_rel_error(yf, y), kFloatRel) << "rope forward";
    rope_backward<double>(y.data(), pos.data(), tokens, heads, hd, 1e6);
    rope_backward<float>(yf.data(), pos.data(), tokens, heads, hd, 1e6);
    EXPECT_LE(max_rel_error(yf, y), kFloatRel) << "rope backward";
  }
  // Attention (batch, seq, n_q, n_kv, d) = (2, 12, 4, 2, 16).
  {
    const AttnShape s = {2, 12, 4, 2, 16};
    const auto q = float_exact(random_vec(s.batch * s.seq * s.n_q * s.d, kSeed, 121));
    const auto k = float_exact(random_vec(s.batch * s.seq * s.n_kv * s.d, kSeed, 122));
    const auto v = float_exact(random_vec(s.batch * s.seq * s.n_kv * s.d, kSeed, 123));
    const auto dy = float_exact(random_vec(q.size(), kSeed, 124));
    std::vector<double> out(q.size()), lse(s.batch * s.n_q * s.seq), dq(q.size()), dk(k.size()), dv(v.size());
    attention_forward<double>(q.data(), k.data(), v.data(), s.batch, s.seq, s.n_q, s.n_kv, s.d, out.data(), lse.data());
    attention_backward<double>(dy.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), s.batch, s.seq, s.n_q,
                               s.n_kv, s.d, dq.data(), dk.data(), dv.data());
    const auto qf = cast_vec<float>(q), kf = cast_vec<float>(k), vf = cast_vec<float>(v), dyf = cast_vec<float>(dy);
    std::vector<float> outf(q.size()), lsef(lse.size()), dqf(q.size()), dkf(k.size()), dvf(v.size());
    attention_forward<float>(qf.data(), kf.data(), vf.data(), s.batch, s.seq, s.n_q, s.n_kv, s.d, outf.data(),
                             lsef.data());
    attention_backward<float>(dyf.data(), qf.data(), kf.data(), vf.data(), outf.data(), lsef.data(), s.batch, s.seq,
                              s.n_q, s.n_kv, s.d, dqf.data(), dkf.data(), dvf.data());
    EXPECT_LE(max_rel_error(outf, out), kFloatRel) << "attention out";
    EXPECT_LE(max_rel_error(lsef, lse), kFloatRel) << "attention lse";
    EXPECT_LE(max_rel_error(dqf, dq), kFloatRel) << "attention dq";
    EXPECT_LE(max_rel_error(dkf, dk), kFloatRel) << "attention dk";
    EXPECT_LE(max_rel_error(dvf, dv), kFloatRel) << "attention dv";
  }
  // SwiGLU (n) = 200.
  {
    const int64_t n = 200;
    const auto g = float_exact(random_vec(n, kSeed, 131, 3.0)), u = float_exact(random_vec(n, kSeed, 132));
    const auto dy = float_exact(random_vec(n, kSeed, 133));
    std::vector<double> out(n), dg(n), du(n);
    swiglu_forward<double>(g.data(), u.data(), n, out.data());
    swiglu_backward<double>(dy.data(), g.data(), u.data(), n, dg.data(), du.data());
    const auto gf = cast_vec<float>(g), uf = cast_vec<float>(u), dyf = cast_vec<float>(dy);
    std::vector<float> outf(n), dgf(n), duf(n);
    swiglu_forward<float>(gf.data(), uf.data(), n, outf.data());
    swiglu_backward<float>(dyf.data(), gf.data(), uf.data(), n, dgf.data(), duf.data());
    EXPECT_LE(max_rel_error(outf, out), kFloatRel) << "swiglu out";
    EXPECT_LE(max_rel_error(dgf, dg), kFloatRel) << "swiglu dgate";
    EXPECT_LE(max_rel_error(duf, du), kFloatRel) << "swiglu dup";
  }
  // Cross-entropy (tokens, vocab) = (8, 50) and gemm (9, 7, 33).
  {
    const int64_t tokens = 8, vocab = 50;
    const auto logits = float_exact(random_vec(tokens * vocab, kSeed, 141, 3.0));
    auto targets = random_ints(tokens, kSeed, 142, 0, vocab - 1);
    targets[5] = kIgnore;
    const int64_t count = count_targets(targets.data(), tokens, kIgnore);
    std::vector<double> lse(tokens), dl(tokens * vocab);
    const double loss = cross_entropy_forward<double>(logits.data(), targets.data(), tokens, 0, vocab, kIgnore,
                                                      make_local_reducer(), lse.data());
    cross_entropy_backward<double>(logits.data(), targets.data(), lse.data(), tokens, 0, vocab, kIgnore, count, 1.0,
                                   dl.data());
    const auto lf = cast_vec<float>(logits);
    std::vector<float> lsef(tokens), dlf(tokens * vocab);
    const double lossf = cross_entropy_forward<float>(lf.data(), targets.data(), tokens, 0, vocab, kIgnore,
                                                      make_local_reducer(), lsef.data());
    cross_entropy_backward<float>(lf.data(), targets.data(), lsef.data(), tokens, 0, vocab, kIgnore, count, 1.0f,
                                  dlf.data());
    EXPECT_LE(std::abs(lossf - loss), kFloatRel * loss) << "cross_entropy loss";
    EXPECT_LE(max_rel_error(dlf, dl), kFloatRel) << "cross_entropy dlogits";

    const int64_t m = 9, n = 7, kk = 33;
    const auto a = float_exact(random_vec(m * kk, kSeed, 151)), b = float_exact(random_vec(kk * n, kSeed, 152));
    std::vector<double> c(m * n);
    std::vector<float> cf(m * n);
    gemm<double>(false, true, m, n, kk, 1.0, a.data(), b.data(), 0.0, c.data());
    gemm<float>(false, true, m, n, kk, 1.0f, cast_vec<float>(a).data(), cast_vec<float>(b).data(), 0.0f, cf.data());
    EXPECT_LE(max_rel_error(cf, c), kFloatRel) << "gemm";
  }
}

}  // namespace
}  // namespace echo::cpu
