// Data-parallel training without MPI: two replicas, each on a device of its own and in a thread of its
// own, reduce their gradients through an in-process rendezvous standing in for MPI_Allreduce. They must
// step as one session on the combined batch does (the same losses and parameters, to float rounding),
// and stay bit-identical to each other after every step. The optimizers include those whose update
// FusionPlan fuses into the gradient product's epilogue, which the split into two programs must undo.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "compiler/training.hpp"
#include "error_of.hpp"
#include "gpu_check.hpp"

namespace mn::test {
namespace {

// The all_reduce of `ranks` threads: the last to arrive adds every rank's spans in rank order into every
// rank's receive, so all of them get the same bits, as MPI_Allreduce does.
class Rendezvous {
public:
    explicit Rendezvous(int ranks) : posted_(static_cast<size_t>(ranks)) {}
    void all_reduce(int rank, const std::vector<GradientExchange::Span>& spans) {
        std::unique_lock<std::mutex> lock(m_);
        posted_[static_cast<size_t>(rank)] = &spans;
        const uint64_t generation = generation_;
        if (++arrived_ < static_cast<int>(posted_.size())) {
            cv_.wait(lock, [&] { return generation_ != generation; });
            return;
        }
        for (size_t k = 0; k < spans.size(); ++k) {
            for (size_t j = 0; j < spans[k].count; ++j) {
                float sum = 0;
                for (const auto* p : posted_) sum += (*p).at(k).send[j];
                for (const auto* p : posted_) (*p)[k].receive[j] = sum;
            }
        }
        arrived_ = 0;
        ++generation_;
        cv_.notify_all();
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    std::vector<const std::vector<GradientExchange::Span>*> posted_;
    int arrived_ = 0;
    uint64_t generation_ = 0;
};

// A two-layer regression of `rows` rows (the combined batch, or one replica's slice).
struct Regression {
    Graph g;
    Tensor loss;
    explicit Regression(int64_t rows) {
        Tensor h = g.relu(g.linear(g.input("x", {rows, 7}), g.parameter("fc1.weight", {13, 7}, Init::uniform(-0.4, 0.4)),
                                   g.parameter("fc1.bias", {13}, Init::uniform(-0.1, 0.1))));
        Tensor y = g.linear(h, g.parameter("fc2.weight", {3, 13}, Init::uniform(-0.3, 0.3)), g.parameter("fc2.bias", {3}));
        loss = g.mse_loss(y, g.input("y", {rows, 3}));
    }
};

constexpr const char* kParameters[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
constexpr int64_t kRows = 10, kReplicas = 2;  // 5 rows each: no tile of any kernel divides them
constexpr int kSteps = 6;

// The rows of step `step`'s combined batch: x [kRows, 7], y [kRows, 3].
std::pair<std::vector<float>, std::vector<float>> batch(int step) {
    Regression whole(kRows);
    const ref::Feeds f = random_feeds(whole.g, 100 + static_cast<uint64_t>(step));
    return {std::vector<float>(f.at("x").data.begin(), f.at("x").data.end()),
            std::vector<float>(f.at("y").data.begin(), f.at("y").data.end())};
}

std::vector<float> rows_of(const std::vector<float>& v, int64_t rank, int64_t width) {
    const int64_t per = kRows / kReplicas * width;
    return {v.begin() + rank * per, v.begin() + (rank + 1) * per};
}

struct Replica {
    std::vector<float> losses;
    std::vector<std::map<std::string, std::vector<float>>> parameters;  // after each step
};

// bucket_bytes: GradientExchange's (1: a bucket, and a segment of the backward, for each step that finishes a gradient).
Replica run_replica(const CompileOptions& base, int rank, Rendezvous* rendezvous, size_t bucket_bytes = size_t(25) << 20) {
    Regression r(rendezvous ? kRows / kReplicas : kRows);
    CompileOptions o = base;
    o.loss = r.loss;
    o.poison_outputs = true;
    if (rendezvous) {
        o.data_parallel = GradientExchange{
            .all_reduce = [rendezvous, rank](const auto& spans) { rendezvous->all_reduce(rank, spans); },
            .processes = kReplicas,
            .bucket_bytes = bucket_bytes};
    }
    const Device dev = Device::open();
    Session s = compile(r.g, dev, o);
    Replica run;
    for (int step = 0; step < kSteps; ++step) {
        auto [x, y] = batch(step);
        s.set("x", rendezvous ? rows_of(x, rank, 7) : x);
        s.set("y", rendezvous ? rows_of(y, rank, 3) : y);
        run.losses.push_back(s.step());
        run.parameters.emplace_back();
        for (const char* p : kParameters) run.parameters.back()[p] = s.get(p);
    }
    for (const auto& m : dev.context()->take_validation_messages()) ADD_FAILURE() << "validation: " << m;
    return run;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

class DataParallel : public GpuTest, public ::testing::WithParamInterface<Optimizer> {};

TEST_P(DataParallel, TwoReplicasStepAsOneSessionOnTheCombinedBatchAndStayBitIdentical) {
    const CompileOptions options{.optimizer = GetParam(), .clip_grad_norm = 1.5, .seed = 3};
    const Replica whole = run_replica(options, 0, nullptr);
    Rendezvous rendezvous(kReplicas);
    std::vector<Replica> replicas(kReplicas);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kReplicas; ++rank)
        threads.emplace_back([&, rank] { replicas[static_cast<size_t>(rank)] = run_replica(options, rank, &rendezvous); });
    for (auto& t : threads) t.join();
    // The same with the backward in segments, each bucket reduced while the later ones run: the same sums.
    Rendezvous segmented_rendezvous(kReplicas);
    std::vector<Replica> segmented(kReplicas);
    threads.clear();
    for (int rank = 0; rank < kReplicas; ++rank)
        threads.emplace_back([&, rank] { segmented[static_cast<size_t>(rank)] = run_replica(options, rank, &segmented_rendezvous, 1); });
    for (auto& t : threads) t.join();

    for (int step = 0; step < kSteps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step + 1));
        const auto i = static_cast<size_t>(step);
        EXPECT_EQ(replicas[0].losses[i], replicas[1].losses[i]);
        EXPECT_LT(relative(replicas[0].losses[i], whole.losses[i]), 1e-5) << replicas[0].losses[i] << " vs " << whole.losses[i];
        for (const char* p : kParameters) {
            const std::vector<float>& a = replicas[0].parameters[i].at(p);
            EXPECT_EQ(std::memcmp(a.data(), replicas[1].parameters[i].at(p).data(), a.size() * 4), 0) << p;
            for (const Replica& r : segmented)
                EXPECT_EQ(std::memcmp(a.data(), r.parameters[i].at(p).data(), a.size() * 4), 0) << p << " in segments";
            const std::vector<float>& w = whole.parameters[i].at(p);
            double diff = 0, norm = 0;
            for (size_t j = 0; j < a.size(); ++j) diff += (a[j] - w[j]) * (a[j] - w[j]), norm += w[j] * w[j];
            EXPECT_LT(std::sqrt(diff / std::max(norm, 1e-30)), 1e-5) << p;
        }
    }
    EXPECT_NE(whole.parameters.front().at("fc1.weight"), whole.parameters.back().at("fc1.weight"));  // it trained
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DataParallel,
                         ::testing::Values(Optimizer{AdamW{.lr = 0.02, .weight_decay = 0.1}},
                                           Optimizer{SGD{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}},
                                           Optimizer{SGD{.lr = 0.05}}));

// all_reduce gets a bucket of gradients a call, in the order the backward finishes them, each span a gradient
// padded to 16 bytes and the spans end to end; the last call's span 0 is the loss. With the default bucket
// (25 MiB) this model's four gradients are one call; with bucket_bytes = 1 the backward runs in a segment
// for each step that finishes a gradient, and each bucket is reduced as its segment ends.
TEST(DataParallelSpans, EachCallABucketOfGradientsEndToEndTheLossFirstInTheLast) {
    Regression r(4);
    std::map<std::string, std::vector<float>> gradients;  // each parameter's, by s.get
    for (const size_t bucket_bytes : {size_t(25) << 20, size_t(1)}) {
        SCOPED_TRACE("bucket_bytes " + std::to_string(bucket_bytes));
        std::vector<std::vector<GradientExchange::Span>> calls;
        const CompileOptions o{.loss = r.loss,
                               .data_parallel = GradientExchange{.all_reduce = [&](const auto& spans) {
                                                                     calls.push_back(spans);
                                                                     for (const auto& sp : spans) std::memcpy(sp.receive, sp.send, sp.count * 4);
                                                                 },
                                                                 .bucket_bytes = bucket_bytes}};
        Session s = compile(r.g, device(), o);
        s.set("x", std::vector<float>(28, 0.5f));
        s.set("y", std::vector<float>(12, 0.25f));
        const float loss = s.step();
        ASSERT_FALSE(calls.empty());
        if (bucket_bytes == 1) EXPECT_GT(calls.size(), 1u);
        else EXPECT_EQ(calls.size(), 1u);
        ASSERT_FALSE(calls.back().empty());
        EXPECT_EQ(calls.back()[0].count, 1u);
        EXPECT_EQ(*calls.back()[0].send, loss);
        std::vector<GradientExchange::Span> spans;  // the gradients' spans in the order they came
        for (size_t c = 0; c < calls.size(); ++c)
            for (size_t k = c + 1 == calls.size() ? 1 : 0; k < calls[c].size(); ++k) spans.push_back(calls[c][k]);
        std::set<std::string> seen;
        for (size_t k = 0; k < spans.size(); ++k) {
            if (k + 1 < spans.size()) {  // end to end, across calls too
                EXPECT_EQ(spans[k].send + spans[k].count, spans[k + 1].send);
                EXPECT_EQ(spans[k].receive + spans[k].count, spans[k + 1].receive);
            }
            for (const char* p : kParameters) {
                const std::vector<float> g = s.get(compiler::gradient_output(p));
                if (spans[k].count != (g.size() + 3) / 4 * 4 || !std::equal(g.begin(), g.end(), spans[k].send)) continue;
                for (size_t j = g.size(); j < spans[k].count; ++j) EXPECT_EQ(spans[k].send[j], 0.0f) << p << " padding";
                seen.insert(p);
                if (bucket_bytes == 1) EXPECT_EQ(gradients.at(p), g) << p << ": the same gradient in segments";
                gradients[p] = g;
            }
        }
        EXPECT_EQ(spans.size(), std::size(kParameters));
        EXPECT_EQ(seen.size(), std::size(kParameters));
        if (bucket_bytes == 1) {
            EXPECT_EQ(error_of([&] { s.record(nullptr); }), "record: a data-parallel session's backward runs as several programs; step() runs them");
        }
        EXPECT_EQ(error_of([&] { s.record_step(nullptr); }).rfind("record_step: a data-parallel session steps with step()", 0), 0u);
    }
    EXPECT_EQ(error_of([&] { compile(r.g, device(), {.loss = std::nullopt, .data_parallel = GradientExchange{}}); }),
              "compile: data_parallel is for training: give a loss too");
}

}  // namespace
}  // namespace mn::test
