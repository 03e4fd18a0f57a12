// The mesh layer's parallelism, over oneTBB's one shared pool of worker threads (Debian's
// libtbb-dev). Why TBB: several meshes are post-processed at once in the server, each of them in
// parallel; one pool shared by all of them keeps the machine's cores busy without running more
// threads than cores, and a thread that waits for its own parallel loop helps run it.
//
// Determinism: every parallel step of the mesh layer splits its work into pieces that depend
// only on the input (never on the thread count) and joins their results in a fixed order, so the
// output is byte-identical for any thread count.
//
// Private to src/mesh/ (scripts/check_layering.py keeps TBB there).
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace cube3d::mesh_parallel {

// Runs `fn` with at most `threads` threads (the caller included) when threads > 0; otherwise in
// the caller's own arena: all the machine's cores, shared with every other mesh in progress.
template <typename Fn>
decltype(auto) with_threads(int threads, Fn&& fn) {
  if (threads <= 0) return std::forward<Fn>(fn)();
  tbb::task_arena arena(threads);
  return arena.execute(std::forward<Fn>(fn));
}

// The threads that a parallel loop started here can use.
inline int concurrency() { return tbb::this_task_arena::max_concurrency(); }

// fn(i) for every i in [0, count), each on some thread, one index a task: for pieces of work that
// are large and few (slabs, blocks).
template <typename Fn>
void for_each_index(std::size_t count, const Fn& fn) {
  if (count == 1) {
    fn(std::size_t{0});
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, count, 1),
      [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) fn(i);
      },
      tbb::simple_partitioner());
}

// The fixed chunks in which linear passes split [0, count): their boundaries depend only on
// count, so per-chunk results joined in chunk order are the same for any thread count.
inline constexpr std::size_t kChunk = 1 << 16;
inline std::size_t chunk_count(std::size_t count) { return (count + kChunk - 1) / kChunk; }

// fn(begin, end) over the fixed chunks of [0, count), in parallel.
template <typename Fn>
void for_each_chunk(std::size_t count, const Fn& fn) {
  const std::size_t chunks = chunk_count(count);
  if (chunks <= 1) {
    if (count > 0) fn(std::size_t{0}, count);
    return;
  }
  for_each_index(chunks, [&](std::size_t c) { fn(c * kChunk, std::min(count, (c + 1) * kChunk)); });
}

// Keeps the items for which keep(i) is true, in order: each chunk counts and copies its own
// part, the parts joined by their offsets. `items` are groups of `width` values (3 per face).
template <typename T, typename Keep>
std::size_t filter_groups(std::vector<T>& items, std::size_t width, const Keep& keep) {
  const std::size_t count = items.size() / width;
  const std::size_t chunks = chunk_count(count);
  std::vector<std::size_t> kept(chunks + 1, 0);
  std::vector<uint8_t> flags(count);
  for_each_chunk(count, [&](std::size_t begin, std::size_t end) {
    std::size_t n = 0;
    for (std::size_t i = begin; i < end; ++i) n += (flags[i] = keep(i) ? 1 : 0);
    kept[begin / kChunk + 1] = n;
  });
  for (std::size_t c = 0; c < chunks; ++c) kept[c + 1] += kept[c];
  const std::size_t total = kept[chunks];
  if (total == count) return 0;
  std::vector<T> out(total * width);
  for_each_chunk(count, [&](std::size_t begin, std::size_t end) {
    std::size_t at = kept[begin / kChunk] * width;
    for (std::size_t i = begin; i < end; ++i) {
      if (flags[i]) {
        std::copy_n(items.begin() + static_cast<std::ptrdiff_t>(i * width), width,
                    out.begin() + static_cast<std::ptrdiff_t>(at));
        at += width;
      }
    }
  });
  items = std::move(out);
  return count - total;
}

// Compressed rows: for keys in [0, key_count), the items (in ascending item order) whose key is
// each key, built by a counting sort in fixed chunks (linear, parallel, deterministic).
struct Buckets {
  std::vector<uint32_t> offsets;  // [key_count + 1]
  std::vector<uint32_t> items;    // item numbers, grouped by key, ascending within a key
  std::size_t size(std::size_t key) const { return offsets[key + 1] - offsets[key]; }
  const uint32_t* begin(std::size_t key) const { return items.data() + offsets[key]; }
  const uint32_t* end(std::size_t key) const { return items.data() + offsets[key + 1]; }
};

// key_of(i) for every item i in [0, item_count); each key < key_count. The keys are computed in
// parallel; counting and placing are one serial pass each (measured: faster than any parallel
// placement tried on a 2-core machine, where these passes are bound by memory, not by cores).
template <typename KeyOf>
Buckets bucket_by_key(std::size_t item_count, std::size_t key_count, const KeyOf& key_of) {
  Buckets b;
  b.offsets.assign(key_count + 1, 0);
  b.items.resize(item_count);
  std::vector<uint32_t> keys(item_count);
  for_each_chunk(item_count, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) keys[i] = static_cast<uint32_t>(key_of(i));
  });
  for (const uint32_t k : keys) ++b.offsets[k + 1];
  for (std::size_t k = 0; k < key_count; ++k) b.offsets[k + 1] += b.offsets[k];
  std::vector<uint32_t> cursor(b.offsets.begin(), b.offsets.end() - 1);
  for (std::size_t i = 0; i < item_count; ++i)
    b.items[cursor[keys[i]]++] = static_cast<uint32_t>(i);
  return b;
}

// Items [0, item_count) in 2^bits partitions by part_of(i) < 2^bits, in ascending item order
// within each: per-chunk counts, then each chunk places its items from its own offsets (no
// atomics: for a few partitions, shared counters would be contended).
template <typename PartOf>
Buckets partition_items(std::size_t item_count, int bits, const PartOf& part_of) {
  const std::size_t parts = std::size_t{1} << bits;
  const std::size_t chunks = chunk_count(item_count);
  std::vector<uint32_t> counts(chunks * parts, 0);
  std::vector<uint8_t> part(item_count);
  for_each_chunk(item_count, [&](std::size_t begin, std::size_t end) {
    uint32_t* count = counts.data() + begin / kChunk * parts;
    for (std::size_t i = begin; i < end; ++i) ++count[part[i] = static_cast<uint8_t>(part_of(i))];
  });
  Buckets b;
  b.offsets.assign(parts + 1, 0);
  // Offsets: partition-major, chunk order within a partition.
  uint32_t at = 0;
  for (std::size_t p = 0; p < parts; ++p) {
    b.offsets[p] = at;
    for (std::size_t c = 0; c < chunks; ++c) {
      const uint32_t n = counts[c * parts + p];
      counts[c * parts + p] = at;
      at += n;
    }
  }
  b.offsets[parts] = at;
  b.items.resize(item_count);
  for_each_chunk(item_count, [&](std::size_t begin, std::size_t end) {
    uint32_t* cursor = counts.data() + begin / kChunk * parts;
    for (std::size_t i = begin; i < end; ++i) b.items[cursor[part[i]]++] = static_cast<uint32_t>(i);
  });
  return b;
}

}  // namespace cube3d::mesh_parallel
