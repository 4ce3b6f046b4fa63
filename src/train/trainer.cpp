#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "io/atomic_file.hpp"
#include "models/classifier.hpp"
#include "train/curve.hpp"
#include "train/progress.hpp"

namespace mn::train {

namespace {

// Runs a compiled forward session over `data` in fixed-size batches (the last one padded).
Evaluation evaluate(Session& s, const Dataset& data, int64_t batch) {
    Evaluation e;
    std::vector<float> x;
    std::vector<int32_t> y;
    for (int64_t start = 0; start < data.count; start += batch) {
        const int64_t rows = fill_batch(data, start, batch, x, y);
        s.set("images", x);
        s.run();
        add_scores(s.get("logits"), batch, y, rows, e);
    }
    e.accuracy /= static_cast<double>(std::max<int64_t>(e.count, 1));
    e.loss /= static_cast<double>(std::max<int64_t>(e.count, 1));
    return e;
}

// A step whose loss or whose update is not finite ends the run: one such update makes every later
// step non-finite, so going on (and saving) would replace the last good checkpoint with garbage.
// A non-finite gradient shows as non-finite parameters, hence as the next step's loss; the
// parameters themselves are checked before every save, which catches the last step of an epoch.
class FiniteGuard {
public:
    FiniteGuard(const Graph& graph, const std::string& checkpoint) : graph_(graph), checkpoint_(checkpoint) {}

    void check_loss(float loss, int64_t step) const {
        if (!std::isfinite(loss)) stop("step " + std::to_string(step) + ": the loss is " + std::to_string(loss));
    }
    void check_parameters(const Session& s, int64_t step) const {
        for (const Node& node : graph_.nodes()) {
            if (node.op != Op::Parameter) continue;
            const std::vector<float> values = s.get(node.name);
            const auto bad = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
            if (bad != values.end())
                stop("step " + std::to_string(step) + ": parameter '" + node.name + "' holds " + std::to_string(*bad) +
                     " at index " + std::to_string(bad - values.begin()) + " after the update");
        }
    }
    void saved(int64_t step) { saved_step_ = step; }

private:
    [[noreturn]] void stop(const std::string& what) const {
        throw Error(what + "; training stopped, " + checkpoint_ +
                    (saved_step_ < 0 ? " was not written" : " keeps step " + std::to_string(saved_step_)) +
                    " (a lower --lr, or check the data)");
    }
    const Graph& graph_;
    const std::string& checkpoint_;
    int64_t saved_step_ = -1;
};

Session compile_eval(const Device& device, const std::string& model, int64_t batch) {
    models::Classifier c = models::fashion_classifier(model, batch);
    return compile(*c.graph, device);
}

// What the curve shows, from the run itself: the model, the data it saw and the optimizer.
std::string plot_title(const ClassifierRun& run, const Dataset& train_set, const Dataset& test_set) {
    char text[256];
    std::snprintf(text, sizeof text, "%s on Fashion-MNIST: %lld training / %lld test images, batch %lld, %lld epochs, lr %g %s",
                  run.model.c_str(), static_cast<long long>(train_set.count), static_cast<long long>(test_set.count),
                  static_cast<long long>(run.batch), static_cast<long long>(run.epochs), learning_rate(run.optimizer),
                  run.cosine ? "cosine" : "constant");
    return text;
}

}  // namespace

void add_scores(const std::vector<float>& logits, int64_t batch, const std::vector<int32_t>& labels, int64_t rows,
                Evaluation& e) {
    const int64_t classes = static_cast<int64_t>(logits.size()) / batch;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = logits.data() + r * classes;
        int64_t best = 0;
        double max = row[0], sum = 0;
        for (int64_t c = 1; c < classes; ++c) {
            if (row[c] > row[best]) best = c;
            max = std::max<double>(max, row[c]);
        }
        for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - max);
        e.loss += max + std::log(sum) - row[labels[static_cast<size_t>(r)]];
        e.accuracy += best == labels[static_cast<size_t>(r)];
    }
    e.count += rows;
}

std::string curve_prefix(const ClassifierRun& run) {
    if (!run.curve_prefix.empty()) return run.curve_prefix;
    const size_t slash = run.checkpoint.rfind('/'), dot = run.checkpoint.rfind('.');
    return dot == std::string::npos || (slash != std::string::npos && dot < slash) ? run.checkpoint
                                                                                   : run.checkpoint.substr(0, dot);
}

Evaluation evaluate_classifier(const Device& device, const std::string& model, const std::string& checkpoint,
                               const Dataset& data, int64_t batch) {
    Session s = compile_eval(device, model, batch);
    s.load(checkpoint);
    return evaluate(s, data, batch);
}

namespace {

// The names of the graph's parameters that train.
std::vector<std::string> trained_parameters(const Graph& g) {
    std::vector<std::string> names;
    for (const Node& n : g.nodes())
        if (n.op == Op::Parameter && n.requires_grad) names.push_back(n.name);
    return names;
}

}  // namespace

Evaluation train_classifier(const Device& device, const ClassifierRun& run, const Dataset& train_set,
                            const Dataset& test_set) {
    distributed::World* world = run.world;
    const bool root = !world || world->root();
    const int64_t ranks = world ? world->size() : 1, rank = world ? world->rank() : 0;
    const std::string prefix = curve_prefix(run);
    if (root) {
        io::check_can_write(run.checkpoint, "checkpoint");
        io::check_can_write(prefix + ".csv", "loss curve");
        io::check_can_write(prefix + ".svg", "loss curve");
    }
    BatchIterator batches(train_set, run.batch * ranks, run.seed);
    const int64_t per_epoch = batches.batches_per_epoch();
    if (per_epoch == 0)
        throw Error(std::to_string(train_set.count) + " training images, fewer than one batch of " +
                    std::to_string(run.batch * ranks));
    const int64_t total = per_epoch * run.epochs;
    const LrSchedule schedule{.decay = run.cosine ? LrSchedule::Decay::Cosine : LrSchedule::Decay::Constant,
                              .total_steps = total};
    models::Classifier c = models::fashion_classifier(run.model, run.batch);
    CompileOptions options{.loss = c.loss, .optimizer = run.optimizer, .schedule = schedule, .seed = run.seed};
    if (world) options.data_parallel = world->exchange();
    Session s = compile(*c.graph, device, options);
    Session eval = compile_eval(device, run.model, run.eval_batch);
    if (!run.resume.empty()) s.load(run.resume);
    const std::vector<std::string> parameters = trained_parameters(*c.graph);
    if (world) world->broadcast(s, parameters);

    int64_t step = s.step_count();
    if (step >= total) throw Error("the checkpoint has already trained " + std::to_string(step) + " of " +
                                   std::to_string(total) + " steps; pass more --epochs");
    batches.seek(step / per_epoch, step % per_epoch);

    LossCurve curve;
    if (!run.resume.empty()) {
        try {
            curve = LossCurve::read_csv(prefix + ".csv");
        } catch (const Error&) {
            // no earlier curve: this run's starts at the resumed step
        }
    }
    if (root)
        std::printf("training %s on %s: %lld examples, batch %lld%s, %lld steps per epoch, %zu dispatches per step\n",
                    run.model.c_str(), device.name().c_str(), static_cast<long long>(train_set.count),
                    static_cast<long long>(run.batch * ranks),
                    world ? (" (" + std::to_string(ranks) + " processes of " + std::to_string(run.batch) + ")").c_str() : "",
                    static_cast<long long>(per_epoch), s.stats().dispatches);
    Evaluation result;
    FiniteGuard guard(*c.graph, run.checkpoint);
    if (!run.resume.empty() && run.resume == run.checkpoint) guard.saved(step);
    std::vector<float> x;
    std::vector<int32_t> y;
    for (int64_t epoch = step / per_epoch; epoch < run.epochs; ++epoch) {
        Progress progress("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(run.epochs), per_epoch,
                          root ? stderr : no_output());
        const auto t0 = std::chrono::steady_clock::now();
        const int64_t first = step;
        const size_t features = static_cast<size_t>(train_set.features), rows = static_cast<size_t>(run.batch);
        while (step < (epoch + 1) * per_epoch && batches.next(x, y)) {
            if (world) {  // this rank's rows of the global batch
                const auto r = static_cast<size_t>(rank);
                x = std::vector<float>(x.begin() + r * rows * features, x.begin() + (r + 1) * rows * features);
                y = std::vector<int32_t>(y.begin() + r * rows, y.begin() + (r + 1) * rows);
            }
            s.set("images", x);
            s.set("labels", y);
            const float loss = s.step();
            ++step;
            guard.check_loss(loss, step);
            if (world) world->check_replicas(s, parameters, step);
            curve.add(step, loss);
            progress.update(step - epoch * per_epoch, loss);
        }
        progress.finish();
        batches.seek(epoch + 1);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!root) continue;
        guard.check_parameters(s, step);
        s.save(run.checkpoint);
        guard.saved(step);
        eval.load(run.checkpoint);
        result = evaluate(eval, test_set, run.eval_batch);
        curve.add_eval(step, static_cast<float>(result.accuracy));
        std::printf("epoch %lld: %.1f s (%.1f steps/s), train loss %.4f, test loss %.4f, test accuracy %.2f%%\n",
                    static_cast<long long>(epoch + 1), seconds, static_cast<double>(step - first) / seconds,
                    progress.smoothed_loss(), result.loss, 100 * result.accuracy);
        if (world)
            std::printf("epoch %lld: %.2f s of rank 0's in the gradients' all-reduce\n", static_cast<long long>(epoch + 1),
                        world->take_reduce_seconds());
    }
    if (!root) return result;
    curve.write_csv(prefix + ".csv");
    curve.write_svg(prefix + ".svg", plot_title(run, train_set, test_set));
    std::printf("checkpoint %s, loss curve %s.csv and %s.svg\n", run.checkpoint.c_str(), prefix.c_str(), prefix.c_str());
    return result;
}

}  // namespace mn::train
