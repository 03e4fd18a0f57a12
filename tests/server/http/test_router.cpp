// The router's path matching: exact paths, and `{name}` segments that match one segment.
#include "cube3d/server/http/router.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace cube3d::http {
namespace {

Router make_router(std::vector<std::string>& refusals) {
  Router router(Cors({}), [&refusals](const std::shared_ptr<Exchange>&, int status,
                                      grpc::StatusCode, const std::string&,
                                      Headers) { refusals.push_back(std::to_string(status)); });
  router.add("/v1/jobs", {"POST"}, [](const auto&) {});
  router.add("/v1/jobs/{id}", {"GET", "DELETE"}, [](const auto&) {});
  router.add("/v1/jobs/{id}/mesh", {"GET"}, [](const auto&) {});
  return router;
}

TEST(Router, VariableSegmentsMatchExactlyOneNonEmptySegment) {
  std::vector<std::string> refusals;
  const Router router = make_router(refusals);
  EXPECT_EQ(router.allowed_methods("/v1/jobs"), "POST");
  EXPECT_EQ(router.allowed_methods("/v1/jobs/abc"), "GET, HEAD, DELETE");
  EXPECT_EQ(router.allowed_methods("/v1/jobs/abc/mesh"), "GET, HEAD");
  EXPECT_EQ(router.allowed_methods("/v1/jobs/"), "");
  EXPECT_EQ(router.allowed_methods("/v1/jobs//mesh"), "");
  EXPECT_EQ(router.allowed_methods("/v1/jobs/abc/mesh/more"), "");
  EXPECT_EQ(router.allowed_methods("/v1/jobs/abc/other"), "");
  EXPECT_EQ(router.allowed_methods("/v1/jobsabc"), "");
}

}  // namespace
}  // namespace cube3d::http
