// cube3d-loadgen's transports: a RequestSender sends one streaming GenerateMesh request at a
// time and measures it (a RequestRecord); a SenderFactory makes senders for one protocol and
// server. The load shapes (load_driver.h) only see these two interfaces:
//   closed loop: each worker makes one sender and sends all of its requests on it;
//   open loop:   each request borrows an idle sender from a pool or makes a new one, so an
//                arrival never waits for a connection.
// gRPC (grpc_sender.h): every sender shares the factory's channel (one HTTP/2 connection,
// calls multiplexed). HTTP (http_sender.h): each sender owns one HTTP/1.1 keep-alive
// connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cube3d/clients/call_retry.h"
#include "cube3d/clients/client_tls.h"
#include "cube3d/clients/load_report.h"
#include "cube3d/core/clock.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

enum class Protocol { kGrpc, kHttp };

// "grpc" or "http"; anything else throws invalid_argument naming --protocol.
Protocol parse_protocol(std::string_view name);
const char* protocol_name(Protocol protocol);

struct SenderOptions {
  // host:port of the server's listener for the protocol (gRPC: listen, HTTP: http_listen).
  // gRPC also takes several, comma-separated, balanced round robin (grpc_target.h).
  std::string server;
  // gRPC: UNAVAILABLE tried again, on another replica when there is one (call_retry.h).
  RetryPolicy retry;
  int64_t deadline_ms = 600000;  // per request, from its send
  std::string api_key;           // sent as bearer_authorization(); empty: no credentials
  ClientTls tls;                 // not enabled: plain TCP (h2c for gRPC, HTTP/1.1 for HTTP)
};

// The authorization value that carries an API key, as gRPC metadata and as the HTTP header
// alike: "Bearer <key>"; "" (send none) for an empty key.
std::string bearer_authorization(const std::string& api_key);

// Sends requests one after another; one thread at a time.
class RequestSender {
 public:
  virtual ~RequestSender() = default;
  // Sends `request`, reads its stream to the final status and returns the measurement:
  // status (a gRPC code name, or NO_RESULT), ttft, e2e and queue time; send_offset_s counts
  // from `phase_start`. The index is left 0 (the caller's to set). Failures are records, never
  // exceptions.
  virtual RequestRecord send(const v1::GenerateMeshRequest& request,
                             SteadyClock::time_point phase_start) = 0;
};

// Makes senders for one protocol and server; thread-safe.
class SenderFactory {
 public:
  virtual ~SenderFactory() = default;
  virtual std::unique_ptr<RequestSender> make_sender() const = 0;
};

// The factory of `protocol` (grpc_sender.h or http_sender.h). Throws invalid_argument naming
// --server when the address cannot be one (HTTP needs host:port).
std::unique_ptr<SenderFactory> make_sender_factory(Protocol protocol, const SenderOptions& options);

}  // namespace cube3d
