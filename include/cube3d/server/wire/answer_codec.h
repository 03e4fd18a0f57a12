// A call's answer (service/mesh_answer.h) as the API's GenerateMeshResponse: what the gRPC door
// sends, the HTTP door renders as JSON, a file or a PNG, a job keeps and the Open Inference
// Protocol's answer reads; and the result cache's encoding of an answer's body (the message's
// bytes without the call's own fields), which the service is given as its AnswerCodec.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cube3d/core/status.h"
#include "cube3d/server/service/mesh_answer.h"
#include "cube3d/server/service/service.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

v1::GenerateMeshResponse response_message(const MeshAnswer& answer);

// A call's outcome with its answer as the API's message (empty unless status.ok()).
struct ResponseOutcome {
  Status status;
  v1::GenerateMeshResponse response;
  std::vector<std::pair<std::string, std::string>> trailers;
};
ResponseOutcome response_outcome(CallOutcome outcome);

// The message's cache status as ours; nullopt for UNSPECIFIED (and unknown numbers).
std::optional<CacheStatus> cache_status_of(v1::CacheStatus status);

// The answer codec the server runs with: the body as the message's bytes (the same bytes the
// gRPC door would send of it, so message_bytes is exact).
class ProtoAnswerCodec final : public AnswerCodec {
 public:
  std::string encode(const MeshBody& body) const override;
  std::optional<MeshBody> decode(std::string_view bytes) const override;
  int64_t body_bytes(const MeshBody& body) const override;
  int64_t message_bytes(const MeshAnswer& answer, int64_t body_bytes) const override;
};

}  // namespace cube3d
