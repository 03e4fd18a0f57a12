// Test support: drives a ContinuousDecoder the way the server's scheduler does (done slots
// leave, arrivals join free slots between steps) and records what every request got.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "cube3d/engine/continuous_decoder.h"

namespace cube3d::test {

struct Arrival {
  int64_t step = 0;  // admitted at the first step boundary at or after this one with a free slot
  GenerationRequest request;
};

struct Finished {
  at::Tensor ids;     // [T]
  at::Tensor logits;  // [T, C]
  int64_t admitted_at = 0;
};

struct Trace {
  std::vector<Finished> finished;  // by arrival index
  std::vector<int64_t> buckets;    // of every step
  std::vector<bool> guided;        // of every step
  int64_t max_active = 0;
};

// Drives the decoder the way the server's scheduler does: between steps, done slots leave and
// arrivals join free slots (at most `joins_per_step` at a time), in arrival order.
inline Trace run_schedule(ContinuousDecoder& decoder, const std::vector<Arrival>& arrivals,
                          int64_t joins_per_step = 2) {
  Trace trace;
  trace.finished.resize(arrivals.size());
  std::map<ContinuousDecoder::SlotId, size_t> owner;
  size_t next = 0;
  for (int64_t step = 0; next < arrivals.size() || decoder.active() > 0; ++step) {
    for (const auto id : decoder.slots()) {
      if (!decoder.done(id)) continue;
      trace.finished[owner.at(id)].ids = decoder.ids(id);
      if (decoder.options().record_logits) {
        trace.finished[owner.at(id)].logits = decoder.logits(id);
      }
      decoder.release(id);
    }
    std::vector<GenerationRequest> joining;
    std::vector<size_t> joining_index;
    while (next < arrivals.size() && arrivals[next].step <= step &&
           decoder.active() + static_cast<int64_t>(joining.size()) < decoder.capacity() &&
           static_cast<int64_t>(joining.size()) < joins_per_step) {
      joining.push_back(arrivals[next].request);
      joining_index.push_back(next++);
    }
    if (!joining.empty()) {
      const auto ids = decoder.admit(joining);
      for (size_t i = 0; i < ids.size(); ++i) {
        owner[ids[i]] = joining_index[i];
        trace.finished[joining_index[i]].admitted_at = step;
      }
    }
    trace.max_active = std::max(trace.max_active, decoder.active());
    if (decoder.active() > 0) {
      trace.buckets.push_back(decoder.bucket());
      trace.guided.push_back(decoder.guided());
      decoder.step();
    }
  }
  return trace;
}

}  // namespace cube3d::test
