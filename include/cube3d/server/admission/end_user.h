// End users under an API key: a game server calls with its studio's key on behalf of many
// players, and names the player in `X-End-User-Id` (HTTP) or `end-user-id` (gRPC metadata), so
// that the key's per_user limits and the scheduler's fairness apply to each player.
//
// An id is an opaque name of the caller's choosing, 1 to kMaxEndUserIdBytes bytes of
// [A-Za-z0-9] and ._:@+/=- (a number, a UUID, base64, "player:123"). Players' ids are personal
// data: the server never logs or stores one as sent, only its pseudonym, a keyed hash that is
// stable within one server run and cannot be reversed by trying ids (the key is random per run).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cube3d {

inline constexpr size_t kMaxEndUserIdBytes = 128;

// The header / metadata names, for messages.
inline constexpr const char* kEndUserHeader = "X-End-User-Id";
inline constexpr const char* kEndUserMetadata = "end-user-id";

// Throws invalid_argument naming the header and metadata when `id` is not a valid end user id
// (empty, too long, a byte outside the allowed set) or was sent more than once (`times_sent`,
// when the transport may carry it several times) (the message never echoes the id: it might be
// anything the client sent).
void check_end_user_id(std::string_view id, size_t times_sent = 1);

// The pseudonym of `id` under API key `key_name`: "u" and 16 hex digits. Empty for an empty id.
std::string end_user_pseudonym(std::string_view key_name, std::string_view id);

}  // namespace cube3d
