#include "train/finetune_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "io/atomic_file.hpp"
#include "train/curve.hpp"
#include "train/progress.hpp"

namespace mn::train {

namespace fs = std::filesystem;

namespace {

std::string mib(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / double(1 << 20));
    return text;
}

void print_eval(const HeldOut& e, int64_t step, int64_t epoch_steps) {
    std::fprintf(stderr, "held-out loss %.4f", e.loss);
    if (e.accuracy) std::fprintf(stderr, ", accuracy %.2f%%", 100 * *e.accuracy);
    std::fprintf(stderr, " at step %lld", static_cast<long long>(step));
    if (epoch_steps > 0 && step % epoch_steps == 0) std::fprintf(stderr, " (epoch %lld)", static_cast<long long>(step / epoch_steps));
    std::fputc('\n', stderr);
}

// The median of `ms` past its first fifth (at most 5 steps: pipeline creation, caches warming).
double median_after_warmup(std::vector<double> ms) {
    ms.erase(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(5, ms.size() / 5)));
    std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
    return ms[ms.size() / 2];
}

// What a step costs on the device and, in a distributed run, in the gradients' all-reduce (rank 0's
// wait), the feeding of inputs excluded: bench/ddp_bench.sh reads this line.
void print_step_times(const std::vector<double>& step_ms, const std::vector<double>& reduce_ms) {
    if (step_ms.empty()) return;
    std::fprintf(stderr, "step time: median %.3f ms of %zu steps", median_after_warmup(step_ms), step_ms.size());
    if (!reduce_ms.empty()) std::fprintf(stderr, ", of which all-reduce %.3f ms", median_after_warmup(reduce_ms));
    std::fputc('\n', stderr);
}

volatile std::sig_atomic_t stop_signal = 0;

void on_stop_signal(int number) { stop_signal = number; }

// While it lives, SIGINT and SIGTERM ask the step loop to stop (the first one; the handler is reset,
// so a second ends the process as before); the previous handlers come back after. A signal the
// process was started ignoring (SIGINT of a shell's background job, nohup) stays ignored.
class StopRequests {
public:
    StopRequests() {
        stop_signal = 0;
        struct sigaction a = {};
        a.sa_handler = on_stop_signal;
        a.sa_flags = SA_RESETHAND;
        sigemptyset(&a.sa_mask);
        for (auto [number, was] : {std::pair{SIGINT, &int_}, std::pair{SIGTERM, &term_}}) {
            sigaction(number, nullptr, was);
            if (was->sa_handler != SIG_IGN) sigaction(number, &a, nullptr);
        }
    }
    ~StopRequests() {
        sigaction(SIGINT, &int_, nullptr);
        sigaction(SIGTERM, &term_, nullptr);
    }
    StopRequests(const StopRequests&) = delete;
    StopRequests& operator=(const StopRequests&) = delete;
    static const char* requested() {
        return stop_signal == SIGINT ? "SIGINT" : stop_signal == SIGTERM ? "SIGTERM" : nullptr;
    }

private:
    struct sigaction int_ = {}, term_ = {};
};

}  // namespace

Shard shard_of(const distributed::World* world) {
    return world ? Shard{world->rank(), world->size()} : Shard{};
}

std::string prepare_output(const std::string& out, bool resume) {
    const std::string flag = resume ? "--resume " : "--out ";
    std::error_code error;
    if (fs::exists(out, error) && !fs::is_directory(out, error)) throw Error(flag + out + " is a file, not a folder");
    const fs::path checkpoint = fs::path(out) / "checkpoint.safetensors";
    if (resume && !fs::exists(checkpoint)) throw Error("--resume " + out + ": there is no " + checkpoint.string());
    if (!resume && fs::exists(checkpoint))
        throw Error("--out " + out + " has a checkpoint; pass --resume " + out + " to continue it");
    if (fs::create_directories(out, error); error) throw Error(flag + out + ": cannot create it: " + error.message());
    return checkpoint.string();
}

void record_run(const std::string& out, const std::string& name, const std::string& text, bool resume,
                const std::function<std::string(const std::string& was)>& mismatch) {
    const fs::path file = fs::path(out) / name;
    if (!resume) {
        io::write_file_atomically(file.string(), {text});
        return;
    }
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error("--resume " + out + ": there is no " + file.string() + " (what the run must repeat)");
    std::stringstream was;
    was << in.rdbuf();
    if (was.str() != text) throw Error(mismatch(was.str()));
}

std::string joined(const std::vector<std::string>& items, const std::string& between) {
    std::string text;
    for (const std::string& s : items) text += (text.empty() ? "" : between) + s;
    return text;
}

Trainable trainable_parameters(const Graph& g) {
    Trainable t;
    for (const Node& n : g.nodes()) {
        if (n.op != Op::Parameter) continue;
        t.parameters += numel(n.shape);
        if (n.requires_grad) t.names.push_back(n.name), t.count += numel(n.shape);
    }
    return t;
}

void print_plan(const std::string& model, const Trainable& t, const std::string& what, const SessionStats& st) {
    std::fprintf(stderr, "finetune %s: %lld parameters, %lld trainable (%s); memory: %s pinned (parameters, optimizer state, "
                 "inputs), %s arena (activations)\n", model.c_str(), static_cast<long long>(t.parameters),
                 static_cast<long long>(t.count), what.c_str(), mib(static_cast<double>(st.pinned_bytes)).c_str(),
                 mib(static_cast<double>(st.physical_bytes)).c_str());
}

io::TensorMap tensors_of(const Session& s, const std::vector<std::string>& names) {
    io::TensorMap out;
    for (const std::string& n : names) out[n] = io::TensorData::from_f32(s.shape(n), s.get(n));
    return out;
}

CompileOptions training_options(Tensor loss, const AdamWRun& run) {
    return {.loss = loss, .optimizer = AdamW{.lr = run.lr, .weight_decay = run.weight_decay},
            .schedule = {.decay = LrSchedule::Decay::Cosine, .total_steps = run.total_steps},
            .read_back = std::vector<std::string>{"loss"}, .seed = run.seed};
}

FinetuneResult run_steps(Session& train, Session& eval, const std::vector<std::string>& to_eval, const StepLoop& loop,
                         const std::function<void(int64_t step)>& feed, const std::function<HeldOut()>& evaluate) {
    const fs::path out(loop.out);
    const std::string checkpoint = (out / "checkpoint.safetensors").string();
    distributed::World* world = loop.world;
    const bool root = !world || world->root();
    if (world) world->broadcast(train, to_eval);
    LossCurve curve;
    if (train.step_count() > 0 && fs::exists(out / "loss.csv")) curve = LossCurve::read_csv((out / "loss.csv").string());
    auto eval_now = [&] {
        if (!root) return HeldOut{};  // rank 0's parameters are every rank's
        train.copy_to(eval, to_eval);
        return evaluate();
    };
    if (train.step_count() >= loop.total)
        throw Error("--resume " + loop.out + ": the run has taken " + std::to_string(train.step_count()) + " steps, as many as " +
                    "this one would take (" + std::to_string(loop.total) + "); raise --steps or --epochs to train further");
    const bool resumed = train.step_count() > 0;
    const StopRequests stop;  // from here, so that a signal during the first evaluation stops after one step
    FinetuneResult result{.first_eval = eval_now()};
    if (root) print_eval(result.first_eval, train.step_count(), loop.epoch_steps);
    // Training from there would only stop at the first step, blaming the step.
    if (!std::isfinite(result.first_eval.loss))
        throw Error("the held-out loss is " + std::to_string(result.first_eval.loss) + " before " +
                    (resumed ? "this run's first step: " + checkpoint : std::string("any training: the model's weights")) +
                    " give non-finite values");

    auto save = [&] {
        if (!root) return;
        train.save(checkpoint, loop.frozen);
        curve.write_csv((out / "loss.csv").string());
        curve.write_svg((out / "loss.svg").string(), loop.curve_title);
    };
    Progress progress("finetune", loop.total, root ? stderr : no_output());
    if (!loop.unit.empty()) progress.show_rate(loop.per_step, loop.unit);
    std::vector<double> step_ms, reduce_ms;  // of each step() of this run, feeding excluded
    for (int64_t step = train.step_count() + 1; step <= loop.total; ++step) {
        feed(step);
        const auto t0 = std::chrono::steady_clock::now();
        const float loss = train.step();
        step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        if (world) reduce_ms.push_back(1e3 * world->take_reduce_seconds());
        if (!std::isfinite(loss))
            throw Error("step " + std::to_string(step) + ": the loss is " + std::to_string(loss) + "; " +
                        (fs::exists(checkpoint) ? checkpoint + " keeps the last saved state"
                                                : "no checkpoint was written (--eval-every N writes one every N steps)"));
        if (result.steps++ == 0) result.first_loss = loss;
        result.last_loss = loss;
        if (world) world->check_replicas(train, to_eval, step);
        curve.add(step, loss);
        progress.update(step, loss);
        const bool evaluate_now = (loop.eval_every > 0 && step % loop.eval_every == 0) || step == loop.total;
        if (evaluate_now) {
            result.last_eval = eval_now();
            if (step != loop.total && root) std::fputc('\n', stderr);
            if (root) print_eval(result.last_eval, step, loop.epoch_steps);
            if (result.last_eval.accuracy) curve.add_eval(step, static_cast<float>(*result.last_eval.accuracy));
            save();
        }
        if (const char* by = StopRequests::requested(); by && step != loop.total) {
            if (!evaluate_now) save();
            throw Error(std::string(by) + ": stopped after step " + std::to_string(step) + " of " + std::to_string(loop.total) +
                        "; " + checkpoint + " holds it, and --resume " + loop.out + " continues the run");
        }
    }
    progress.finish();
    if (root) print_step_times(step_ms, reduce_ms);
    if (result.steps == 0) result.last_eval = result.first_eval;
    return result;
}

}  // namespace mn::train
