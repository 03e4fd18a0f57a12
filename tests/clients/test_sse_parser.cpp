// The event-stream parser: fields, comments, the three line ends, events split anywhere
// between reads (down to a byte at a time, a CRLF cut in two), and what is not an event.
#include "cube3d/clients/sse_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace cube3d {
namespace test_sse_parser {

std::vector<SseEvent> parse_whole(std::string_view body) { return SseParser().feed(body); }

// Feeds `body` in pieces cut at `cuts` (increasing offsets).
std::vector<SseEvent> parse_cut(std::string_view body, const std::vector<size_t>& cuts) {
  SseParser parser;
  std::vector<SseEvent> out;
  size_t from = 0;
  for (const size_t cut : cuts) {
    for (auto& e : parser.feed(body.substr(from, cut - from))) out.push_back(std::move(e));
    from = cut;
  }
  for (auto& e : parser.feed(body.substr(from))) out.push_back(std::move(e));
  return out;
}

// What the server writes for one streaming call: a keep-alive, progress, then the result.
constexpr std::string_view kServerStream =
    ":\n\n"
    "event: progress\ndata: {\"stage\":\"STAGE_QUEUED\"}\n\n"
    "event: progress\ndata: {\"stage\":\"STAGE_DECODING\",\"tokensDone\":32}\n\n"
    ":\n\n"
    "event: result\ndata: {\"requestId\":\"r1\",\"timings\":{\"queueMs\":1.5}}\n\n";

const std::vector<SseEvent> kServerEvents = {
    {"progress", "{\"stage\":\"STAGE_QUEUED\"}"},
    {"progress", "{\"stage\":\"STAGE_DECODING\",\"tokensDone\":32}"},
    {"result", "{\"requestId\":\"r1\",\"timings\":{\"queueMs\":1.5}}"},
};

TEST(SseParserTest, ParsesTheServersStream) {
  EXPECT_EQ(parse_whole(kServerStream), kServerEvents);
}

TEST(SseParserTest, NothingFedNothingOut) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("").empty());
  EXPECT_TRUE(parser.idle());
}

TEST(SseParserTest, EventsComeOutWhenTheirBlankLineArrives) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("event: progress\n").empty());
  EXPECT_TRUE(parser.feed("data: 1\n").empty());
  EXPECT_FALSE(parser.idle());
  EXPECT_EQ(parser.feed("\n"), (std::vector<SseEvent>{{"progress", "1"}}));
  EXPECT_TRUE(parser.idle());
  EXPECT_EQ(parser.feed("data: 2\n\ndata: 3\n\ndata: 4"),
            (std::vector<SseEvent>{{"message", "2"}, {"message", "3"}}));
  EXPECT_FALSE(parser.idle());
  EXPECT_EQ(parser.feed("\n\n"), (std::vector<SseEvent>{{"message", "4"}}));
}

TEST(SseParserTest, CrLfAndCrLineEnds) {
  const std::vector<SseEvent> want = {{"progress", "a"}, {"result", "b"}};
  EXPECT_EQ(parse_whole("event: progress\r\ndata: a\r\n\r\nevent: result\r\ndata: b\r\n\r\n"),
            want);
  EXPECT_EQ(parse_whole("event: progress\rdata: a\r\revent: result\rdata: b\r\r"), want);
  // Mixed in one stream.
  EXPECT_EQ(parse_whole("event: progress\r\ndata: a\n\revent: result\rdata: b\n\r\n"), want);
}

TEST(SseParserTest, CrLfSplitBetweenReadsIsOneLineEnd) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: a\r").empty());
  // The LF completes the CRLF; only the second CRLF is the blank line.
  EXPECT_TRUE(parser.feed("\n").empty());
  EXPECT_TRUE(parser.feed("data: b\r").empty());
  EXPECT_TRUE(parser.feed("").empty());  // an empty read keeps the pending CR
  // A CR ends the blank line at once; the LF after it, in the next read, is part of it.
  EXPECT_EQ(parser.feed("\n\r"), (std::vector<SseEvent>{{"message", "a\nb"}}));
  EXPECT_TRUE(parser.feed("\n").empty());
  EXPECT_TRUE(parser.idle());
  EXPECT_EQ(parser.feed("data: c\n\n"), (std::vector<SseEvent>{{"message", "c"}}));
}

TEST(SseParserTest, TwoCrsAreTwoLineEnds) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: a\r").empty());
  EXPECT_EQ(parser.feed("\r"), (std::vector<SseEvent>{{"message", "a"}}));
}

TEST(SseParserTest, CommentsAreIgnored) {
  EXPECT_TRUE(parse_whole(":\n\n: keep-alive\n\n:\r\n\r\n").empty());
  EXPECT_EQ(parse_whole("event: progress\n: in the middle\ndata: x\n:\n\n"),
            (std::vector<SseEvent>{{"progress", "x"}}));
  SseParser parser;
  parser.feed(": just a comment\n");
  EXPECT_TRUE(parser.idle());
}

TEST(SseParserTest, DataLinesJoinWithNewlines) {
  EXPECT_EQ(parse_whole("data: one\ndata: two\ndata:\ndata: four\n\n"),
            (std::vector<SseEvent>{{"message", "one\ntwo\n\nfour"}}));
}

TEST(SseParserTest, OneSpaceAfterTheColonIsDropped) {
  EXPECT_EQ(parse_whole("data:x\n\n"), (std::vector<SseEvent>{{"message", "x"}}));
  EXPECT_EQ(parse_whole("data:  x\n\n"), (std::vector<SseEvent>{{"message", " x"}}));
  EXPECT_EQ(parse_whole("event:progress\ndata: a:b: c\n\n"),
            (std::vector<SseEvent>{{"progress", "a:b: c"}}));
}

TEST(SseParserTest, ALineWithoutAColonIsAFieldWithNoValue) {
  // "data" alone is an empty data line: the event has data, the empty string.
  EXPECT_EQ(parse_whole("event: ping\ndata\n\n"), (std::vector<SseEvent>{{"ping", ""}}));
  EXPECT_EQ(parse_whole("data:\n\n"), (std::vector<SseEvent>{{"message", ""}}));
}

TEST(SseParserTest, AnEventWithoutDataIsNotDispatched) {
  EXPECT_TRUE(parse_whole("event: progress\n\n").empty());
  // ... and its event name does not leak into the next event.
  EXPECT_EQ(parse_whole("event: progress\n\ndata: x\n\n"),
            (std::vector<SseEvent>{{"message", "x"}}));
}

TEST(SseParserTest, EventNameDefaultsToMessageAndResetsAfterEachEvent) {
  EXPECT_EQ(parse_whole("event: result\ndata: 1\n\ndata: 2\n\n"),
            (std::vector<SseEvent>{{"result", "1"}, {"message", "2"}}));
  EXPECT_EQ(parse_whole("event:\ndata: 1\n\n"), (std::vector<SseEvent>{{"message", "1"}}));
  // The last event field wins.
  EXPECT_EQ(parse_whole("event: a\nevent: b\ndata: 1\n\n"), (std::vector<SseEvent>{{"b", "1"}}));
}

TEST(SseParserTest, OtherFieldsAreIgnored) {
  EXPECT_EQ(parse_whole("id: 7\nretry: 1000\nevent: result\nfoo: bar\ndata: x\n\n"),
            (std::vector<SseEvent>{{"result", "x"}}));
  // A field name is matched exactly (case and all).
  EXPECT_TRUE(parse_whole("Data: x\n\n").empty());
  EXPECT_TRUE(parse_whole(" data: x\n\n").empty());
}

TEST(SseParserTest, AnUnfinishedLastEventIsDropped) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("event: result\ndata: {\"partial\"").empty());
  EXPECT_FALSE(parser.idle());
  EXPECT_TRUE(parse_whole("event: result\ndata: x\n").empty());
}

TEST(SseParserTest, LeadingByteOrderMarkIsSkipped) {
  EXPECT_EQ(parse_whole("\xEF\xBB\xBF"
                        "data: x\n\n"),
            (std::vector<SseEvent>{{"message", "x"}}));
  // Split inside the mark.
  EXPECT_EQ(parse_cut("\xEF\xBB\xBF"
                      "data: x\n\n",
                      {1, 2}),
            (std::vector<SseEvent>{{"message", "x"}}));
  // Only at the very start: later it is part of a field name (so the field is unknown).
  EXPECT_TRUE(parse_whole(":\n\xEF\xBB\xBF"
                          "data: x\n\n")
                  .empty());
}

TEST(SseParserTest, EverySplitInTwoGivesTheSameEvents) {
  for (size_t cut = 0; cut <= kServerStream.size(); ++cut) {
    EXPECT_EQ(parse_cut(kServerStream, {cut}), kServerEvents) << "cut at " << cut;
  }
}

TEST(SseParserTest, EverySplitInThreeGivesTheSameEventsWithCrLf) {
  std::string crlf;
  for (const char c : kServerStream) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  for (size_t a = 0; a <= crlf.size(); ++a) {
    for (size_t b = a; b <= crlf.size(); b += 7) {
      ASSERT_EQ(parse_cut(crlf, {a, b}), kServerEvents) << "cuts at " << a << ", " << b;
    }
  }
}

TEST(SseParserTest, OneByteAtATime) {
  for (const std::string_view end : {"\n", "\r\n", "\r"}) {
    std::string body;
    for (const char c : kServerStream) {
      if (c == '\n') {
        body += end;
      } else {
        body += c;
      }
    }
    SseParser parser;
    std::vector<SseEvent> got;
    for (const char c : body) {
      for (auto& e : parser.feed(std::string_view(&c, 1))) got.push_back(std::move(e));
    }
    EXPECT_EQ(got, kServerEvents);
    EXPECT_TRUE(parser.idle());
  }
}

TEST(SseParserTest, ALargeDataLineInManyPieces) {
  // A mesh in base64 is one long data line.
  const std::string payload(3 * 1024 * 1024 + 17, 'A');
  const std::string body = "event: result\ndata: " + payload + "\n\n";
  SseParser parser;
  std::vector<SseEvent> got;
  for (size_t pos = 0; pos < body.size(); pos += 4093) {
    for (auto& e : parser.feed(std::string_view(body).substr(pos, 4093))) {
      got.push_back(std::move(e));
    }
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].event, "result");
  EXPECT_EQ(got[0].data, payload);
  EXPECT_TRUE(parser.idle());
}

}  // namespace test_sse_parser
}  // namespace cube3d
