// attend/distributed/ring_attention.hpp — sequence-parallel attention over MPI: each rank holds a contiguous shard of
// one sequence's queries, keys and values, and gets back its shard of the output (and lse), equal to
// scaled_dot_product_attention over the whole sequence.
//
//   queries (batch, n_r, num_heads * d), keys (batch, n_r, num_kv_heads * d), values (batch, n_r, num_kv_heads * dv)
//   -> output (batch, n_r, num_heads * dv); lse (batch, n_r, num_heads)
//
// Rank r's shard is positions [n_0 + ... + n_{r-1}, ... + n_r) of the sequence; the n_r may differ. The mask is one of
// no mask, per-batch valid lengths, causal, or valid lengths && causal, on the whole sequence's positions; the score
// options are the scale, the softcap and ALiBi (an additive bias of (queries, keys) would not be sharded: refused).
//
// How (detail/ring_layout.hpp for the plan):
// 1. One exchange (MPI_Alltoallv) moves each rank's queries, keys and values to the spans it works on: its own shard,
//    or under a causal mask the zigzag pair of chunks that gives every rank the same number of scores.
// 2. P steps around the ring: at step s a rank holds the keys and values of rank r - s's spans, sends them on to
//    r + 1 and receives r - s - 1's from r - 1 (non-blocking, polled between the core's calls) while it attends its
//    queries to them with the single-process core (detail/core/attention.hpp); each block's output and lse merge into
//    the running ones by their log-sum-exp. A rank holds at most two blocks of keys and values at a time.
// 3. One exchange moves the output and lse back to the caller's shards.
// The backward pass runs the same ring from O, lse and dO: dQ stays, and the dK and dV of each block travel with it
// and reach their home after the last step (FlashAttention-2's rule on each block: P = exp(s - lse) with the global
// lse, D = rowsum(dO * O) with the global O).
//
// A query that sees no key at all (valid length 0) follows the mask's FullyMasked rule as in one process: a zero row,
// or d2l's mean of every value of the sequence (one allreduce). Every check is collective: a rank's bad argument, or
// arguments that differ across ranks, make every rank throw std::invalid_argument with the same message, so none is
// left waiting. On a communicator of one rank the call is scaled_dot_product_attention's.
#pragma once

#include <attend/attention_gradients.hpp>
#include <attend/config.hpp>
#include <attend/detail/core/attention.hpp>
#include <attend/detail/ring_layout.hpp>
#include <attend/distributed/collective.hpp>
#include <attend/mask.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <attend/score_options.hpp>
#include <attend/tensor.hpp>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace ring {

// What the ranks agreed on for one call.
struct Plan {
  int rank = 0, ranks = 1;
  Index batch = 0, heads = 0, kv_heads = 0, dim = 0, value_dim = 0, total = 0;
  bool causal = false;
  std::vector<Index> lens;  // per batch row, on the whole sequence; empty without valid lengths
  FullyMasked rule = FullyMasked::uniform;
  Layout shards, work;

  // Columns of Q, K, V and O.
  Index cq() const { return heads * dim; }
  Index ck() const { return kv_heads * dim; }
  Index cv() const { return kv_heads * value_dim; }
  Index co() const { return heads * value_dim; }
  const std::vector<Span>& mine() const { return work[static_cast<std::size_t>(rank)]; }
  // The block of keys and values of rank r's work, (batch, its positions, ck + cv) keys first: its elements.
  Index block_size(int r) const { return batch * positions(work[static_cast<std::size_t>(r)]) * (ck() + cv()); }
  Index largest_positions() const {
    Index largest = 0;
    for (const auto& spans : work) largest = std::max(largest, positions(spans));
    return largest;
  }
  Index largest_block() const { return batch * largest_positions() * (ck() + cv()); }
  // At step s this rank holds the block of owner(s); the next rank on the ring, and the one before.
  int owner(int step) const { return (rank - step + ranks) % ranks; }
  int after() const { return (rank + 1) % ranks; }
  int before() const { return (rank + ranks - 1) % ranks; }
};

// One turn of the ring at `step`: posts the send of `held` (a block laid out as owner(step)'s keys and values) to the
// next rank and the receipt into `arriving` of the previous rank's, which holds owner(step + 1)'s.
template <class Scalar>
void pass(MPI_Comm comm, const Plan& p, int step, int tag, const Scalar* held, Scalar* arriving,
          std::vector<MPI_Request>& requests) {
  requests.resize(2);
  MPI_Irecv(arriving, static_cast<int>(p.block_size(p.owner(step + 1))), mpi_type<Scalar>(), p.before(), tag, comm,
            &requests[0]);
  MPI_Isend(held, static_cast<int>(p.block_size(p.owner(step))), mpi_type<Scalar>(), p.after(), tag, comm,
            &requests[1]);
}

// The bits of a Scalar, for comparing options across ranks.
template <class Scalar>
long long bits_of(Scalar x) {
  double wide = static_cast<double>(x);
  long long bits = 0;
  std::memcpy(&bits, &wide, sizeof bits);
  return bits;
}

// The local checks of one rank's arguments and the collective ones across ranks; the plan every rank then follows.
template <class Scalar>
Plan plan(MPI_Comm comm, const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
          Index num_heads, Index num_kv_heads, const Mask& mask, const ScoreOptions<Scalar>& options,
          const char* where) {
  Plan p;
  p.rank = comm_rank(comm);
  p.ranks = comm_size(comm);
  AttentionShape s{};
  std::string problem;
  try {
    s = attention_shape<Scalar>(queries, num_heads, num_kv_heads, where);
    require_keys_values<Scalar>(keys, values, s, where);
    require(keys.dimension(1) == s.queries, where, ": keys must hold the queries' shard of the sequence, ", s.queries,
            " positions, got ", keys.dimension(1));
    require(!mask.has_window() && !mask.has_elementwise(), where,
            ": mask must be none, per-batch valid lengths, causal or both (a window or keep tensor is not sharded)");
    require(mask.valid_lens().empty() || mask.valid_lens().kind() == ValidLens::Kind::per_batch, where,
            ": mask's valid lengths must be per batch row (per-query lengths are not sharded)");
    require(options.bias.size() == 0, where,
            ": options.bias must be empty (a bias of (queries, keys) scores is not sharded), got ",
            shape_text(options.bias.dimensions()));
    require_score_options(options, s, where);
  } catch (const std::invalid_argument& e) {
    problem = e.what();
  }
  require_everywhere(comm, problem, where);

  const ValidLens& lens = mask.valid_lens();
  long long lens_sum = 0, lens_weighted = 0, slopes_weighted = 0;
  for (Index b = 0; !lens.empty() && b < lens.batch(); ++b) {
    lens_sum += lens.length(b, 0);
    lens_weighted += lens.length(b, 0) * (b + 1);
  }
  for (std::size_t h = 0; h < options.alibi_slopes.size(); ++h)
    slopes_weighted += bits_of(options.alibi_slopes[h]) ^ static_cast<long long>(h * 0x9E3779B97F4A7C15ull);
  require_same(comm,
               {{"queries.dimension(0) (batch)", s.batch},
                {"queries.dimension(2)", queries.dimension(2)},
                {"keys.dimension(2)", keys.dimension(2)},
                {"values.dimension(2)", values.dimension(2)},
                {"num_heads", num_heads},
                {"num_kv_heads", num_kv_heads},
                {"mask.is_causal()", mask.is_causal()},
                {"the mask's FullyMasked rule", static_cast<long long>(mask.fully_masked())},
                {"the number of valid lengths", lens.empty() ? -1 : lens.batch()},
                {"the sum of the valid lengths", lens_sum},
                {"the valid lengths (weighted by batch row)", lens_weighted},
                {"options.scale (its bits)", bits_of(options.scale)},
                {"options.softcap (its bits)", bits_of(options.softcap)},
                {"options.alibi_slopes.size()", static_cast<long long>(options.alibi_slopes.size())},
                {"options.alibi_slopes (their bits)", slopes_weighted}},
               where);

  std::vector<long long> lengths(static_cast<std::size_t>(p.ranks));
  const long long mine = queries.dimension(1);
  MPI_Allgather(&mine, 1, MPI_LONG_LONG, lengths.data(), 1, MPI_LONG_LONG, comm);
  std::vector<Index> shard_lengths(lengths.begin(), lengths.end());
  for (Index n : shard_lengths) p.total += n;
  // The valid lengths are alike on every rank: this check gives every rank the same answer.
  mask.require_shape(s.batch, p.total, p.total, where);

  p.batch = s.batch;
  p.heads = s.heads;
  p.kv_heads = s.kv_heads;
  p.dim = s.dim;
  p.value_dim = s.value_dim;
  p.causal = mask.is_causal();
  p.rule = mask.fully_masked();
  for (Index b = 0; !lens.empty() && b < s.batch; ++b) p.lens.push_back(lens.length(b, 0));
  p.shards = shards(shard_lengths);
  p.work = p.causal ? zigzag(p.total, p.ranks) : p.shards;
  return p;
}

// Where span i starts in a buffer of spans, each (batch, span, width): its offset in positions.
inline Index offset_of(const std::vector<Span>& spans, std::size_t i) {
  Index before = 0;
  for (std::size_t k = 0; k < i; ++k) before += spans[k].size();
  return before;
}

// Moves rows of `width` Scalars from layout `from` to layout `to` (one MPI_Alltoallv): this rank's rows in `from` are
// `source`, its spans in order, each (batch, span, width); `target` receives its spans of `to` likewise.
template <class Scalar>
void exchange(MPI_Comm comm, const Layout& from, const Layout& to, Index batch, Index width, const Scalar* source,
              Scalar* target) {
  if (width == 0 || batch == 0) return;
  const int rank = comm_rank(comm), ranks = comm_size(comm);
  const auto me = static_cast<std::size_t>(rank);
  // Calls visit(offset of the rows in the `from` buffer, in the `to` buffer, rows) for each run of rows rank `at` in
  // `from` passes to rank `into` in `to`, in the order both sides agree on.
  const auto runs = [&](std::size_t at, std::size_t into, auto&& visit) {
    for (std::size_t t = 0; t < to[into].size(); ++t)
      for (std::size_t f = 0; f < from[at].size(); ++f) {
        const Span& T = to[into][t];
        const Span& F = from[at][f];
        const Index begin = std::max(T.begin, F.begin), end = std::min(T.end, F.end);
        if (begin >= end) continue;
        const Index f0 = offset_of(from[at], f), t0 = offset_of(to[into], t);
        for (Index b = 0; b < batch; ++b)
          visit(batch * f0 + b * F.size() + begin - F.begin, batch * t0 + b * T.size() + begin - T.begin, end - begin);
      }
  };
  std::vector<int> send_counts(static_cast<std::size_t>(ranks)), send_at(send_counts.size());
  std::vector<int> receive_counts(send_counts.size()), receive_at(send_counts.size());
  long long sent = 0, received = 0;
  for (std::size_t r = 0; r < send_counts.size(); ++r) {
    send_at[r] = static_cast<int>(sent);
    receive_at[r] = static_cast<int>(received);
    runs(me, r, [&](Index, Index, Index rows) { sent += rows; });
    runs(r, me, [&](Index, Index, Index rows) { received += rows; });
    require(sent <= INT_MAX && received <= INT_MAX, "ring attention: more than INT_MAX rows to exchange");
    send_counts[r] = static_cast<int>(sent) - send_at[r];
    receive_counts[r] = static_cast<int>(received) - receive_at[r];
  }
  std::vector<Scalar> out(static_cast<std::size_t>(sent * width)), in(static_cast<std::size_t>(received * width));
  Scalar* packed = out.data();
  for (std::size_t r = 0; r < send_counts.size(); ++r)
    runs(me, r, [&](Index f, Index, Index rows) {
      packed = std::copy(source + f * width, source + (f + rows) * width, packed);
    });
  MPI_Datatype row;
  MPI_Type_contiguous(static_cast<int>(width), mpi_type<Scalar>(), &row);
  MPI_Type_commit(&row);
  MPI_Alltoallv(out.data(), send_counts.data(), send_at.data(), row, in.data(), receive_counts.data(),
                receive_at.data(), row, comm);
  MPI_Type_free(&row);
  const Scalar* unpacked = in.data();
  for (std::size_t r = 0; r < send_counts.size(); ++r)
    runs(r, me, [&](Index, Index t, Index rows) {
      std::copy(unpacked, unpacked + rows * width, target + t * width);
      unpacked += rows * width;
    });
}

// One call of the core: queries at `queries`, a piece of span i of this rank's work, against keys at `keys`, a part of
// span j of the block held, under `mask` (FullyMasked::zero: a row that sees none of these keys adds nothing to the
// merge).
struct BlockCall {
  Span queries, keys;
  Mask mask;
};

// The core's calls for this rank's span `queries` against the held block's span `keys`: the queries in pieces of
// tuning::ring_query_rows (the messages are polled between calls), each against the keys some of its queries see.
inline std::vector<BlockCall> block_calls(const Plan& p, const Span& queries, const Span& keys) {
  std::vector<BlockCall> calls;
  if (keys.empty()) return calls;
  for (const Span& q : pieces(queries, tuning::ring_query_rows)) {
    BlockCall call{q, keys, Mask{}};
    if (p.causal) {
      const CausalBlock seen = causal_block(q, keys);
      if (seen.keys.empty()) continue;
      call.keys = seen.keys;
      if (!seen.whole) call.mask = Mask::window(p.total, seen.right);
    }
    if (!p.lens.empty()) {
      std::vector<Index> local(p.lens.size());
      bool any = false;
      for (std::size_t b = 0; b < local.size(); ++b) {
        local[b] = std::clamp(p.lens[b] - call.keys.begin, Index(0), call.keys.size());
        any = any || local[b] > 0;
      }
      if (!any) continue;
      call.mask = call.mask && Mask(ValidLens::per_batch(std::move(local)));
    }
    call.mask = call.mask.when_fully_masked(FullyMasked::zero);
    calls.push_back(std::move(call));
  }
  return calls;
}

// The row, in a buffer of spans each (batch, span, width), of batch row b's first position of `part`, a part of span i.
inline Index row_of(const std::vector<Span>& spans, std::size_t i, const Span& part, Index batch, Index b) {
  return batch * offset_of(spans, i) + b * spans[i].size() + part.begin - spans[i].begin;
}

// The heads, from column `column`, of positions `part` of span i of a buffer of spans each (batch, span, width).
template <class Element>
Heads<Element> part_heads(Element* buffer, const std::vector<Span>& spans, std::size_t i, const Span& part, Index batch,
                          Index width, Index count, Index dim) {
  return Heads<Element>{
      buffer + row_of(spans, i, part, batch, 0) * width, width, spans[i].size(), batch, part.size(), count, dim, dim};
}

// The heads of a contiguous (batch, rows, count * dim).
template <class Element>
Heads<Element> dense_heads(Element* data, Index batch, Index rows, Index count, Index dim) {
  return Heads<Element>{data, count * dim, rows, batch, rows, count, dim, dim};
}

// to[row_of(b) ...] += from[b ...] for each batch row: `rows` rows of `width` per batch row.
template <class Scalar, class RowOf>
void add_rows(Scalar* to, const Scalar* from, Index batch, Index rows, Index width, RowOf row_of_batch) {
  for (Index b = 0; b < batch; ++b) {
    Scalar* y = to + row_of_batch(b) * width;
    const Scalar* x = from + b * rows * width;
    for (Index e = 0; e < rows * width; ++e) y[e] += x[e];
  }
}

// The core's call for queries at `q` against keys at `k`: the score rule with ALiBi's positions on the sequence.
template <class Scalar>
core::Call<Scalar> block_call(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                              const Mask& mask, const ScoreOptions<Scalar>& options, const Span& q, const Span& k) {
  core::Call<Scalar> call{
      Q, K, V, &mask, core::score_rule(options, Q.batch, Q.count, Q.length, K.length, Q.dim), AttentionDropout{}};
  call.rule.query_offset = q.begin - k.begin;
  return call;
}

// Running output `acc` and lse `acc_lse` merged with a block's (`part`, `part_lse`), row by row: `rows` rows (batch
// x queries x heads) of dv values.
template <class Scalar>
void merge(Scalar* acc, Scalar* acc_lse, const Scalar* part, const Scalar* part_lse, Index rows, Index dv) {
  constexpr Scalar none = -std::numeric_limits<Scalar>::infinity();
  for (Index i = 0; i < rows; ++i) {
    const Scalar b = part_lse[i];
    if (b == none) continue;
    const Scalar a = acc_lse[i];
    Scalar* o = acc + i * dv;
    const Scalar* x = part + i * dv;
    if (a == none) {
      std::copy(x, x + dv, o);
      acc_lse[i] = b;
      continue;
    }
    const Scalar m = std::max(a, b), wa = std::exp(a - m), wb = std::exp(b - m), sum = wa + wb;
    for (Index c = 0; c < dv; ++c) o[c] = (wa * o[c] + wb * x[c]) / sum;
    acc_lse[i] = m + std::log(sum);
  }
}

// Lets MPI move the ring's messages while the blocks are computed.
inline void progress(std::vector<MPI_Request>& requests) {
  if (requests.empty()) return;
  int done = 0;
  MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
}
inline void finish(std::vector<MPI_Request>& requests) {
  if (!requests.empty()) MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  requests.clear();
}

// The batch rows every query of which sees no key (valid length 0) and follow d2l's uniform rule.
inline std::vector<Index> uniform_rows(const Plan& p) {
  std::vector<Index> rows;
  if (p.rule != FullyMasked::uniform || p.total == 0) return rows;
  for (std::size_t b = 0; b < p.lens.size(); ++b)
    if (p.lens[b] == 0) rows.push_back(static_cast<Index>(b));
  return rows;
}

// Collective: (batch, kv_heads * dv) of the sums over the whole sequence of x, a shard (batch, n_r, columns) summed
// over its positions, for the batch rows in `rows` (the others 0).
template <class Scalar>
Vector<Scalar> sequence_sums(MPI_Comm comm, const Tensor3<Scalar>& x, const std::vector<Index>& rows) {
  const Index n = x.dimension(1), columns = x.dimension(2);
  Vector<Scalar> sums = Vector<Scalar>::Zero(x.dimension(0) * columns);
  for (Index b : rows)
    for (Index t = 0; t < n; ++t)
      for (Index c = 0; c < columns; ++c) sums[b * columns + c] += x(b, t, c);
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), mpi_type<Scalar>(), MPI_SUM, comm);
  return sums;
}

}  // namespace ring
}  // namespace detail

template <class Scalar>
Tensor3<Scalar> ring_attention(MPI_Comm comm, const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys,
                               const Tensor3<Scalar>& values, Index num_heads, Index num_kv_heads,
                               const Mask& mask = {}, const ScoreOptions<Scalar>& options = {},
                               Tensor3<Scalar>* lse = nullptr) {
  static_assert(std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value,
                "attend: ring_attention takes float or double");
  if constexpr (std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value) {  // float, double only
    namespace ring = detail::ring;
    constexpr const char* where = "ring_attention";
    const ring::Plan p = ring::plan(comm, queries, keys, values, num_heads, num_kv_heads, mask, options, where);
    if (p.ranks == 1)
      return scaled_dot_product_attention(queries, keys, values, num_heads, num_kv_heads, mask, options, lse);

    const Index B = p.batch, H = p.heads, G = p.kv_heads, d = p.dim, dv = p.value_dim;
    const Index cq = p.cq(), ck = p.ck(), cv = p.cv(), co = p.co();
    const auto& mine = p.mine();
    const Index positions = ring::positions(mine);

    // 1. This rank's queries, and keys and values, in its work spans.
    Tensor3<Scalar> Q(B, positions, cq);  // spans in order, each (batch, span, cq)
    std::vector<Scalar> current(static_cast<std::size_t>(p.largest_block())), next(current.size());  // keys, values
    ring::exchange(comm, p.shards, p.work, B, cq, queries.data(), Q.data());
    ring::exchange(comm, p.shards, p.work, B, ck, keys.data(), current.data());
    ring::exchange(comm, p.shards, p.work, B, cv, values.data(), current.data() + B * positions * ck);

    // 2. Around the ring.
    Tensor3<Scalar> out(B, positions, co), out_lse(B, positions, H);  // spans in order, each (batch, span, co | H)
    const Index piece = std::min(positions, detail::tuning::ring_query_rows);  // the most query rows of one call
    std::vector<Scalar> part(static_cast<std::size_t>(B * piece * co)),
        part_lse(static_cast<std::size_t>(B * piece * H));
    out.setZero();
    out_lse.setConstant(-std::numeric_limits<Scalar>::infinity());
    detail::core::Buffers<Scalar> buffers;
    std::vector<MPI_Request> requests;
    for (int step = 0; step < p.ranks; ++step) {
      const auto& held = p.work[static_cast<std::size_t>(p.owner(step))];
      const Index held_positions = ring::positions(held);
      if (step + 1 < p.ranks) ring::pass(comm, p, step, step, current.data(), next.data(), requests);
      const Scalar* K = current.data();
      const Scalar* V = current.data() + B * held_positions * ck;
      for (std::size_t i = 0; i < mine.size(); ++i)
        for (std::size_t j = 0; j < held.size(); ++j)
          for (const ring::BlockCall& c : ring::block_calls(p, mine[i], held[j])) {
            const Index rows = c.queries.size();
            const auto call = ring::block_call<Scalar>(
                ring::part_heads<const Scalar>(Q.data(), mine, i, c.queries, B, cq, H, d),
                ring::part_heads<const Scalar>(K, held, j, c.keys, B, ck, G, d),
                ring::part_heads<const Scalar>(V, held, j, c.keys, B, cv, G, dv), c.mask, options, c.queries, c.keys);
            detail::core::forward(call, ring::dense_heads(part.data(), B, rows, H, dv), part_lse.data(), buffers);
            for (Index b = 0; b < B; ++b) {
              const Index row = ring::row_of(mine, i, c.queries, B, b);
              ring::merge(out.data() + row * co, out_lse.data() + row * H, part.data() + b * rows * co,
                          part_lse.data() + b * rows * H, rows * H, dv);
            }
            ring::progress(requests);
          }
      ring::finish(requests);
      std::swap(current, next);
    }

    // 3. Back to the caller's shard.
    Tensor3<Scalar> result(B, queries.dimension(1), co);
    ring::exchange(comm, p.work, p.shards, B, co, out.data(), result.data());
    if (lse != nullptr) {
      lse->resize(B, queries.dimension(1), H);
      ring::exchange(comm, p.work, p.shards, B, H, out_lse.data(), lse->data());
    }
    // d2l's rule for rows that see no key: the mean of every value of the sequence.
    const std::vector<Index> uniform = ring::uniform_rows(p);
    if (!uniform.empty()) {
      const Vector<Scalar> sums = ring::sequence_sums(comm, values, uniform);  // (batch, cv)
      const Scalar share = Scalar(1) / static_cast<Scalar>(p.total);
      for (Index b : uniform)
        for (Index t = 0; t < result.dimension(1); ++t)
          for (Index h = 0; h < H; ++h)
            for (Index c = 0; c < dv; ++c) result(b, t, h * dv + c) = sums[b * cv + (h / (H / G)) * dv + c] * share;
    }
    return result;
  } else {
    return {};  // not reached: the assertion stops the build
  }
}

template <class Scalar>
AttentionGradients<Scalar> ring_attention_backward(MPI_Comm comm, const Tensor3<Scalar>& queries,
                                                   const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                                                   const Tensor3<Scalar>& output, const Tensor3<Scalar>& lse,
                                                   const Tensor3<Scalar>& grad_output, Index num_heads,
                                                   Index num_kv_heads, const Mask& mask = {},
                                                   const ScoreOptions<Scalar>& options = {}) {
  static_assert(std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value,
                "attend: ring_attention_backward takes float or double");
  if constexpr (std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value) {  // float, double only
    namespace ring = detail::ring;
    constexpr const char* where = "ring_attention_backward";
    const ring::Plan p = ring::plan(comm, queries, keys, values, num_heads, num_kv_heads, mask, options, where);
    {
      const Index B = p.batch, n = queries.dimension(1);
      const std::array<Index, 3> out_shape{B, n, p.heads * p.value_dim}, lse_shape{B, n, p.heads};
      std::string problem;
      if (output.dimensions() != out_shape)
        problem =
            detail::message(where, ": output must have shape ", detail::shape_text(out_shape),
                            " (batch, queries, num_heads * value_dim), got ", detail::shape_text(output.dimensions()));
      else if (grad_output.dimensions() != out_shape)
        problem = detail::message(where, ": grad_output must have shape ", detail::shape_text(out_shape),
                                  " (the output's), got ", detail::shape_text(grad_output.dimensions()));
      else if (lse.dimensions() != lse_shape)
        problem = detail::message(where, ": lse must have shape ", detail::shape_text(lse_shape),
                                  " (batch, queries, num_heads), got ", detail::shape_text(lse.dimensions()));
      detail::require_everywhere(comm, problem, where);
    }
    if (p.ranks == 1)
      return scaled_dot_product_attention_backward(queries, keys, values, output, lse, grad_output, num_heads,
                                                   num_kv_heads, mask, options);

    const Index B = p.batch, H = p.heads, G = p.kv_heads, d = p.dim, dv = p.value_dim;
    const Index cq = p.cq(), ck = p.ck(), cv = p.cv(), co = p.co();
    const auto& mine = p.mine();
    const Index positions = ring::positions(mine);

    // 1. This rank's queries, output, dO and lse, and keys and values, in its work spans.
    Tensor3<Scalar> Q(B, positions, cq), O(B, positions, co), dO(B, positions, co), L(B, positions, H);
    std::vector<Scalar> current(static_cast<std::size_t>(p.largest_block())), next(current.size());  // keys, values
    ring::exchange(comm, p.shards, p.work, B, cq, queries.data(), Q.data());
    ring::exchange(comm, p.shards, p.work, B, co, output.data(), O.data());
    ring::exchange(comm, p.shards, p.work, B, co, grad_output.data(), dO.data());
    ring::exchange(comm, p.shards, p.work, B, H, lse.data(), L.data());
    ring::exchange(comm, p.shards, p.work, B, ck, keys.data(), current.data());
    ring::exchange(comm, p.shards, p.work, B, cv, values.data(), current.data() + B * positions * ck);

    // 2. Around the ring. The gradients of the block held travel after it, laid out as its keys and values: `grads`
    // holds the held block's, `arriving` receives the next one's.
    Tensor3<Scalar> dQ(B, positions, cq);  // spans in order, each (batch, span, cq)
    dQ.setZero();
    const Index piece = std::min(positions, detail::tuning::ring_query_rows);  // the most query rows of one call
    std::vector<Scalar> dQ_part(static_cast<std::size_t>(B * piece * cq)),
        part_lse(static_cast<std::size_t>(B * piece * H));
    std::vector<Scalar> grads(current.size()), arriving(current.size()), block_grads(current.size());
    std::vector<Scalar> dK_part(static_cast<std::size_t>(B * p.largest_positions() * ck)),
        dV_part(static_cast<std::size_t>(B * p.largest_positions() * cv));
    detail::core::Buffers<Scalar> buffers;
    const int tags = p.ranks;  // the gradients' tags follow the keys'
    std::vector<MPI_Request> kv_requests, grad_requests;
    for (int step = 0; step < p.ranks; ++step) {
      const auto& held = p.work[static_cast<std::size_t>(p.owner(step))];
      const Index held_positions = ring::positions(held), held_size = p.block_size(p.owner(step));
      if (step + 1 < p.ranks) ring::pass(comm, p, step, step, current.data(), next.data(), kv_requests);
      const Scalar* K = current.data();
      const Scalar* V = current.data() + B * held_positions * ck;
      std::fill(block_grads.begin(), block_grads.begin() + held_size, Scalar(0));
      Scalar* dK = block_grads.data();
      Scalar* dV = block_grads.data() + B * held_positions * ck;
      for (std::size_t i = 0; i < mine.size(); ++i)
        for (std::size_t j = 0; j < held.size(); ++j)
          for (const ring::BlockCall& c : ring::block_calls(p, mine[i], held[j])) {
            const Index rows = c.queries.size(), seen = c.keys.size();
            const auto call = ring::block_call<Scalar>(
                ring::part_heads<const Scalar>(Q.data(), mine, i, c.queries, B, cq, H, d),
                ring::part_heads<const Scalar>(K, held, j, c.keys, B, ck, G, d),
                ring::part_heads<const Scalar>(V, held, j, c.keys, B, cv, G, dv), c.mask, options, c.queries, c.keys);
            for (Index b = 0; b < B; ++b) {  // the core reads lse as (batch, rows, H), contiguous
              const Scalar* from = L.data() + ring::row_of(mine, i, c.queries, B, b) * H;
              std::copy(from, from + rows * H, part_lse.data() + b * rows * H);
            }
            detail::core::backward(
                call, ring::part_heads<const Scalar>(O.data(), mine, i, c.queries, B, co, H, dv), part_lse.data(),
                ring::part_heads<const Scalar>(dO.data(), mine, i, c.queries, B, co, H, dv),
                ring::dense_heads(dQ_part.data(), B, rows, H, d), ring::dense_heads(dK_part.data(), B, seen, G, d),
                ring::dense_heads(dV_part.data(), B, seen, G, dv), buffers);
            const auto query_row = [&](Index b) { return ring::row_of(mine, i, c.queries, B, b); };
            const auto key_row = [&](Index b) { return ring::row_of(held, j, c.keys, B, b); };
            ring::add_rows(dQ.data(), dQ_part.data(), B, rows, cq, query_row);
            ring::add_rows(dK, dK_part.data(), B, seen, ck, key_row);
            ring::add_rows(dV, dV_part.data(), B, seen, cv, key_row);
            ring::progress(kv_requests);
            ring::progress(grad_requests);
          }
      // The held block's gradients: what came before it (from rank r - 1, after the first step) plus this rank's; then
      // on to rank r + 1. After the last step they reach the block's home.
      ring::finish(grad_requests);
      for (Index e = 0; e < held_size; ++e) {
        const auto k = static_cast<std::size_t>(e);
        grads[k] = step == 0 ? block_grads[k] : arriving[k] + block_grads[k];
      }
      ring::pass(comm, p, step, tags + step, grads.data(), arriving.data(), grad_requests);
      ring::finish(kv_requests);
      std::swap(current, next);
    }
    ring::finish(grad_requests);  // `arriving` holds this rank's own block's dK, then dV

    // 3. Back to the caller's shards.
    AttentionGradients<Scalar> result{Tensor3<Scalar>(queries.dimensions()), Tensor3<Scalar>(keys.dimensions()),
                                      Tensor3<Scalar>(values.dimensions())};
    ring::exchange(comm, p.work, p.shards, B, cq, dQ.data(), result.queries.data());
    ring::exchange(comm, p.work, p.shards, B, ck, arriving.data(), result.keys.data());
    ring::exchange(comm, p.work, p.shards, B, cv, arriving.data() + B * positions * ck, result.values.data());
    // d2l's rule for rows that see no key: each value's weight is 1 / n in every such row, so dV gets the sum of their
    // dO over the sequence, times 1 / n.
    const std::vector<Index> uniform = ring::uniform_rows(p);
    if (!uniform.empty()) {
      const Vector<Scalar> sums = ring::sequence_sums(comm, grad_output, uniform);  // (batch, co)
      const Scalar share = Scalar(1) / static_cast<Scalar>(p.total);
      const Index group = H / G;
      for (Index b : uniform)
        for (Index g = 0; g < G; ++g)
          for (Index c = 0; c < dv; ++c) {
            Scalar total = 0;
            for (Index h = g * group; h < (g + 1) * group; ++h) total += sums[b * co + h * dv + c];
            for (Index t = 0; t < values.dimension(1); ++t) result.values(b, t, g * dv + c) += share * total;
          }
    }
    return result;
  } else {
    return {};  // not reached: the assertion stops the build
  }
}

}  // namespace ATTEND_ABI
}  // namespace attend
