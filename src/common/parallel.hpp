#pragma once
// Work spread over every core: compile's glslang and pipeline compiles, staging uploads, image loading.
// No pool outlives a call: each call is large (milliseconds to seconds of work), so starting threads costs
// nothing measurable.
#include <algorithm>
#include <atomic>
#include <cstddef>
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
