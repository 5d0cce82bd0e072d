#include "executor/runtime/cpu_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// Work that blocks its stream until the test opens the gate.
struct Gate {
  std::promise<void> opened;
  std::shared_future<void> wait = opened.get_future().share();
  void open() { opened.set_value(); }
};

TEST(CpuStream, RunsWorkInEnqueueOrder) {
  auto stream = make_cpu_stream("s");
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) stream->enqueue([&order, i] { order.push_back(i); }, "append");
  stream->synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(stream->name(), "s");
}

TEST(CpuStream, EventCompletesOnceTheWorkBeforeItHasRun) {
  auto stream = make_cpu_stream("s");
  EXPECT_TRUE(stream->record()->done());  // nothing before it
  Gate gate;
  bool ran = false;
  stream->enqueue([&] { gate.wait.wait(); }, "blocked");
  stream->enqueue([&] { ran = true; }, "after the gate");
  auto event = stream->record();
  stream->enqueue([] {}, "after the event");
  EXPECT_FALSE(event->done());
  gate.open();
  event->wait();
  EXPECT_TRUE(event->done());
  EXPECT_TRUE(ran);
}

TEST(CpuStream, WaitForHoldsBackLaterWorkOnAnotherStream) {
  auto producer = make_cpu_stream("producer");
  auto consumer = make_cpu_stream("consumer");
  Gate gate;
  std::atomic<int> produced{0};
  int seen = -1;
  producer->enqueue(
      [&] {
        gate.wait.wait();
        produced = 1;
      },
      "produce");
  consumer->wait_for(producer->record());
  consumer->enqueue([&] { seen = produced; }, "consume");
  auto consumed = consumer->record();
  EXPECT_FALSE(consumed->done());
  gate.open();
  consumed->wait();
  EXPECT_EQ(seen, 1);
}

TEST(CpuStream, FailureIsRethrownWithItsWhatAndLaterWorkIsSkipped) {
  auto stream = make_cpu_stream("comm");
  bool later_ran = false;
  stream->enqueue([] {}, "fine");
  auto before = stream->record();
  stream->enqueue([] { throw std::runtime_error("peer closed"); }, "all-gather of layers.3");
  auto at_failure = stream->record();
  stream->enqueue([&] { later_ran = true; }, "later");
  try {
    stream->synchronize();
    FAIL() << "synchronize did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_STREQ(e.what(), "all-gather of layers.3 on stream 'comm' failed: peer closed");
  }
  EXPECT_FALSE(later_ran);
  EXPECT_NO_THROW(before->wait());  // the failure came after this point
  EXPECT_THROW(at_failure->wait(), Error);
  EXPECT_THROW(stream->synchronize(), Error);  // and stays failed
}

TEST(CpuStream, ErrorThatNamesItsWorkKeepsMessageAndCode) {
  auto stream = make_cpu_stream("io");
  stream->enqueue([] { fail(ExitCode::kIo, "checkpoint shard 3: disk full"); },
                  "checkpoint shard 3");
  try {
    stream->synchronize();
    FAIL() << "synchronize did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kIo);
    EXPECT_STREQ(e.what(), "checkpoint shard 3: disk full");
  }
}

TEST(CpuStream, FailureReachesStreamsThatWaitForIt) {
  auto failing = make_cpu_stream("rs");
  auto waiting = make_cpu_stream("compute");
  bool ran = false;
  failing->enqueue([] { throw std::runtime_error("timeout"); }, "reduce-scatter of layers.0");
  waiting->wait_for(failing->record());
  waiting->enqueue([&] { ran = true; }, "optimizer step");
  try {
    waiting->synchronize();
    FAIL() << "synchronize did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce-scatter of layers.0"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(ran);
}

TEST(CpuStream, SynchronizeWaitsForEverythingEnqueuedFromManyThreads) {
  auto stream = make_cpu_stream("s");
  std::atomic<int> count{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < 4; ++t) {
    producers.emplace_back([&] {
      for (int i = 0; i < 250; ++i) stream->enqueue([&] { ++count; }, "count");
    });
  }
  for (auto& p : producers) p.join();
  stream->synchronize();
  EXPECT_EQ(count, 1000);
}

TEST(CpuStream, DestructorRunsQueuedWorkAndEventsOutliveTheStream) {
  std::atomic<int> count{0};
  std::shared_ptr<Event> last;
  {
    auto stream = make_cpu_stream("s");
    for (int i = 0; i < 10; ++i) stream->enqueue([&] { ++count; }, "count");
    last = stream->record();
  }
  EXPECT_EQ(count, 10);
  EXPECT_TRUE(last->done());
  EXPECT_NO_THROW(last->wait());
}

}  // namespace
}  // namespace mfsdp::executor
