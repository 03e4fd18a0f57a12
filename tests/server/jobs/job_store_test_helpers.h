// Test support shared by the job store tests (the memory store and the Redis store): an answer
// read as the job or the status it must be, and the progress and results a worker reports.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "cube3d/core/error.h"
#include "cube3d/server/jobs/job_store.h"

namespace cube3d::testing {

inline v1::MeshJob job_of(const JobStore::Answer& answer) {
  if (const auto* status = std::get_if<Status>(&answer)) {
    ADD_FAILURE() << "expected a job, got status " << to_string(status->code()) << ": "
                  << status->message();
    return {};
  }
  return std::get<v1::MeshJob>(answer);
}

inline Status status_of(const JobStore::Answer& answer) {
  if (const auto* status = std::get_if<Status>(&answer)) return *status;
  ADD_FAILURE() << "expected a status, got a job in state "
                << std::get<v1::MeshJob>(answer).state();
  return {};
}

// A result of `bytes` encoded bytes, as the executor writes it (with the request's id).
inline v1::GenerateMeshResponse result_of_size(std::size_t bytes,
                                               const std::string& request_id = "r") {
  v1::GenerateMeshResponse response;
  response.set_request_id(request_id);
  response.set_format(v1::MESH_FORMAT_GLB);
  response.set_encoded(std::string(bytes, 'g'));
  return response;
}

inline v1::Progress stage(v1::Stage value, std::uint32_t tokens_done = 0) {
  v1::Progress progress;
  progress.set_stage(value);
  progress.set_tokens_done(tokens_done);
  return progress;
}

}  // namespace cube3d::testing
