// common/parallel.hpp: JobQueue runs every job, those that jobs add included, and returns only after the last.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "common/parallel.hpp"

namespace mn::test {
namespace {

// A tree of jobs: each of depth d < 4 adds three of depth d + 1 (1 + 3 + 9 + 27 + 81 jobs), and run() must not
// return while any of them has yet to run, though at times every job waiting was added by one still running.
TEST(JobQueue, RunsTheJobsThatJobsAddBeforeReturning) {
    JobQueue queue;
    std::atomic<int> ran{0};
    std::function<void(int)> job = [&](int depth) {
        ++ran;
        if (depth == 4) return;
        for (int k = 0; k < 3; ++k) queue.add(depth, [&job, depth] { job(depth + 1); });
    };
    queue.add(0, [&] { job(0); });
    queue.run();
    EXPECT_EQ(ran.load(), 1 + 3 + 9 + 27 + 81);
}

// On one thread the jobs run in priority order, ties in the order added, a job's additions among those waiting.
TEST(JobQueue, StartsTheWaitingJobOfHighestPriority) {
    JobQueue queue;
    std::vector<std::string> order;
    auto job = [&](std::string name) { return [&order, name] { order.push_back(name); }; };
    queue.add(1, job("1"));
    queue.add(5, [&] {
        order.push_back("5a");
        queue.add(4, job("4"));
        queue.add(0, job("0"));
    });
    queue.add(3, job("3"));
    queue.add(5, job("5b"));
    queue.run(1);
    EXPECT_EQ(order, (std::vector<std::string>{"5a", "5b", "4", "3", "1", "0"}));
}

TEST(JobQueue, AnEmptyQueueReturns) {
    JobQueue queue;
    queue.run();
}

}  // namespace
}  // namespace mn::test
