// What the client of a gRPC call saw, from what the server knows at the end of the call (its
// reactor's OnDone): the request counter counts every call to the mesh API, and every call to a
// method the server does not have, exactly once with that code, also when the client's
// deadline passed, it cancelled, or the transport refused its request message, whatever the
// server answered then. Pure functions, tested on their own; the reactors call them.
//
// Not counted: gRPC's own services (health, reflection): probes every few seconds would dilute
// the error rate that the request counter feeds.
#pragma once

#include <chrono>
#include <string>

namespace cube3d::grpc_outcome {

// sent_code: the code the server finished the call with (empty when it finished none);
// cancelled: the call did not end with that status (OnCancel ran); deadline_passed: the
// client's deadline is behind us; request_missing: the call's request message never arrived.
std::string code_seen_by_client(const std::string& sent_code, bool cancelled, bool deadline_passed,
                                bool request_missing);

// Whether a cancelled call ended by its deadline: the client's own deadline fires (and it
// cancels) a little before the server's copy (taken when the headers arrived) does, so a
// cancellation within kDeadlineSlack of the deadline is the deadline.
inline constexpr std::chrono::milliseconds kDeadlineSlack{100};
bool deadline_reached(std::chrono::system_clock::time_point deadline);

}  // namespace cube3d::grpc_outcome
