// Takes the model's identity at load (core/model_identity.h): a SHA-256 of every weight file the
// config names (streamed; run it beside the model load), and of the settings that change the
// numbers. Random weights (the demo model) are identified by their seed and the model config.
#pragma once

#include "cube3d/core/model_config.h"
#include "cube3d/server/config/server_config.h"
#include "cube3d/server/service/model_identity.h"

namespace cube3d {

// Throws cube3d::Error naming a file that cannot be read.
ModelIdentity load_model_identity(const ServerConfig& config, const ModelConfig& model);

}  // namespace cube3d
