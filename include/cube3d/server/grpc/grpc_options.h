// The gRPC front door's resource and connection settings: the server config's `grpc:` section
// is this struct. Plain data, free of gRPC itself (the config layer and its fuzzer read it);
// grpc_server_options.h applies it to a ServerBuilder.
//
// What bounds what:
//   - The mesh API runs on gRPC's callback API: a call holds no thread while it waits for its
//     request message, in the queue, or while its mesh is made, only a small reactor.
//   - max_calls_awaiting_message bounds the calls whose request message has not arrived (a
//     client that opens calls and sends nothing): beyond it the one that has waited longest is
//     refused with RESOURCE_EXHAUSTED, so a flood of stalled calls costs bounded memory and
//     never the calls of clients that send their message at once; each is also cancelled after
//     limits.request_read_timeout_ms. ModelStreamInfer streams count against it until their
//     first request (awaiting_calls.h), with no read timeout.
//   - max_threads is the grpc::ResourceQuota's thread limit: gRPC's synchronous services
//     (reflection) get no more threads than this; a call beyond it gets RESOURCE_EXHAUSTED.
//   - max_concurrent_streams: calls open at once on one HTTP/2 connection (SETTINGS).
//   - Keepalive enforcement: a client may ping no more often than min_client_ping_interval_ms
//     (more often is a strike; max_ping_strikes of them close the connection with GOAWAY); the
//     server pings an idle connection every keepalive_time_ms to find dead peers.
//   - Connection lifetime: a connection is sent GOAWAY after max_connection_age_ms (gRPC adds
//     +-10% jitter) and closed max_connection_age_grace_ms later, and one with no call for
//     max_connection_idle_ms is closed: clients reconnect, so the replicas an autoscaler adds
//     behind a Kubernetes Service (which balances connections, not calls) get their share.
//   - write_timeout_ms: a response or event that the client does not take within this (it
//     never reads its stream) cancels the call.
//   - handshake_timeout_ms: a new connection must finish its TLS handshake and send HTTP/2's
//     preface and SETTINGS within this, or it is closed (gRPC's own default is 120 s; HTTP's
//     http.header_timeout_ms is the same bound on the other door). Idle connections after
//     that: max_connection_idle_ms.
#pragma once

#include <cstdint>

namespace cube3d {

struct GrpcOptions {
  int64_t max_threads = 256;
  int64_t max_calls_awaiting_message = 1024;
  int64_t max_concurrent_streams = 100;
  int64_t keepalive_time_ms = 60'000;
  int64_t keepalive_timeout_ms = 20'000;
  int64_t min_client_ping_interval_ms = 10'000;
  int64_t max_ping_strikes = 2;
  int64_t max_connection_age_ms = 30 * 60'000;
  // Longer than limits.default_deadline_ms (5 min): a request in flight when its connection
  // ages out still finishes on it.
  int64_t max_connection_age_grace_ms = 6 * 60'000;
  int64_t max_connection_idle_ms = 10 * 60'000;
  int64_t write_timeout_ms = 30'000;
  int64_t handshake_timeout_ms = 10'000;
  bool operator==(const GrpcOptions&) const = default;
};

// Throws invalid_argument naming the grpc.* key at fault (the server config checks the section
// with this).
void validate_grpc_options(const GrpcOptions& options);

}  // namespace cube3d
