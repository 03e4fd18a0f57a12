// The teller of a call's news: progress then one outcome, outside the owner's lock, one event
// at a time; what comes while another event is being told waits (the newest per key) and is
// told by the thread telling; nothing after the outcome.
#include "cube3d/server/service/ordered_teller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cube3d {
namespace test_ordered_teller {

using namespace std::chrono_literals;

// What an owner's listeners saw, in order ("p:<event>", "k<key>:<event>", "done:<outcome>").
struct Seen {
  std::mutex mutex;
  std::vector<std::string> events;
  void add(std::string event) {
    const std::lock_guard lock(mutex);
    events.push_back(std::move(event));
  }
  std::vector<std::string> all() {
    const std::lock_guard lock(mutex);
    return events;
  }
};

// Holds the telling thread inside a listener until released, so that the test can report while
// an event is being told. Bounded: a teller that waited for the reporting thread would fail
// the test, not hang it.
struct Gate {
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  void hold() {  // in the listener
    entered.set_value();
    EXPECT_EQ(released.wait_for(20s), std::future_status::ready);
  }
  void wait_entered() { ASSERT_EQ(entered.get_future().wait_for(20s), std::future_status::ready); }
  void open() { release.set_value(); }
};

TEST(OrderedTeller, TellsProgressThenTheOutcomeAndNothingAfter) {
  std::mutex owner;
  Seen seen;
  OrderedTeller<int, std::string> teller([&](const int& p) { seen.add("p:" + std::to_string(p)); },
                                         [&](std::string o) { seen.add("done:" + o); });
  EXPECT_TRUE(teller.listens_to_progress());
  teller.progress(std::unique_lock(owner), 1);
  teller.progress(std::unique_lock(owner), 2);
  teller.outcome(std::unique_lock(owner), "ok");
  teller.progress(std::unique_lock(owner), 3);       // after the outcome: dropped
  teller.outcome(std::unique_lock(owner), "twice");  // the first outcome is the one
  EXPECT_EQ(seen.all(), (std::vector<std::string>{"p:1", "p:2", "done:ok"}));
  // Every call released the owner's lock.
  EXPECT_TRUE(owner.try_lock());
  owner.unlock();
}

TEST(OrderedTeller, AListenerMayTakeTheOwnersLock) {
  // An observer that calls back into its call (cancel() from a progress event) takes the
  // owner's lock: it is not held while the observer is told.
  std::mutex owner;
  Seen seen;
  OrderedTeller<int, std::string>* told = nullptr;
  OrderedTeller<int, std::string> teller(
      [&](const int& p) {
        seen.add("p:" + std::to_string(p));
        told->outcome(std::unique_lock(owner), "cancelled from progress");
      },
      [&](std::string o) {
        const std::unique_lock lock(owner, std::try_to_lock);
        seen.add(lock.owns_lock() ? "done:" + o : "done under the owner's lock");
      });
  told = &teller;
  teller.progress(std::unique_lock(owner), 1);
  EXPECT_EQ(seen.all(), (std::vector<std::string>{"p:1", "done:cancelled from progress"}));
}

TEST(OrderedTeller, WhatComesWhileTellingWaitsForTheTellingThreadNewestFirst) {
  std::mutex owner;
  Seen seen;
  Gate gate;
  OrderedTeller<int, std::string> teller(
      [&](const int& p) {
        seen.add("p:" + std::to_string(p));
        if (p == 1) gate.hold();
      },
      [&](std::string o) { seen.add("done:" + o); });
  std::thread telling([&] { teller.progress(std::unique_lock(owner), 1); });
  gate.wait_entered();
  // The first event is being told on the other thread: these return at once, untold.
  teller.progress(std::unique_lock(owner), 2);
  teller.progress(std::unique_lock(owner), 3);  // replaces 2, which waits
  EXPECT_EQ(seen.all(), (std::vector<std::string>{"p:1"}));
  gate.open();
  telling.join();
  EXPECT_EQ(seen.all(), (std::vector<std::string>{"p:1", "p:3"}));
  teller.outcome(std::unique_lock(owner), "ok");
  EXPECT_EQ(seen.all(), (std::vector<std::string>{"p:1", "p:3", "done:ok"}));
}

TEST(OrderedTeller, KeepsTheNewestPerKeyAndDropsWhatWaitsPastTheOutcome) {
  std::mutex owner;
  Seen seen;
  Gate gate;
  Gate second_gate;
  // Two runs of a batch: the listener holds the first report of each.
  const auto keyed = [&](const size_t& key, const int& p) {
    seen.add("k" + std::to_string(key) + ":" + std::to_string(p));
    if (key == 0) gate.hold();
    if (key == 5) second_gate.hold();
  };
  const auto done = [&](std::string o) { seen.add("done:" + o); };
  OrderedTeller<int, std::string, size_t> teller(keyed, done);
  std::thread telling([&] { teller.progress(std::unique_lock(owner), 0, 1); });
  gate.wait_entered();
  teller.progress(std::unique_lock(owner), 2, 20);
  teller.progress(std::unique_lock(owner), 1, 10);
  teller.progress(std::unique_lock(owner), 2, 21);  // replaces key 2's 20
  gate.open();
  telling.join();
  // Told in key order, the newest of each.
  EXPECT_EQ(seen.all(), (std::vector<std::string>{"k0:1", "k1:10", "k2:21"}));

  // Progress waiting when the outcome comes is dropped.
  OrderedTeller<int, std::string, size_t> second(keyed, done);
  std::thread telling_again([&] { second.progress(std::unique_lock(owner), 5, 50); });
  second_gate.wait_entered();
  second.progress(std::unique_lock(owner), 6, 60);
  second.outcome(std::unique_lock(owner), "failed");
  second_gate.open();
  telling_again.join();
  EXPECT_EQ(seen.all(),
            (std::vector<std::string>{"k0:1", "k1:10", "k2:21", "k5:50", "done:failed"}));
}

TEST(OrderedTeller, ReleasesWhatTheListenersHoldAfterTheOutcomeOutsideTheLock) {
  // A listener's captures (a connection, a reactor) may take locks of their own as they go:
  // they are released once the outcome is told, not under the owner's lock.
  std::mutex owner;
  std::vector<std::string> released;
  struct Holder {
    Holder(std::mutex* o, std::vector<std::string>* r, std::string n)
        : owner(o), released(r), name(std::move(n)) {}
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;
    std::mutex* owner;
    std::vector<std::string>* released;
    std::string name;
    ~Holder() {
      const std::unique_lock lock(*owner, std::try_to_lock);
      released->push_back(name + (lock.owns_lock() ? " outside" : " under the lock"));
    }
  };
  auto progress_holder = std::make_shared<Holder>(&owner, &released, "progress");
  auto done_holder = std::make_shared<Holder>(&owner, &released, "done");
  bool told = false;
  OrderedTeller<int, std::string> teller(
      [h = std::move(progress_holder)](const int&) {},
      [h = std::move(done_holder), &told](std::string) { told = true; });
  teller.progress(std::unique_lock(owner), 1);
  EXPECT_TRUE(released.empty());
  teller.outcome(std::unique_lock(owner), "ok");
  EXPECT_TRUE(told);
  std::sort(released.begin(), released.end());
  EXPECT_EQ(released, (std::vector<std::string>{"done outside", "progress outside"}));
}

TEST(OrderedTeller, WithoutAProgressListenerTellsOnlyTheOutcome) {
  std::mutex owner;
  Seen seen;
  OrderedTeller<int, std::string> teller(nullptr, [&](std::string o) { seen.add("done:" + o); });
  EXPECT_FALSE(teller.listens_to_progress());
  teller.progress(std::unique_lock(owner), 1);
  teller.outcome(std::unique_lock(owner), "ok");
  EXPECT_EQ(seen.all(), (std::vector<std::string>{"done:ok"}));
}

}  // namespace test_ordered_teller
}  // namespace cube3d
