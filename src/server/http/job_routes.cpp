#include "cube3d/server/http/job_routes.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>
#include <utility>

#include "cube3d/server/http/content_negotiation.h"
#include "cube3d/server/http/http_error.h"
#include "cube3d/server/http/http_status.h"
#include "cube3d/server/http/mesh_answers.h"
#include "cube3d/server/http/whole_number.h"

namespace cube3d::http {
namespace {

constexpr int64_t kMaxWaitParamMs = 3'600'000;  // the store caps it far lower (jobs.max_wait_ms)
constexpr size_t kMaxIdempotencyKeyBytes = 255;

// The {id} of /v1/jobs/{id} and /v1/jobs/{id}/mesh (the router matched the shape already).
std::string id_of(const std::string& path) {
  std::string_view rest = std::string_view(path).substr(std::string_view(kJobsPath).size() + 1);
  return std::string(rest.substr(0, rest.find('/')));
}

std::chrono::milliseconds wait_of(const Request& req) {
  const std::optional<std::string> text = req.query_param("wait_ms");
  if (!text) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(
      whole_number(*text, "query parameter wait_ms", "milliseconds", 0, kMaxWaitParamMs));
}

bool open(const v1::MeshJob& job) {
  return job.state() == v1::JOB_STATE_QUEUED || job.state() == v1::JOB_STATE_RUNNING;
}

std::string retry_after_of(const v1::MeshJob& job) {
  return std::to_string(std::max<int64_t>(1, (int64_t{job.poll_after_ms()} + 999) / 1000));
}

Response job_response(int status, const v1::MeshJob& job) {
  Response out = make_response(status, to_json(job), kJsonType);
  out.headers.set(kRequestIdHeader, job.request_id());
  if (open(job)) out.headers.set("Retry-After", retry_after_of(job));
  return out;
}

// Whether GET .../mesh answers the file itself: unless Accept names JSON and not the file's
// type (no Accept, or */*, takes the file: that is what the path is for).
bool wants_file(const std::string& accept_header, v1::MeshFormat format) {
  if (accept_header.empty() || accept_header.find("*/*") != std::string::npos) return true;
  const Accepted accepted = parse_accept(accept_header);
  for (const v1::MeshFormat f : accepted.meshes) {
    if (f == format) return true;
  }
  if (accepted.json) return false;
  const MeshMediaType* media = media_type_of(format);
  throw HttpError(406, ErrorCode::kInvalidArgument,
                  "the job's mesh is " + std::string(media ? media->type : "RAW") +
                      "; Accept takes neither it nor application/json");
}

Response mesh_of(const v1::MeshJob& job, const std::string& accept, int64_t retry_after) {
  if (open(job)) {
    Response out = error_response(http_status_of(ErrorCode::kFailedPrecondition),
                                  ErrorCode::kFailedPrecondition,
                                  "job " + job.id() + " is " + v1::JobState_Name(job.state()) +
                                      ": poll GET /v1/jobs/" + job.id() + " until SUCCEEDED");
    out.headers.set("Retry-After", retry_after_of(job));
    return out;
  }
  if (job.state() != v1::JOB_STATE_SUCCEEDED) {
    return error_response(
        http_status_of(ErrorCode::kFailedPrecondition), ErrorCode::kFailedPrecondition,
        "job " + job.id() + " ended " + v1::JobState_Name(job.state()) + " without a mesh (" +
            job.error().status() + ": " + job.error().message() + ")");
  }
  const v1::MeshFormat format = job.result().format();
  std::optional<v1::MeshFormat> file;
  if (format != v1::MESH_FORMAT_RAW && wants_file(accept, format)) file = format;
  ResponseOutcome outcome;
  outcome.response = job.result();
  return mesh_answer(std::move(outcome), file, retry_after);
}

}  // namespace

std::string idempotency_key_of(const Request& req) {
  const auto values = req.headers.get_all(kIdempotencyKeyHeader);
  if (values.empty()) return {};
  if (values.size() > 1) {
    throw HttpError(400, ErrorCode::kInvalidArgument,
                    std::string(kIdempotencyKeyHeader) + " is sent " +
                        std::to_string(values.size()) + " times; a submit has one key");
  }
  std::string_view key = values.front();
  // The draft's value is a Structured Field string ("..."); a bare token is taken as it is.
  if (key.size() >= 2 && key.front() == '"' && key.back() == '"') {
    key = key.substr(1, key.size() - 2);
  }
  const bool printable_ascii = std::all_of(key.begin(), key.end(), [](char c) {
    return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\';
  });
  if (key.empty() || key.size() > kMaxIdempotencyKeyBytes || !printable_ascii) {
    throw HttpError(400, ErrorCode::kInvalidArgument,
                    std::string(kIdempotencyKeyHeader) + " must be 1.." +
                        std::to_string(kMaxIdempotencyKeyBytes) +
                        " printable ASCII characters (a UUID, say), quoted or not");
  }
  return std::string(key);
}

void JobRoutes::submit(const std::shared_ptr<Exchange>& ex, const v1::GenerateMeshRequest& request,
                       const CallContext& call) {
  const int64_t retry_after = retry_after_seconds_;
  const std::string key = idempotency_key_of(ex->request());
  // The answer may come from the job store's thread: the JSON is made on the exchange's.
  jobs_.submit(
      request, call,
      [ex, retry_after](JobAnswer answer) {
        ex->defer([ex, retry_after, answer = std::move(answer)] {
          if (answer.key_conflict) {
            // The idempotency draft's answer to a key reused with another request.
            Response out = status_response(answer.status, retry_after, answer.trailers);
            out.status = 422;
            out.body = http_error_body(422, answer.status.code(), answer.status.message());
            return ex->respond(std::move(out));
          }
          if (!answer.status.ok()) {
            return ex->respond(status_response(answer.status, retry_after, answer.trailers));
          }
          // A retry of a submit that made its job: that job, not a second one.
          Response out = job_response(answer.existing ? 200 : 202, answer.job);
          out.headers.set("Location", std::string(kJobsPath) + "/" + answer.job.id());
          if (open(answer.job)) out.headers.set("Retry-After", retry_after_of(answer.job));
          ex->respond(std::move(out));
        });
      },
      key);
}

void JobRoutes::job(const std::shared_ptr<Exchange>& ex) {
  const Request& req = ex->request();
  const std::string id = id_of(req.path);
  const std::string authorization = req.headers.value_or("Authorization");
  const int64_t retry_after = retry_after_seconds_;
  if (req.method == "DELETE") {
    return jobs_.cancel(id, authorization, [ex, retry_after](JobAnswer answer) {
      ex->defer([ex, retry_after, answer = std::move(answer)] {
        if (!answer.status.ok()) {
          return ex->respond(status_response(answer.status, retry_after, answer.trailers));
        }
        ex->respond(job_response(200, answer.job));
      });
    });
  }
  // The answer may come from the thread that ends the job: the JSON is made on the exchange's.
  jobs_.get(id, authorization, wait_of(req), [ex, retry_after](JobAnswer answer) {
    ex->defer([ex, retry_after, answer = std::move(answer)] {
      if (!answer.status.ok()) {
        return ex->respond(status_response(answer.status, retry_after, answer.trailers));
      }
      ex->respond(job_response(200, answer.job));
    });
  });
}

void JobRoutes::mesh(const std::shared_ptr<Exchange>& ex) {
  const Request& req = ex->request();
  const std::string id = id_of(req.path);
  const std::string accept = req.headers.value_or("Accept");
  const int64_t retry_after = retry_after_seconds_;
  jobs_.get(id, req.headers.value_or("Authorization"), wait_of(req),
            [ex, accept, retry_after](JobAnswer answer) {
              ex->defer([ex, accept, retry_after, answer = std::move(answer)] {
                if (!answer.status.ok()) {
                  return ex->respond(status_response(answer.status, retry_after, answer.trailers));
                }
                try {
                  ex->respond(mesh_of(answer.job, accept, retry_after));
                } catch (const HttpError& e) {
                  ex->respond(error_response(e.http_status, e.code, e.what()));
                }
              });
            });
}

}  // namespace cube3d::http
