#pragma once
// Work spread over every core: compile's glslang and pipeline compiles, staging uploads, image loading.
// No pool outlives a call: each call is large (milliseconds to seconds of work), so starting threads costs
// nothing measurable.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

namespace mn {

// Calls work(k) once for every k in [0, count), on up to one thread per core (the caller's among them),
// starting them in increasing order of k. work must not throw: catch inside and report after.
template <typename Work>
void parallel_for(size_t count, Work&& work) {
    std::atomic<size_t> next{0};
    auto worker = [&] {
        for (size_t k; (k = next++) < count;) work(k);
    };
    std::vector<std::thread> threads(std::max<size_t>(std::min<size_t>(std::thread::hardware_concurrency(), count), 1) - 1);
    for (auto& t : threads) t = std::thread(worker);
    worker();
    for (auto& t : threads) t.join();
}

// Jobs on one thread per core (or `threads`), the waiting job of highest priority starting first (ties in the order
// added); a job may add more (compile's pipelines, each once the shader it is made of is compiled). run() returns when
// every job has run. Jobs must not throw: catch inside and report after.
class JobQueue {
public:
    void add(double priority, std::function<void()> job) {
        std::lock_guard lock(mutex_);
        waiting_.emplace(priority, std::move(job));
        ready_.notify_one();
    }

    void run(unsigned threads = std::thread::hardware_concurrency()) {
        auto worker = [this] {
            std::unique_lock lock(mutex_);
            for (;;) {
                ready_.wait(lock, [this] { return !waiting_.empty() || running_ == 0; });
                if (waiting_.empty()) return;  // and nothing running that could add more
                const auto first = waiting_.begin();
                std::function<void()> job = std::move(first->second);
                waiting_.erase(first);
                ++running_;
                lock.unlock();
                job();
                lock.lock();
                if (--running_ == 0 && waiting_.empty()) ready_.notify_all();
            }
        };
        std::vector<std::thread> others(std::max(threads, 1u) - 1);
        for (auto& t : others) t = std::thread(worker);
        worker();
        for (auto& t : others) t.join();
    }

private:
    std::mutex mutex_;
    std::condition_variable ready_;
    std::multimap<double, std::function<void()>, std::greater<>> waiting_;  // highest priority first
    size_t running_ = 0;
};

// The indices [0, count) by size_of(i), largest first (ties in index order): jobs started in this order
// end about together, where the largest started last would run on alone after the others.
template <typename SizeOf>
std::vector<size_t> largest_first(size_t count, SizeOf&& size_of) {
    std::vector<size_t> order(count);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return size_of(a) > size_of(b); });
    return order;
}

}  // namespace mn
