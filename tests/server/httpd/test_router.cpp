// The router's path matching: exact paths, and `{name}` segments that match one segment.
#include "cube3d/server/httpd/router.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace cube3d::http {
namespace test_router {

Router make_router(std::vector<std::string>& refusals) {
  Router router(Cors({}), [&refusals](const std::shared_ptr<Exchange>&, int status, ErrorCode,
                                      const std::string&,
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

TEST(Router, TheNotFoundMessageListsOnlyListedRoutes) {
  std::string message;
  Router router(Cors({}), [&message](const std::shared_ptr<Exchange>&, int, ErrorCode,
                                     const std::string& m, Headers) { message = m; });
  router.add("/", {"GET"}, [](const auto&) {});
  router.add(
      "/playground/app.js", {"GET"}, [](const auto&) {}, /*listed=*/false);
  router.add("/v1/model", {"GET"}, [](const auto&) {});
  class Unanswered final : public Exchange {
   public:
    Unanswered() { request_.method = "GET", request_.path = "/nope"; }
    const Request& request() const override { return request_; }
    void respond(Response) override {}
    void start_stream(Response, StreamOptions) override {}
    void write(std::string) override {}
    void end_stream() override {}
    void defer(std::function<void()> task) override { task(); }
    void on_finished(std::function<void(bool)>) override {}

   private:
    Request request_;
  };
  router.handle(std::make_shared<Unanswered>());
  EXPECT_EQ(message, "no such path: /nope (GET /, GET /v1/model)");
  EXPECT_EQ(router.allowed_methods("/playground/app.js"), "GET, HEAD");  // served all the same
}

}  // namespace test_router
}  // namespace cube3d::http
