// cube3d-loadgen over HTTP: POST /v1/meshes:generateStream on the server's HTTP listener
// (http_listen), the request in protobuf's JSON mapping, the deadline in X-Request-Timeout-Ms
// and the API key as `Authorization: Bearer <key>`; the answer is text/event-stream
// (sse_parser.h) of `progress` events, then one `result` or `error` event.
//
// Each sender owns one HTTP/1.1 keep-alive connection, opened on its first request and again
// when the server closed it (checked before each request: an idle connection the server
// closed has its end of stream waiting; a request is never sent twice, so a connection lost
// with a request on it counts UNAVAILABLE). Boost.Beast over Asio; blocking for the caller,
// but each operation runs asynchronously on the sender's own io_context, because only Beast's
// asynchronous operations honour tcp_stream's expiry (the deadline, from the send).
//
// HTTPS with options.tls (client_tls.h): the same, over Beast's ssl_stream (OpenSSL). Each
// connection handshakes when it opens, within the deadline of the request that opened it: SNI
// and the certificate's name are --server-name or the --server host (no SNI for an IP address),
// the chain is checked against --ca or the system's roots. A failed handshake is UNAVAILABLE
// (the first one's reason logged as a warning); an orderly close sends close_notify, waiting
// briefly for the server's, after the request's clock stopped. Plain HTTP is unchanged.
//
// A record: ttft at the arrival of the first progress event of stage STAGE_DECODING, e2e at
// the end of the answer (with its result read), queue_ms from the result's timings.queueMs.
// Status: OK with a result; an error event's or a plain HTTP error's error.status
// (http_error_status.h); DEADLINE_EXCEEDED when the deadline passed on the client (connect,
// send or read); UNAVAILABLE when the connection failed (refused, reset, closed mid-answer, an
// answer that is no HTTP/1.1); NO_RESULT for a stream that ends without a result or an error;
// INTERNAL for a result that is no GenerateMeshResponse.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "cube3d/clients/request_sender.h"

namespace cube3d {

struct HostPort {
  std::string host;  // without brackets for IPv6
  std::string port;
  bool operator==(const HostPort&) const = default;
};

// "host:port", "1.2.3.4:port" or "[v6]:port" with a port 1..65535; throws invalid_argument
// naming --server otherwise.
HostPort parse_host_port(std::string_view address);

// Throws invalid_argument naming --server when options.server is no host:port, naming --ca
// when OpenSSL cannot use its certificate.
std::unique_ptr<SenderFactory> make_http_sender_factory(const SenderOptions& options);

}  // namespace cube3d
