// A GET of a static site's file through an exchange that keeps its one answer: what the static
// site's and the playground's tests read answers with.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cube3d/server/httpd/static_site.h"

namespace cube3d::testing {

using http::Exchange;
using http::Headers;
using http::Request;
using http::Response;
using http::StaticSite;

// An exchange that keeps its one answer.
class RecordingExchange final : public Exchange {
 public:
  explicit RecordingExchange(Request request) : request_(std::move(request)) {}
  const Request& request() const override { return request_; }
  void respond(Response response) override { answer = std::move(response); }
  void start_stream(Response, StreamOptions) override { ADD_FAILURE() << "no streams here"; }
  void write(std::string) override {}
  void end_stream() override {}
  void defer(std::function<void()> task) override { task(); }
  void on_finished(std::function<void(bool)> callback) override { callback(true); }

  std::optional<Response> answer;

 private:
  Request request_;
};

inline Response get(const StaticSite& site, const std::string& path, const Headers& headers = {}) {
  Request request;
  request.method = "GET";
  request.path = path;
  request.headers = headers;
  const StaticSite::File* file = site.find(path);
  EXPECT_NE(file, nullptr) << path;
  auto exchange = std::make_shared<RecordingExchange>(std::move(request));
  if (file) StaticSite::serve(*file, exchange);
  return exchange->answer.value_or(Response{});
}

}  // namespace cube3d::testing
